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

/// On a node a rotation set aside because its drain could not finish: a label (`true`, to list
/// them) and an annotation (JSON `{"reason", "at"}`). The node stays cordoned with its pods; the
/// next run tries it again first, and `nodes --release-quarantined` uncordons it.
pub const QUARANTINED: &str = "rollout-ext.io/quarantined";

/// Set on a node this tool cordoned for replacement (so validation, and a resumed run, know the
/// cordon is ours). Value: the phase reached, `cordoned` then `drained` (or `quarantined`).
pub const PHASE: &str = "rollout-ext.io/phase";

/// On a StatefulSet under an update of this tool: its `updateStrategy` before the update (JSON),
/// restored at the end.
pub const ORIGINAL_UPDATE_STRATEGY: &str = "rollout-ext.io/original-update-strategy";

/// On a StatefulSet or DaemonSet this tool is rolling back: set when the template was pointed
/// back, so that a resumed run goes on back rather than forward.
pub const ROLLING_BACK: &str = "rollout-ext.io/rolling-back";

/// On the rotation's Lease: what the running rotation waits for now, and since when (JSON
/// `{"what", "since"}`), so that `status` from any machine says what holds it.
pub const HOLDING: &str = "rollout-ext.io/holding";

/// On the Lease: the running rotation's estimate of what is left (JSON: elapsed and remaining
/// seconds, the end, the basis), kept current after each batch for `status`.
pub const ESTIMATE: &str = "rollout-ext.io/estimate";

/// On the Lease: how far the running rotation is, per group (JSON: instances, replaced, the
/// batch in flight), kept current at each batch's start and end for `status --watch`.
pub const PROGRESS: &str = "rollout-ext.io/progress";

/// On the Lease: the batch stage running past this cluster's history (its 90th percentile),
/// while it does.
pub const SLOW: &str = "rollout-ext.io/slow";

/// On the rotation's Lease: an operator's request that the rotation pause at its next safe point
/// (JSON `{"by", "reason", "at"}`); `resume` removes it. A run started meanwhile waits.
pub const PAUSE: &str = "rollout-ext.io/pause";
/// On the rotation's Lease: an operator's request that the running rotation stop after its
/// current step (same JSON); the run that honours it removes it.
pub const ABORT: &str = "rollout-ext.io/abort";

/// The well-known label that takes a node out of cloud load balancers (Service controllers
/// honour it since Kubernetes 1.19, when cordoning stopped doing so).
pub const EXCLUDE_FROM_LOAD_BALANCERS: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";

/// The value this tool gives [`EXCLUDE_FROM_LOAD_BALANCERS`]: the label is ours only with it, and
/// only ours is ever removed.
pub const EXCLUDED_BY_US: &str = "rollout-ext";

/// The default PreferNoSchedule taint put on nodes chosen for replacement.
pub const SCHEDULED_FOR_UPDATE: &str = "rollout-ext.io/scheduled-for-update";

/// On the next controller of a rolling update: `<old name>:<old uid>` (legacy kubectl's key).
pub const LEGACY_SOURCE_ID: &str = "kubectl.kubernetes.io/update-source-id";
/// On the controller being scaled up: the replicas it should end with.
pub const LEGACY_DESIRED_REPLICAS: &str = "kubectl.kubernetes.io/desired-replicas";
/// On the old controller: its replicas before the update began (written once; rollback uses it).
pub const LEGACY_ORIGINAL_REPLICAS: &str = "kubectl.kubernetes.io/original-replicas";
/// On the old controller: the name of the next one (the seed's "update-partner").
pub const LEGACY_NEXT_CONTROLLER: &str = "kubectl.kubernetes.io/next-controller-id";
/// Which pods a ReplicaSet or ReplicationController removes first (servers from 1.22).
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// On pods of a controller being renamed: the controller to create under its final name, kept
/// until the rename completes so that an interrupted rename can be finished.
pub const RENAME_RECORD: &str = "rollout-ext.io/rename";

/// Pod annotations that ask a drain not to disrupt the pod, each with the value that asks it:
/// the drain waits for such a pod to go away on its own (policy `drain.doNotDisruptTimeout`).
pub const DO_NOT_DISRUPT: &[(&str, &str)] = &[
    ("rollout-ext.io/do-not-disrupt", "true"),
    ("karpenter.sh/do-not-disrupt", "true"),
    ("cluster-autoscaler.kubernetes.io/safe-to-evict", "false"),
];
/// Node annotations that ask a rotation not to disrupt the node, each with the value that asks
/// it: an out-of-date node that carries one is not selected unless `--force`.
pub const NODE_DO_NOT_DISRUPT: &[(&str, &str)] = &[
    ("rollout-ext.io/do-not-disrupt", "true"),
    ("karpenter.sh/do-not-disrupt", "true"),
];
/// On a pod (`"true"`): like a Job's pods, it is left to complete before its node is drained
/// (policy `drain.jobTimeout`).
pub const WAIT_FOR_COMPLETION: &str = "rollout-ext.io/wait-for-completion";
/// Priority classes whose pods a drain evicts last unless `drain.order` places them.
pub const CRITICAL_PRIORITY_CLASSES: &[&str] = &["system-cluster-critical", "system-node-critical"];

/// On a run handed to the cluster (`--in-cluster`): its Job, pods and ConfigMap, the Job's name.
/// A drain evicts such a pod last (its run resumes in the Job's next pod) rather than waiting
/// for it to complete as for another Job's.
pub const RUNNER: &str = "rollout-ext.io/runner";

/// Taints other disruptors put on the nodes they take out, and who they are.
pub const DISRUPTOR_TAINTS: &[(&str, &str)] = &[
    ("karpenter.sh/disrupted", "karpenter"),
    ("ToBeDeletedByClusterAutoscaler", "cluster-autoscaler"),
    ("medik8s.io/drain", "medik8s"),
];

/// Node lifecycle conditions (KEP-5683, Kubernetes 1.37) that say a node is being disrupted
/// while True.
pub const IN_PROGRESS_CONDITIONS: &[&str] = &["DrainInProgress", "MaintenanceInProgress"];

/// The cluster-autoscaler leaves a node with this annotation `"true"` alone in scale-down: a run
/// puts it on the nodes it will rotate, so that they are not scaled down under it.
pub const SCALE_DOWN_DISABLED: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";

/// Beside [`SCALE_DOWN_DISABLED`] when a run put it there: only that one is ever removed.
pub const SCALE_DOWN_DISABLED_BY_US: &str = "rollout-ext.io/scale-down-disabled";

/// On a Karpenter NodePool whose voluntary disruptions a run paused for a batch: the pool's own
/// `spec.disruption.budgets` (JSON; `null` when it set none), put back after the batch.
pub const PAUSED_BUDGETS: &str = "rollout-ext.io/paused-disruption-budgets";
