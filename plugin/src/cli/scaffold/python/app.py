"""{{name}}: a rollout-ext policy hook, as `kubectl rollout-ext hooks new` wrote it. Its rules:
- select: the built-in choice, oldest first, never a node labelled example.com/hold=true;
- batch: at most 2 nodes at a time;
- gate: after each batch, wait (3 checks, 30 s apart) while a pod of namespace default is not
  Ready, then abort.
Change them, and the tests (test_app.py) and fixtures (fixtures/) with them. A function for each
point served, taking the arguments it names; the build declares them (and defers the points left
out).
"""

from rollout_ext_hooks import at_most, choose, hold_while, oldest_first, pods

NAME = "{{name}}"
HOLD = "example.com/hold"


def select(chosen):
    kept = [c for c in chosen if c.label(HOLD) != "true"]
    return choose((c.name, "oldest first") for c in oldest_first(kept))


def next_batch(progress):
    return at_most(2, progress, "at most 2 at a time")


# A gate asked after each batch only (check(phase, batch) is asked in every phase).
def after_batch(batch):
    not_ready = [p.key for p in pods("default") if not p.ready]
    return hold_while(batch, 3, 30, "pods of default not Ready", not_ready)
