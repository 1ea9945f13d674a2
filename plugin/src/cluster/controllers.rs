//! ReplicationControllers, ReplicaSets and their pods, as the rolling update reads and changes
//! them. Waits are watches: a controller settling, a controller gone, a pod changing.

use std::time::Duration;

use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, PropagationPolicy,
};
use kube::runtime::watcher;
use serde_json::Value;

use super::{Cluster, ClusterError, Request};
use crate::plan::rolling_update::controller::{Controller, Kind};
use crate::plan::rolling_update::pods::PodInfo;

/// Writes are real, or sent with `dryRun=All`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    Apply,
    ServerDryRun,
}

fn resource(kind: Kind) -> ApiResource {
    let (group, version) = match kind.api_version().split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", kind.api_version()),
    };
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind.as_str()))
}

fn to_controller(kind: Kind, object: DynamicObject) -> Controller {
    let mut value = serde_json::to_value(object).expect("objects serialize");
    value["kind"] = Value::from(kind.as_str());
    value["apiVersion"] = Value::from(kind.api_version());
    Controller {
        kind,
        object: value,
    }
}

impl Cluster {
    pub(super) fn controllers(&self, kind: Kind, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &resource(kind))
    }

    pub(super) fn pods_api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            namespace,
            &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod")),
        )
    }

    pub async fn get_controller(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Controller>, ClusterError> {
        self.controllers(kind, namespace)
            .get_opt(name)
            .await
            .map(|o| o.map(|o| to_controller(kind, o)))
            .map_err(|e| request("get", kind.resource(), namespace).error(&self.server, e))
    }

    pub async fn list_controllers(
        &self,
        kind: Kind,
        namespace: &str,
    ) -> Result<Vec<Controller>, ClusterError> {
        self.controllers(kind, namespace)
            .list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .map(|o| to_controller(kind, o))
                    .collect()
            })
            .map_err(|e| request("list", kind.resource(), namespace).error(&self.server, e))
    }

    pub async fn create_controller(
        &self,
        namespace: &str,
        controller: &Controller,
        write: Write,
    ) -> Result<Controller, ClusterError> {
        let object: DynamicObject = serde_json::from_value(controller.for_create())
            .expect("a controller object is a valid object");
        let params = PostParams {
            dry_run: write == Write::ServerDryRun,
            ..Default::default()
        };
        self.controllers(controller.kind, namespace)
            .create(&params, &object)
            .await
            .map(|o| to_controller(controller.kind, o))
            .map_err(|e| {
                request("create", controller.kind.resource(), namespace).error(&self.server, e)
            })
    }

    /// Merge-patches a controller (annotations, labels, replicas, selector).
    pub async fn patch_controller(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        patch: &Value,
        write: Write,
    ) -> Result<Controller, ClusterError> {
        let params = PatchParams {
            dry_run: write == Write::ServerDryRun,
            ..Default::default()
        };
        self.controllers(kind, namespace)
            .patch(name, &params, &Patch::Merge(patch))
            .await
            .map(|o| to_controller(kind, o))
            .map_err(|e| request("patch", kind.resource(), namespace).error(&self.server, e))
    }

    /// Deletes a controller (orphaning its pods when asked) and waits until it is gone.
    pub async fn delete_controller(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        orphan: bool,
        timeout: Duration,
    ) -> Result<(), ClusterError> {
        let api = self.controllers(kind, namespace);
        let params = DeleteParams {
            propagation_policy: Some(if orphan {
                PropagationPolicy::Orphan
            } else {
                PropagationPolicy::Background
            }),
            ..Default::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => {
                return Err(request("delete", kind.resource(), namespace).error(&self.server, e));
            }
        }
        let gone = async {
            let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
            let mut events = std::pin::pin!(watcher(api.clone(), config));
            loop {
                match api.get_opt(name).await {
                    Ok(None) => return Ok(()),
                    Ok(Some(_)) => {}
                    Err(e) => {
                        return Err(
                            request("get", kind.resource(), namespace).error(&self.server, e)
                        );
                    }
                }
                if events.next().await.is_none() {
                    return Ok(());
                }
            }
        };
        tokio::time::timeout(timeout, gone)
            .await
            .unwrap_or_else(|_| {
                Err(ClusterError::Api {
                    verb: "delete".into(),
                    resource: kind.resource().into(),
                    code: 0,
                    message: format!("{name} still exists {timeout:?} after it was deleted"),
                })
            })
    }

    /// Waits until the controller has seen its spec and runs that many pods (legacy kubectl's
    /// scale-and-wait), by watching it.
    pub async fn wait_settled(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<Controller, ClusterError> {
        let api = self.controllers(kind, namespace);
        let settled = async {
            let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
            let mut events = std::pin::pin!(watcher(api.clone(), config));
            loop {
                if let Some(c) = self.get_controller(kind, namespace, name).await?
                    && c.settled()
                {
                    return Ok(c);
                }
                if events.next().await.is_none() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        tokio::time::timeout(timeout, settled)
            .await
            .unwrap_or_else(|_| {
                Err(ClusterError::Api {
                    verb: "scale".into(),
                    resource: kind.resource().into(),
                    code: 0,
                    message: format!("{name} did not reach its replica count within {timeout:?}"),
                })
            })
    }

    /// Pods matching a selector string, raw and summarized.
    pub async fn list_pods(
        &self,
        namespace: &str,
        selector: &str,
    ) -> Result<Vec<(Value, PodInfo)>, ClusterError> {
        let params = ListParams::default().labels(selector);
        self.pods_api(namespace)
            .list(&params)
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .map(|p| {
                        let value = serde_json::to_value(p).expect("objects serialize");
                        let info = PodInfo::from_value(&value);
                        (value, info)
                    })
                    .collect()
            })
            .map_err(|e| request("list", "pods", namespace).error(&self.server, e))
    }

    /// Merge-patches a pod's metadata (labels, annotations).
    pub async fn patch_pod(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<(), ClusterError> {
        match self
            .pods_api(namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(()),
            // Gone meanwhile: nothing left to label.
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(request("patch", "pods", namespace).error(&self.server, e)),
        }
    }

    /// Sets (or, with `None`, removes) one annotation of a pod.
    pub async fn annotate_pod(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
        value: Option<&str>,
    ) -> Result<(), ClusterError> {
        let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
        self.patch_pod(namespace, name, &patch).await
    }

    /// The server's minor version, when it says.
    pub async fn server_minor_version(&self) -> Option<u32> {
        let info = self.client.apiserver_version().await.ok()?;
        info.minor
            .trim_end_matches(|c: char| !c.is_ascii_digit())
            .parse()
            .ok()
    }
}

fn request<'a>(verb: &'a str, resource: &'a str, namespace: &'a str) -> Request<'a> {
    Request {
        verb,
        resource,
        namespace: Some(namespace),
    }
}
