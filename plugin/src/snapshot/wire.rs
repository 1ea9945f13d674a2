//! One object as an API list page or a watch event carries it, read straight into the compact
//! type we keep (no full API object is ever built), with the identity a watch needs: name,
//! namespace, uid and resourceVersion.

use serde::{Deserialize, Deserializer};

use super::{FromParts, Meta};

/// An object read into `T`, and who it is.
#[derive(Debug, Clone)]
pub struct Decoded<T> {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Empty when the object carries none.
    pub resource_version: String,
    pub value: T,
}

#[derive(Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de> + Default, St: Deserialize<'de> + Default"))]
struct Parts<S, St> {
    #[serde(default)]
    metadata: Meta<String>,
    #[serde(default = "Default::default")]
    spec: S,
    #[serde(default = "Default::default")]
    status: St,
}

impl<'de, T: FromParts> Deserialize<'de> for Decoded<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let parts = Parts::<T::Spec, T::Status>::deserialize(deserializer)?;
        let Meta {
            name,
            namespace,
            uid,
            labels,
            annotations,
            creation_timestamp,
            deletion_timestamp,
            owner_references,
            resource_version,
        } = parts.metadata;
        let meta = Meta {
            name: name.clone(),
            namespace: namespace.clone(),
            uid: uid.clone(),
            labels,
            annotations,
            creation_timestamp,
            deletion_timestamp,
            owner_references,
            resource_version: None,
        };
        Ok(Decoded {
            namespace,
            name,
            uid,
            resource_version: resource_version.unwrap_or_default(),
            value: T::from_parts(meta, parts.spec, parts.status),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Node, Pod};

    #[test]
    fn reads_a_watched_object_into_its_compact_type() {
        let event = r#"{"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u-1", "resourceVersion": "42",
                         "labels": {"app": "web"}},
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}"#;
        let pod: Decoded<Pod> = serde_json::from_str(event).unwrap();
        assert_eq!(
            (pod.namespace.as_str(), pod.name.as_str(), pod.uid.as_str()),
            ("shop", "web-1", "u-1")
        );
        assert_eq!(pod.resource_version, "42");
        assert!(pod.value.ready && pod.value.node_name.as_deref() == Some("n1"));
        assert_eq!(pod.value.uid, "u-1");

        let node: Decoded<Node> = serde_json::from_str(r#"{"metadata": {"name": "n1"}}"#).unwrap();
        assert_eq!(node.name, "n1");
        assert!(node.resource_version.is_empty() && !node.value.ready);
    }
}
