"""{{name}}: a rollout-ext policy hook, as `kubectl rollout-ext hooks new` wrote it. Its rules:
- select: the built-in choice, oldest first, never a node labelled example.com/hold=true;
- batch: at most 2 nodes at a time;
- gate: after each batch, wait (3 checks, 30 s apart) while a pod of namespace default is not
  Ready, then abort.
Change them, and the tests (test_app.py) and fixtures (fixtures/) with them. A class for each
point served; the build declares them (and defers the points left out).
"""

from rollout_ext_hooks import AnyConfig, choose, hold, oldest_first, pods, size
from wit_world.imports import types

HOLD = "example.com/hold"


class Metadata(AnyConfig):
    NAME = "{{name}}"


class Selection:
    def select(self, ctx, group, candidates):
        held = {i for i in range(candidates.len()) if candidates.label(i, HOLD) == "true"}
        everyone = candidates.get(0, candidates.len())
        chosen = [c for i, c in enumerate(everyone) if c.reason is not None and i not in held]
        return choose((c.name, "oldest first") for c in oldest_first(chosen))


class Batching:
    def next_batch(self, ctx, progress, pending):
        return size(min(2, progress.max_batch), "at most 2 at a time")


class Gates:
    def check(self, ctx, phase, batch, summary):
        if phase != types.Phase.AFTER_BATCH:
            return types.Verdict_Defer()
        n = sum(1 for p in pods("default") if not p.ready)
        return types.Verdict_Proceed() if n == 0 else hold(batch, 3, 30, f"{n} pod(s) of default not Ready")
