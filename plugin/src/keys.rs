//! Label, annotation and taint keys the tool reads or writes, in one place.

/// Group labels tried in order when `--group-label` and the policy's `groupLabel` are unset.
pub const GROUP_LABELS: &[&str] = &[
    "kops.k8s.io/instancegroup",
    "eks.amazonaws.com/nodegroup",
    "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool",
    "karpenter.sh/nodepool",
];

pub const ROLE_CONTROL_PLANE: &str = "node-role.kubernetes.io/control-plane";
pub const ROLE_MASTER: &str = "node-role.kubernetes.io/master";

pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const ZONE_LEGACY: &str = "failure-domain.beta.kubernetes.io/zone";

/// kops' own "replace this instance" annotation.
pub const KOPS_NEEDS_UPDATE: &str = "kops.k8s.io/needs-update";
/// Our "replace this instance" annotation.
pub const NEEDS_UPDATE: &str = "rollout-ext.io/needs-update";
/// Set on a node whose instance an earlier run detached for surging.
pub const DETACHED: &str = "rollout-ext.io/detached";

/// Namespaces whose pods must be Ready for the cluster to validate.
pub const SYSTEM_NAMESPACES: &[&str] = &["kube-system"];
