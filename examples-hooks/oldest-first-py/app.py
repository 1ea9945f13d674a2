"""oldest-first: a rollout-ext policy hook written in Python, built into a component with
componentize-py against the same WIT as the Rust hooks (hooks-sdk/wit/policy.wit).

Selection only: the instances the built-in rules chose are replaced oldest first (by creation
time; those without one first, as the Rust and JavaScript helpers sort them), then by name. Up-to-date instances are never chosen (that would
need `force`). The points it leaves out defer (the build puts in the SDK's deferring classes).
The hook takes no config: any JSON object is accepted.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from rollout_ext_hooks import oldest_first
from wit_world.imports import host, types

# The contract this module is built against: the package version of hooks-sdk/wit/policy.wit.
WIT_VERSION = "0.3.7"


class Metadata(exports.Metadata):
    def describe(self) -> types.Info:
        return types.Info(
            name="oldest-first",
            # No SDK here: the SDK version of a Python hook is the contract's.
            sdk_version=WIT_VERSION,
            wit_version=WIT_VERSION,
            points=[types.HookPoint.SELECT],
        )

    def validate_config(self, config: str) -> None:
        try:
            value = json.loads(config)
        except ValueError as e:
            raise Err(f"config is not JSON: {e}")
        if not isinstance(value, dict):
            raise Err("config must be an object")


class Selection(exports.Selection):
    def select(
        self, ctx: types.Context, group: types.Group, candidates: types.Instances
    ) -> types.Selection:
        # The candidates stay with the host: one read brings them all (the fields only; labels
        # would be read one call each).
        everyone = candidates.get(0, candidates.len())
        chosen = [c for c in everyone if c.reason is not None and not c.up_to_date]
        if not chosen:
            return types.Selection_Defer()
        chosen = oldest_first(chosen)
        host.log(host.Level.DEBUG, f"oldest-first: {len(chosen)} instance(s) of {group.name}")
        return types.Selection_Choose(
            [
                types.Choice(
                    name=c.name,
                    reason=f"{c.reason}; oldest first (created {c.created})",
                    force=False,
                )
                for c in chosen
            ]
        )

