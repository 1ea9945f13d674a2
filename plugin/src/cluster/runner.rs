//! Runs handed to the cluster (`--in-cluster`): a ConfigMap holding the run's policy and hook
//! modules, and a Job that runs the same command in a pod under the runner's ServiceAccount
//! (whose RBAC is created on request); and whether a runner pod that holds the lock is gone, so
//! that the Job's next pod takes the run over where it stopped.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, EnvVar, EnvVarSource, KeyToPath,
    ObjectFieldSelector, Pod, PodSpec, PodTemplateSpec, ServiceAccount, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ListParams, LogParams, ObjectMeta, Patch, PatchParams, PostParams};

use super::{Cluster, ClusterError, Request};

/// The ServiceAccount runner pods run as.
pub const RUNNER_ACCOUNT: &str = "rollout-ext";
/// The ClusterRoleBinding `--create-rbac` makes: the account to the ClusterRole of
/// deploy/clusterrole.yaml.
pub const RUNNER_BINDING: &str = "rollout-ext-runner";
/// On a runner's Job, its pods and its ConfigMap: the Job's name.
pub const RUNNER_LABEL: &str = crate::keys::RUNNER;
/// Where a runner pod finds its run's files.
pub const RUN_DIR: &str = "/etc/rollout-ext/run";
/// In a runner pod: `job/NAMESPACE/NAME`, the Job it belongs to.
pub const RUNNER_ENV: &str = "ROLLOUT_EXT_RUNNER";
/// In a runner pod: the pod's own name.
pub const POD_ENV: &str = "ROLLOUT_EXT_POD";
/// In a runner pod: the node it runs on.
pub const NODE_ENV: &str = "ROLLOUT_EXT_NODE";
/// The most a ConfigMap holds (the API server's limit on an object is about this).
pub const RUN_FILES_LIMIT: usize = 1 << 20;
/// The permissions of the tool, as deploy/ ships them.
const CLUSTER_ROLE: &str = include_str!("../../../deploy/clusterrole.yaml");
const FIELD_MANAGER: &str = "rollout-ext";

/// A file of the run: its key in the ConfigMap and its path under [`RUN_DIR`].
#[derive(Debug, Clone, PartialEq)]
pub struct RunFile {
    pub key: String,
    pub path: String,
    pub bytes: Vec<u8>,
}

/// A run to hand to the cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct Runner {
    pub namespace: String,
    /// The Job's name, and its ConfigMap's.
    pub name: String,
    pub image: String,
    /// The command, its files under [`RUN_DIR`].
    pub args: Vec<String>,
    pub files: Vec<RunFile>,
}

/// Where the holder of a lock runs when it is a runner pod: `job/NAMESPACE/NAME/pod-POD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerPod {
    /// `job/NAMESPACE/NAME`.
    pub job: String,
    pub namespace: String,
    pub pod: String,
}

impl RunnerPod {
    /// The runner pod a lock holder names; none for a holder that is no runner pod.
    pub fn of_holder(holder: &str) -> Option<RunnerPod> {
        let (job, pod) = holder.rsplit_once("/pod-")?;
        let mut parts = job.split('/');
        let (kind, namespace, name) = (parts.next()?, parts.next()?, parts.next()?);
        (kind == "job" && parts.next().is_none() && !name.is_empty() && !pod.is_empty()).then(
            || RunnerPod {
                job: job.to_string(),
                namespace: namespace.to_string(),
                pod: pod.to_string(),
            },
        )
    }

    /// The lock holder this pod is.
    pub fn holder(&self) -> String {
        format!("{}/pod-{}", self.job, self.pod)
    }
}

impl Runner {
    fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (RUNNER_LABEL.to_string(), self.name.clone()),
            (
                "app.kubernetes.io/name".to_string(),
                "rollout-ext".to_string(),
            ),
        ])
    }

    fn config_map(&self) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(self.labels()),
                ..Default::default()
            },
            binary_data: Some(
                (self.files.iter())
                    .map(|f| (f.key.clone(), ByteString(f.bytes.clone())))
                    .collect(),
            ),
            // What the run's first pod read, its next pods read too.
            immutable: Some(true),
            ..Default::default()
        }
    }

    fn job(&self) -> Job {
        let env = |name: &str, value: &str| EnvVar {
            name: name.to_string(),
            value: Some(value.to_string()),
            ..Default::default()
        };
        let field = |name: &str, path: &str| EnvVar {
            name: name.to_string(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: path.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (mounts, volumes) = match self.files.is_empty() {
            true => (None, None),
            false => (
                Some(vec![VolumeMount {
                    name: "run".into(),
                    mount_path: RUN_DIR.into(),
                    read_only: Some(true),
                    ..Default::default()
                }]),
                Some(vec![Volume {
                    name: "run".into(),
                    config_map: Some(ConfigMapVolumeSource {
                        name: self.name.clone(),
                        items: Some(
                            (self.files.iter())
                                .map(|f| KeyToPath {
                                    key: f.key.clone(),
                                    path: f.path.clone(),
                                    ..Default::default()
                                })
                                .collect(),
                        ),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
            ),
        };
        let job = format!("job/{}/{}", self.namespace, self.name);
        Job {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(self.labels()),
                ..Default::default()
            },
            spec: Some(JobSpec {
                // A run that fails is not run again behind the operator's back; a pod evicted
                // (its node drained, perhaps by this very run) is replaced, and the new pod
                // resumes from the Lease.
                backoff_limit: Some(0),
                pod_failure_policy: Some(PodFailurePolicy {
                    rules: vec![PodFailurePolicyRule {
                        action: "Ignore".into(),
                        on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                            type_: "DisruptionTarget".into(),
                            status: "True".into(),
                        }]),
                        on_exit_codes: None,
                    }],
                }),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(self.labels()),
                        ..Default::default()
                    }),
                    spec: Some(PodSpec {
                        service_account_name: Some(RUNNER_ACCOUNT.into()),
                        restart_policy: Some("Never".into()),
                        containers: vec![Container {
                            name: "run".into(),
                            image: Some(self.image.clone()),
                            args: Some(self.args.clone()),
                            env: Some(vec![
                                env(RUNNER_ENV, &job),
                                field(POD_ENV, "metadata.name"),
                                field(NODE_ENV, "spec.nodeName"),
                            ]),
                            volume_mounts: mounts,
                            ..Default::default()
                        }],
                        volumes,
                        ..Default::default()
                    }),
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// What a `verb` on `resource` (in `namespace`) that failed is, as an error.
fn failed<'a>(
    cluster: &'a Cluster,
    verb: &'a str,
    resource: &'a str,
    namespace: Option<&'a str>,
) -> impl FnOnce(kube::Error) -> ClusterError + 'a {
    move |e| {
        let request = Request {
            verb,
            resource,
            namespace,
        };
        request.error(&cluster.server, e)
    }
}

impl Cluster {
    /// The runner's ServiceAccount in `namespace`, the ClusterRole of deploy/clusterrole.yaml
    /// and the binding between them, applied (so running it again changes nothing).
    pub async fn create_runner_rbac(&self, namespace: &str) -> Result<(), ClusterError> {
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        let account = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(RUNNER_ACCOUNT.into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        (accounts
            .patch(RUNNER_ACCOUNT, &apply, &Patch::Apply(&account))
            .await)
            .map_err(failed(self, "patch", "serviceaccounts", Some(namespace)))?;
        let role: ClusterRole = serde_saphyr::from_str(CLUSTER_ROLE)
            .map_err(|e| ClusterError::Kubeconfig(format!("deploy/clusterrole.yaml: {e}")))?;
        let role_name = role.metadata.name.clone().unwrap_or_default();
        let roles: Api<ClusterRole> = Api::all(self.client.clone());
        (roles.patch(&role_name, &apply, &Patch::Apply(&role)).await).map_err(failed(
            self,
            "patch",
            "clusterroles.rbac.authorization.k8s.io",
            None,
        ))?;
        let binding = ClusterRoleBinding {
            metadata: ObjectMeta {
                name: Some(RUNNER_BINDING.into()),
                ..Default::default()
            },
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                name: role_name,
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: RUNNER_ACCOUNT.into(),
                namespace: Some(namespace.into()),
                ..Default::default()
            }]),
        };
        let bindings: Api<ClusterRoleBinding> = Api::all(self.client.clone());
        (bindings
            .patch(RUNNER_BINDING, &apply, &Patch::Apply(&binding))
            .await)
            .map_err(failed(
                self,
                "patch",
                "clusterrolebindings.rbac.authorization.k8s.io",
                None,
            ))?;
        Ok(())
    }

    /// Creates the run's ConfigMap, then its Job, then hands the ConfigMap to the Job (deleting
    /// the Job deletes it).
    pub async fn start_runner(&self, runner: &Runner) -> Result<(), ClusterError> {
        let ns = runner.namespace.as_str();
        let maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
        if !runner.files.is_empty() {
            (maps
                .create(&PostParams::default(), &runner.config_map())
                .await)
                .map_err(failed(self, "create", "configmaps", Some(ns)))?;
        }
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), ns);
        let job = (jobs.create(&PostParams::default(), &runner.job()).await).map_err(failed(
            self,
            "create",
            "jobs.batch",
            Some(ns),
        ))?;
        if runner.files.is_empty() {
            return Ok(());
        }
        let owner = OwnerReference {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: runner.name.clone(),
            uid: job.metadata.uid.unwrap_or_default(),
            ..Default::default()
        };
        let patch = serde_json::json!({"metadata": {"ownerReferences": [owner]}});
        (maps
            .patch(&runner.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await)
            .map_err(failed(self, "patch", "configmaps", Some(ns)))?;
        Ok(())
    }

    /// The runner Job `name` of `namespace`, else the newest there; none when there is none.
    pub async fn runner_job(
        &self,
        namespace: &str,
        name: Option<&str>,
    ) -> Result<Option<Job>, ClusterError> {
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), namespace);
        let fail = failed(self, "list", "jobs.batch", Some(namespace));
        let listed = jobs.list(&ListParams::default().labels(RUNNER_LABEL)).await;
        let mut runners = listed.map_err(fail)?.items;
        runners.retain(|j| name.is_none_or(|n| j.metadata.name.as_deref() == Some(n)));
        runners.sort_by_key(|j| j.metadata.creation_timestamp.clone().map(|t| t.0));
        Ok(runners.pop())
    }

    /// The pods of runner Job `job` in `namespace`, oldest first.
    pub async fn runner_pods(&self, namespace: &str, job: &str) -> Result<Vec<Pod>, ClusterError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let of_job = ListParams::default().labels(&format!("{RUNNER_LABEL}={job}"));
        let fail = failed(self, "list", "pods", Some(namespace));
        let mut found = pods.list(&of_job).await.map_err(fail)?.items;
        found.sort_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0));
        Ok(found)
    }

    /// The output of runner pod `pod` of `namespace`, line by line, following it while it runs
    /// when `follow`.
    pub async fn runner_output(
        &self,
        namespace: &str,
        pod: &str,
        follow: bool,
    ) -> Result<impl futures::Stream<Item = std::io::Result<String>> + use<>, ClusterError> {
        use futures::AsyncBufReadExt;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let params = LogParams {
            follow,
            container: Some("run".into()),
            ..Default::default()
        };
        let fail = failed(self, "get", "pods/log", Some(namespace));
        Ok(pods.log_stream(pod, &params).await.map_err(fail)?.lines())
    }

    /// Waits for a change to the pods of runner Job `job` (one created, started, finished or
    /// gone), at most `timeout`.
    pub async fn runner_pods_changed(&self, namespace: &str, job: &str, timeout: Duration) {
        use futures::StreamExt;
        use kube::runtime::watcher;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let config = watcher::Config::default().labels(&format!("{RUNNER_LABEL}={job}"));
        let changed = watcher(pods, config).skip_while(|e| {
            let listing = matches!(
                e,
                Ok(watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone)
            );
            std::future::ready(listing)
        });
        let _ = tokio::time::timeout(timeout, std::pin::pin!(changed).next()).await;
    }

    /// Whether runner pod `pod` no longer runs: gone, being deleted (evicted), or finished.
    pub async fn runner_gone(&self, pod: &RunnerPod) -> Result<bool, ClusterError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let found = (pods.get_opt(&pod.pod).await).map_err(failed(
            self,
            "get",
            "pods",
            Some(&pod.namespace),
        ))?;
        Ok(found.is_none_or(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            p.metadata.deletion_timestamp.is_some() || matches!(phase, Some("Succeeded" | "Failed"))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runner_pod_is_read_back_from_the_holder_it_writes() {
        let pod = RunnerPod::of_holder("job/kube-system/rollout-ext-run-1/pod-abc").unwrap();
        assert_eq!(pod.job, "job/kube-system/rollout-ext-run-1");
        assert_eq!(
            (pod.namespace.as_str(), pod.pod.as_str()),
            ("kube-system", "abc")
        );
        assert_eq!(pod.holder(), "job/kube-system/rollout-ext-run-1/pod-abc");
        for other in [
            "alice@laptop/pid-12",
            "job/ns/pod-x",
            "job/a/b/c/pod-x",
            "job/a/b/pod-",
        ] {
            assert_eq!(RunnerPod::of_holder(other), None, "{other}");
        }
    }

    #[test]
    fn the_job_runs_once_under_the_runner_account_and_survives_an_eviction() {
        let runner = Runner {
            namespace: "kube-system".into(),
            name: "rollout-ext-run-1".into(),
            image: "site/rollout-ext:1".into(),
            args: vec!["nodes".into(), "--yes".into()],
            files: vec![RunFile {
                key: "module-0.wasm".into(),
                path: "hooks/zone.wasm".into(),
                bytes: vec![0, 97, 115, 109],
            }],
        };
        let job = serde_json::to_value(runner.job()).unwrap();
        let spec = &job["spec"];
        assert_eq!(spec["backoffLimit"], 0);
        assert_eq!(
            spec["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["type"],
            "DisruptionTarget"
        );
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], RUNNER_ACCOUNT);
        assert_eq!(pod["restartPolicy"], "Never");
        assert_eq!(
            pod["volumes"][0]["configMap"]["items"][0]["path"],
            "hooks/zone.wasm"
        );
        let env = &pod["containers"][0]["env"];
        assert_eq!(env[0]["value"], "job/kube-system/rollout-ext-run-1");
        assert_eq!(
            env[1]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.name"
        );
        assert_eq!(
            env[2]["valueFrom"]["fieldRef"]["fieldPath"],
            "spec.nodeName"
        );
        let map = serde_json::to_value(runner.config_map()).unwrap();
        assert_eq!(map["binaryData"]["module-0.wasm"], "AGFzbQ==");
        assert_eq!(map["immutable"], true);
    }

    #[test]
    fn the_shipped_cluster_role_parses() {
        let role: ClusterRole = serde_saphyr::from_str(CLUSTER_ROLE).unwrap();
        assert_eq!(role.metadata.name.as_deref(), Some("rollout-ext"));
        assert!(role.rules.is_some_and(|r| !r.is_empty()));
    }
}
