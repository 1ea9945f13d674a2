"""oldest-first: a rollout-ext policy hook written in Python, built into a component with
componentize-py against the same WIT as the Rust hooks (hooks-sdk/wit/policy.wit).

Selection only: the instances the built-in rules chose are replaced oldest first (by creation
time; those without one last), then by name. Every other point defers.
"""

from typing import List

from wit_world import exports
from wit_world.imports import host, types


class Metadata(exports.Metadata):
    def describe(self) -> types.Info:
        return types.Info(
            name="oldest-first",
            sdk_version="0.1.0",
            wit_version="0.2.0",
            points=[types.HookPoint.SELECT],
        )


class Selection(exports.Selection):
    def select(
        self, ctx: types.Context, group: types.Group, candidates: List[types.Instance]
    ) -> types.Selection:
        chosen = [c for c in candidates if c.reason is not None]
        if not chosen:
            return types.Selection_Defer()
        never = 2**62
        chosen.sort(key=lambda c: (c.created if c.created is not None else never, c.name))
        host.log(host.Level.DEBUG, f"oldest-first: {len(chosen)} instance(s) of {group.name}")
        return types.Selection_Choose(
            [
                types.Choice(
                    name=c.name,
                    reason=f"{c.reason}; oldest first (created {c.created})",
                )
                for c in chosen
            ]
        )


class Batching(exports.Batching):
    def next_batch(
        self, ctx: types.Context, progress: types.Progress, pending: types.Pending
    ) -> types.BatchSize:
        return types.BatchSize_Defer()


class Gates(exports.Gates):
    def check(
        self,
        ctx: types.Context,
        phase: types.Phase,
        batch: types.Batch,
        summary: types.ValidationSummary,
    ) -> types.Verdict:
        return types.Verdict_Defer()
