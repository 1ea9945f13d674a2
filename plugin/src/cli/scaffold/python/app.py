"""{{name}}: a rollout-ext policy hook, as `kubectl rollout-ext hooks new` wrote it. Its rules:
- select: the built-in choice, oldest first, never a node labelled example.com/hold=true;
- batch: at most 2 nodes at a time;
- gate: after each batch, wait (3 checks, 30 s apart) while a pod of namespace default is not
  Ready, then abort.
Change them, and the tests (test_app.py) and fixtures (fixtures/) with them. A class for each
point served; the build declares them (and defers the points left out).
"""

from rollout_ext_hooks import (AFTER_BATCH, DEFER, AnyConfig, candidates_of, choose, hold_while,
                               oldest_first, pods, size)

HOLD = "example.com/hold"


class Metadata(AnyConfig):
    NAME = "{{name}}"


class Selection:
    def select(self, ctx, group, candidates):
        everyone = candidates_of(candidates)
        chosen = [c for c in everyone if c.reason is not None and c.label(HOLD) != "true"]
        return choose((c.name, "oldest first") for c in oldest_first(chosen))


class Batching:
    def next_batch(self, ctx, progress, pending):
        return size(min(2, progress.max_batch), "at most 2 at a time")


class Gates:
    def check(self, ctx, phase, batch, summary):
        if phase != AFTER_BATCH:
            return DEFER
        not_ready = [p.key for p in pods("default") if not p.ready]
        return hold_while(batch, 3, 30, "pods of default not Ready", not_ready)
