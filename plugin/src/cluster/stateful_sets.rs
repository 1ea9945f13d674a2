//! StatefulSets and their ControllerRevisions, as the partitioned update reads and changes
//! them. Whole-object writes carry the resourceVersion read, so a change made meanwhile is
//! refused rather than overwritten; waits are watches.

use std::time::Duration;

use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::watcher;
use serde_json::Value;

use super::controllers::Write;
use super::{Cluster, ClusterError, Request};
use crate::plan::rolling_update::stateful_set::StatefulSet;

const RESOURCE: &str = "statefulsets.apps";

fn request<'a>(verb: &'static str, namespace: &'a str) -> Request<'a> {
    Request {
        verb,
        resource: RESOURCE,
        namespace: Some(namespace),
    }
}

fn to_stateful_set(object: DynamicObject) -> StatefulSet {
    let mut value = serde_json::to_value(object).expect("objects serialize");
    value["kind"] = Value::from("StatefulSet");
    value["apiVersion"] = Value::from("apps/v1");
    StatefulSet { object: value }
}

impl Cluster {
    fn stateful_sets(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            namespace,
            &ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "StatefulSet")),
        )
    }

    pub async fn get_stateful_set(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<StatefulSet>, ClusterError> {
        self.stateful_sets(namespace)
            .get_opt(name)
            .await
            .map(|o| o.map(to_stateful_set))
            .map_err(|e| request("get", namespace).error(&self.server, e))
    }

    /// Writes `set` as it is, if nobody changed it since it was read (409 otherwise).
    pub async fn replace_stateful_set(
        &self,
        namespace: &str,
        set: &StatefulSet,
        write: Write,
    ) -> Result<StatefulSet, ClusterError> {
        let object: DynamicObject =
            serde_json::from_value(set.object.clone()).expect("a StatefulSet is an object");
        let params = PostParams {
            dry_run: write == Write::ServerDryRun,
            ..Default::default()
        };
        self.stateful_sets(namespace)
            .replace(set.name(), &params, &object)
            .await
            .map(to_stateful_set)
            .map_err(|e| request("update", namespace).error(&self.server, e))
    }

    /// Merge-patches a StatefulSet (its partition, its annotations).
    pub async fn patch_stateful_set(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<StatefulSet, ClusterError> {
        self.stateful_sets(namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(to_stateful_set)
            .map_err(|e| request("patch", namespace).error(&self.server, e))
    }

    /// The pod template a ControllerRevision of a StatefulSet holds.
    pub async fn revision_template(
        &self,
        namespace: &str,
        revision: &str,
    ) -> Result<Option<Value>, ClusterError> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            namespace,
            &ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "ControllerRevision")),
        );
        let object = api.get_opt(revision).await.map_err(|e| {
            Request {
                verb: "get",
                resource: "controllerrevisions.apps",
                namespace: Some(namespace),
            }
            .error(&self.server, e)
        })?;
        Ok(object.and_then(|o| {
            let mut template = o.data["data"]["spec"]["template"].clone();
            // The revision is stored as a strategic-merge patch replacing the template.
            template.as_object_mut()?.remove("$patch");
            Some(template)
        }))
    }

    /// Yields whenever the watch of StatefulSet `name` delivers something.
    pub fn stateful_set_changes(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl futures::Stream<Item = ()> + Send + use<> {
        use kube::runtime::WatchStreamExt;
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        watcher(self.stateful_sets(namespace), config)
            .default_backoff()
            .map(|_| ())
    }

    /// Waits, watching it, until `ready` holds for the StatefulSet `name`.
    pub async fn wait_stateful_set(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
        ready: impl Fn(&StatefulSet) -> bool,
    ) -> Result<StatefulSet, ClusterError> {
        let api = self.stateful_sets(namespace);
        let waited = async {
            let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
            let mut events = std::pin::pin!(watcher(api.clone(), config));
            loop {
                match self.get_stateful_set(namespace, name).await? {
                    Some(set) if ready(&set) => return Ok(set),
                    Some(_) => {}
                    None => {
                        return Err(ClusterError::Api {
                            verb: "get".into(),
                            resource: RESOURCE.into(),
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
                    resource: RESOURCE.into(),
                    code: 0,
                    message: format!(
                        "the controller did not take in the change of {name} within {timeout:?}"
                    ),
                })
            })
    }
}
