//! The life of a NodeClaim in the Karpenter stand-in: launched, its node registered after the
//! boot delay, and once deleted, its node tainted, drained and removed before the termination
//! finalizer goes.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, EvictParams, Patch, PatchParams};
use serde_json::json;
use tokio::sync::watch;

use super::super::nodes::NodeSpec;
use super::{
    DEFAULT_VERSION, KarpenterSim, NODEPOOL_LABEL, NodeClaimDeletion, PROVIDER_PREFIX,
    TERMINATION_FINALIZER, WAIT, node_of, nodeclaims, nodepools, provisioning,
};

const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";

impl KarpenterSim {
    /// Launches `claim`, registers its node after the boot delay, and terminates it once deleted.
    pub(super) async fn lifecycle(self, claim: DynamicObject, mut deleted: watch::Receiver<bool>) {
        let name = claim.name_any();
        let pool = claim.labels().get(NODEPOOL_LABEL).cloned();
        let (version, delay) = {
            let mut state = self.state();
            match state.direct.remove(&name) {
                Some(version) => (version, Duration::ZERO),
                None => {
                    let version = pool.as_ref().and_then(|p| state.versions.get(p));
                    let version = version.map_or(DEFAULT_VERSION, |v| v.as_str());
                    (version.to_string(), state.boot_delay)
                }
            }
        };
        let launched_at = now();
        let mut node = None;
        if let Some(pool) = pool.as_deref().filter(|_| !*deleted.borrow()) {
            let launched = self.set_status(&claim, false, &launched_at).await;
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = deleted.wait_for(|d| *d) => {}
            }
            if let Err(e) = launched {
                eprintln!("karpenter-sim: NodeClaim {name} could not be launched: {e}");
            } else if !*deleted.borrow() {
                match self.register(&claim, pool, &version, &launched_at).await {
                    Ok(registered) => node = Some(registered),
                    Err(e) => eprintln!("karpenter-sim: NodeClaim {name} did not register: {e}"),
                }
            }
        }
        let _ = deleted.wait_for(|d| *d).await;
        self.terminate(&name, pool.as_deref(), node).await;
    }

    /// The NodeClaim's status: Launched, or also Registered and Initialized (its node is up).
    async fn set_status(
        &self,
        claim: &DynamicObject,
        registered: bool,
        launched_at: &str,
    ) -> anyhow::Result<()> {
        let name = claim.name_any();
        let (generation, t) = (claim.metadata.generation.unwrap_or(1), now());
        // Karpenter's True conditions have an empty message, left out here: kube-apiserver 1.20
        // turns an empty string inside a custom resource's list into null, then refuses it.
        let condition = |type_: &str, up: bool, since: &str| {
            let mut condition = json!({"type": type_, "status": "True", "reason": type_,
                   "lastTransitionTime": since, "observedGeneration": generation});
            if !up {
                condition["status"] = json!("Unknown");
                condition["reason"] = json!("AwaitingReconciliation");
                condition["message"] = json!("object is awaiting reconciliation");
            }
            condition
        };
        let capacity = json!({"cpu": "8", "memory": "32Gi", "pods": "110"});
        let mut status = json!({
            "providerID": format!("{PROVIDER_PREFIX}{name}"), "imageID": "sim",
            "capacity": capacity, "allocatable": capacity,
            "conditions": [condition("Launched", true, launched_at),
                           condition("Registered", registered, &t),
                           condition("Initialized", registered, &t),
                           condition("Ready", registered, &t)],
        });
        if registered {
            status["nodeName"] = json!(node_of(&name));
        }
        nodeclaims(&self.client)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "status": status })),
            )
            .await?;
        Ok(())
    }

    /// Registers the node of `claim` (owned by it, as Karpenter's are) and marks it Registered;
    /// once the node exists, it is the NodeClaim's whatever else fails.
    async fn register(
        &self,
        claim: &DynamicObject,
        pool: &str,
        version: &str,
        launched_at: &str,
    ) -> anyhow::Result<String> {
        let name = claim.name_any();
        let node = node_of(&name);
        let template = nodepools(&self.client).get(pool).await?;
        let mut spec = NodeSpec::new(&node, pool)
            .without_group_label()
            .provider_id(&format!("{PROVIDER_PREFIX}{name}"))
            .kubelet(version);
        spec.labels = provisioning::node_labels(&template);
        spec.zone = spec.labels.get("topology.kubernetes.io/zone").cloned();
        self.nodes.add(spec).await?;
        self.state()
            .registered
            .insert(name.clone(), pool.to_string());
        let owner = json!({"metadata": {"ownerReferences": [{
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": name,
            "uid": claim.uid().unwrap_or_default(), "blockOwnerDeletion": true}]}});
        let owned = Api::<Node>::all(self.client.clone())
            .patch(&node, &PatchParams::default(), &Patch::Merge(&owner))
            .await;
        if let Err(e) = owned {
            eprintln!("karpenter-sim: {node} could not be owned by NodeClaim {name}: {e}");
        }
        if let Err(e) = self.set_status(claim, true, launched_at).await {
            eprintln!("karpenter-sim: NodeClaim {name} could not be marked registered: {e}");
        }
        self.report_pool(pool).await;
        Ok(node)
    }

    /// Karpenter's termination: taint, drain and remove the node, then release the NodeClaim.
    async fn terminate(&self, name: &str, pool: Option<&str>, node: Option<String>) {
        let deletion = NodeClaimDeletion {
            nodeclaim: name.to_string(),
            node: node.clone(),
        };
        self.state().deletions.push(deletion.clone());
        // Nobody listening is fine.
        let _ = self.feed.send(deletion);
        if let Some(node) = &node {
            let taint =
                json!({"spec": {"taints": [{"key": DISRUPTED_TAINT, "effect": "NoSchedule"}]}});
            let nodes: Api<Node> = Api::all(self.client.clone());
            if let Err(e) = nodes
                .patch(node, &PatchParams::default(), &Patch::Strategic(&taint))
                .await
            {
                eprintln!("karpenter-sim: tainting {node} failed: {e}");
            }
            self.drain(node).await;
            if let Err(e) = self.nodes.remove(node).await {
                eprintln!("karpenter-sim: removing {node} failed: {e}");
            }
            self.state().registered.remove(name);
            if let Some(pool) = pool {
                self.report_pool(pool).await;
            }
        }
        if let Err(e) = self.release(name).await {
            eprintln!("karpenter-sim: releasing NodeClaim {name} failed: {e}");
        }
    }

    /// Evicts the pods of `node` that Karpenter drains (not DaemonSets', mirror pods, finished
    /// pods, or pods tolerating the disrupted taint) and waits until they are gone. A refused
    /// eviction is retried after a second, as Karpenter's eviction queue backs off.
    async fn drain(&self, node: &str) {
        let mut changed = self.pods_changed.subscribe();
        let mut evicted = HashSet::new();
        loop {
            let pods: Vec<Arc<Pod>> = (self.pods.state().into_iter())
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
                .filter(|p| drained(p))
                .collect();
            if pods.is_empty() {
                return;
            }
            let mut refused = false;
            for pod in pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
            {
                if evicted.contains(&pod.uid()) {
                    continue;
                }
                let api: Api<Pod> =
                    Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
                match api.evict(&pod.name_any(), &EvictParams::default()).await {
                    Ok(_) => {
                        evicted.insert(pod.uid());
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(_) => refused = true,
                }
            }
            let retry = tokio::time::sleep(if refused {
                Duration::from_secs(1)
            } else {
                WAIT
            });
            tokio::select! {
                _ = changed.changed() => {}
                _ = retry => {}
            }
        }
    }

    /// Removes the termination finalizer.
    async fn release(&self, name: &str) -> anyhow::Result<()> {
        let api = nodeclaims(&self.client);
        loop {
            let Some(claim) = api.get_opt(name).await? else {
                return Ok(());
            };
            let rest: Vec<&String> = (claim.finalizers().iter())
                .filter(|f| *f != TERMINATION_FINALIZER)
                .collect();
            if rest.len() == claim.finalizers().len() {
                return Ok(());
            }
            let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": claim.resource_version()}});
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                // Changed meanwhile: look again.
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                other => return other.map(|_| ()).map_err(Into::into),
            }
        }
    }

    /// Writes how many nodes `pool` has into its status.
    async fn report_pool(&self, pool: &str) {
        let n = (self.state().registered.values())
            .filter(|p| *p == pool)
            .count();
        let status = json!({"status": {"nodes": n, "resources": {
            "nodes": n.to_string(), "cpu": (8 * n).to_string(),
            "memory": format!("{}Gi", 32 * n), "pods": (110 * n).to_string()}}});
        let _ = nodepools(&self.client)
            .patch_status(pool, &PatchParams::default(), &Patch::Merge(&status))
            .await;
    }
}

/// Whether Karpenter's drain evicts `pod` and waits for it.
fn drained(pod: &Pod) -> bool {
    let mirror = pod
        .annotations()
        .contains_key("kubernetes.io/config.mirror");
    let finished = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    let tolerates = (pod.spec.as_ref().and_then(|s| s.tolerations.as_ref()))
        .into_iter()
        .flatten()
        .any(|t| {
            t.key.as_deref() == Some(DISRUPTED_TAINT)
                || (t.key.is_none() && t.operator.as_deref() == Some("Exists"))
        });
    !provisioning::is_daemon(pod) && !mirror && !finished && !tolerates
}

pub(super) fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string()
}
