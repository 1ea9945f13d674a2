//! medik8s' NodeMaintenance, served by the test cluster from the CustomResourceDefinition of
//! node-maintenance-operator's module (`install-control-plane.sh` caches it). The operator itself
//! does not run: a test plays it, creating and deleting NodeMaintenances (and the cordon and
//! drain taint it would put on) as it would.

use std::path::PathBuf;

use anyhow::Context;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};

/// The node-maintenance-operator release whose definition is served
/// (`tests/cluster/node-maintenance/VERSION`).
fn version() -> &'static str {
    include_str!("../../cluster/node-maintenance/VERSION").trim()
}

fn dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ROLLOUT_EXT_NMO_DIR") {
        return PathBuf::from(dir);
    }
    super::cache_root().join(format!(
        "node-maintenance-{}",
        version().trim_start_matches('v')
    ))
}

/// The NodeMaintenance CustomResourceDefinition, as YAML.
pub(super) fn crd() -> anyhow::Result<String> {
    let path =
        super::installed(dir().join("crds/nodemaintenance.medik8s.io_nodemaintenances.yaml"))?;
    std::fs::read_to_string(&path).with_context(|| path.display().to_string())
}

/// The NodeMaintenances API (`nodemaintenance.medik8s.io/v1beta1`, cluster-scoped).
pub fn node_maintenances(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("nodemaintenance.medik8s.io", "v1beta1", "NodeMaintenance");
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}
