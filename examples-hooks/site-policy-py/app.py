"""The site-policy example (examples-hooks/site-policy) again, in Python on the SDK's helpers:
fewest pods first and never a node labelled example.com/pinned=true; at most 2 nodes per batch,
never two of one example.com/rack; after each batch, wait (3 checks, 20 s apart) while a pod in
namespace payments is not Ready, then abort.
"""

from rollout_ext_hooks import PROCEED, choose_by, hold, pods, size

NAME = "site-policy-py"
PINNED, RACK = "example.com/pinned", "example.com/rack"


def select(candidates):
    chosen = [c for c in candidates if not c.up_to_date and c.label(PINNED) != "true"]
    return choose_by(chosen, lambda c: c.pods, lambda c: f"{c.pods} pods to move")


def next_batch(pending):
    two = len(pending) > 1 and pending[0].label(RACK) != pending[1].label(RACK)
    return size(2 if two else 1, "at most 2, one per rack")


def after_batch(batch):
    n = sum(1 for p in pods("payments") if not p.ready)
    return PROCEED if n == 0 else hold(batch, 3, 20, f"{n} payments pod(s) not Ready")
