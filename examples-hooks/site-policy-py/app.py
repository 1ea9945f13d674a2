"""The site-policy example (examples-hooks/site-policy) again, in Python on the SDK's helpers:
fewest pods first and never a node labelled example.com/pinned=true; at most 2 nodes per batch,
never two of one example.com/rack; after each batch, wait (3 checks, 20 s apart) while a pod in
namespace payments is not Ready, then abort.
"""

from rollout_ext_hooks import AnyConfig, candidates_of, choose_by, hold, pods, size
from wit_world.imports import types

PINNED, RACK = "example.com/pinned", "example.com/rack"


class Metadata(AnyConfig):
    NAME = "site-policy-py"


class Selection:
    def select(self, ctx, group, candidates):
        everyone = candidates_of(candidates)
        chosen = [c for c in everyone if not c.up_to_date and c.label(PINNED) != "true"]
        return choose_by(chosen, lambda c: c.pods, lambda c: f"{c.pods} pods to move")


class Batching:
    def next_batch(self, ctx, progress, pending):
        two = pending.len() > 1 and pending.label(0, RACK) != pending.label(1, RACK)
        return size(2 if two else 1, "at most 2, one per rack")


class Gates:
    def check(self, ctx, phase, batch, summary):
        if phase != types.Phase.AFTER_BATCH:
            return types.Verdict_Defer()
        n = sum(1 for p in pods("payments") if not p.ready)
        return types.Verdict_Proceed() if n == 0 else hold(batch, 3, 20, f"{n} payments pod(s) not Ready")
