use rollout_ext_hooks::testing::{
    self, batch, candidates, context, group, healthy, node, progress,
};
use rollout_ext_hooks::{LocalInstance, Pause, Phase, Policy, Selection, Verdict};
use serde_json::json;

use super::SitePolicy;

fn with_pods(name: &str, pods: u32) -> LocalInstance {
    let mut n = node(name, "a");
    n.pods = pods;
    n
}

fn chosen(selection: Selection) -> Vec<(String, String)> {
    match selection {
        Selection::Choose(c) => c.into_iter().map(|c| (c.name, c.reason)).collect(),
        Selection::Defer => panic!("the policy always chooses"),
    }
}

#[test]
fn fewest_pods_first_and_never_a_pinned_or_up_to_date_node() {
    let nodes = vec![
        with_pods("busy", 9),
        with_pods("pinned", 0).with_label("example.com/pinned", "true"),
        with_pods("idle", 1),
        with_pods("fresh", 0).up_to_date(),
        with_pods("unpinned", 4).with_label("example.com/pinned", "false"),
    ];
    let g = group(&nodes, 0, 2);
    let answer = SitePolicy::select(&context(0, json!({})), &g, &candidates(nodes)).unwrap();
    assert_eq!(
        chosen(answer),
        [
            ("idle".to_string(), "1 pods to move".to_string()),
            ("unpinned".into(), "4 pods to move".into()),
            ("busy".into(), "9 pods to move".into()),
        ]
    );
}

#[test]
fn at_most_two_per_batch_and_one_per_rack() {
    let in_rack = |name: &str, rack: &str| node(name, "a").with_label("example.com/rack", rack);
    let cases = [
        (
            vec![in_rack("a", "r1"), in_rack("b", "r2"), in_rack("c", "r3")],
            2,
        ),
        (vec![in_rack("a", "r1"), in_rack("b", "r1")], 1),
        (vec![node("a", "a"), node("b", "a")], 1), // no rack label: one unknown rack
        (vec![in_rack("a", "r1")], 1),
    ];
    for (pending, size) in cases {
        let g = group(&pending, 0, 3);
        let p = progress(g, pending, 1, 1);
        let answer = SitePolicy::next_batch(&context(0, json!({})), &p).unwrap();
        assert_eq!(answer.count(), Some(size), "{answer:?}");
    }
}

fn payments_pod(name: &str, ready: bool) -> serde_json::Value {
    let status = if ready { "True" } else { "False" };
    json!({"metadata": {"name": name, "namespace": "payments"},
           "status": {"conditions": [{"type": "Ready", "status": status}]}})
}

#[test]
fn after_a_batch_waits_three_checks_for_payments_then_aborts() {
    let ctx = context(0, json!({}));
    let pods = vec![payments_pod("api-0", true), payments_pod("api-1", false)];
    testing::with_objects(&[("v1", "Pod", pods)], || {
        let mut b = batch(&["n1"]);
        let verdict = SitePolicy::check(&ctx, Phase::AfterBatch, &b, &healthy(3, 2)).unwrap();
        assert_eq!(
            verdict,
            Verdict::Wait(Pause {
                seconds: 20,
                reason: "1 payments pod(s) not Ready (check 1 of 3)".into()
            })
        );
        b.attempt = 2;
        let verdict = SitePolicy::check(&ctx, Phase::AfterBatch, &b, &healthy(3, 2)).unwrap();
        assert_eq!(
            verdict,
            Verdict::Abort("1 payments pod(s) not Ready after 3 checks".into())
        );
        // Only after a batch: before it, the built-in verdict stands.
        let before = SitePolicy::check(&ctx, Phase::BeforeBatch, &b, &healthy(3, 2)).unwrap();
        assert_eq!(before, Verdict::Defer);
    });
    let ready = vec![payments_pod("api-0", true)];
    testing::with_objects(&[("v1", "Pod", ready)], || {
        let verdict =
            SitePolicy::check(&ctx, Phase::AfterBatch, &batch(&["n1"]), &healthy(3, 1)).unwrap();
        assert_eq!(verdict, Verdict::Proceed);
    });
}
