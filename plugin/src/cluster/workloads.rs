//! StatefulSets, DaemonSets and their ControllerRevisions, as their updates read and change
//! them. Whole-object writes carry the resourceVersion read, so a change made meanwhile is
//! refused rather than overwritten; waits are watches.

use std::time::Duration;

use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, Preconditions,
};
use kube::runtime::watcher;
use serde_json::Value;

use super::controllers::Write;
use super::{Cluster, ClusterError, Request};
use crate::plan::rolling_update::daemon_set::{DaemonPod, DaemonSet, Revision};
use crate::plan::rolling_update::in_place::InPlaceWorkload;
use crate::plan::rolling_update::pods::PodRef;
use crate::plan::rolling_update::stateful_set::StatefulSet;

/// The apps/v1 workloads updated in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppsKind {
    StatefulSet,
    DaemonSet,
}

impl AppsKind {
    fn kind(self) -> &'static str {
        match self {
            AppsKind::StatefulSet => "StatefulSet",
            AppsKind::DaemonSet => "DaemonSet",
        }
    }

    pub(super) fn resource(self) -> &'static str {
        match self {
            AppsKind::StatefulSet => "statefulsets.apps",
            AppsKind::DaemonSet => "daemonsets.apps",
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

fn apps_resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", kind))
}

/// A change written to a workload.
pub struct Changed<T> {
    pub object: T,
    /// Its status had moved since it was read, so the change was written again onto the object
    /// as it was then.
    pub rewritten: bool,
}

impl<T> Changed<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Changed<U> {
        Changed {
            object: f(self.object),
            rewritten: self.rewritten,
        }
    }
}

impl Cluster {
    pub(super) fn apps(&self, kind: AppsKind, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &apps_resource(kind.kind()))
    }

    fn to_object(kind: AppsKind, object: DynamicObject) -> Value {
        let mut value = serde_json::to_value(object).expect("objects serialize");
        value["kind"] = Value::from(kind.kind());
        value["apiVersion"] = Value::from("apps/v1");
        value
    }

    pub(super) async fn get_workload(
        &self,
        kind: AppsKind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ClusterError> {
        self.apps(kind, namespace)
            .get_opt(name)
            .await
            .map(|o| o.map(|o| Self::to_object(kind, o)))
            .map_err(|e| kind.request("get", namespace).error(&self.server, e))
    }

    /// Writes `object` as it is, if nobody changed it since it was read (409 otherwise).
    async fn replace_workload(
        &self,
        kind: AppsKind,
        namespace: &str,
        object: &Value,
        write: Write,
    ) -> Result<Value, ClusterError> {
        let typed: DynamicObject =
            serde_json::from_value(object.clone()).expect("a workload is an object");
        let params = PostParams {
            dry_run: write == Write::ServerDryRun,
            ..Default::default()
        };
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        self.apps(kind, namespace)
            .replace(name, &params, &typed)
            .await
            .map(|o| Self::to_object(kind, o))
            .map_err(|e| kind.request("update", namespace).error(&self.server, e))
    }

    /// Writes `change(read)`. When the server refuses it because the object moved since `read`
    /// and only its status moved (its controller reported; same generation, labels and
    /// annotations), the same change is written once more onto the object as it is now; any
    /// other move is the 409 it was.
    async fn change_workload(
        &self,
        kind: AppsKind,
        namespace: &str,
        read: &Value,
        change: impl Fn(&Value) -> Value,
        write: Write,
    ) -> Result<Changed<Value>, ClusterError> {
        let conflict = match self
            .replace_workload(kind, namespace, &change(read), write)
            .await
        {
            Err(e @ ClusterError::Api { code: 409, .. }) => e,
            done => {
                return done.map(|object| Changed {
                    object,
                    rewritten: false,
                });
            }
        };
        let name = read["metadata"]["name"].as_str().unwrap_or_default();
        let Some(now) = self.get_workload(kind, namespace, name).await? else {
            return Err(conflict);
        };
        let same = |key: &str| now["metadata"][key] == read["metadata"][key];
        if !(same("generation") && same("labels") && same("annotations")) {
            return Err(conflict);
        }
        let object = self
            .replace_workload(kind, namespace, &change(&now), write)
            .await?;
        Ok(Changed {
            object,
            rewritten: true,
        })
    }

    /// Merge-patches a workload (its partition, its annotations, its strategy).
    pub async fn patch_workload(
        &self,
        kind: AppsKind,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, ClusterError> {
        self.apps(kind, namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|o| Self::to_object(kind, o))
            .map_err(|e| kind.request("patch", namespace).error(&self.server, e))
    }

    /// Waits, watching it, until `ready` holds for the workload `name`.
    async fn wait_workload(
        &self,
        kind: AppsKind,
        namespace: &str,
        name: &str,
        timeout: Duration,
        ready: impl Fn(&Value) -> bool,
    ) -> Result<Value, ClusterError> {
        let api = self.apps(kind, namespace);
        let waited = async {
            let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
            let mut events = std::pin::pin!(watcher(api.clone(), config));
            loop {
                match self.get_workload(kind, namespace, name).await? {
                    Some(object) if ready(&object) => return Ok(object),
                    Some(_) => {}
                    None => {
                        return Err(ClusterError::Api {
                            verb: "get".into(),
                            resource: kind.resource().into(),
                            code: 404,
                            message: format!("{name} was deleted during the update"),
                        });
                    }
                }
                if events.next().await.is_none() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        tokio::time::timeout(timeout, waited)
            .await
            .unwrap_or_else(|_| {
                Err(ClusterError::Api {
                    verb: "watch".into(),
                    resource: kind.resource().into(),
                    code: 0,
                    message: format!(
                        "the controller did not take in the change of {name} within {timeout:?}"
                    ),
                })
            })
    }

    fn revisions_api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            namespace,
            &apps_resource("ControllerRevision"),
        )
    }

    fn revisions_request<'a>(verb: &'static str, namespace: &'a str) -> Request<'a> {
        Request {
            verb,
            resource: "controllerrevisions.apps",
            namespace: Some(namespace),
        }
    }

    /// The ControllerRevisions matching `selector`, as JSON.
    pub async fn list_revisions(
        &self,
        namespace: &str,
        selector: &str,
    ) -> Result<Vec<Value>, ClusterError> {
        self.revisions_api(namespace)
            .list(&ListParams::default().labels(selector))
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .map(|o| serde_json::to_value(o).expect("objects serialize"))
                    .collect()
            })
            .map_err(|e| Self::revisions_request("list", namespace).error(&self.server, e))
    }

    /// The pod template a ControllerRevision of a StatefulSet holds.
    pub async fn revision_template(
        &self,
        namespace: &str,
        revision: &str,
    ) -> Result<Option<Value>, ClusterError> {
        let object = self
            .revisions_api(namespace)
            .get_opt(revision)
            .await
            .map_err(|e| Self::revisions_request("get", namespace).error(&self.server, e))?;
        Ok(object.and_then(|o| {
            let mut template = o.data["data"]["spec"]["template"].clone();
            // The revision is stored as a strategic-merge patch replacing the template.
            template.as_object_mut()?.remove("$patch");
            Some(template)
        }))
    }

    /// Deletes `pod` with its own grace period. Only that object: the uid is a precondition,
    /// so a pod its controller started again under the same name (after a run stopped between
    /// reading and deleting, say) is left alone. Gone or replaced already is fine.
    pub async fn delete_pod_object(
        &self,
        namespace: &str,
        pod: &PodRef,
    ) -> Result<(), ClusterError> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            namespace,
            &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod")),
        );
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(pod.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&pod.name, &params).await {
            Ok(_) => Ok(()),
            // 409: the uid precondition failed, the pod of that name is another one now.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => Err(Request {
                verb: "delete",
                resource: "pods",
                namespace: Some(namespace),
            }
            .error(&self.server, e)),
        }
    }

    pub async fn get_stateful_set(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<StatefulSet>, ClusterError> {
        let object = self
            .get_workload(AppsKind::StatefulSet, namespace, name)
            .await?;
        Ok(object.map(|object| StatefulSet { object }))
    }

    pub async fn replace_stateful_set(
        &self,
        namespace: &str,
        set: &StatefulSet,
        write: Write,
    ) -> Result<StatefulSet, ClusterError> {
        let object = self
            .replace_workload(AppsKind::StatefulSet, namespace, &set.object, write)
            .await?;
        Ok(StatefulSet { object })
    }

    /// [`Cluster::replace_stateful_set`] of `change(read)`, written again onto the set as it is
    /// now if only its status moved since `read`.
    pub async fn change_stateful_set(
        &self,
        namespace: &str,
        read: &StatefulSet,
        change: impl Fn(&StatefulSet) -> StatefulSet,
        write: Write,
    ) -> Result<Changed<StatefulSet>, ClusterError> {
        let changed = self
            .change_workload(
                AppsKind::StatefulSet,
                namespace,
                &read.object,
                |o| change(&StatefulSet { object: o.clone() }).object,
                write,
            )
            .await?;
        Ok(changed.map(|object| StatefulSet { object }))
    }

    pub async fn patch_stateful_set(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<StatefulSet, ClusterError> {
        let object = self
            .patch_workload(AppsKind::StatefulSet, namespace, name, patch)
            .await?;
        Ok(StatefulSet { object })
    }

    pub async fn wait_stateful_set(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
        ready: impl Fn(&StatefulSet) -> bool,
    ) -> Result<StatefulSet, ClusterError> {
        let object = self
            .wait_workload(AppsKind::StatefulSet, namespace, name, timeout, |o| {
                ready(&StatefulSet { object: o.clone() })
            })
            .await?;
        Ok(StatefulSet { object })
    }

    pub async fn get_daemon_set(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<DaemonSet>, ClusterError> {
        let object = self
            .get_workload(AppsKind::DaemonSet, namespace, name)
            .await?;
        Ok(object.map(|object| DaemonSet { object }))
    }

    /// [`Cluster::replace_daemon_set`] of `change(read)`, written again onto the set as it is now
    /// if only its status moved since `read`.
    pub async fn change_daemon_set(
        &self,
        namespace: &str,
        read: &DaemonSet,
        change: impl Fn(&DaemonSet) -> DaemonSet,
        write: Write,
    ) -> Result<Changed<DaemonSet>, ClusterError> {
        let changed = self
            .change_workload(
                AppsKind::DaemonSet,
                namespace,
                &read.object,
                |o| change(&DaemonSet { object: o.clone() }).object,
                write,
            )
            .await?;
        Ok(changed.map(|object| DaemonSet { object }))
    }

    pub async fn replace_daemon_set(
        &self,
        namespace: &str,
        set: &DaemonSet,
        write: Write,
    ) -> Result<DaemonSet, ClusterError> {
        let object = self
            .replace_workload(AppsKind::DaemonSet, namespace, &set.object, write)
            .await?;
        Ok(DaemonSet { object })
    }

    /// The pods `set` owns and its ControllerRevisions.
    pub async fn daemon_set_state(
        &self,
        namespace: &str,
        set: &DaemonSet,
    ) -> Result<(Vec<DaemonPod>, Vec<Revision>), ClusterError> {
        let selector = set.selector_string();
        let pods = self
            .list_pods(namespace, &selector)
            .await?
            .iter()
            .filter_map(|(_, pod)| DaemonPod::owned(pod, set.uid()))
            .collect();
        let revisions = self.daemon_set_revisions(namespace, set).await?;
        Ok((pods, revisions))
    }

    /// The ControllerRevisions of a DaemonSet.
    pub async fn daemon_set_revisions(
        &self,
        namespace: &str,
        set: &DaemonSet,
    ) -> Result<Vec<Revision>, ClusterError> {
        let revisions = self
            .list_revisions(namespace, &set.selector_string())
            .await?;
        let owned = revisions
            .iter()
            .filter_map(|r| Revision::owned(r, set.uid()));
        Ok(owned.collect())
    }

    pub async fn wait_daemon_set(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
        ready: impl Fn(&DaemonSet) -> bool,
    ) -> Result<DaemonSet, ClusterError> {
        let object = self
            .wait_workload(AppsKind::DaemonSet, namespace, name, timeout, |o| {
                ready(&DaemonSet { object: o.clone() })
            })
            .await?;
        Ok(DaemonSet { object })
    }
}
