"""Unit tests of app.py on the SDK's stand-in host (hooks-sdk/python/rollout_ext_testing.py), in
Python: `python3 -m unittest` (or pytest) in this directory. `make test` runs them."""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hooks-sdk" / "python"))
import rollout_ext_testing as t  # noqa: E402  (before the hook: it stands in for the bindings)
import app  # noqa: E402

PINNED, RACK = app.PINNED, app.RACK


class SitePolicy(unittest.TestCase):
    def setUp(self):
        t.cluster.reset()

    def test_fewest_pods_first_and_never_a_pinned_node(self):
        nodes = [t.node("a", pods=5), t.node("b", pods=1, labels={PINNED: "true"}),
                 t.node("c", pods=2), t.node("d", up_to_date=True, reason=None)]
        chosen = app.select(t.candidates(nodes))
        self.assertEqual(t.answer(chosen), {"answer": "choose", "order": [
            {"name": "c", "reason": "2 pods to move"}, {"name": "a", "reason": "5 pods to move"}]})

    def test_two_at_a_time_only_from_two_racks(self):
        two = [t.node("a", labels={RACK: "r1"}), t.node("b", labels={RACK: "r2"})]
        one_rack = [t.node("a", labels={RACK: "r1"}), t.node("b", labels={RACK: "r1"})]
        for pending, size in [(two, 2), (one_rack, 1), (two[:1], 1)]:
            self.assertEqual(t.answer(app.next_batch(t.candidates(pending)))["count"], size)

    def test_after_a_batch_it_waits_for_payments_then_aborts(self):
        t.cluster.reset(t.pod("payments", "api-0", ready=False), t.pod("payments", "api-1"))
        check = lambda attempt: t.answer(app.after_batch(t.batch(["a"], attempt=attempt)))
        self.assertEqual(check(0), {"answer": "wait", "seconds": 20,
                                    "reason": "1 payments pod(s) not Ready (check 1 of 3)"})
        self.assertEqual(check(2), {"answer": "abort",
                                    "reason": "1 payments pod(s) not Ready after 3 checks"})
        self.assertEqual(t.cluster.asked, [("v1", "Pod", "payments", None)] * 2)
        t.cluster.reset(t.pod("payments", "api-0"))
        self.assertEqual(check(0), {"answer": "proceed"})

    def test_the_gate_is_asked_after_batches_only(self):
        t.cluster.reset(t.pod("payments", "api-0", ready=False))
        gates = t.exports(app).Gates()
        for phase in (t.types.Phase.BEFORE_GROUP, t.types.Phase.BEFORE_BATCH):
            answer = gates.check(t.context(), phase, t.batch(["a"]), t.healthy())
            self.assertEqual(t.answer(answer), {"answer": "defer"})
        after = gates.check(t.context(), t.types.Phase.AFTER_BATCH, t.batch(["a"]), t.healthy())
        self.assertEqual(t.answer(after)["answer"], "wait")


if __name__ == "__main__":
    unittest.main()
