//! The objects a view watches, as kube's typed API reads them: our compact types
//! ([`Decoded`]) behind the metadata kube's watcher needs (name, namespace, uid and
//! resourceVersion), for any kind named by its [`ApiResource`].

use kube::api::ApiResource;
use kube::core::{DynamicResourceScope, ObjectMeta, Resource};
use serde::{Deserialize, Deserializer};

use crate::snapshot::{Decoded, FromParts};

/// One watched or listed object.
#[derive(Debug, Clone)]
pub struct Watched<T> {
    meta: ObjectMeta,
    pub object: Decoded<T>,
}

impl<T> Watched<T> {
    /// Its resourceVersion as a number: etcd's revision, which orders every change the API
    /// server makes (0 when it is not one).
    pub fn version(&self) -> u64 {
        version_of(&self.object.resource_version)
    }
}

/// A resourceVersion as a number (0 when it is not one).
pub fn version_of(resource_version: &str) -> u64 {
    resource_version.parse().unwrap_or(0)
}

impl<'de, T: FromParts> Deserialize<'de> for Watched<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let object = Decoded::<T>::deserialize(deserializer)?;
        let meta = ObjectMeta {
            name: Some(object.name.clone()),
            namespace: (!object.namespace.is_empty()).then(|| object.namespace.clone()),
            uid: Some(object.uid.clone()),
            resource_version: Some(object.resource_version.clone()),
            ..ObjectMeta::default()
        };
        Ok(Watched { meta, object })
    }
}

impl<T> Resource for Watched<T> {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn group(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

/// The API resource of `plural` in `group/version` (`group` empty for the core group).
pub fn api_resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version,
        kind: kind.into(),
        plural: plural.into(),
    }
}
