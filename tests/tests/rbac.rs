//! Least privilege: a user with no rights is told which verb on which resource it lacks; bound to
//! the shipped ClusterRole, it plans, rotates and rolls a controller, a StatefulSet and a
//! DaemonSet; bound to it and the shipped Cluster API role, it rotates a MachineDeployment; with
//! one verb taken out of either role, a live run names the verb and the resource before it
//! changes anything. Every way a kubeconfig names the server's CA and the user's certificate
//! (files, inline data, an exec plugin, `tls-server-name`) works where kubectl's does, and fails
//! where kubectl's fails, with the reason.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::core::v1::ReplicationController;
use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;
use rollout_ext_e2e::cluster::{GroupSpec, NodeSpec, OPERATOR_TOKEN, OPERATOR_USER, TestCluster};
use rollout_ext_e2e::daemon::{create_ds, wait_ds};
use rollout_ext_e2e::fingerprint::{Fingerprint, wait_settled};
use rollout_ext_e2e::stateful::{create_sts, wait_all_on};
use rollout_ext_e2e::workloads::create_namespace;
use rollout_ext_e2e::{
    FAST_ROTATION, capi_rotation as capi, plugin_binary, run_plugin, workspace_root,
};
use serde_json::json;

/// The shipped ClusterRoles: what the tool uses, and what its `clusterAPI` provider adds.
const ROLE: &str = "deploy/clusterrole.yaml";
const CAPI_ROLE: &str = "deploy/clusterrole-cluster-api.yaml";

fn plugin(args: &[&str]) -> Output {
    Command::new(plugin_binary()).args(args).output().unwrap()
}

fn kubectl(kubeconfig: &str, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap()
}

/// A node of `group` running an old kubelet; its replacements come with the new one.
async fn outdated_node(cluster: &TestCluster, name: &str, group: &str) {
    let spec = GroupSpec {
        kubelet_version: Some("v1.20.2".into()),
        ..Default::default()
    };
    cluster.cloud.set_group_spec(group, spec);
    let node = NodeSpec::new(name, group).kubelet("v1.19.7");
    cluster.nodes.add(node).await.unwrap();
}

/// A namespace holding one ReplicationController `ops` of one replica.
async fn ops_controller(client: &kube::Client, namespace: &str) -> Api<ReplicationController> {
    create_namespace(client, namespace).await;
    let rc: ReplicationController = serde_json::from_value(json!({
        "metadata": {"name": "ops"},
        "spec": {"replicas": 1, "selector": {"app": "ops"},
                 "template": {"metadata": {"labels": {"app": "ops"}},
                              "spec": {"containers": [{"name": "main", "image": "registry.invalid/ops:1"}]}}}
    }))
    .unwrap();
    let rcs: Api<ReplicationController> = Api::namespaced(client.clone(), namespace);
    rcs.create(&PostParams::default(), &rc).await.unwrap();
    rcs
}

/// One test at a time: the second compares the whole cluster before and after its runs.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits until `kubectl auth can-i CAN_I` answers yes: the authorizer sees a new binding through
/// its own informer, a moment after the binding is created.
async fn wait_allowed(kubeconfig: &str, can_i: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let args: Vec<&str> = ["auth", "can-i"].iter().chain(can_i).copied().collect();
    while !kubectl(kubeconfig, &args).status.success() {
        assert!(
            Instant::now() < deadline,
            "the binding never took effect ({can_i:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn the_shipped_cluster_role_is_enough_and_missing_rights_are_named() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    outdated_node(cluster, "least-1", "least").await;
    let operator = cluster.dir().join("operator.kubeconfig");
    cluster
        .kubeconfig_for(&operator, OPERATOR_TOKEN, OPERATOR_USER)
        .unwrap();
    let operator = operator.to_str().unwrap().to_string();
    let admin = cluster.kubeconfig.to_str().unwrap().to_string();

    // No rights: the error names the verb and the resource.
    let denied = plugin(&["nodes", "--kubeconfig", &operator]);
    assert_eq!(denied.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert!(
        stderr.contains("forbidden: this user may not list nodes at cluster scope"),
        "{stderr}"
    );

    // Bound to the shipped role.
    let role = workspace_root().join(ROLE);
    let applied = kubectl(&admin, &["apply", "-f", role.to_str().unwrap()]);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let bound = kubectl(
        &admin,
        &[
            "create",
            "clusterrolebinding",
            "rollout-ext-operator",
            "--clusterrole=rollout-ext",
            &format!("--user={OPERATOR_USER}"),
        ],
    );
    assert!(
        bound.status.success(),
        "{}",
        String::from_utf8_lossy(&bound.stderr)
    );
    wait_allowed(&operator, &["create", "pods", "--subresource=eviction"]).await;

    let plan = plugin(&["nodes", "--kubeconfig", &operator, "-o", "json"]);
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let rotated = plugin(
        &[
            "nodes",
            "--yes",
            "--kubeconfig",
            &operator,
            "--policy",
            policy.to_str().unwrap(),
            // Only its own group: the other test leaves an outdated node behind.
            "--instance-group",
            "least",
            "--kubelet-version",
            "v1.20.2",
        ]
        .iter()
        .chain(FAST_ROTATION)
        .copied()
        .collect::<Vec<_>>(),
    );
    assert!(
        rotated.status.success(),
        "{}",
        String::from_utf8_lossy(&rotated.stderr)
    );
    // The role lets the run read and keep the cluster's history of durations.
    let said = String::from_utf8_lossy(&rotated.stderr);
    assert!(!said.contains("durations"), "{said}");
    let calls: Vec<String> = cluster
        .cloud
        .calls()
        .into_iter()
        .map(|c| c.target)
        .collect();
    assert_eq!(calls, ["least-1"]);

    // The same role rolls a ReplicationController.
    let client = cluster.client().await;
    let rcs = ops_controller(&client, "least-ru").await;
    let rolled = plugin(&[
        "rolling-update",
        "ops",
        "--image=registry.invalid/ops:2",
        "--update-period=1s",
        "--poll-interval=1s",
        "-n",
        "least-ru",
        "--kubeconfig",
        &operator,
    ]);
    assert!(
        rolled.status.success(),
        "{}",
        String::from_utf8_lossy(&rolled.stderr)
    );
    let ops = rcs.get("ops").await.unwrap();
    let image = ops.spec.unwrap().template.unwrap().spec.unwrap().containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("registry.invalid/ops:2"));

    // And a StatefulSet, through its partition, on a node of its own.
    (cluster.nodes)
        .add(NodeSpec::new("least-ru-1", "least-ru"))
        .await
        .unwrap();
    let strategy = json!({"type": "RollingUpdate"});
    create_sts(
        &client,
        "least-ru",
        "db",
        1,
        "registry.invalid/db:1",
        strategy,
    )
    .await;
    let rolled = plugin(&[
        "rolling-update",
        "sts/db",
        "--image=registry.invalid/db:2",
        "--poll-interval=1s",
        "-n",
        "least-ru",
        "--kubeconfig",
        &operator,
    ]);
    assert!(
        rolled.status.success(),
        "{}",
        String::from_utf8_lossy(&rolled.stderr)
    );
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "least-ru");
    wait_all_on(&sets, "db", 1).await;
    let db = sets.get("db").await.unwrap();
    let image = db.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("registry.invalid/db:2"));

    // And a DaemonSet, node by node.
    cluster
        .nodes
        .add(NodeSpec::new("least-ds-1", "least-ds"))
        .await
        .unwrap();
    let strategy = json!({"type": "RollingUpdate"});
    create_ds(
        &client,
        "least-ru",
        "agent",
        "least-ds",
        1,
        "registry.invalid/agent:1",
        strategy,
    )
    .await;
    let rolled = plugin(&[
        "rolling-update",
        "ds/agent",
        "--image=registry.invalid/agent:2",
        "--poll-interval=1s",
        "-n",
        "least-ru",
        "--kubeconfig",
        &operator,
    ]);
    assert!(
        rolled.status.success(),
        "{}",
        String::from_utf8_lossy(&rolled.stderr)
    );
    let sets: Api<DaemonSet> = Api::namespaced(client.clone(), "least-ru");
    wait_ds(&sets, "agent", 1).await;
    let agent = sets.get("agent").await.unwrap();
    let image = agent.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("registry.invalid/agent:2"));
}

/// The shipped ClusterRole of `file` (under the workspace root) without `verb` on `resource`,
/// as `<role>-<user>`, bound to `user` (who is impersonated through the admin's kubeconfig).
async fn bind_role_without(admin: &str, user: &str, file: &str, verb: &str, resource: &str) {
    let shipped = std::fs::read_to_string(workspace_root().join(file)).unwrap();
    let mut role: serde_json::Value = serde_saphyr::from_str(&shipped).unwrap();
    let name = format!("{}-{user}", role["metadata"]["name"].as_str().unwrap());
    role["metadata"]["name"] = json!(name);
    let rules = role["rules"].as_array_mut().unwrap();
    let at = rules
        .iter()
        .position(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .contains(&json!(resource))
        })
        .expect("the shipped role has a rule for the resource");
    // The resource gets a rule of its own: the others its rule lists keep the verb.
    let mut own = rules[at].clone();
    own["resources"] = json!([resource]);
    let others = rules[at]["resources"].as_array_mut().unwrap();
    others.retain(|r| r != resource);
    if others.is_empty() {
        rules.remove(at);
    }
    let verbs = own["verbs"].as_array_mut().unwrap();
    let before = verbs.len();
    verbs.retain(|v| v != verb);
    assert_eq!(
        verbs.len(),
        before - 1,
        "the shipped role grants {verb} on {resource}"
    );
    // A rule must grant something: without its only verb, the rule goes.
    if !verbs.is_empty() {
        rules.push(own);
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("role.json");
    std::fs::write(&file, role.to_string()).unwrap();
    succeeded(&kubectl(admin, &["apply", "-f", file.to_str().unwrap()]));
    bind(admin, user, &name, &role).await;
}

/// The shipped ClusterRole of `file` (under the workspace root), applied as it is and bound to
/// `user`.
async fn bind_shipped_role(admin: &str, user: &str, file: &str) {
    let path = workspace_root().join(file);
    let role: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    succeeded(&kubectl(admin, &["apply", "-f", path.to_str().unwrap()]));
    let binding = format!("{}-{user}", role["metadata"]["name"].as_str().unwrap());
    bind(admin, user, &binding, &role).await;
}

/// Binds ClusterRole `role` to `user` as `binding`, and waits until the authorizer grants its
/// first rule's first verb.
async fn bind(admin: &str, user: &str, binding: &str, role: &serde_json::Value) {
    let name = role["metadata"]["name"].as_str().unwrap();
    succeeded(&kubectl(
        admin,
        &[
            "create",
            "clusterrolebinding",
            binding,
            &format!("--clusterrole={name}"),
            &format!("--user={user}"),
        ],
    ));
    let rule = &role["rules"][0];
    let resource = rule["resources"][0].as_str().unwrap();
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(format!("--subresource={s}"))),
        None => (resource, None),
    };
    let resource = match rule["apiGroups"][0].as_str().unwrap() {
        "" => resource.to_string(),
        group => format!("{resource}.{group}"),
    };
    let verb = rule["verbs"][0].as_str().unwrap();
    let mut can_i = vec!["--as", user, verb, &resource];
    can_i.extend(subresource.as_deref());
    wait_allowed(admin, &can_i).await;
}

/// With one verb taken out of the shipped role, a live run is refused before it changes anything,
/// naming the verb and the resource (SelfSubjectAccessReviews up front).
#[tokio::test]
async fn one_missing_verb_is_named_before_anything_changes() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    outdated_node(cluster, "lacking-1", "lacking").await;
    let rcs = ops_controller(&client, "lacking").await;
    let ready = |rc: Option<&ReplicationController>| {
        rc.and_then(|r| r.status.as_ref())
            .and_then(|s| s.ready_replicas)
            == Some(1)
    };
    tokio::time::timeout(Duration::from_secs(120), await_condition(rcs, "ops", ready))
        .await
        .expect("the pod becomes Ready")
        .unwrap();
    wait_settled(cluster, &["lacking-1"]).await;

    let admin = cluster.kubeconfig.to_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let policy = policy.to_str().unwrap();
    let rotate = |user: &str| -> Vec<String> {
        [
            "nodes",
            "--yes",
            "--kubeconfig",
            &admin,
            "--as",
            user,
            "--policy",
            policy,
            "--instance-group",
            "lacking",
            "--kubelet-version",
            "v1.20.2",
        ]
        .iter()
        .chain(FAST_ROTATION)
        .map(|s| s.to_string())
        .collect()
    };
    let roll = |user: &str| -> Vec<String> {
        [
            "rolling-update",
            "ops",
            "--image=registry.invalid/ops:2",
            "-n",
            "lacking",
            "--kubeconfig",
            &admin,
            "--as",
            user,
        ]
        .map(String::from)
        .to_vec()
    };
    let cases = [
        (
            "no-node-delete",
            "delete",
            "nodes",
            rotate("no-node-delete"),
            "missing permission: delete on nodes (cluster-wide)",
        ),
        (
            "no-eviction",
            "create",
            "pods/eviction",
            rotate("no-eviction"),
            "missing permission: create on pods/eviction (cluster-wide)",
        ),
        (
            "no-lease-create",
            "create",
            "leases",
            rotate("no-lease-create"),
            "missing permission: create on leases.coordination.k8s.io (in namespace kube-system)",
        ),
        (
            "no-rc-delete",
            "delete",
            "replicationcontrollers",
            roll("no-rc-delete"),
            "missing permission: delete on replicationcontrollers (in namespace lacking)",
        ),
        (
            "no-sts-update",
            "update",
            "statefulsets",
            [
                "rolling-update",
                "sts/db",
                "--image=registry.invalid/db:2",
                "-n",
                "lacking",
                "--kubeconfig",
                &admin,
                "--as",
                "no-sts-update",
            ]
            .map(String::from)
            .to_vec(),
            "missing permission: update on statefulsets.apps (in namespace lacking)",
        ),
        (
            "no-revision-list",
            "list",
            "controllerrevisions",
            [
                "rolling-update",
                "ds/agent",
                "--image=registry.invalid/agent:2",
                "-n",
                "lacking",
                "--kubeconfig",
                &admin,
                "--as",
                "no-revision-list",
            ]
            .map(String::from)
            .to_vec(),
            "missing permission: list on controllerrevisions.apps (in namespace lacking)",
        ),
    ];
    for (user, verb, resource, _, _) in &cases {
        bind_role_without(&admin, user, ROLE, verb, resource).await;
    }
    let before = Fingerprint::take(cluster).await;
    for (user, _, _, args, message) in &cases {
        let out = run_plugin(args.clone()).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{user}: {stderr}");
        assert!(stderr.contains(message), "{user}: {stderr}");
        assert!(stderr.contains("nothing was changed"), "{user}: {stderr}");
        // Only the one verb is missing: the rest of the role is in effect.
        assert!(!stderr.contains("missing permissions"), "{user}: {stderr}");
        before.assert_unchanged(cluster, user).await;
    }
}

/// Binds `user` (impersonated through the admin's kubeconfig) to the shipped `rollout-ext`
/// ClusterRole and to the shipped `rollout-ext-karpenter` one, or, with `lacking` (a verb and a
/// resource), to a copy of the latter without that verb.
async fn bind_karpenter_roles(admin: &str, user: &str, lacking: Option<(&str, &str)>) {
    let file = |name: &str| workspace_root().join("deploy").join(name);
    for role in ["clusterrole.yaml", "clusterrole-karpenter.yaml"] {
        succeeded(&kubectl(
            admin,
            &["apply", "-f", file(role).to_str().unwrap()],
        ));
    }
    let mut karpenter_role = "rollout-ext-karpenter".to_string();
    let dir = tempfile::tempdir().unwrap();
    if let Some((verb, resource)) = lacking {
        let shipped = std::fs::read_to_string(file("clusterrole-karpenter.yaml")).unwrap();
        let mut role: serde_json::Value = serde_saphyr::from_str(&shipped).unwrap();
        karpenter_role = format!("rollout-ext-karpenter-{user}");
        role["metadata"]["name"] = json!(karpenter_role);
        let rules = role["rules"].as_array_mut().unwrap();
        let rule = (rules.iter_mut())
            .find(|r| {
                r["resources"]
                    .as_array()
                    .unwrap()
                    .contains(&json!(resource))
            })
            .expect("the shipped karpenter role has a rule for the resource");
        let verbs = rule["verbs"].as_array_mut().unwrap();
        let before = verbs.len();
        verbs.retain(|v| v != verb);
        assert_eq!(
            verbs.len(),
            before - 1,
            "the role grants {verb} on {resource}"
        );
        let copy = dir.path().join("role.json");
        std::fs::write(&copy, role.to_string()).unwrap();
        succeeded(&kubectl(admin, &["apply", "-f", copy.to_str().unwrap()]));
    }
    for role in ["rollout-ext".to_string(), karpenter_role] {
        succeeded(&kubectl(
            admin,
            &[
                "create",
                "clusterrolebinding",
                &format!("{user}:{role}"),
                &format!("--clusterrole={role}"),
                &format!("--user={user}"),
            ],
        ));
    }
    wait_allowed(admin, &["--as", user, "list", "nodes"]).await;
    wait_allowed(admin, &["--as", user, "list", "nodeclaims.karpenter.sh"]).await;
}

/// Bound to both shipped ClusterRoles, an operator rotates a Karpenter NodePool; with `delete`
/// on NodeClaims taken out of the karpenter role, the run is refused before anything changes,
/// naming it (a run that went ahead would have drained a node it could not remove).
#[tokio::test]
async fn the_karpenter_role_beside_the_shipped_one_rotates_a_node_pool_and_a_missing_verb_is_named()
{
    use rollout_ext_e2e::cluster::{NODEPOOL_LABEL, new_kubelet};
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let pool = "least-karpenter";
    let new_kubelet = new_kubelet();
    let karpenter = cluster.karpenter().await;
    let old = karpenter.busy_pool(pool, 2).await.unwrap();
    let admin = cluster.kubeconfig.to_str().unwrap().to_string();
    bind_karpenter_roles(&admin, "karpenter-operator", None).await;
    let lacking = "karpenter-no-nodeclaim-delete";
    bind_karpenter_roles(&admin, lacking, Some(("delete", "nodeclaims"))).await;
    let rotate = |user: &str| -> Vec<String> {
        [
            "nodes",
            "--yes",
            "--kubeconfig",
            &admin,
            "--as",
            user,
            "--provider",
            "karpenter",
            "--instance-group",
            pool,
            "--kubelet-version",
            &new_kubelet,
        ]
        .iter()
        .chain(FAST_ROTATION)
        .map(|s| s.to_string())
        .collect()
    };
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            Command::new(plugin_binary()).args(&args).output().unwrap()
        })
    };
    let deleted = || -> Vec<String> {
        (karpenter.deletions().into_iter())
            .filter(|d| d.nodeclaim.starts_with(&format!("{pool}-")))
            .filter_map(|d| d.node)
            .collect()
    };

    let nodes: Vec<&str> = old.iter().map(String::as_str).collect();
    wait_settled(cluster, &nodes).await;
    let before = Fingerprint::take(cluster).await;
    let out = run(rotate(lacking)).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("missing permission: delete on nodeclaims.karpenter.sh (cluster-wide)"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    assert!(!stderr.contains("missing permissions"), "{stderr}");
    before.assert_unchanged(cluster, lacking).await;
    assert!(
        (cluster.cordoned_by_label(NODEPOOL_LABEL, pool).await).is_empty(),
        "nothing cordoned"
    );
    assert!(deleted().is_empty(), "no NodeClaim deleted");

    let out = run(rotate("karpenter-operator")).await.unwrap();
    succeeded(&out);
    let mut removed = deleted();
    removed.sort();
    assert_eq!(
        removed,
        old.iter().cloned().collect::<Vec<_>>(),
        "each old node's NodeClaim deleted once"
    );
    // The new nodes settle before another test compares the cluster before and after its runs.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(cluster.client().await);
    let selector = format!("{NODEPOOL_LABEL}={pool}");
    let list = kube::api::ListParams::default().labels(&selector);
    let new: Vec<String> = (nodes.list(&list).await.unwrap().items.into_iter())
        .filter_map(|n| n.metadata.name)
        .collect();
    let new: Vec<&str> = new.iter().map(String::as_str).collect();
    wait_settled(cluster, &new).await;
}

/// Bound to both shipped ClusterRoles, an operator rotates a MachineDeployment through Cluster
/// API; with `update` on MachineDeployments taken out of the Cluster API role (the scale-down
/// that removes a Machine), the run is refused up front, naming it, with nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_api_role_is_enough_and_a_missing_verb_is_named() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let (ns, md) = ("rbac-capi", "rbac-workers");
    let outdated = capi::outdated_deployment(cluster, ns, md, 2).await;
    let observer = capi::observed(cluster, ns, md, &outdated, 1, 0).await;
    let nodes: Vec<&str> = outdated.iter().map(String::as_str).collect();
    wait_settled(cluster, &nodes).await;

    let admin = cluster.kubeconfig.to_str().unwrap().to_string();
    let (full, lacking) = ("capi-operator", "capi-no-md-update");
    for user in [full, lacking] {
        bind_shipped_role(&admin, user, ROLE).await;
    }
    bind_shipped_role(&admin, full, CAPI_ROLE).await;
    bind_role_without(&admin, lacking, CAPI_ROLE, "update", "machinedeployments").await;
    let rotate = |user: &str| capi::rotate_args(cluster, md, &["--as", user]);

    let before = Fingerprint::take(cluster).await;
    let refused = run_plugin(rotate(lacking)).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "missing permission: update on machinedeployments.cluster.x-k8s.io (cluster-wide)"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    assert!(
        stderr.contains(CAPI_ROLE),
        "where the verb is granted: {stderr}"
    );
    // Only the one verb is missing: the rest of both roles is in effect.
    assert!(!stderr.contains("missing permissions"), "{stderr}");
    before.assert_unchanged(cluster, lacking).await;

    let rotated = run_plugin(rotate(full)).await;
    assert!(
        rotated.status.success(),
        "{}",
        String::from_utf8_lossy(&rotated.stderr)
    );
    let now = capi::assert_back_at_size(cluster, ns, md, outdated.len()).await;
    let calls = cluster.capi.calls_made(ns);
    let (report, _) = observer.finish(cluster, calls, now).await;
    assert!(report.is_none(), "{}", report.unwrap());
    capi::assert_each_replaced_once(cluster, ns, md, &outdated);
}

/// A kubeconfig for `server` whose cluster and user entries have `cluster` and `user` (YAML
/// fields, one per line, indented under their entry).
fn tls_kubeconfig(path: &std::path::Path, server: &str, cluster: &str, user: &str) -> String {
    let indent = |fields: &str| {
        (fields.lines())
            .map(|line| format!("    {line}\n"))
            .collect::<String>()
    };
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n{}users:\n- name: u\n  user:\n{}contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
        indent(cluster),
        indent(user)
    );
    std::fs::write(path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// base64 of a file's bytes, as a kubeconfig's `*-data` fields hold it.
fn base64_of(file: &std::path::Path) -> String {
    let bytes = k8s_openapi::ByteString(std::fs::read(file).unwrap());
    serde_json::to_value(bytes)
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn the_kubeconfig_s_certificates_are_honoured_as_kubectl_honours_them() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let dir = tempfile::tempdir().unwrap();
    let ca = cluster.server_ca();
    let (cert, key) = cluster
        .client_certificate("tls-admin", "tls-admin", "system:masters")
        .unwrap();
    let (ca_text, cert_text, key_text) = (ca.display(), cert.display(), key.display());
    // An exec plugin answering with the client certificate (client-go's ExecCredential).
    let credential = dir.path().join("credential.json");
    let answer = json!({
        "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
        "status": {"clientCertificateData": std::fs::read_to_string(&cert).unwrap(),
                   "clientKeyData": std::fs::read_to_string(&key).unwrap()}
    });
    std::fs::write(&credential, answer.to_string()).unwrap();
    let exec = format!(
        "exec:\n  apiVersion: client.authentication.k8s.io/v1\n  command: cat\n  args: [\"{}\"]\n  interactiveMode: Never",
        credential.display()
    );
    let files = format!("client-certificate: {cert_text}\nclient-key: {key_text}");
    let client_ca = cluster.dir().join("client-ca.crt");
    // (what, cluster fields, user fields, our exit code and error when kubectl fails too)
    let cases = [
        (
            "files",
            format!("certificate-authority: {ca_text}"),
            files.clone(),
            None,
        ),
        (
            "inline data",
            format!("certificate-authority-data: {}", base64_of(&ca)),
            format!(
                "client-certificate-data: {}\nclient-key-data: {}",
                base64_of(&cert),
                base64_of(&key)
            ),
            None,
        ),
        (
            "exec plugin",
            format!("certificate-authority: {ca_text}"),
            exec,
            None,
        ),
        (
            "server name",
            format!("certificate-authority: {ca_text}\ntls-server-name: kubernetes.default.svc"),
            files.clone(),
            None,
        ),
        (
            "another CA",
            format!("certificate-authority: {}", client_ca.display()),
            files.clone(),
            Some((1, "UnknownIssuer")),
        ),
        (
            "another server name",
            format!("certificate-authority: {ca_text}\ntls-server-name: elsewhere.example"),
            files.clone(),
            Some((1, "certificate not valid for name \"elsewhere.example\"")),
        ),
        (
            "a key alone",
            format!("certificate-authority: {ca_text}"),
            format!("client-key: {key_text}"),
            Some((2, "client-key without client-certificate")),
        ),
    ];
    for (i, (what, cluster_fields, user_fields, fails_with)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("{i}.kubeconfig"));
        let kubeconfig = tls_kubeconfig(&path, &cluster.server, cluster_fields, user_fields);
        let ours = plugin(&["nodes", "--kubeconfig", &kubeconfig]);
        let theirs = kubectl(&kubeconfig, &["get", "nodes", "-o", "name"]);
        let stderr = String::from_utf8_lossy(&ours.stderr);
        assert_eq!(
            ours.status.success(),
            theirs.status.success(),
            "{what}: kubectl {} and we {}: {stderr} / {}",
            theirs.status,
            ours.status,
            String::from_utf8_lossy(&theirs.stderr)
        );
        match fails_with {
            None => assert!(!ours.stdout.is_empty(), "{what}: no plan"),
            Some((code, says)) => {
                // A server that is not who it says: 1 (it may be right later); a kubeconfig
                // that cannot be right: 2, as all bad input.
                assert_eq!(ours.status.code(), Some(*code), "{what}: {stderr}");
                assert!(stderr.contains(says), "{what}: {stderr}");
                assert!(ours.stdout.is_empty(), "{what}");
            }
        }
    }
}
