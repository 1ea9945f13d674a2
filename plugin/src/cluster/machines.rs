//! Cluster API objects as the `cluster-api` provider changes them: Machines marked and
//! deleted, their MachineDeployment or MachineSet scaled. Scaling writes carry the
//! resourceVersion read, so a change made meanwhile is refused rather than overwritten.

use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch};
use kube::api::{ListParams, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;

use super::{Cluster, ClusterError, Request};

/// The Cluster API kinds the provider reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapiKind {
    Machine,
    MachineSet,
    MachineDeployment,
}

impl CapiKind {
    pub fn kind(self) -> &'static str {
        match self {
            CapiKind::Machine => "Machine",
            CapiKind::MachineSet => "MachineSet",
            CapiKind::MachineDeployment => "MachineDeployment",
        }
    }

    pub fn resource(self) -> &'static str {
        match self {
            CapiKind::Machine => "machines.cluster.x-k8s.io",
            CapiKind::MachineSet => "machinesets.cluster.x-k8s.io",
            CapiKind::MachineDeployment => "machinedeployments.cluster.x-k8s.io",
        }
    }

    fn request<'a>(self, verb: &'static str, namespace: &'a str) -> Request<'a> {
        Request {
            verb,
            resource: self.resource(),
            namespace: Some(namespace),
        }
    }
}

impl Cluster {
    fn capi(&self, kind: CapiKind, namespace: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", kind.kind());
        Api::namespaced_with(self.client.clone(), namespace, &ApiResource::from_gvk(&gvk))
    }

    /// A Cluster API object; `None` when it is gone.
    pub async fn get_capi(
        &self,
        kind: CapiKind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ClusterError> {
        self.capi(kind, namespace)
            .get_opt(name)
            .await
            .map(|o| o.map(|o| serde_json::to_value(o).expect("objects serialize")))
            .map_err(|e| kind.request("get", namespace).error(&self.server, e))
    }

    /// Sets annotations on a Machine.
    pub async fn annotate_machine(
        &self,
        namespace: &str,
        name: &str,
        annotations: &[(&str, &str)],
    ) -> Result<(), ClusterError> {
        let annotations: serde_json::Map<String, Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), Value::from(*v)))
            .collect();
        let patch = serde_json::json!({"metadata": {"annotations": annotations}});
        let patched = self
            .capi(CapiKind::Machine, namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|e| {
                CapiKind::Machine
                    .request("patch", namespace)
                    .error(&self.server, e)
            })?;
        self.writes
            .now(super::writes::Kind::Machine, &patched.metadata);
        Ok(())
    }

    /// Deletes a Machine; one already gone is fine.
    pub async fn delete_machine(&self, namespace: &str, name: &str) -> Result<(), ClusterError> {
        match self
            .capi(CapiKind::Machine, namespace)
            .delete(name, &DeleteParams::default())
            .await
        {
            // A Machine goes once its machine controller has let its instance go: the view
            // need not wait for that, only for what the run changed.
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(CapiKind::Machine
                .request("delete", namespace)
                .error(&self.server, e)),
        }
    }

    /// Writes a MachineDeployment or MachineSet as it is, if nobody changed it since it was
    /// read (409 otherwise).
    pub async fn replace_capi(
        &self,
        kind: CapiKind,
        namespace: &str,
        object: &Value,
    ) -> Result<Value, ClusterError> {
        let typed: DynamicObject =
            serde_json::from_value(object.clone()).expect("a Cluster API object is an object");
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        self.capi(kind, namespace)
            .replace(name, &PostParams::default(), &typed)
            .await
            .map(|o| serde_json::to_value(o).expect("objects serialize"))
            .map_err(|e| kind.request("update", namespace).error(&self.server, e))
    }

    /// Waits, watching them, until at least `replicas` of the Machines of `namespace` that
    /// match `labels` and `belongs` are not being deleted; false when `timeout` passed first.
    pub async fn wait_machines_created(
        &self,
        namespace: &str,
        labels: &str,
        belongs: impl Fn(&DynamicObject) -> bool,
        replicas: usize,
        timeout: Duration,
    ) -> Result<bool, ClusterError> {
        let machines = self.capi(CapiKind::Machine, namespace);
        let mut changes = watcher(machines.clone(), watcher::Config::default().labels(labels))
            .default_backoff()
            .boxed();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let listed = machines
                .list(&ListParams::default().labels(labels))
                .await
                .map_err(|e| {
                    CapiKind::Machine
                        .request("list", namespace)
                        .error(&self.server, e)
                })?;
            let active = listed
                .items
                .iter()
                .filter(|m| m.metadata.deletion_timestamp.is_none() && belongs(m))
                .count();
            if active >= replicas {
                return Ok(true);
            }
            if tokio::time::timeout_at(deadline, changes.next())
                .await
                .is_err()
            {
                return Ok(false);
            }
        }
    }

    /// Waits, watching it, until Machine `name` is gone; false when `timeout` passed first.
    pub async fn wait_machine_gone(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<bool, ClusterError> {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut changes = watcher(self.capi(CapiKind::Machine, namespace), config)
            .default_backoff()
            .boxed();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self
                .get_capi(CapiKind::Machine, namespace, name)
                .await?
                .is_none()
            {
                return Ok(true);
            }
            if tokio::time::timeout_at(deadline, changes.next())
                .await
                .is_err()
            {
                return Ok(false);
            }
        }
    }
}
