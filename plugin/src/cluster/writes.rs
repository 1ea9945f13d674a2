//! The run's own writes, as the live view must reflect them before the next decision: a patch
//! leaves the version the server gave the object, a deletion the object that must be gone. A
//! view has caught up once it shows each (see `view::LiveView::caught_up`); until then what it
//! holds may predate the run's last step.

use std::sync::{Arc, Mutex};

/// The kinds a run writes and its view watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Node,
    Pod,
    Machine,
}

impl Kind {
    pub fn resource(self) -> &'static str {
        match self {
            Kind::Node => "nodes",
            Kind::Pod => "pods",
            Kind::Machine => "machines.cluster.x-k8s.io",
        }
    }
}

/// What a write left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The object at this resourceVersion, or a later one.
    Now(u64),
    /// The object gone: no object of that name, or another one (a different uid; unknown when
    /// the server did not say).
    Gone(Option<String>),
}

/// One write of the run's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub change: Change,
}

impl Written {
    /// The object, for a message: `nodes/n1`, `pods/shop/web-1`.
    pub fn describe(&self) -> String {
        match self.namespace.as_str() {
            "" => format!("{}/{}", self.kind.resource(), self.name),
            ns => format!("{}/{ns}/{}", self.kind.resource(), self.name),
        }
    }
}

/// The writes no view has shown yet, shared by every clone of a [`super::Cluster`].
#[derive(Debug, Clone, Default)]
pub struct Writes(Arc<Mutex<Vec<Written>>>);

impl Writes {
    pub fn record(&self, written: Written) {
        let mut pending = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // A later write of the same object supersedes the earlier one.
        pending.retain(|w| {
            (w.kind, &w.namespace, &w.name) != (written.kind, &written.namespace, &written.name)
        });
        pending.push(written);
    }

    /// An object patched or created: the server's answer carries its new version.
    pub fn now(
        &self,
        kind: Kind,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) {
        let version = meta
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok());
        if let (Some(version), Some(name)) = (version, &meta.name) {
            self.record(Written {
                kind,
                namespace: meta.namespace.clone().unwrap_or_default(),
                name: name.clone(),
                change: Change::Now(version),
            });
        }
    }

    /// An object deleted (or seen gone).
    pub fn gone(&self, kind: Kind, namespace: &str, name: &str, uid: Option<String>) {
        self.record(Written {
            kind,
            namespace: namespace.into(),
            name: name.into(),
            change: Change::Gone(uid.filter(|u| !u.is_empty())),
        });
    }

    /// Drops the writes `shown` says a view reflects; returns those it does not yet.
    pub fn settle(&self, shown: impl Fn(&Written) -> bool) -> Vec<Written> {
        let mut pending = self.0.lock().unwrap_or_else(|e| e.into_inner());
        pending.retain(|w| !shown(w));
        pending.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_write_of_an_object_supersedes_the_earlier() {
        let writes = Writes::default();
        let meta = |v: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("n1".into()),
            resource_version: Some(v.into()),
            ..Default::default()
        };
        writes.now(Kind::Node, &meta("5"));
        writes.now(Kind::Node, &meta("9"));
        writes.gone(Kind::Pod, "shop", "web-1", Some("u".into()));
        let pending = writes.settle(|w| w.kind == Kind::Pod);
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].change, Change::Now(9));
        assert_eq!(pending[0].describe(), "nodes/n1");
        assert!(writes.settle(|_| true).is_empty());
    }
}
