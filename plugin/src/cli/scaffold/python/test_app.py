"""Unit tests of app.py on the SDK's stand-in host: `python3 -m unittest` (or pytest) here."""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "sdk" / "python"))
import rollout_ext_testing as t  # noqa: E402  (before the hook: it stands in for the bindings)
import app  # noqa: E402


class Hook(unittest.TestCase):
    def setUp(self):
        t.cluster.reset()

    def test_oldest_first_and_never_a_held_node(self):
        nodes = [t.node("young", created=300), t.node("held", created=100, labels={app.HOLD: "true"}),
                 t.node("old", created=200), t.node("fresh", created=50, up_to_date=True, reason=None)]
        chosen = app.select(t.chosen(nodes))
        self.assertEqual([c["name"] for c in t.answer(chosen)["order"]], ["old", "young"])

    def test_at_most_two_at_a_time(self):
        pending = [t.node("a"), t.node("b"), t.node("c")]
        sized = app.next_batch(t.progress(pending, 3))
        self.assertEqual(t.answer(sized)["count"], 2)

    def test_after_a_batch_it_waits_three_checks_then_aborts(self):
        t.cluster.reset(t.pod("default", "web-0", ready=False))
        check = lambda attempt: t.answer(app.after_batch(t.batch(["n1"], attempt=attempt)))
        self.assertEqual(check(0), {"answer": "wait", "seconds": 30,
                                    "reason": "pods of default not Ready: default/web-0 (check 1 of 3)"})
        self.assertEqual(check(2), {"answer": "abort",
                                    "reason": "pods of default not Ready: default/web-0 after 3 checks"})


if __name__ == "__main__":
    unittest.main()
