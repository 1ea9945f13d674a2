//! Least privilege, checked up front: before a run changes anything, the API server is asked
//! (with SelfSubjectAccessReviews) for every permission the run will use, and every one it
//! refuses is named at once. Without this check a missing permission would surface only at the
//! call that needs it, possibly half-way through a rotation.

use std::fmt;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use super::lock::LOCK_NAMESPACE;
use super::{Cluster, ClusterError, Request};
use crate::plan::rolling_update::controller::Kind;
use crate::report::{self, Level};

/// How many access reviews are in flight at once.
const REVIEWS_AT_ONCE: usize = 4;

/// One permission: a verb on a resource, written as Kubernetes names it (`nodes`,
/// `pods/eviction`, `leases.coordination.k8s.io`), cluster-wide or in one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    pub verb: &'static str,
    pub resource: &'static str,
    pub namespace: Option<String>,
}

impl Permission {
    pub fn new(verb: &'static str, resource: &'static str, namespace: Option<&str>) -> Self {
        Permission {
            verb,
            resource,
            namespace: namespace.map(String::from),
        }
    }

    /// The review's attributes: `leases.coordination.k8s.io` is resource `leases` of group
    /// `coordination.k8s.io`; `pods/eviction` is subresource `eviction` of `pods`.
    fn attributes(&self) -> ResourceAttributes {
        let (resource, subresource) = match self.resource.split_once('/') {
            Some((r, s)) => (r, Some(s.to_string())),
            None => (self.resource, None),
        };
        let (resource, group) = resource.split_once('.').unwrap_or((resource, ""));
        ResourceAttributes {
            verb: Some(self.verb.into()),
            group: Some(group.into()),
            resource: Some(resource.into()),
            subresource,
            namespace: self.namespace.clone(),
            ..Default::default()
        }
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} on {} (in namespace {ns})", self.verb, self.resource),
            None => write!(f, "{} on {} (cluster-wide)", self.verb, self.resource),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error(
        "missing permission{}: {}; nothing was changed (grant {} in the user's Role or ClusterRole: deploy/clusterrole.yaml lists every permission the tool uses, with deploy/clusterrole-cluster-api.yaml and deploy/clusterrole-karpenter.yaml for those providers)",
        if .0.len() == 1 { "" } else { "s" },
        list(.0),
        if .0.len() == 1 { "it" } else { "them" }
    )]
    Missing(Vec<Permission>),
    /// A run handed to the cluster would lack these under its ServiceAccount.
    #[error(
        "the ServiceAccount {account} that in-cluster runs use is missing permission{}: {}; nothing was created (create it and its binding with --create-rbac, or apply deploy/runner.yaml and deploy/clusterrole.yaml)",
        if .missing.len() == 1 { "" } else { "s" },
        list(.missing)
    )]
    MissingForRunner {
        account: String,
        missing: Vec<Permission>,
    },
    #[error("cannot check permissions up front: {0}")]
    Review(#[source] ClusterError),
}

/// Whose permissions are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// The user this command runs as.
    Me,
    /// A ServiceAccount, as its pods' token is judged.
    ServiceAccount { namespace: String, name: String },
}

fn list(missing: &[Permission]) -> String {
    let items: Vec<String> = missing.iter().map(Permission::to_string).collect();
    items.join("; ")
}

/// What `nodes --yes` uses. Without `cloud_only` it drains: evictions, or with
/// `disable_eviction` pod deletions.
pub fn for_rotation(cloud_only: bool, disable_eviction: bool) -> Vec<Permission> {
    let all = |verb, resource| Permission::new(verb, resource, None);
    let lock = |verb| Permission::new(verb, "leases.coordination.k8s.io", Some(LOCK_NAMESPACE));
    let mut needed = vec![
        all("get", "nodes"),
        all("list", "nodes"),
        all("watch", "nodes"),
        all("patch", "nodes"),
        all("delete", "nodes"),
        all("list", "pods"),
        all("watch", "pods"),
        all("list", "poddisruptionbudgets.policy"),
        // The run's live view watches what it lists.
        all("watch", "poddisruptionbudgets.policy"),
        lock("get"),
        // Pause and abort requests reach the run through a watch of its Lease.
        lock("list"),
        lock("watch"),
        lock("create"),
        lock("update"),
        lock("patch"),
        lock("delete"),
    ];
    // Kubernetes Events about the nodes and the run, beside the Lease; a repeat patches the
    // first one's count.
    for verb in ["create", "patch"] {
        needed.push(Permission::new(
            verb,
            "events.events.k8s.io",
            Some(LOCK_NAMESPACE),
        ));
    }
    match (cloud_only, disable_eviction) {
        (true, _) => {}
        (false, false) => needed.push(all("create", "pods/eviction")),
        (false, true) => needed.push(all("delete", "pods")),
    }
    needed
}

/// What the `clusterAPI` provider uses besides a rotation's own needs: Machines read with the
/// nodes, marked and removed; MachineDeployments and MachineSets read and scaled.
pub fn for_cluster_api() -> Vec<Permission> {
    let all = |verb, resource| Permission::new(verb, resource, None);
    let mut needed: Vec<Permission> = ["get", "list", "watch", "patch", "delete"]
        .into_iter()
        .map(|verb| all(verb, "machines.cluster.x-k8s.io"))
        .collect();
    for resource in [
        "machinedeployments.cluster.x-k8s.io",
        "machinesets.cluster.x-k8s.io",
    ] {
        needed.extend(["get", "update"].map(|verb| all(verb, resource)));
    }
    needed
}

/// What the `karpenter` provider uses besides a rotation's own needs: NodePools read with the
/// nodes (for their own disruption budgets), a node's NodeClaim found and deleted.
pub fn for_karpenter() -> Vec<Permission> {
    let all = |verb, resource| Permission::new(verb, resource, None);
    vec![
        all("list", "nodepools.karpenter.sh"),
        all("watch", "nodepools.karpenter.sh"),
        all("list", "nodeclaims.karpenter.sh"),
        all("delete", "nodeclaims.karpenter.sh"),
    ]
}

/// What counting others' disruptions reads besides nodes: every DaemonSet (for kured's lock)
/// and, where `others` says the server serves them, NodeMaintenances.
pub fn for_others(others: super::Others) -> Vec<Permission> {
    let all = |verb, resource| Permission::new(verb, resource, None);
    let mut needed = Vec::new();
    if others.daemon_sets {
        needed.extend(["list", "watch"].map(|verb| all(verb, "daemonsets.apps")));
    }
    if others.node_maintenances {
        needed.extend(
            ["list", "watch"].map(|verb| all(verb, "nodemaintenances.nodemaintenance.medik8s.io")),
        );
    }
    needed
}

/// What a live `rolling-update` of a `kind` in `namespace` uses.
pub fn for_rolling_update(kind: Kind, namespace: &str) -> Vec<Permission> {
    let here = |verb, resource| Permission::new(verb, resource, Some(namespace));
    let controllers = kind.resource();
    let mut needed: Vec<Permission> = ["get", "list", "watch", "create", "patch", "delete"]
        .into_iter()
        .map(|verb| here(verb, controllers))
        .collect();
    needed.extend(["list", "watch", "patch"].map(|verb| here(verb, "pods")));
    // Kubernetes Events on the controllers; a repeat patches the first one's count.
    needed.extend(["create", "patch"].map(|verb| here(verb, "events.events.k8s.io")));
    needed
}

/// What a live partitioned update of a StatefulSet in `namespace` uses.
pub fn for_stateful_set_update(namespace: &str) -> Vec<Permission> {
    let here = |verb, resource| Permission::new(verb, resource, Some(namespace));
    let mut needed: Vec<Permission> = ["get", "watch", "update", "patch"]
        .into_iter()
        .map(|verb| here(verb, "statefulsets.apps"))
        .collect();
    // The template a rollback goes back to.
    needed.push(here("get", "controllerrevisions.apps"));
    // An OnDelete StatefulSet's pods are deleted by the run itself.
    needed.extend(["list", "watch", "delete"].map(|verb| here(verb, "pods")));
    // The update's own lock, beside the StatefulSet.
    needed.extend(
        ["get", "create", "update", "delete"].map(|verb| here(verb, "leases.coordination.k8s.io")),
    );
    needed
}

/// What a live node-by-node update of a DaemonSet in `namespace` uses.
pub fn for_daemon_set_update(namespace: &str) -> Vec<Permission> {
    let here = |verb, resource| Permission::new(verb, resource, Some(namespace));
    let mut needed: Vec<Permission> = ["get", "watch", "update", "patch"]
        .into_iter()
        .map(|verb| here(verb, "daemonsets.apps"))
        .collect();
    // Which template each pod runs, and the one a rollback goes back to.
    needed.push(here("list", "controllerrevisions.apps"));
    needed.extend(["list", "watch", "delete"].map(|verb| here(verb, "pods")));
    // The nodes, as the selection hooks see them.
    needed.push(Permission::new("list", "nodes", None));
    needed.extend(
        ["get", "create", "update", "delete"].map(|verb| here(verb, "leases.coordination.k8s.io")),
    );
    needed
}

impl Cluster {
    /// Asks the API server about every permission in `needed`; fails naming each one refused.
    pub async fn check_access(&self, needed: &[Permission]) -> Result<(), AccessError> {
        let missing = self.refused(&Subject::Me, needed).await?;
        match missing.is_empty() {
            true => Ok(()),
            false => Err(AccessError::Missing(missing)),
        }
    }

    /// Asks the API server about every permission in `needed` for the ServiceAccount
    /// `namespace/name`; fails naming each one refused.
    pub async fn check_runner_access(
        &self,
        namespace: &str,
        name: &str,
        needed: &[Permission],
    ) -> Result<(), AccessError> {
        let subject = Subject::ServiceAccount {
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let missing = self.refused(&subject, needed).await?;
        match missing.is_empty() {
            true => Ok(()),
            false => Err(AccessError::MissingForRunner {
                account: format!("{namespace}/{name}"),
                missing,
            }),
        }
    }

    /// As [`Self::check_runner_access`], just after the runner's RBAC was applied: the API
    /// server's authorizer learns of a new binding from its own watch, a moment after the write,
    /// so a refusal is reviewed again (said with `-v`) until `within` has passed.
    pub async fn await_runner_access(
        &self,
        namespace: &str,
        name: &str,
        needed: &[Permission],
        within: std::time::Duration,
    ) -> Result<(), AccessError> {
        let deadline = tokio::time::Instant::now() + within;
        let mut pause = std::time::Duration::from_millis(50);
        loop {
            match self.check_runner_access(namespace, name, needed).await {
                Err(AccessError::MissingForRunner { missing, .. })
                    if tokio::time::Instant::now() + pause < deadline =>
                {
                    report::log(
                        Level::Info,
                        &format!(
                            "the runner's new RBAC is not in force yet ({} of {} permissions refused): asking again in {} ms",
                            missing.len(),
                            needed.len(),
                            pause.as_millis()
                        ),
                    );
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
                answer => return answer,
            }
        }
    }

    /// Whether `subject` may do what `permission` says, as the API server reviews it.
    async fn allowed(
        &self,
        subject: &Subject,
        permission: &Permission,
    ) -> Result<bool, AccessError> {
        let attributes = Some(permission.attributes());
        let (answer, resource) = match subject {
            Subject::Me => {
                let api: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
                let review = SelfSubjectAccessReview {
                    spec: SelfSubjectAccessReviewSpec {
                        resource_attributes: attributes,
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let answer = api.create(&PostParams::default(), &review).await;
                let resource = "selfsubjectaccessreviews.authorization.k8s.io";
                (
                    answer.map(|a| a.status.is_some_and(|s| s.allowed)),
                    resource,
                )
            }
            Subject::ServiceAccount { namespace, name } => {
                let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
                let review = SubjectAccessReview {
                    spec: SubjectAccessReviewSpec {
                        resource_attributes: attributes,
                        user: Some(format!("system:serviceaccount:{namespace}:{name}")),
                        groups: Some(vec![
                            "system:serviceaccounts".into(),
                            format!("system:serviceaccounts:{namespace}"),
                            "system:authenticated".into(),
                        ]),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let answer = api.create(&PostParams::default(), &review).await;
                let resource = "subjectaccessreviews.authorization.k8s.io";
                (
                    answer.map(|a| a.status.is_some_and(|s| s.allowed)),
                    resource,
                )
            }
        };
        answer.map_err(|e| {
            let request = Request {
                verb: "create",
                resource,
                namespace: None,
            };
            AccessError::Review(request.error(&self.server, e))
        })
    }

    /// The permissions of `needed` the API server refuses `subject`.
    async fn refused(
        &self,
        subject: &Subject,
        needed: &[Permission],
    ) -> Result<Vec<Permission>, AccessError> {
        let reviews = needed.iter().map(|permission| async move {
            let allowed = self.allowed(subject, permission).await?;
            Ok::<_, AccessError>((!allowed).then(|| permission.clone()))
        });
        // A few at a time: each request in flight takes a connection of its own, and a new
        // connection's TLS handshake costs the server more than a review on one already open.
        let answers: Vec<_> = futures::StreamExt::collect(futures::StreamExt::buffered(
            futures::stream::iter(reviews),
            REVIEWS_AT_ONCE,
        ))
        .await;
        let mut missing = Vec::new();
        for answer in answers {
            missing.extend(answer?);
        }
        Ok(missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_split_into_group_resource_and_subresource() {
        let eviction = Permission::new("create", "pods/eviction", None).attributes();
        assert_eq!(eviction.resource.as_deref(), Some("pods"));
        assert_eq!(eviction.subresource.as_deref(), Some("eviction"));
        assert_eq!(eviction.group.as_deref(), Some(""));
        assert_eq!(eviction.namespace, None);
        let lease = Permission::new("update", "leases.coordination.k8s.io", Some("kube-system"))
            .attributes();
        assert_eq!(lease.resource.as_deref(), Some("leases"));
        assert_eq!(lease.group.as_deref(), Some("coordination.k8s.io"));
        assert_eq!(lease.subresource, None);
        assert_eq!(lease.namespace.as_deref(), Some("kube-system"));
    }

    #[test]
    fn every_missing_permission_is_named_with_its_scope() {
        let one = AccessError::Missing(vec![Permission::new("delete", "nodes", None)]);
        assert!(
            one.to_string().starts_with(
                "missing permission: delete on nodes (cluster-wide); nothing was changed"
            ),
            "{one}"
        );
        let two = AccessError::Missing(vec![
            Permission::new("delete", "nodes", None),
            Permission::new("patch", "pods", Some("web")),
        ]);
        assert!(
            two.to_string().starts_with(
                "missing permissions: delete on nodes (cluster-wide); patch on pods (in namespace web);"
            ),
            "{two}"
        );
    }

    #[test]
    fn a_drain_needs_evictions_or_deletions_and_cloudonly_neither() {
        let has = |needed: &[Permission], verb: &str, resource: &str| {
            needed
                .iter()
                .any(|p| p.verb == verb && p.resource == resource)
        };
        let evicting = for_rotation(false, false);
        assert!(has(&evicting, "create", "pods/eviction"));
        assert!(!has(&evicting, "delete", "pods"));
        let deleting = for_rotation(false, true);
        assert!(has(&deleting, "delete", "pods"));
        assert!(!has(&deleting, "create", "pods/eviction"));
        let cloud_only = for_rotation(true, false);
        assert!(
            !has(&cloud_only, "create", "pods/eviction") && !has(&cloud_only, "delete", "pods")
        );
        assert!(has(&cloud_only, "delete", "nodes"));
    }

    #[test]
    fn a_rolling_update_is_checked_in_its_namespace() {
        let needed = for_rolling_update(Kind::ReplicaSet, "web");
        assert!(needed.iter().all(|p| p.namespace.as_deref() == Some("web")));
        assert!(
            needed
                .iter()
                .any(|p| p.verb == "create" && p.resource == "replicasets.apps")
        );
        assert!(
            needed
                .iter()
                .any(|p| p.verb == "patch" && p.resource == "pods")
        );
    }
}
