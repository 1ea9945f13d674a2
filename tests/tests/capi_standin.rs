//! The Cluster API stand-in behaves as the real controllers do where rotation meets them: a
//! MachineDeployment's MachineSet keeps its Machines, each with a Node; scaling down removes the
//! Machine marked `cluster.x-k8s.io/delete-machine`; a deleted Machine is replaced at once; a
//! Machine whose Node never registers stays Provisioning.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt};
use rollout_ext_e2e::cluster::{GROUP_LABEL, MachineDeletion, TestCluster};
use serde_json::{Value, json};

const V: &str = "v1.20.2";
const WAIT: Duration = Duration::from_secs(60);

fn capi(client: &Client, namespace: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", kind);
    Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk(&gvk))
}

async fn annotate(machines: &Api<DynamicObject>, name: &str, key: &str) {
    let patch = json!({"metadata": {"annotations": {key: "true"}}});
    machines
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Waits until Machine `name` is gone, its Node deleted before its finalizer went.
async fn wait_gone(machines: &Api<DynamicObject>, name: &str) {
    let gone = await_condition(machines.clone(), name, |m: Option<&DynamicObject>| {
        m.is_none()
    });
    tokio::time::timeout(WAIT, gone).await.unwrap().unwrap();
}

/// The next deletion the stand-in acts on.
async fn next_deletion(
    feed: &mut tokio::sync::broadcast::Receiver<MachineDeletion>,
    namespace: &str,
) -> MachineDeletion {
    loop {
        let deletion = tokio::time::timeout(WAIT, feed.recv())
            .await
            .unwrap()
            .unwrap();
        if deletion.namespace == namespace {
            return deletion;
        }
    }
}

#[tokio::test]
async fn scaling_down_removes_the_marked_machine_and_scaling_up_adds_a_new_one() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let (ns, md) = ("capi-scale", "capi-scale");
    cluster.capi.create_deployment(ns, md, 3, V).await.unwrap();
    let names = cluster.capi.wait_machines(ns, md, 3, V).await.unwrap();
    let ms = format!("{md}-ms");

    let machines = capi(&client, ns, "Machine");
    let nodes: Api<Node> = Api::all(client.clone());
    for name in &names {
        let machine = machines.get(name).await.unwrap();
        let labels = machine.labels();
        assert_eq!(labels["cluster.x-k8s.io/cluster-name"], "test");
        assert_eq!(labels["cluster.x-k8s.io/set-name"], ms);
        assert_eq!(labels["cluster.x-k8s.io/deployment-name"], md);
        let owner = &machine.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("MachineSet", ms.as_str())
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(machine.finalizers(), ["machine.cluster.x-k8s.io"]);
        let provider_id = format!("capi-sim:///{ns}/{name}");
        assert_eq!(machine.data["spec"]["providerID"], provider_id.as_str());
        assert_eq!(machine.data["spec"]["version"], V);
        assert_eq!(machine.data["status"]["nodeRef"]["name"], name.as_str());
        assert_eq!(machine.data["status"]["phase"], "Running");

        let node = nodes.get(name).await.unwrap();
        let annotations = node.annotations();
        assert_eq!(annotations["cluster.x-k8s.io/machine"], *name);
        assert_eq!(annotations["cluster.x-k8s.io/owner-kind"], "MachineSet");
        assert_eq!(annotations["cluster.x-k8s.io/owner-name"], ms);
        assert_eq!(annotations["cluster.x-k8s.io/cluster-name"], "test");
        assert_eq!(annotations["cluster.x-k8s.io/cluster-namespace"], ns);
        assert!(!node.labels().contains_key(GROUP_LABEL));
        assert_eq!(node.spec.unwrap().provider_id, Some(provider_id));
        let info = node.status.unwrap().node_info.unwrap();
        assert_eq!(info.kubelet_version, V);
    }
    let set = capi(&client, ns, "MachineSet").get(&ms).await.unwrap();
    let owner = &set.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("MachineDeployment", md)
    );
    assert_eq!(owner.controller, Some(true));

    // The MachineDeployment's status follows (it is written after the Machines').
    let deployments = capi(&client, ns, "MachineDeployment");
    let ready = |d: Option<&DynamicObject>| {
        d.is_some_and(|d| {
            d.data["status"]["readyReplicas"] == 3 && d.data["status"]["phase"] == "Running"
        })
    };
    tokio::time::timeout(WAIT, await_condition(deployments.clone(), md, ready))
        .await
        .unwrap()
        .unwrap();

    // Scaled down by one, the MachineSet removes the marked Machine, not the newest.
    let mut feed = cluster.capi.subscribe();
    let victim = &names[0];
    annotate(&machines, victim, "cluster.x-k8s.io/delete-machine").await;
    cluster.capi.scale(ns, md, 2).await.unwrap();
    let deletion = next_deletion(&mut feed, ns).await;
    let expected = MachineDeletion {
        namespace: ns.into(),
        machine: victim.clone(),
        node: Some(victim.clone()),
        drain_excluded: false,
    };
    assert_eq!(deletion, expected);
    wait_gone(&machines, victim).await;
    assert!(
        nodes.get_opt(victim).await.unwrap().is_none(),
        "its Node is deleted"
    );
    let left = cluster.capi.wait_machines(ns, md, 2, V).await.unwrap();
    assert_eq!(left, names[1..]);
    assert!(cluster.capi.deletions().contains(&expected));

    // Scaled up again, it makes a Machine of a new name.
    cluster.capi.scale(ns, md, 3).await.unwrap();
    let now = cluster.capi.wait_machines(ns, md, 3, V).await.unwrap();
    let new: Vec<&String> = now.iter().filter(|n| !names.contains(n)).collect();
    assert_eq!(new.len(), 1, "{now:?}");
    assert!(cluster.capi.created().contains(new[0]));
    // The feed is the whole stand-in's: the other test deletes Machines of its own meanwhile.
    let mut also_deleted = Vec::new();
    loop {
        match feed.try_recv() {
            Ok(deletion) if deletion.namespace == ns => also_deleted.push(deletion),
            Ok(_) | Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {}
            Err(_) => break,
        }
    }
    assert!(
        also_deleted.is_empty(),
        "nothing else was deleted: {also_deleted:?}"
    );
}

#[tokio::test]
async fn a_deleted_machine_is_replaced_and_one_that_never_joins_has_no_node() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let (ns, md) = ("capi-replace", "capi-replace");
    cluster.capi.create_deployment(ns, md, 2, V).await.unwrap();
    let names = cluster.capi.wait_machines(ns, md, 2, V).await.unwrap();
    let machines = capi(&client, ns, "Machine");
    let nodes: Api<Node> = Api::all(client.clone());

    // Deleted directly, a Machine is replaced at once (while its own deletion goes on).
    let mut feed = cluster.capi.subscribe();
    let victim = names[1].clone();
    annotate(
        &machines,
        &victim,
        "machine.cluster.x-k8s.io/exclude-node-draining",
    )
    .await;
    machines
        .delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    let deletion = next_deletion(&mut feed, ns).await;
    assert_eq!(deletion.machine, victim);
    assert!(deletion.drain_excluded);
    wait_gone(&machines, &victim).await;
    let now = cluster.capi.wait_machines(ns, md, 2, V).await.unwrap();
    assert!(now.contains(&names[0]) && !now.contains(&victim), "{now:?}");

    // New Machines of a MachineDeployment that never joins stay Provisioning, without a Node;
    // once it joins again, a later Machine gets its Node, and the earlier still has none.
    cluster.capi.set_never_joins(ns, md, true);
    cluster.capi.scale(ns, md, 3).await.unwrap();
    let provisioning = |m: &DynamicObject| m.data["status"]["phase"] == "Provisioning";
    let seen = cluster
        .capi
        .wait_for(ns, md, "a Provisioning Machine", move |ms| {
            ms.iter().any(provisioning)
        })
        .await
        .unwrap();
    let stuck = seen.iter().find(|m| provisioning(m)).unwrap().name_any();
    cluster.capi.set_never_joins(ns, md, false);
    cluster.capi.scale(ns, md, 4).await.unwrap();
    let joined = |m: &DynamicObject| !m.data["status"]["nodeRef"].is_null();
    let known = [now.clone(), vec![stuck.clone()]].concat();
    cluster
        .capi
        .wait_for(ns, md, "a fourth Machine with a Node", move |ms| {
            ms.iter()
                .any(|m| !known.contains(&m.name_any()) && joined(m))
        })
        .await
        .unwrap();
    let machine = machines.get(&stuck).await.unwrap();
    assert_eq!(machine.data["status"]["phase"], "Provisioning");
    assert_eq!(machine.data["status"]["nodeRef"], Value::Null);
    assert_eq!(machine.data["spec"]["providerID"], Value::Null);
    assert!(nodes.get_opt(&stuck).await.unwrap().is_none());

    // Scaled down, the Machine without a Node goes first.
    cluster.capi.scale(ns, md, 3).await.unwrap();
    let deletion = next_deletion(&mut feed, ns).await;
    assert_eq!(
        (deletion.machine.as_str(), deletion.node),
        (stuck.as_str(), None)
    );
    let uid = machine.uid().unwrap();
    let gone = await_condition(machines.clone(), &stuck, conditions::is_deleted(&uid));
    tokio::time::timeout(WAIT, gone).await.unwrap().unwrap();
    cluster.capi.wait_machines(ns, md, 3, V).await.unwrap();
}
