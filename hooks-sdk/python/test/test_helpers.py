"""Unit tests of the Python helpers, run with the standard library (`python3 -m unittest`)
outside a component, on the SDK's stand-in host (rollout_ext_testing.py)."""

import sys
import types as pytypes
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
import rollout_ext_testing as t  # noqa: E402
from rollout_ext_testing import Err  # noqa: E402
import rollout_ext_hooks as h  # noqa: E402

# 2026-11-27T12:00:00Z is a Friday.
FRIDAY_NOON = 1795780800


class Helpers(unittest.TestCase):
    def test_hold_waits_for_the_checks_it_is_given_then_aborts(self):
        batch = lambda attempt: pytypes.SimpleNamespace(attempt=attempt)
        wait = h.hold(batch(0), 3, 20, "pods not Ready")
        self.assertEqual(type(wait).__name__, "Verdict_Wait")
        self.assertEqual(wait.args[0].kwargs, {"seconds": 20, "reason": "pods not Ready (check 1 of 3)"})
        self.assertEqual(type(h.hold(batch(1), 3, 20, "x")).__name__, "Verdict_Wait")
        self.assertEqual(h.hold(batch(2), 3, 20, "x").args, ("x after 3 checks",))
        self.assertEqual(h.hold(batch(0), 1, 20, "x").args, ("x after 1 check",))

    def test_week_windows_wrap_past_sunday_midnight(self):
        self.assertEqual(h.minute_of_week(FRIDAY_NOON), 4 * 1440 + 12 * 60)
        self.assertTrue(h.in_window(FRIDAY_NOON, "fri 09:00", "fri 17:00"))
        self.assertFalse(h.in_window(FRIDAY_NOON, "sat 22:00", "mon 06:00"))
        self.assertTrue(h.in_window(FRIDAY_NOON + 2 * 86400, "sat 22:00", "mon 06:00"))
        self.assertFalse(h.in_window(FRIDAY_NOON, "fri 09:00", "fri 17:00", 6 * 60))

    def test_choose_by_orders_candidates_by_several_rules_with_reasons(self):
        from collections import Counter

        instances = t.Instances([t.node("a1", "a", created=30), t.node("b1", "b", created=20),
                                 t.node("a2", "a", created=10),
                                 t.node("c1", "c", labels={"drain-first": "yes"})])
        everyone = h.candidates_of(instances)
        self.assertEqual([(c.index, c.name) for c in everyone][3], (3, "c1"))
        self.assertEqual(everyone[3].labels(), {"drain-first": "yes"})
        zones = Counter(c.zone for c in everyone)
        key = lambda c: (c.label("drain-first") is None, -zones[c.zone], c.created or 0)
        chosen = t.answer(h.choose_by(everyone, key, lambda c: f"zone {c.zone}: {zones[c.zone]}"))
        self.assertEqual([(c["name"], c["reason"]) for c in chosen["order"]],
                         [("c1", "zone c: 1"), ("a2", "zone a: 2"), ("a1", "zone a: 2"),
                          ("b1", "zone b: 1")])

    def test_choose_by_rules_names_the_rule_that_placed_each_choice(self):
        from collections import Counter

        instances = t.Instances([t.node("a1", "a"), t.node("b1", "b", labels={"tier": "spot"}),
                                 t.node("a2", "a"), t.node("c1", "c")])
        everyone = h.candidates_of(instances)
        zones = Counter(c.zone for c in everyone)
        rules = [("spot first", lambda c: c.label("tier") != "spot"),
                 ("largest zone first", lambda c: -zones[c.zone],
                  lambda c: f"zone {c.zone} has {zones[c.zone]}"),
                 ("oldest first", lambda c: c.created or 0)]
        chosen = t.answer(h.choose_by_rules(everyone, rules))
        self.assertEqual([(c["name"], c["reason"]) for c in chosen["order"]], [
            ("b1", "spot first"), ("a1", "tied with a2 on every rule"),
            ("a2", "largest zone first: zone a has 2"),
            ("c1", "after a2 by largest zone first: zone c has 1")])
        self.assertEqual(t.answer(h.choose_by_rules(everyone[:1], rules))["order"],
                         [{"name": "a1", "reason": "the only candidate"}])
        self.assertEqual(h.today_at(FRIDAY_NOON, "18:00"), FRIDAY_NOON + 6 * 3600)
        self.assertEqual(h.today_at(FRIDAY_NOON, "18:00", 60), FRIDAY_NOON + 5 * 3600)
        self.assertEqual(t.answer(h.abort("no")), {"answer": "abort", "reason": "no"})
        self.assertEqual(t.answer(h.PROCEED), {"answer": "proceed"})
        self.assertEqual(t.answer(h.DEFER), {"answer": "defer"})
        batch = t.batch(["n1"])
        self.assertEqual(t.answer(h.hold_while(batch, 5, 60, "blocked", [])), {"answer": "proceed"})
        self.assertEqual(t.answer(h.hold_while(batch, 5, 60, "blocked", ["shop/db"])),
                         {"answer": "wait", "seconds": 60, "reason": "blocked: shop/db (check 1 of 5)"})
        self.assertEqual(t.answer(h.abort_if_any("short", ["a", "b"])),
                         {"answer": "abort", "reason": "short: a, b"})
        self.assertEqual(t.answer(h.abort_if_any("short", iter([]))), {"answer": "proceed"})
        self.assertEqual(h.AFTER_BATCH, t.types.Phase.AFTER_BATCH)

    def test_the_stand_in_host_filters_by_label_selector(self):
        t.cluster.reset(t.pod("a", "crit", labels={"critical": "true"}, node="n1"),
                        t.pod("a", "calm", labels={"critical": "false"}, node="n2"),
                        t.pod("b", "bare", node="n3"))
        self.assertEqual([p.name for p in h.pods(None, "critical=true")], ["crit"])
        self.assertEqual([p.name for p in h.pods(None, "critical!=true")], ["calm", "bare"])
        self.assertEqual([p.name for p in h.pods("a", "!critical")], [])
        self.assertEqual([p.name for p in h.pods(None, "critical")], ["crit", "calm"])
        with self.assertRaises(Err):
            h.pods(None, "critical in (true)")
        self.assertEqual(h.nodes_running(None, "critical=true"), {"n1"})

    def test_percent_of_rounds_as_kubernetes_rounds_budgets(self):
        self.assertEqual(h.percent_of(25, 10, True), 3)
        self.assertEqual(h.percent_of(25, 10, False), 2)

    def test_workloads_read_the_api_defaults(self):
        sts = {"apiVersion": "apps/v1", "kind": "StatefulSet"}
        t.cluster.reset(
            {**sts, "metadata": {"namespace": "shop", "name": "web"}, "spec": {}, "status": {}},
            {**sts, "metadata": {"namespace": "shop", "name": "db"}, "spec": {"replicas": 3},
             "status": {"readyReplicas": 3}},
        )
        web, db = h.workloads("StatefulSet", "shop")
        self.assertEqual((web.desired, web.available, web.short), (1, 0, True))
        self.assertEqual((db.desired, db.available, db.short), (3, 3, False))
        t.cluster.reset({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
                         "status": {"desiredNumberScheduled": 4, "numberAvailable": 3}})
        (agent,) = h.workloads("DaemonSet")
        self.assertTrue(agent.short)

    def test_pods_are_ready_by_their_condition_and_finished_by_their_phase(self):
        t.cluster.reset(t.pod("payments", "a"), t.pod("payments", "c", phase="Succeeded", ready=False))
        a, c = h.pods("payments")
        self.assertEqual((a.ready, a.key), (True, "payments/a"))
        self.assertEqual((c.ready, c.finished), (False, True))

    def test_a_batch_ends_at_its_cautious_estimate(self):
        estimate = lambda seconds, p90: pytypes.SimpleNamespace(
            seconds=seconds, p90_seconds=p90, basis="history of 2 runs")
        t.cluster.reset(estimates=pytypes.SimpleNamespace(batch=estimate(300, 420),
                                                          remaining=estimate(900, 1200)))
        self.assertEqual(h.estimates().remaining.seconds, 900)
        self.assertEqual(h.batch_ends(1000), 1420)
        self.assertEqual(h.run_ends(1000), 2200)
        none = pytypes.SimpleNamespace(batch=None, remaining=None)
        self.assertIsNone(h.batch_ends(1000, none))

    def test_who_else_disrupts_a_node_is_found_among_the_others_the_plugin_tells(self):
        t.cluster.reset(others=[("ip-1", "karpenter"), ("ip-2", "cluster-autoscaler")])
        self.assertEqual(len(h.others_disrupting()), 2)
        self.assertEqual(h.disrupted_by("ip-2"), "cluster-autoscaler")
        self.assertIsNone(h.disrupted_by("ip-3"))
        self.assertIsNone(h.disrupted_by("ip-1", []))

    def test_a_config_that_is_not_an_object_is_refused(self):
        with self.assertRaises(Err):
            h.config_object("[1]")
        self.assertEqual(h.config_object('{"a": 1}'), {"a": 1})

    def test_oldest_first_puts_an_unknown_creation_first_and_breaks_ties_by_name(self):
        at = lambda name, created: pytypes.SimpleNamespace(name=name, created=created)
        order = h.oldest_first([at("c", 200), at("b", 100), at("a", 100), at("x", None)])
        self.assertEqual([i.name for i in order], ["x", "a", "b", "c"])

    def test_the_build_entry_defers_the_points_left_out_and_declares_those_served(self):
        class Metadata(h.AnyConfig):
            NAME = "site"

        class Gates:
            def check(self, ctx, phase, batch, summary):
                return None

        app = pytypes.SimpleNamespace(__name__="app", Metadata=Metadata, Gates=Gates)
        meta, selection, batching, gates = h.hook_exports(app)
        self.assertEqual((selection, batching, gates), (h.DeferSelection, h.DeferBatching, Gates))
        self.assertEqual(meta().describe().kwargs["points"], [h.POINTS["gate"]])

    def test_a_point_served_but_not_declared_is_refused_naming_it(self):
        class Metadata(h.AnyConfig):
            def describe(self):
                return h.describe("site", ["select"])

        class Batching(h.DeferBatching):
            def next_batch(self, ctx, progress, pending):
                return h.size(1, "one")

        app = pytypes.SimpleNamespace(__name__="app", Metadata=Metadata, Batching=Batching)
        meta = h.hook_exports(app)[0]
        with self.assertRaisesRegex(ValueError, "app.py's class Batching serves point 'batch'"):
            meta().describe()
        with self.assertRaisesRegex(AttributeError, "rollout-ext-build: app.py sets no NAME and defines no class Metadata"):
            h.hook_exports(pytypes.SimpleNamespace(__name__="app"))

    def test_the_short_form_passes_each_function_the_arguments_it_names(self):
        seen = []

        def select(candidates, config, chosen):
            seen.append(("select", [c.name for c in candidates], config, [c.name for c in chosen]))
            return h.choose((c.name, "any") for c in candidates)

        def next_batch(now, pending, progress):
            seen.append(("next_batch", now, [c.label("rack") for c in pending], progress.max_batch))
            return h.size(1, "one")

        def before_batch(batch):
            seen.append(("before_batch", batch.index))
            return h.PROCEED

        app = pytypes.SimpleNamespace(__name__="app", NAME="site", select=select,
                                      next_batch=next_batch, before_batch=before_batch)
        meta, selection, batching, gates = h.hook_exports(app)
        info = meta().describe()
        self.assertEqual((info.kwargs["name"], info.kwargs["points"]),
                         ("site", [h.POINTS[p] for p in ("select", "batch", "gate")]))
        nodes = [t.node("a", labels={"rack": "r1"}), t.node("b", reason=None)]
        ctx = t.context(now=600, config={"max": 2})
        selection().select(ctx, t.group(nodes), t.Instances(nodes))
        batching().next_batch(ctx, t.progress(nodes, 2), t.Instances(nodes))
        for phase in (h.BEFORE_GROUP, h.BEFORE_BATCH, h.AFTER_BATCH):
            answer = gates().check(ctx, phase, t.batch(["a"], index=4), t.healthy())
            self.assertEqual(t.answer(answer)["answer"], "proceed" if phase == h.BEFORE_BATCH else "defer")
        self.assertEqual(seen, [("select", ["a", "b"], {"max": 2}, ["a"]), ("next_batch", 600, ["r1", None], 2),
                                ("before_batch", 4)])

    def test_an_instant_is_said_as_its_weekday_and_time(self):
        self.assertEqual(h.day_and_time(FRIDAY_NOON), "fri 12:00")
        self.assertEqual(h.day_and_time(FRIDAY_NOON + 12 * 3600 + 28 * 60), "sat 00:28")
        self.assertEqual(h.day_and_time(FRIDAY_NOON, -13 * 60), "thu 23:00")

    def test_a_candidate_without_a_zone_and_keys_with_none_sort_first(self):
        nodes = [t.node("a", "z1", created=5), t.node("b", created=None), t.node("c", created=3)]
        everyone = t.candidates(nodes)
        self.assertEqual([c.zone for c in everyone], ["z1", "", ""])
        tainted = t.candidates([t.node("t", taints=[("retiring", "", "NoSchedule")])])[0]
        self.assertTrue(tainted.has_taint("retiring") and not tainted.has_taint("other"))
        by_age = h.choose_by(everyone, lambda c: (c.created, c.name), lambda c: "old")
        self.assertEqual([c["name"] for c in t.answer(by_age)["order"]], ["b", "c", "a"])
        rules = h.choose_by_rules(everyone, [("oldest first", lambda c: c.created)])
        self.assertEqual([c["name"] for c in t.answer(rules)["order"]], ["b", "c", "a"])

    def test_at_most_keeps_to_what_the_budget_allows_now_and_says_so(self):
        p = t.progress([t.node("a"), t.node("b")], 2)
        self.assertEqual(t.answer(h.at_most(3, p, "weekend")),
                         {"answer": "size", "count": 2, "reason": "weekend (2 allowed now)"})
        self.assertEqual(t.answer(h.at_most(2, p, "weekend")),
                         {"answer": "size", "count": 2, "reason": "weekend"})

    def test_the_short_form_refuses_what_it_cannot_call_naming_it(self):
        def after_batch(b):
            return h.PROCEED

        def check(phase):
            return h.DEFER

        app = lambda **points: pytypes.SimpleNamespace(__name__="app", NAME="site", **points)
        with self.assertRaisesRegex(TypeError, "rollout-ext-build: app.py's after_batch takes 'b', which is none of its arguments \\(ctx, config, now, batch, summary\\)"):
            h.hook_exports(app(after_batch=after_batch))
        with self.assertRaisesRegex(TypeError, "app.py has check and a phase's gate \\(after_batch\\)"):
            h.hook_exports(app(check=check, after_batch=lambda batch: h.PROCEED))
        with self.assertRaisesRegex(TypeError, "app.py serves point 'gate' twice, by class Gates and by check"):
            h.hook_exports(app(check=check, Gates=h.DeferGates))
        gates = h.hook_exports(app(after_batch=lambda batch: None))[3]
        with self.assertRaisesRegex(Err, "app.py's after_batch answered nothing \\(it returned None\\)"):
            gates().check(t.context(), h.AFTER_BATCH, t.batch(["a"]), t.healthy())

    def test_a_schedule_holds_day_ranges_lists_and_spans_past_midnight(self):
        office = "mon-fri 09:00-17:00"
        self.assertTrue(h.in_schedule(FRIDAY_NOON, office))
        self.assertFalse(h.in_schedule(FRIDAY_NOON + 6 * 3600, office))
        self.assertFalse(h.in_schedule(FRIDAY_NOON + 86400, [office]), "Saturday")
        self.assertFalse(h.in_schedule(FRIDAY_NOON, office, 360))
        nights = ["sat,sun 22:00-06:00", "fri-mon 12:00-12:30"]
        self.assertTrue(h.in_schedule(FRIDAY_NOON, nights))
        sunday_3am = FRIDAY_NOON + 86400 + 15 * 3600
        self.assertTrue(h.in_schedule(sunday_3am, nights))
        self.assertTrue(h.in_schedule(sunday_3am + 86400, nights))
        self.assertFalse(h.in_schedule(sunday_3am + 2 * 86400, nights))
        with self.assertRaisesRegex(ValueError, "schedule 'weekdays 09:00-17:00': invalid weekday"):
            h.in_schedule(0, "weekdays 09:00-17:00")
        with self.assertRaisesRegex(ValueError, "invalid time '9': expected HH:MM"):
            h.in_schedule(0, "mon-fri 9-5")

    def test_these_last_keeps_each_part_in_its_order(self):
        self.assertEqual(h.these_last([1, 2, 3, 4, 5], lambda n: n % 2 == 0), [1, 3, 5, 2, 4])

    def test_budgets_read_what_the_disruption_controller_computed(self):
        t.cluster.reset({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                         "metadata": {"namespace": "shop", "name": "web"},
                         "status": {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2,
                                    "expectedPods": 3}},
                        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                         "metadata": {"namespace": "shop", "name": "new"}})
        web, new = h.pod_disruption_budgets("shop")
        self.assertEqual((web.key, web.disruptions_allowed, web.blocks), ("shop/web", 1, False))
        self.assertEqual((new.expected_pods, new.blocks), (0, True))
        self.assertEqual(t.cluster.asked, [("policy/v1", "PodDisruptionBudget", "shop", None)])


if __name__ == "__main__":
    unittest.main()
