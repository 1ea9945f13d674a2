//! The capacity simulation on crafted clusters: where evicted pods go, or why they cannot.

use serde_json::{Value, json};

use super::*;

const GROUP: &str = "kops.k8s.io/instancegroup";

/// A Ready node of `group` with this allocatable (none: unlimited), labels and taints.
fn node(name: &str, group: &str, allocatable: Option<(&str, &str)>) -> Value {
    let mut n = json!({
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": name, "labels": {GROUP: group, "kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    });
    if let Some((cpu, memory)) = allocatable {
        n["status"]["allocatable"] = json!({"cpu": cpu, "memory": memory, "pods": "110"});
    }
    n
}

fn labeled(mut node: Value, key: &str, value: &str) -> Value {
    node["metadata"]["labels"][key] = json!(value);
    node
}

fn tainted(mut node: Value, key: &str, value: &str, effect: &str) -> Value {
    node["spec"]["taints"] = json!([{"key": key, "value": value, "effect": effect}]);
    node
}

/// A ReplicaSet's pod on `node` requesting `cpu` and `memory`.
fn pod(name: &str, node: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "shop",
                     "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": true}]},
        "spec": {"nodeName": node, "containers": [
            {"name": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    })
}

fn with_spec(mut pod: Value, key: &str, value: Value) -> Value {
    pod["spec"][key] = value;
    pod
}

fn snapshot(items: Vec<Value>) -> Snapshot {
    let list = json!({"kind": "List", "apiVersion": "v1", "items": items});
    Snapshot::from_json(list.to_string().as_bytes()).unwrap()
}

enum Step<'s> {
    Surge(&'s [&'s str]),
    Drain(&'s [&'s str]),
}

/// Runs `steps` on group `nodes` and returns what each drain left without room.
fn simulate(snapshot: &Snapshot, steps: &[Step]) -> Vec<Placed> {
    let index = Index::new(snapshot);
    let mut capacity = Capacity::new(snapshot, &index, None, &Staleness::default());
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut out = Vec::new();
    for step in steps {
        match step {
            Step::Surge(n) => capacity.surge("nodes", &names(n)),
            Step::Drain(n) => {
                out.push(capacity.drain("nodes", &names(n), &index, &DrainOptions::default()))
            }
        }
    }
    out
}

fn drain_n1(items: Vec<Value>) -> Placed {
    simulate(&snapshot(items), &[Step::Drain(&["n1"])]).remove(0)
}

fn pending_pods(placed: &Placed) -> Vec<&str> {
    placed
        .pending
        .iter()
        .flat_map(|p| p.pods.iter().map(String::as_str))
        .collect()
}

#[test]
fn pods_that_fit_on_the_other_nodes_are_ok() {
    let placed = drain_n1(vec![
        node("n1", "nodes", Some(("2", "4Gi"))),
        node("n2", "nodes", Some(("2", "4Gi"))),
        pod("a", "n1", "1", "1Gi"),
        pod("b", "n1", "500m", "2Gi"),
        pod("c", "n2", "500m", "1Gi"),
    ]);
    assert_eq!(placed, Placed::default());
}

#[test]
fn pods_wait_for_the_replacements_when_the_other_nodes_are_full() {
    let placed = drain_n1(vec![
        node("n1", "nodes", Some(("2", "4Gi"))),
        node("n2", "nodes", Some(("2", "4Gi"))),
        pod("big", "n1", "1500m", "1Gi"),
        pod("small", "n1", "250m", "512Mi"),
        pod("resident", "n2", "1", "1Gi"),
    ]);
    // The large pod does not fit in n2's 1 CPU left; the small one does.
    assert_eq!(placed.pending.len(), 1, "{placed:?}");
    assert_eq!(placed.pending[0].pods, ["shop/big"]);
    assert_eq!(
        placed.pending[0].reason,
        "fits on no schedulable node until the batch's replacements are Ready (needs cpu 1500m, memory 1Gi)"
    );
    assert!(placed.nowhere.is_empty());
}

#[test]
fn a_node_selector_no_node_matches_is_nowhere() {
    let placed = drain_n1(vec![
        node("n1", "nodes", Some(("2", "4Gi"))),
        node("n2", "nodes", Some(("2", "4Gi"))),
        with_spec(
            pod("db", "n1", "100m", "128Mi"),
            "nodeSelector",
            json!({"disk": "ssd"}),
        ),
    ]);
    assert_eq!(placed.nowhere.len(), 1);
    assert_eq!(placed.nowhere[0].pods, ["shop/db"]);
    assert_eq!(
        placed.nowhere[0].reason,
        "no node matches its nodeSelector disk=ssd"
    );
    assert_eq!(
        placed.pending[0].reason,
        "fits on no node of any group: no node matches its nodeSelector disk=ssd"
    );
}

#[test]
fn a_no_schedule_taint_keeps_off_pods_that_do_not_tolerate_it() {
    let items = |toleration: Option<Value>| {
        let mut db = pod("db", "n1", "1", "1Gi");
        if let Some(t) = toleration {
            db = with_spec(db, "tolerations", json!([t]));
        }
        vec![
            node("n1", "nodes", Some(("2", "4Gi"))),
            tainted(
                node("n2", "nodes", Some(("2", "4Gi"))),
                "dedicated",
                "db",
                "NoSchedule",
            ),
            db,
        ]
    };
    // n2 is kept off; n1's replacement takes the taint of neither.
    assert_eq!(pending_pods(&drain_n1(items(None))), ["shop/db"]);
    let tolerates =
        json!({"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"});
    assert_eq!(drain_n1(items(Some(tolerates))), Placed::default());
    let other = json!({"key": "dedicated", "operator": "Equal", "value": "web"});
    assert_eq!(pending_pods(&drain_n1(items(Some(other)))), ["shop/db"]);
}

#[test]
fn prefer_no_schedule_is_a_preference_only() {
    let placed = drain_n1(vec![
        node("n1", "nodes", Some(("2", "4Gi"))),
        tainted(
            node("n2", "nodes", Some(("2", "4Gi"))),
            "rollout-ext.io/scheduled-for-update",
            "",
            "PreferNoSchedule",
        ),
        pod("a", "n1", "1", "1Gi"),
    ]);
    assert_eq!(placed, Placed::default());
}

#[test]
fn a_taint_on_every_node_is_nowhere() {
    let placed = drain_n1(vec![
        tainted(node("n1", "nodes", None), "dedicated", "gpu", "NoExecute"),
        tainted(node("n2", "nodes", None), "dedicated", "gpu", "NoExecute"),
        pod("a", "n1", "1", "1Gi"),
    ]);
    assert_eq!(
        placed.nowhere[0].reason,
        "every node it may run on has a taint it does not tolerate (such as dedicated=gpu:NoExecute)"
    );
}

#[test]
fn required_affinity_in_and_not_in_choose_the_nodes() {
    let affinity = |operator: &str, zones: &[&str]| {
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": operator, "values": zones}]}]}}})
    };
    // n2 (zone a) has room, n3 (zone b) none.
    let items = |affinity: Value| {
        vec![
            labeled(node("n1", "nodes", Some(("2", "4Gi"))), "zone", "c"),
            labeled(node("n2", "nodes", Some(("2", "4Gi"))), "zone", "a"),
            labeled(node("n3", "nodes", Some(("2", "4Gi"))), "zone", "b"),
            pod("resident", "n3", "2", "1Gi"),
            with_spec(pod("app", "n1", "1", "1Gi"), "affinity", affinity),
        ]
    };
    assert_eq!(drain_n1(items(affinity("In", &["a"]))), Placed::default());
    assert_eq!(
        pending_pods(&drain_n1(items(affinity("In", &["b"])))),
        ["shop/app"]
    );
    assert_eq!(
        drain_n1(items(affinity("NotIn", &["b", "c"]))),
        Placed::default()
    );
    // Neither a nor b: only n1's zone, which its replacement keeps.
    let placed = drain_n1(items(affinity("NotIn", &["a", "b"])));
    assert!(
        placed.pending[0]
            .reason
            .contains("until the batch's replacements are Ready")
    );
    let placed = drain_n1(items(affinity("In", &["d"])));
    assert_eq!(
        placed.nowhere[0].reason,
        "no node matches its required node affinity"
    );
}

#[test]
fn surged_and_earlier_replacements_take_pods_and_fill_up() {
    let items = vec![
        node("n1", "nodes", Some(("2", "4Gi"))),
        node("n2", "nodes", Some(("2", "4Gi"))),
        pod("a", "n1", "2", "1Gi"),
        pod("b", "n2", "2", "1Gi"),
    ];
    let cluster = snapshot(items);
    // Without a surge each batch waits for its own replacement; n1's is full once it took a.
    let waves = simulate(&cluster, &[Step::Drain(&["n1"]), Step::Drain(&["n2"])]);
    assert_eq!(pending_pods(&waves[0]), ["shop/a"]);
    assert_eq!(pending_pods(&waves[1]), ["shop/b"]);
    // A surged node is Ready before the drain, and a surged instance gets no second new node.
    let waves = simulate(
        &cluster,
        &[
            Step::Surge(&["n1"]),
            Step::Drain(&["n2"]),
            Step::Drain(&["n1"]),
        ],
    );
    assert_eq!(waves[0], Placed::default());
    assert_eq!(waves[1], Placed::default(), "n2's replacement took a");
}

#[test]
fn a_cluster_with_no_room_anywhere_keeps_pods_pending() {
    let cluster = snapshot(vec![
        node("n1", "nodes", Some(("2", "4Gi"))),
        labeled(node("big", "large", Some(("8", "32Gi"))), "size", "xl"),
        pod("hog", "big", "8", "1Gi"),
        pod("wide", "n1", "4", "1Gi"),
        pod("huge", "n1", "16", "1Gi"),
    ]);
    let placed = simulate(&cluster, &[Step::Drain(&["n1"])]).remove(0);
    assert_eq!(placed.pending.len(), 2, "{placed:?}");
    assert_eq!(placed.pending[0].pods, ["shop/huge"]);
    assert_eq!(
        placed.pending[0].reason,
        "fits on no node of any group: it requests more than any node it may run on can hold (cpu 16, memory 1Gi)"
    );
    assert_eq!(placed.pending[1].pods, ["shop/wide"]);
    assert!(
        placed.pending[1]
            .reason
            .contains("not even once the batch's replacements are Ready (needs cpu 4, memory 1Gi)"),
        "{placed:?}"
    );
}

#[test]
fn only_what_the_drain_evicts_and_a_controller_recreates_is_placed() {
    let daemon = json!([{"kind": "DaemonSet", "name": "agent", "controller": true}]);
    let mut agent = pod("agent", "n1", "4", "1Gi");
    agent["metadata"]["ownerReferences"] = daemon;
    let mut finished = pod("job", "n1", "4", "1Gi");
    finished["status"]["phase"] = json!("Succeeded");
    let placed = drain_n1(vec![
        node("n1", "nodes", Some(("8", "4Gi"))),
        node("n2", "nodes", Some(("2", "4Gi"))),
        agent,
        finished,
    ]);
    assert_eq!(placed, Placed::default());
}

#[test]
fn unknown_allocatable_is_unlimited_and_pods_without_requests_need_nothing() {
    let mut bare = pod("bare", "n1", "1", "1Gi");
    bare["spec"]["containers"] = json!([{"name": "app"}]);
    let placed = drain_n1(vec![
        node("n1", "nodes", Some(("2", "4Gi"))),
        node("n2", "nodes", None),
        pod("a", "n1", "64", "1Ti"),
        bare,
    ]);
    assert_eq!(placed, Placed::default());
}

#[test]
fn cordoned_and_unready_nodes_take_nothing() {
    let mut cordoned = node("n2", "nodes", None);
    cordoned["spec"]["unschedulable"] = json!(true);
    let mut unready = node("n3", "nodes", None);
    unready["status"]["conditions"][0]["status"] = json!("False");
    let placed = drain_n1(vec![
        node("n1", "nodes", Some(("2", "4Gi"))),
        cordoned,
        unready,
        pod("a", "n1", "1", "1Gi"),
    ]);
    assert_eq!(pending_pods(&placed), ["shop/a"]);
}

#[test]
fn replacements_take_the_shape_of_an_up_to_date_node_of_the_group() {
    // n2 is the representative (up to date: no needs-update annotation); its replacement has
    // room for the pod, n1's own shape would not.
    let mut outdated = node("n1", "nodes", Some(("500m", "1Gi")));
    outdated["metadata"]["annotations"] = json!({"rollout-ext.io/needs-update": ""});
    let cluster = snapshot(vec![
        outdated,
        node("n2", "nodes", Some(("4", "8Gi"))),
        pod("a", "n1", "1", "1Gi"),
        pod("resident", "n2", "4", "1Gi"),
    ]);
    let placed = simulate(&cluster, &[Step::Drain(&["n1"])]).remove(0);
    assert!(
        placed.pending[0]
            .reason
            .contains("until the batch's replacements are Ready"),
        "{placed:?}"
    );
}

#[test]
fn a_new_node_has_a_hostname_of_its_own() {
    let pinned = with_spec(
        pod("pinned", "n1", "1", "1Gi"),
        "nodeSelector",
        json!({"kubernetes.io/hostname": "n1"}),
    );
    let placed = drain_n1(vec![
        node("n1", "nodes", None),
        node("n2", "nodes", None),
        pinned,
    ]);
    assert_eq!(
        placed.nowhere[0].reason,
        "no node matches its nodeSelector kubernetes.io/hostname=n1"
    );
}

#[test]
fn pods_go_to_nodes_without_the_run_taint_first_and_move_again_when_theirs_is_drained() {
    let cluster = snapshot(vec![
        node("n1", "nodes", Some(("2", "4Gi"))),
        node("n2", "nodes", Some(("2", "4Gi"))),
        node("n3", "nodes", Some(("2", "4Gi"))),
        pod("a", "n1", "1500m", "1Gi"),
    ]);
    let index = Index::new(&cluster);
    let drain = DrainOptions::default();
    let batch = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let used = |c: &Capacity, i: usize| c.nodes[i].used.cpu;

    // Without the taint: first fit, n2; n2's drain moves it again, to n3.
    let mut plain = Capacity::new(&cluster, &index, None, &Staleness::default());
    assert_eq!(
        plain.drain("nodes", &batch(&["n1"]), &index, &drain),
        Placed::default()
    );
    assert_eq!((used(&plain, 1), used(&plain, 2)), (1500, 0));
    assert_eq!(
        plain.drain("nodes", &batch(&["n2"]), &index, &drain),
        Placed::default()
    );
    assert_eq!((used(&plain, 2), used(&plain, 3)), (1500, 0));

    // n1 and n2 are chosen for replacement: the pod prefers n3.
    let mut tainted = Capacity::new(&cluster, &index, None, &Staleness::default());
    tainted.begin(&batch(&["n1", "n2"]));
    tainted.drain("nodes", &batch(&["n1"]), &index, &drain);
    assert_eq!((used(&tainted, 1), used(&tainted, 2)), (0, 1500));
    // When nothing else has room, a tainted node takes it.
    let mut full = Capacity::new(&cluster, &index, None, &Staleness::default());
    full.begin(&batch(&["n1", "n2"]));
    full.nodes[2].used.cpu = 2000;
    full.refresh(2);
    full.drain("nodes", &batch(&["n1"]), &index, &drain);
    assert_eq!(used(&full, 1), 1500);
}
