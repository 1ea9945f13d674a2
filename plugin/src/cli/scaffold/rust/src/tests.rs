//! Unit tests of the rules, natively (`cargo test`), on the SDK's builders and fake cluster.

use rollout_ext_hooks::testing::{self, batch, candidates, context, group, healthy, node, progress};
use rollout_ext_hooks::{Pause, Phase, Policy, Selection, Verdict};
use serde_json::json;

use super::Hook;

#[test]
fn oldest_first_and_never_a_held_node() {
    let at = |name: &str, created: i64| {
        let mut n = node(name, "zone-1");
        n.created = Some(created);
        n
    };
    let nodes = vec![
        at("young", 300),
        at("held", 100).with_label("example.com/hold", "true"),
        at("old", 200),
        at("fresh", 50).up_to_date().with_reason(None),
    ];
    let g = group(&nodes, 0, 3);
    let answer = Hook::select(&context(0, json!({})), &g, &candidates(nodes)).unwrap();
    let Selection::Choose(chosen) = answer else {
        panic!("the hook always chooses");
    };
    let names: Vec<&str> = chosen.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["old", "young"]);
}

#[test]
fn at_most_two_at_a_time() {
    let pending = vec![node("a", "z"), node("b", "z"), node("c", "z")];
    let g = group(&pending, 0, 3);
    let p = progress(g, pending, 1, 1);
    let answer = Hook::next_batch(&context(0, json!({})), &p).unwrap();
    assert_eq!(answer.count(), Some(2));
}

#[test]
fn after_a_batch_waits_three_checks_then_aborts() {
    let pod = json!({"metadata": {"name": "web-0", "namespace": "default"},
                     "status": {"conditions": [{"type": "Ready", "status": "False"}]}});
    testing::with_objects(&[("v1", "Pod", vec![pod])], || {
        let ctx = context(0, json!({}));
        let mut b = batch(&["n1"]);
        let verdict = Hook::check(&ctx, Phase::AfterBatch, &b, &healthy(3, 1)).unwrap();
        let reason = "pods of default not Ready: default/web-0 (check 1 of 3)".to_string();
        assert_eq!(verdict, Verdict::Wait(Pause { seconds: 30, reason }));
        b.attempt = 2;
        let verdict = Hook::check(&ctx, Phase::AfterBatch, &b, &healthy(3, 1)).unwrap();
        let reason = "pods of default not Ready: default/web-0 after 3 checks".to_string();
        assert_eq!(verdict, Verdict::Abort(reason));
    });
}
