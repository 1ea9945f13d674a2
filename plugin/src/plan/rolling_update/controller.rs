//! A ReplicationController or ReplicaSet as the rolling update sees it: the object's JSON with
//! typed accessors for the fields the update reads and writes. Kept as JSON so that fields this
//! tool does not know survive the copy into the next controller untouched.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// The kinds of controller a rolling update can roll.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Kind {
    ReplicationController,
    ReplicaSet,
}

impl Kind {
    /// Parses `NAME`, `rc/NAME` or `rs/NAME` (and the long resource names kubectl accepts).
    pub fn parse_ref(text: &str) -> Result<(Kind, String), String> {
        let (kind, name) = match text.split_once('/') {
            None => (Kind::ReplicationController, text),
            Some((resource, name)) => {
                let kind = match resource.to_ascii_lowercase().as_str() {
                    "rc" | "replicationcontroller" | "replicationcontrollers" => {
                        Kind::ReplicationController
                    }
                    "rs" | "replicaset" | "replicasets" | "replicaset.apps"
                    | "replicasets.apps" => Kind::ReplicaSet,
                    other => {
                        return Err(format!(
                            "{other:?} cannot be rolled: expected a ReplicationController (NAME or rc/NAME), a ReplicaSet (rs/NAME), a StatefulSet (sts/NAME) or a DaemonSet (ds/NAME)"
                        ));
                    }
                };
                (kind, name)
            }
        };
        if name.is_empty() || name.contains('/') {
            return Err(format!("invalid controller name {text:?}"));
        }
        Ok((kind, name.to_string()))
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ReplicationController => "ReplicationController",
            Kind::ReplicaSet => "ReplicaSet",
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            Kind::ReplicationController => "v1",
            Kind::ReplicaSet => "apps/v1",
        }
    }

    /// The resource name, as error messages and RBAC rules spell it.
    pub fn resource(self) -> &'static str {
        match self {
            Kind::ReplicationController => "replicationcontrollers",
            Kind::ReplicaSet => "replicasets.apps",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            Kind::ReplicationController => "rc",
            Kind::ReplicaSet => "rs",
        }
    }

    /// The apps/v1 selector cannot change after creation; the core/v1 one can.
    pub fn selector_is_mutable(self) -> bool {
        self == Kind::ReplicationController
    }
}

/// A controller object.
#[derive(Debug, Clone, PartialEq)]
pub struct Controller {
    pub kind: Kind,
    pub object: Value,
}

fn str_map(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// `object[path...]`, creating objects on the way.
fn entry<'a>(object: &'a mut Value, path: &[&str]) -> &'a mut Value {
    let mut at = object;
    for key in path {
        if !at.is_object() {
            *at = json!({});
        }
        at = at
            .as_object_mut()
            .expect("made an object above")
            .entry(key.to_string())
            .or_insert(Value::Null);
    }
    at
}

/// Removes null members: the server writes some (`creationTimestamp: null` in templates) that
/// typed clients drop, and the hash must not depend on which one saved the object.
fn drop_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// The index of the container of `containers` (the pod template of `display`) an image change
/// applies to: `container`, else the only one.
pub fn container_index(
    containers: &[Value],
    display: &str,
    container: Option<&str>,
) -> Result<usize, String> {
    match container {
        Some(name) => containers
            .iter()
            .position(|c| c["name"].as_str() == Some(name))
            .ok_or_else(|| {
                format!(
                    "container {name:?} not found in the pod template of {}",
                    display
                )
            }),
        None if containers.is_empty() => {
            Err(format!("the pod template of {} has no containers", display))
        }
        None if containers.len() > 1 => Err(format!(
            "the pod template of {} has {} containers: say which one to update with --container",
            display,
            containers.len()
        )),
        None => Ok(0),
    }
}

impl Controller {
    /// Wraps an object, checking it is a controller of a kind this tool rolls.
    pub fn from_value(object: Value) -> Result<Controller, String> {
        let kind = match object["kind"].as_str() {
            Some("ReplicationController") => Kind::ReplicationController,
            Some("ReplicaSet") => Kind::ReplicaSet,
            Some(other) => {
                return Err(format!(
                    "kind {other} cannot be rolled: expected ReplicationController or ReplicaSet"
                ));
            }
            None => return Err("the object has no kind".into()),
        };
        if object["metadata"]["name"]
            .as_str()
            .is_none_or(str::is_empty)
        {
            return Err(format!("the {} has no metadata.name", kind.as_str()));
        }
        Ok(Controller { kind, object })
    }

    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or("")
    }

    pub fn set_name(&mut self, name: &str) {
        *entry(&mut self.object, &["metadata", "name"]) = json!(name);
    }

    pub fn namespace(&self) -> Option<&str> {
        self.object["metadata"]["namespace"].as_str()
    }

    pub fn uid(&self) -> &str {
        self.object["metadata"]["uid"].as_str().unwrap_or("")
    }

    /// `kind/name` as kubectl prints it.
    pub fn display(&self) -> String {
        format!("{}/{}", self.kind.short(), self.name())
    }

    /// spec.replicas; the API's default is 1.
    pub fn replicas(&self) -> i32 {
        self.object["spec"]["replicas"].as_i64().unwrap_or(1) as i32
    }

    pub fn set_replicas(&mut self, replicas: i32) {
        *entry(&mut self.object, &["spec", "replicas"]) = json!(replicas);
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.object["metadata"]["annotations"][key].as_str()
    }

    pub fn annotations(&self) -> BTreeMap<String, String> {
        str_map(self.object["metadata"].get("annotations"))
    }

    pub fn set_annotation(&mut self, key: &str, value: Option<&str>) {
        let annotations = entry(&mut self.object, &["metadata", "annotations"]);
        if !annotations.is_object() {
            *annotations = json!({});
        }
        let map = annotations.as_object_mut().expect("made an object above");
        match value {
            Some(v) => {
                map.insert(key.to_string(), json!(v));
            }
            None => {
                map.remove(key);
            }
        }
    }

    pub fn labels(&self) -> BTreeMap<String, String> {
        str_map(self.object["metadata"].get("labels"))
    }

    fn selector_path(&self) -> &'static [&'static str] {
        match self.kind {
            Kind::ReplicationController => &["spec", "selector"],
            Kind::ReplicaSet => &["spec", "selector", "matchLabels"],
        }
    }

    /// The equality part of the selector (a ReplicationController has nothing else; a
    /// ReplicaSet's matchExpressions are kept but not interpreted).
    pub fn selector(&self) -> BTreeMap<String, String> {
        let mut at = &self.object;
        for key in self.selector_path() {
            at = &at[*key];
        }
        str_map(Some(at))
    }

    pub fn set_selector_label(&mut self, key: &str, value: &str) {
        let path = self.selector_path();
        *entry(&mut self.object, path) = {
            let mut map = self.selector();
            map.insert(key.to_string(), value.to_string());
            json!(map)
        };
    }

    /// The selector as a label-selector string, for list calls.
    pub fn selector_string(&self) -> String {
        self.selector()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn template_labels(&self) -> BTreeMap<String, String> {
        str_map(self.object["spec"]["template"]["metadata"].get("labels"))
    }

    pub fn set_template_label(&mut self, key: &str, value: &str) {
        *entry(
            &mut self.object,
            &["spec", "template", "metadata", "labels", key],
        ) = json!(value);
    }

    /// The pod template's containers.
    pub fn containers(&self) -> &[Value] {
        self.object["spec"]["template"]["spec"]["containers"]
            .as_array()
            .map_or(&[], Vec::as_slice)
    }

    /// The index of the container an image change applies to: `--container`, else the only one.
    pub fn container_index(&self, container: Option<&str>) -> Result<usize, String> {
        container_index(self.containers(), &self.display(), container)
    }

    pub fn image(&self, index: usize) -> Option<&str> {
        self.containers().get(index)?["image"].as_str()
    }

    pub fn set_image(&mut self, index: usize, image: &str, pull_policy: Option<&str>) {
        let container = &mut self.object["spec"]["template"]["spec"]["containers"][index];
        container["image"] = json!(image);
        if let Some(policy) = pull_policy {
            container["imagePullPolicy"] = json!(policy);
        }
    }

    pub fn min_ready_seconds(&self) -> i64 {
        self.object["spec"]["minReadySeconds"].as_i64().unwrap_or(0)
    }

    /// The controller has seen its latest spec and runs the replicas it asks for.
    pub fn settled(&self) -> bool {
        let generation = self.object["metadata"]["generation"].as_i64().unwrap_or(0);
        let observed = self.object["status"]["observedGeneration"]
            .as_i64()
            .unwrap_or(0);
        let replicas = self.object["status"]["replicas"].as_i64().unwrap_or(0);
        observed >= generation && replicas == i64::from(self.replicas())
    }

    /// md5 hex of the object's JSON (the legacy tool's unique-ifying hash), taken without the
    /// server's bookkeeping so that a plan from a snapshot names the same next controller as a
    /// live run.
    pub fn hash(&self) -> String {
        use md5::Digest;
        let mut object = self.for_create();
        drop_nulls(&mut object);
        let bytes = serde_json::to_vec(&object).expect("JSON values serialize");
        hex::encode(md5::Md5::digest(&bytes))
    }

    /// The object as it should be sent to create a copy: no identity, no status, no server
    /// bookkeeping.
    pub fn for_create(&self) -> Value {
        let mut object = self.object.clone();
        if let Some(meta) = object["metadata"].as_object_mut() {
            for key in [
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "generation",
                "managedFields",
                "selfLink",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "ownerReferences",
            ] {
                meta.remove(key);
            }
        }
        if let Some(map) = object.as_object_mut() {
            map.remove("status");
            map.insert("apiVersion".into(), json!(self.kind.api_version()));
            map.insert("kind".into(), json!(self.kind.as_str()));
        }
        object
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rc() -> Controller {
        Controller::from_value(json!({
            "apiVersion": "v1", "kind": "ReplicationController",
            "metadata": {"name": "foo", "namespace": "default", "uid": "u1", "resourceVersion": "7"},
            "spec": {"replicas": 3, "selector": {"app": "foo"},
                     "template": {"metadata": {"labels": {"app": "foo"}},
                                  "spec": {"containers": [{"name": "c", "image": "img:v1"}]}}},
            "status": {"replicas": 3}
        }))
        .unwrap()
    }

    #[test]
    fn references_name_the_kind_or_default_to_a_replication_controller() {
        assert_eq!(
            Kind::parse_ref("foo").unwrap(),
            (Kind::ReplicationController, "foo".into())
        );
        assert_eq!(
            Kind::parse_ref("rs/web").unwrap(),
            (Kind::ReplicaSet, "web".into())
        );
        assert_eq!(
            Kind::parse_ref("replicationcontrollers/x").unwrap().0,
            Kind::ReplicationController
        );
        assert!(
            Kind::parse_ref("deploy/web")
                .unwrap_err()
                .contains("cannot be rolled")
        );
        assert!(Kind::parse_ref("rs/").is_err());
    }

    #[test]
    fn selectors_live_where_each_kind_keeps_them() {
        let mut c = rc();
        c.set_selector_label("deployment", "abc");
        assert_eq!(c.object["spec"]["selector"]["deployment"], "abc");
        assert_eq!(c.selector_string(), "app=foo,deployment=abc");
        let mut rs = Controller::from_value(json!({
            "kind": "ReplicaSet", "metadata": {"name": "r"},
            "spec": {"selector": {"matchLabels": {"app": "r"}}}
        }))
        .unwrap();
        rs.set_selector_label("deployment", "h");
        assert_eq!(
            rs.object["spec"]["selector"]["matchLabels"]["deployment"],
            "h"
        );
    }

    #[test]
    fn a_copy_for_create_has_no_identity_or_status() {
        let copy = rc().for_create();
        assert!(copy["metadata"].get("uid").is_none());
        assert!(copy["metadata"].get("resourceVersion").is_none());
        assert!(copy.get("status").is_none());
        assert_eq!(copy["spec"]["replicas"], 3);
    }

    #[test]
    fn the_hash_changes_with_the_image() {
        let a = rc();
        let mut b = rc();
        b.set_image(0, "img:v2", None);
        assert_ne!(a.hash(), b.hash());
        assert_eq!(a.hash().len(), 32);
    }

    #[test]
    fn several_containers_need_a_name() {
        let mut c = rc();
        c.object["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "side", "image": "s"}));
        assert!(c.container_index(None).unwrap_err().contains("--container"));
        assert_eq!(c.container_index(Some("side")).unwrap(), 1);
        assert!(c.container_index(Some("nope")).is_err());
    }
}
