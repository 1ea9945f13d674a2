//! The stand-in's controllers: one reconciler, fed by the watches, reads each queued object afresh
//! and acts on the difference. Being one task, it never acts twice on what it has not seen
//! itself do (the real controllers keep "expectations" for that).

use std::cmp::Reverse;
use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, ListParams};
use serde_json::Value;

use super::*;
use crate::cluster::nodes::NodeSpec;

/// How long a reconcile that failed waits before it is tried again.
const RETRY: Duration = Duration::from_millis(200);

impl CapiSim {
    pub(super) async fn reconcile_all(self, mut keys: mpsc::UnboundedReceiver<Key>) {
        while let Some(first) = keys.recv().await {
            let lag = self.state.lock().unwrap().lag;
            if !lag.is_zero() {
                tokio::time::sleep(lag).await;
            }
            // Changes come in bursts: each object is reconciled once per burst.
            let mut batch = BTreeSet::from([first]);
            while let Ok(key) = keys.try_recv() {
                batch.insert(key);
            }
            for key in batch {
                let result = match key.kind {
                    Kind::MachineDeployment => self.deployment(&key).await,
                    Kind::MachineSet => self.machine_set(&key).await,
                    Kind::Machine => self.machine(&key).await,
                };
                if let Err(e) = result {
                    eprintln!(
                        "capi-sim: reconciling {:?} {}/{}: {e:#}",
                        key.kind, key.namespace, key.name
                    );
                    let queue = self.queue.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(RETRY).await;
                        let _ = queue.send(key);
                    });
                }
            }
        }
    }

    /// A MachineDeployment: its MachineSet exists and follows its replicas and template; its
    /// status is its MachineSet's.
    async fn deployment(&self, key: &Key) -> anyhow::Result<()> {
        let mds = api(&self.client, Kind::MachineDeployment, &key.namespace);
        let Some(md) = mds.get_opt(&key.name).await? else {
            return Ok(());
        };
        if md.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let spec = &md.data["spec"];
        let replicas = spec["replicas"].as_i64().unwrap_or(1);
        let sets = api(&self.client, Kind::MachineSet, &key.namespace);
        let ms_name = format!("{}-ms", key.name);
        let ms = match sets.get_opt(&ms_name).await? {
            None => {
                let ms: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": API_VERSION,
                    "kind": "MachineSet",
                    "metadata": {
                        "name": ms_name,
                        "namespace": key.namespace,
                        "labels": {
                            CLUSTER_NAME_LABEL: spec["clusterName"],
                            DEPLOYMENT_NAME_LABEL: key.name,
                        },
                        "ownerReferences": [owner_reference(&md)],
                    },
                    "spec": {
                        "clusterName": spec["clusterName"],
                        "replicas": replicas,
                        "selector": spec["selector"],
                        "template": spec["template"],
                    },
                }))?;
                sets.create(&PostParams::default(), &ms).await?
            }
            Some(ms)
                if ms.data["spec"]["replicas"].as_i64() != Some(replicas)
                    || ms.data["spec"]["template"] != spec["template"] =>
            {
                let patch = json!({"spec": {"replicas": replicas, "template": spec["template"]}});
                sets.patch(&ms_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?
            }
            Some(ms) => ms,
        };
        let current = ms.data["status"]["replicas"].as_i64().unwrap_or(0);
        let ready = ms.data["status"]["readyReplicas"].as_i64().unwrap_or(0);
        let phase = if current < replicas || (current == replicas && ready < replicas) {
            "ScalingUp"
        } else if current > replicas {
            "ScalingDown"
        } else {
            "Running"
        };
        let status = json!({
            "selector": selector_string(&spec["selector"]),
            "replicas": current,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "updatedReplicas": current,
            "unavailableReplicas": (replicas - ready).max(0),
            "observedGeneration": md.metadata.generation,
            "phase": phase,
        });
        self.set_status(&mds, &md, status).await.map(|_| ())
    }

    /// A MachineSet: `spec.replicas` Machines not being deleted, no more, no fewer.
    async fn machine_set(&self, key: &Key) -> anyhow::Result<()> {
        let sets = api(&self.client, Kind::MachineSet, &key.namespace);
        let Some(ms) = sets.get_opt(&key.name).await? else {
            return Ok(());
        };
        // Its Machines go with it, through the garbage collector.
        if ms.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let desired = ms.data["spec"]["replicas"].as_i64().unwrap_or(1).max(0) as usize;
        let machines = api(&self.client, Kind::Machine, &key.namespace);
        let selector = format!("{SET_NAME_LABEL}={}", key.name);
        let mut active: Vec<DynamicObject> = machines
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .into_iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .collect();
        while active.len() < desired {
            active.push(self.create_machine(&machines, &ms).await?);
        }
        if active.len() > desired {
            active.sort_by_key(delete_order);
            let excess = active.len() - desired;
            for machine in active.drain(..excess) {
                match machines
                    .delete(&machine.name_any(), &DeleteParams::default())
                    .await
                {
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    other => {
                        other?;
                    }
                }
            }
        }
        let ready = active.iter().filter(|m| has_node(m)).count();
        let status = json!({
            "selector": selector_string(&ms.data["spec"]["selector"]),
            "replicas": active.len(),
            "fullyLabeledReplicas": active.len(),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": ms.metadata.generation,
        });
        self.set_status(&sets, &ms, status).await.map(|_| ())
    }

    /// A new Machine of `ms`, named `<ms>-<n>` after the last one this stand-in numbered.
    async fn create_machine(
        &self,
        machines: &Api<DynamicObject>,
        ms: &DynamicObject,
    ) -> anyhow::Result<DynamicObject> {
        let (namespace, set) = (ms.namespace().unwrap_or_default(), ms.name_any());
        let (spec, template) = (&ms.data["spec"], &ms.data["spec"]["template"]);
        let mut labels = template["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        labels.insert(CLUSTER_NAME_LABEL.into(), spec["clusterName"].clone());
        labels.insert(SET_NAME_LABEL.into(), set.clone().into());
        if let Some(deployment) = ms.labels().get(DEPLOYMENT_NAME_LABEL) {
            labels.insert(DEPLOYMENT_NAME_LABEL.into(), deployment.clone().into());
        }
        let mut machine_spec = serde_json::Map::new();
        machine_spec.insert("clusterName".into(), spec["clusterName"].clone());
        for field in ["version", "bootstrap", "infrastructureRef", "failureDomain"] {
            if !template["spec"][field].is_null() {
                machine_spec.insert(field.into(), template["spec"][field].clone());
            }
        }
        loop {
            let number = {
                let mut state = self.state.lock().unwrap();
                let counter = state
                    .counters
                    .entry((namespace.clone(), set.clone()))
                    .or_default();
                *counter += 1;
                *counter
            };
            let name = format!("{set}-{number}");
            let machine: DynamicObject = serde_json::from_value(json!({
                "apiVersion": API_VERSION,
                "kind": "Machine",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": labels,
                    "finalizers": [MACHINE_FINALIZER],
                    "ownerReferences": [owner_reference(ms)],
                },
                "spec": machine_spec,
            }))?;
            match machines.create(&PostParams::default(), &machine).await {
                // The name is taken (by a test's own Machine, or an earlier MachineSet's).
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                other => {
                    let created = other?;
                    self.state.lock().unwrap().created.push(name);
                    return Ok(created);
                }
            }
        }
    }

    /// A Machine: booted once, given its Node when that registers, and finalized when deleted.
    async fn machine(&self, key: &Key) -> anyhow::Result<()> {
        let machines = api(&self.client, Kind::Machine, &key.namespace);
        let Some(machine) = machines.get_opt(&key.name).await? else {
            return Ok(());
        };
        if machine.metadata.deletion_timestamp.is_some() {
            return self.finalize(&machines, &machine).await;
        }
        if has_node(&machine) {
            return Ok(());
        }
        if self.nodes.spec_of(&key.name).is_some() {
            let nodes: Api<Node> = Api::all(self.client.clone());
            // Registering; its boot queues the Machine again once the Node exists.
            let Some(node) = nodes.get_opt(&key.name).await? else {
                return Ok(());
            };
            let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.clone());
            let patch = json!({"spec": {"providerID": provider_id}});
            let machine = machines
                .patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            let status = json!({
                "phase": "Running",
                "bootstrapReady": true,
                "infrastructureReady": true,
                "nodeRef": {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node.name_any(),
                    "uid": node.uid(),
                },
            });
            return self
                .set_status(&machines, &machine, status)
                .await
                .map(|_| ());
        }
        let uid = machine.uid().unwrap_or_default();
        if self.state.lock().unwrap().booted.contains(&uid) {
            return Ok(());
        }
        let labels = machine.labels();
        let group = labels
            .get(DEPLOYMENT_NAME_LABEL)
            .or_else(|| labels.get(SET_NAME_LABEL))
            .cloned()
            .unwrap_or_else(|| key.name.clone());
        // Whether it joins is decided before it shows as Provisioning: a test that saw the
        // phase may change the setting for the next Machines without changing this one's fate.
        let never_joins = self
            .state
            .lock()
            .unwrap()
            .never_joins
            .contains(&(key.namespace.clone(), group.clone()));
        let status =
            json!({"phase": "Provisioning", "bootstrapReady": true, "infrastructureReady": false});
        self.set_status(&machines, &machine, status).await?;
        let delay = {
            let mut state = self.state.lock().unwrap();
            state.booted.insert(uid);
            state.boot_delay
        };
        if !never_joins {
            tokio::spawn(self.clone().boot(machine, group, delay));
        }
        Ok(())
    }

    /// Registers the Node of a new Machine after `delay`, unless the Machine is deleted first.
    async fn boot(self, machine: DynamicObject, group: String, delay: Duration) {
        tokio::time::sleep(delay).await;
        let (namespace, name) = (machine.namespace().unwrap_or_default(), machine.name_any());
        let spec = &machine.data["spec"];
        let mut node = NodeSpec::new(&name, &group)
            .without_group_label()
            .provider_id(&format!("capi-sim:///{namespace}/{name}"))
            .kubelet(spec["version"].as_str().unwrap_or("v1.20.2"))
            .annotation("cluster.x-k8s.io/machine", &name)
            .annotation("cluster.x-k8s.io/cluster-namespace", &namespace);
        if let Some(cluster) = spec["clusterName"].as_str() {
            node = node.annotation(CLUSTER_NAME_LABEL, cluster);
        }
        if let Some(set) = machine
            .owner_references()
            .iter()
            .find(|o| o.kind == "MachineSet")
        {
            node = node
                .annotation("cluster.x-k8s.io/owner-kind", "MachineSet")
                .annotation("cluster.x-k8s.io/owner-name", &set.name);
        }
        if let Some(zone) = spec["failureDomain"].as_str() {
            node = node.zone(zone);
        }
        // Cluster API keeps the Machine's labels of this prefix on its Node.
        for (key, value) in machine.labels() {
            if key.starts_with(NODE_LABEL_PREFIX) {
                node = node.label(key, value);
            }
        }
        let uid = machine.uid().unwrap_or_default();
        if self.gone(&namespace, &name, &uid).await {
            return;
        }
        if let Err(e) = self.nodes.add(node).await {
            eprintln!("capi-sim: the Node of Machine {namespace}/{name} did not register: {e:#}");
            return;
        }
        // Deleted while its Node registered: the deletion may have missed the Node.
        if self.gone(&namespace, &name, &uid).await {
            let _ = self.nodes.remove(&name).await;
            return;
        }
        let _ = self.queue.send(Key {
            kind: Kind::Machine,
            namespace,
            name,
        });
    }

    /// Whether Machine `uid` is deleted or being deleted.
    async fn gone(&self, namespace: &str, name: &str, uid: &str) -> bool {
        match api(&self.client, Kind::Machine, namespace)
            .get_opt(name)
            .await
        {
            Ok(Some(m)) => {
                m.uid().as_deref() != Some(uid) || m.metadata.deletion_timestamp.is_some()
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// A deleted Machine: recorded, its Node deleted, then its finalizer removed.
    async fn finalize(
        &self,
        machines: &Api<DynamicObject>,
        machine: &DynamicObject,
    ) -> anyhow::Result<()> {
        let finalizers = machine.finalizers();
        if !finalizers.iter().any(|f| f == MACHINE_FINALIZER) {
            return Ok(());
        }
        let name = machine.name_any();
        let node = machine.data["status"]["nodeRef"]["name"]
            .as_str()
            .map(String::from)
            .or_else(|| self.nodes.spec_of(&name).map(|_| name.clone()));
        let first = {
            let mut state = self.state.lock().unwrap();
            state.deleting.insert(machine.uid().unwrap_or_default())
        };
        if first {
            let deletion = MachineDeletion {
                namespace: machine.namespace().unwrap_or_default(),
                machine: name.clone(),
                node: node.clone(),
                drain_excluded: machine.annotations().contains_key(EXCLUDE_NODE_DRAINING),
            };
            self.state.lock().unwrap().deletions.push(deletion.clone());
            // Nobody listening is fine.
            let _ = self.feed.send(deletion);
        }
        let machine = self
            .set_status(machines, machine, json!({"phase": "Deleting"}))
            .await?;
        if let Some(node) = &node {
            self.nodes.remove(node).await?;
        }
        // With the resourceVersion: a finalizer someone added meanwhile is not dropped.
        let rest: Vec<&String> = finalizers
            .iter()
            .filter(|f| *f != MACHINE_FINALIZER)
            .collect();
        let version = machine.resource_version();
        let patch = json!({"metadata": {"resourceVersion": version, "finalizers": rest}});
        machines
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Writes the fields of `status` that differ; returns the object as it is now.
    async fn set_status(
        &self,
        objects: &Api<DynamicObject>,
        object: &DynamicObject,
        status: Value,
    ) -> anyhow::Result<DynamicObject> {
        let old = &object.data["status"];
        let fields = status.as_object().expect("a status is an object");
        if fields.iter().all(|(k, v)| old[k] == *v) {
            return Ok(object.clone());
        }
        let patch = json!({"status": status});
        Ok(objects
            .patch_status(
                &object.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?)
    }
}

/// A controller reference to `owner`.
fn owner_reference(owner: &DynamicObject) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": owner.types.as_ref().map(|t| t.kind.as_str()).unwrap_or_default(),
        "name": owner.name_any(),
        "uid": owner.uid(),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

fn has_node(machine: &DynamicObject) -> bool {
    !machine.data["status"]["nodeRef"]["name"].is_null()
}

/// Cluster API's delete priority: marked Machines first, then those without a Node, then the
/// newest.
fn delete_order(machine: &DynamicObject) -> (bool, bool, Reverse<(Option<Time>, u64)>) {
    let number: u64 = machine
        .name_any()
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    (
        !machine.annotations().contains_key(DELETE_MACHINE),
        has_node(machine),
        Reverse((machine.metadata.creation_timestamp.clone(), number)),
    )
}

/// A label selector as the scale subresource reports it.
fn selector_string(selector: &Value) -> String {
    let labels = selector["matchLabels"].as_object();
    labels
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",")
}
