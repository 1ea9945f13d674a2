//! The checker itself, fed recorded sequences of broken behaviour.

use super::*;

fn node(name: &str, ready: bool, unschedulable: bool) -> Seen {
    Seen::Node {
        name: name.into(),
        ready,
        unschedulable,
    }
}

fn web_pod(name: &str, ready: bool, terminating: bool) -> Seen {
    Seen::Pod {
        key: format!("ns/{name}"),
        labels: [("app".to_string(), "web".to_string())].into(),
        ready,
        terminating,
    }
}

/// Three outdated nodes, maxUnavailable 1, maxSurge 1, two pods under a minAvailable-1 budget,
/// all listed.
fn three_node_checker() -> Checker {
    let mut checker = Checker::new(
        Budget {
            outdated: ["n1", "n2", "n3"].map(String::from).into(),
            max_unavailable: 1,
            max_surge: 1,
            cloud_only: false,
            set_aside: Default::default(),
        },
        vec![Pdb {
            name: "ns/web".into(),
            match_labels: [("app".to_string(), "web".to_string())].into(),
            min_available: 1,
        }],
    );
    for n in ["n1", "n2", "n3"] {
        checker.observe(node(n, true, false));
    }
    checker.observe(Seen::NodesSynced);
    checker.observe(web_pod("a", true, false));
    checker.observe(web_pod("b", true, false));
    checker.observe(Seen::PodsSynced);
    checker
}

/// A correct rotation of the three nodes, one at a time with a surge.
fn correct_sequence() -> Vec<Seen> {
    let mut seq = vec![
        Seen::Detach { node: "n3".into() },
        node("n3-new", false, false),
        node("n3-new", true, false),
    ];
    for n in ["n1", "n2", "n3"] {
        seq.extend([
            node(n, true, true),
            web_pod("a", true, true),
            Seen::PodGone { key: "ns/a".into() },
            web_pod("a", false, false),
            web_pod("a", true, false),
            Seen::NodeGone { name: n.into() },
            Seen::Terminate {
                node: n.into(),
                pods_left: vec![],
            },
        ]);
        if n != "n3" {
            seq.extend([
                node(&format!("{n}-new"), false, false),
                node(&format!("{n}-new"), true, false),
            ]);
        }
    }
    seq
}

fn correct_end() -> End {
    let nodes: Vec<(String, bool, bool)> = ["n1-new", "n2-new", "n3-new"]
        .iter()
        .map(|n| (n.to_string(), true, false))
        .collect();
    End {
        instances: nodes.iter().map(|n| n.0.clone()).collect(),
        nodes,
        lock: None,
        marked: Vec::new(),
        kured_holders: Vec::new(),
    }
}

#[test]
fn a_hold_on_kureds_lock_left_at_the_end_is_a_violation() {
    let mut checker = three_node_checker();
    for seen in correct_sequence() {
        checker.observe(seen);
    }
    checker.finish(&End {
        kured_holders: vec!["rollout-ext/run-1".into()],
        ..correct_end()
    });
    assert_eq!(
        checker.violations(),
        [Violation::KuredLockLeft {
            holder: "rollout-ext/run-1".into()
        }]
    );
}

#[test]
fn a_scale_down_mark_left_at_the_end_is_a_violation() {
    let mut checker = three_node_checker();
    for seen in correct_sequence() {
        checker.observe(seen);
    }
    checker.finish(&End {
        marked: vec!["n2-new".into()],
        ..correct_end()
    });
    assert_eq!(
        checker.violations(),
        [Violation::MarkLeft {
            node: "n2-new".into()
        }]
    );
}

#[test]
fn the_checker_passes_a_correct_rotation() {
    let mut checker = three_node_checker();
    for seen in correct_sequence() {
        checker.observe(seen);
    }
    checker.finish(&correct_end());
    assert_eq!(checker.report(), None);
    assert_eq!(
        checker.fewest_available,
        Some(3),
        "a surge first, then one at a time"
    );
}

#[test]
fn the_checker_reports_a_termination_before_the_drain() {
    let mut checker = three_node_checker();
    checker.observe(Seen::Terminate {
        node: "n1".into(),
        pods_left: vec!["ns/a".into()],
    });
    checker.observe(node("n2", true, true));
    checker.observe(Seen::Terminate {
        node: "n2".into(),
        pods_left: vec!["ns/b".into()],
    });
    assert_eq!(
        checker.violations(),
        [
            Violation::TerminatedUndrained {
                node: "n1".into(),
                cordoned: false,
                pods_left: vec!["ns/a".into()],
            },
            Violation::TerminatedUndrained {
                node: "n2".into(),
                cordoned: true,
                pods_left: vec!["ns/b".into()],
            },
        ]
    );
    assert_eq!(
        checker.report().unwrap().lines().next().unwrap(),
        "invariant violated: node n1 was terminated before it was drained (it was never cordoned; pods still on it: [ns/a])"
    );
}

#[test]
fn a_node_lost_while_the_watch_was_away_is_judged_by_its_pods_alone() {
    let mut checker = three_node_checker();
    // The watch saw neither node cordoned before an interruption; when it listed again, their
    // replacements were there and they were gone.
    checker.observe(node("n1-new", true, false));
    checker.observe(node("n2-new", true, false));
    checker.observe(Seen::NodeLost { name: "n1".into() });
    checker.observe(Seen::NodeLost { name: "n2".into() });
    checker.observe(Seen::Terminate {
        node: "n1".into(),
        pods_left: vec![],
    });
    checker.observe(Seen::Terminate {
        node: "n2".into(),
        pods_left: vec!["ns/b".into()],
    });
    assert_eq!(
        checker.violations(),
        [Violation::TerminatedUndrained {
            node: "n2".into(),
            cordoned: false,
            pods_left: vec!["ns/b".into()],
        }]
    );
}

#[test]
fn the_checker_allows_terminating_undrained_nodes_with_cloudonly() {
    let mut checker = Checker::new(
        Budget {
            outdated: ["n1"].map(String::from).into(),
            max_unavailable: 1,
            max_surge: 0,
            cloud_only: true,
            set_aside: Default::default(),
        },
        vec![],
    );
    checker.observe(Seen::Terminate {
        node: "n1".into(),
        pods_left: vec!["ns/a".into()],
    });
    assert_eq!(checker.report(), None);
}

#[test]
fn the_checker_reports_a_node_terminated_twice_and_one_not_outdated() {
    let mut checker = three_node_checker();
    for seen in correct_sequence() {
        checker.observe(seen);
    }
    checker.observe(Seen::Terminate {
        node: "n2".into(),
        pods_left: vec![],
    });
    checker.observe(node("n1-new", true, true));
    checker.observe(Seen::Terminate {
        node: "n1-new".into(),
        pods_left: vec![],
    });
    assert_eq!(
        checker.violations(),
        [
            Violation::TerminatedTwice { node: "n2".into() },
            Violation::TerminatedNotOutdated {
                node: "n1-new".into()
            },
        ]
    );
}

#[test]
fn the_checker_reports_too_many_unavailable_and_too_many_surges() {
    let mut checker = three_node_checker();
    checker.observe(node("n1", true, true));
    assert!(checker.violations().is_empty(), "one is within the budget");
    checker.observe(node("n2", false, false));
    checker.observe(Seen::Detach { node: "n3".into() });
    checker.observe(Seen::Detach { node: "n2".into() });
    assert_eq!(
        checker.violations(),
        [
            Violation::TooManyUnavailable {
                available: 1,
                floor: 2,
                unavailable: vec!["n1".into(), "n2".into()],
            },
            Violation::TooManySurges {
                detached: vec!["n3".into(), "n2".into()],
                max_surge: 1,
            },
        ]
    );
    assert_eq!(checker.fewest_available, Some(1));
}

#[test]
fn the_checker_reports_a_breached_disruption_budget() {
    let mut checker = three_node_checker();
    checker.observe(web_pod("a", true, true));
    assert!(checker.violations().is_empty(), "one may go");
    checker.observe(Seen::PodGone { key: "ns/b".into() });
    assert_eq!(
        checker.violations(),
        [Violation::PdbBreached {
            pdb: "ns/web".into(),
            healthy: 0,
            min_available: 1,
        }]
    );
}

#[test]
fn the_checker_counts_nothing_before_the_listings_are_complete() {
    let mut checker = Checker::new(
        Budget {
            outdated: ["n1", "n2", "n3"].map(String::from).into(),
            max_unavailable: 1,
            max_surge: 0,
            cloud_only: false,
            set_aside: Default::default(),
        },
        vec![],
    );
    checker.observe(node("n1", true, false));
    assert!(checker.violations().is_empty());
}

#[test]
fn the_checker_counts_a_relisting_once_it_is_complete() {
    let mut checker = three_node_checker();
    checker.observe(node("n1", true, true));
    // While the watch was away n1 was replaced and n2 cordoned; the listing brings n2 before
    // the replacement, and n1's end only at its close.
    checker.observe(Seen::NodesListing);
    checker.observe(node("n2", true, true));
    checker.observe(node("n1-new", true, false));
    checker.observe(node("n3", true, false));
    checker.observe(Seen::NodeLost { name: "n1".into() });
    checker.observe(Seen::NodesSynced);
    assert_eq!(checker.violations(), []);
    assert_eq!(checker.fewest_available, Some(2));
    // A listing that ends short is still reported.
    checker.observe(Seen::NodesListing);
    checker.observe(node("n3", true, true));
    checker.observe(Seen::NodesSynced);
    assert!(
        matches!(
            checker.violations(),
            [Violation::TooManyUnavailable { available: 1, .. }]
        ),
        "{:?}",
        checker.violations()
    );
}

#[test]
fn the_checker_reports_an_unfinished_end() {
    let mut checker = three_node_checker();
    // n3 was never terminated, a surge instance and an unregistered instance remain, and the
    // lock is still held.
    for seen in correct_sequence()
        .into_iter()
        .filter(|s| !matches!(s, Seen::Terminate { node, .. } if node == "n3"))
    {
        checker.observe(seen);
    }
    let mut end = correct_end();
    end.nodes.push(("n3".into(), true, true));
    end.instances.extend(["n3".to_string(), "lost".to_string()]);
    end.lock = Some("me@here/pid-1".into());
    checker.finish(&end);
    assert_eq!(
        checker.violations(),
        [
            Violation::NotReplaced { node: "n3".into() },
            Violation::LeftOver {
                expected: 3,
                instances: vec![
                    "n1-new".into(),
                    "n2-new".into(),
                    "n3-new".into(),
                    "n3".into(),
                    "lost".into()
                ],
            },
            Violation::NotAvailableAtEnd { node: "n3".into() },
            Violation::LockNotReleased {
                holder: "me@here/pid-1".into()
            },
        ]
    );
}

/// A group whose n2 cannot be drained: with quarantine it must be set aside, never terminated.
fn checker_setting_aside_n2() -> Checker {
    let mut checker = Checker::new(
        Budget {
            outdated: ["n1", "n2", "n3"].map(String::from).into(),
            max_unavailable: 2,
            max_surge: 0,
            cloud_only: false,
            set_aside: ["n2".to_string()].into(),
        },
        vec![],
    );
    for n in ["n1", "n2", "n3"] {
        checker.observe(node(n, true, false));
    }
    checker.observe(Seen::NodesSynced);
    checker
}

#[test]
fn a_node_to_set_aside_is_never_terminated_and_ends_cordoned() {
    // Set aside as it must be: cordoned, kept, the others replaced.
    let mut checker = checker_setting_aside_n2();
    for n in ["n2", "n1"] {
        checker.observe(node(n, true, true));
    }
    checker.observe(Seen::Terminate {
        node: "n1".into(),
        pods_left: vec![],
    });
    checker.observe(Seen::NodeGone { name: "n1".into() });
    checker.observe(node("n1-new", true, false));
    checker.observe(node("n3", true, true));
    checker.observe(Seen::Terminate {
        node: "n3".into(),
        pods_left: vec![],
    });
    checker.observe(Seen::NodeGone { name: "n3".into() });
    checker.observe(node("n3-new", true, false));
    let nodes: Vec<(String, bool, bool)> = vec![
        ("n1-new".into(), true, false),
        ("n2".into(), true, true),
        ("n3-new".into(), true, false),
    ];
    let end = End {
        instances: nodes.iter().map(|n| n.0.clone()).collect(),
        nodes,
        ..Default::default()
    };
    checker.finish(&end);
    assert_eq!(checker.violations(), []);

    // Terminated after all, or left uncordoned at the end: both are reported.
    let mut terminated = checker_setting_aside_n2();
    terminated.observe(node("n2", true, true));
    terminated.observe(Seen::Terminate {
        node: "n2".into(),
        pods_left: vec![],
    });
    assert_eq!(
        terminated.violations(),
        [Violation::SetAsideTerminated { node: "n2".into() }]
    );
    let mut uncordoned = checker_setting_aside_n2();
    let mut end = end;
    end.nodes[1].2 = false;
    uncordoned.finish(&end);
    assert!(
        uncordoned
            .violations()
            .contains(&Violation::SetAsideNotCordoned { node: "n2".into() }),
        "{:?}",
        uncordoned.violations()
    );
}
