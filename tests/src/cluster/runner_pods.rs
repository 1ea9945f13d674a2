//! The kubelet's job for the pods of runs handed to the cluster (`--in-cluster`), which the
//! product does not do and the harness must: a runner pod bound to a simulated node runs as a
//! local process of the plugin binary, with the pod's ServiceAccount token (asked of the
//! TokenRequest API) in a kubeconfig of its own, its ConfigMap volumes written into a directory
//! (the mount paths in its arguments pointed there) and its env. Its status follows the process
//! (Running, then Succeeded or Failed with the exit code); a pod deleted (evicted with its node)
//! has its process stopped with SIGTERM, as a kubelet stops a container, is Failed or Succeeded
//! by its exit code, and then goes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

pub use rollout_ext::cluster::runner::RUNNER_LABEL;

/// Runner pods, run as processes.
pub struct RunnerPods {
    client: Client,
    server: String,
    dir: PathBuf,
    /// The process of each runner pod running, by pod uid.
    running: Mutex<HashMap<String, u32>>,
    /// Pods deleted before their process started.
    stopping: Mutex<HashSet<String>>,
    started: AtomicUsize,
    logs: Mutex<Vec<PathBuf>>,
    /// Each runner pod's output file (`NAMESPACE/POD`), and whether its process has ended.
    outputs: Mutex<HashMap<String, (PathBuf, Arc<AtomicBool>)>>,
}

impl RunnerPods {
    pub fn new(client: Client, server: String, dir: PathBuf) -> Arc<RunnerPods> {
        Arc::new(RunnerPods {
            client,
            server,
            dir,
            running: Mutex::default(),
            stopping: Mutex::default(),
            started: AtomicUsize::new(0),
            logs: Mutex::default(),
            outputs: Mutex::default(),
        })
    }

    /// How many runner processes were started.
    pub fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }

    /// What every runner process printed, in the order they started.
    pub fn output(&self) -> String {
        let logs = self.logs.lock().unwrap().clone();
        logs.iter()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n----- next runner pod -----\n")
    }

    /// The output file of runner pod `namespace/pod`, and whether its process has ended.
    pub fn output_of(&self, namespace: &str, pod: &str) -> Option<(PathBuf, impl Fn() -> bool)> {
        let outputs = self.outputs.lock().unwrap();
        let (file, ended) = outputs.get(&format!("{namespace}/{pod}"))?.clone();
        Some((file, move || ended.load(Ordering::SeqCst)))
    }

    /// Runs `pod` until its process ends or the pod is deleted.
    pub fn start(self: &Arc<Self>, pod: Pod) {
        let me = self.clone();
        tokio::spawn(async move {
            if let Err(e) = me.run(&pod).await {
                eprintln!("runner pod {}: {e:#}", pod.name_any());
                me.finish(&pod, None).await;
            }
        });
    }

    /// Stops the process of `pod`, which is being deleted; the pod goes once it has ended.
    pub fn stop(self: &Arc<Self>, pod: Pod) {
        let uid = pod.uid().unwrap_or_default();
        let pid = self.running.lock().unwrap().get(&uid).copied();
        match pid {
            Some(pid) => {
                // SAFETY: kill(2) with a pid this harness started; a process gone already is
                // an error kill reports, and nothing else.
                unsafe { libc::kill(pid as i32, libc::SIGTERM) };
            }
            None => {
                self.stopping.lock().unwrap().insert(uid);
                let me = self.clone();
                tokio::spawn(async move { me.finish(&pod, None).await });
            }
        }
    }

    async fn run(&self, pod: &Pod) -> anyhow::Result<()> {
        let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        let uid = pod.uid().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let container = spec.containers.first().cloned().unwrap_or_default();
        let home = self.dir.join(format!("pod-{uid}"));
        std::fs::create_dir_all(home.join("home"))?;

        // The ServiceAccount's token, in a kubeconfig.
        let account = spec
            .service_account_name
            .clone()
            .unwrap_or("default".into());
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &ns);
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![],
                expiration_seconds: Some(3600),
                ..Default::default()
            },
            ..Default::default()
        };
        let token: TokenRequest = accounts
            .create_subresource("token", &account, &PostParams::default(), &request)
            .await?;
        let token = token.status.map(|s| s.token).unwrap_or_default();
        let kubeconfig = home.join("kubeconfig");
        let user = format!("system:serviceaccount:{ns}:{account}");
        super::write_kubeconfig(&kubeconfig, &self.server, &token, &user)?;

        // Volumes: each ConfigMap's items at their paths.
        let maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), &ns);
        let mut mounted = BTreeMap::new();
        for volume in spec.volumes.iter().flatten() {
            let Some(source) = &volume.config_map else {
                continue;
            };
            let map = maps.get(&source.name).await?;
            let at = home.join(format!("volume-{}", volume.name));
            for item in source.items.iter().flatten() {
                let bytes = (map.binary_data.as_ref())
                    .and_then(|d| d.get(&item.key).map(|b| b.0.clone()))
                    .or_else(|| {
                        map.data
                            .as_ref()?
                            .get(&item.key)
                            .map(|t| t.clone().into_bytes())
                    })
                    .unwrap_or_default();
                let file = at.join(&item.path);
                std::fs::create_dir_all(file.parent().unwrap())?;
                std::fs::write(file, bytes)?;
            }
            mounted.insert(volume.name.clone(), at);
        }
        let mounts: Vec<(String, PathBuf)> = (container.volume_mounts.iter().flatten())
            .filter_map(|m| Some((m.mount_path.clone(), mounted.get(&m.name)?.clone())))
            .collect();
        let args: Vec<String> = (container.args.iter().flatten())
            .map(|arg| {
                for (path, at) in &mounts {
                    if let Some(rest) = arg.strip_prefix(path.as_str()) {
                        return format!("{}{rest}", at.display());
                    }
                }
                arg.clone()
            })
            .collect();
        let mut env: Vec<(String, String)> = (container.env.iter().flatten())
            .map(|e| {
                let from_field = (e.value_from.as_ref())
                    .and_then(|v| v.field_ref.as_ref())
                    .map(|f| match f.field_path.as_str() {
                        "metadata.name" => name.clone(),
                        "metadata.namespace" => ns.clone(),
                        "spec.nodeName" => spec.node_name.clone().unwrap_or_default(),
                        _ => String::new(),
                    });
                (
                    e.name.clone(),
                    e.value.clone().or(from_field).unwrap_or_default(),
                )
            })
            .collect();
        env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
        env.push(("HOME".into(), home.join("home").display().to_string()));

        let log = home.join("output.log");
        let out = std::fs::File::create(&log)?;
        let mut child = tokio::process::Command::new(crate::plugin_binary())
            .args(&args)
            .envs(env)
            .env_remove("XDG_CACHE_HOME")
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()?;
        self.logs.lock().unwrap().push(log.clone());
        let ended = Arc::new(AtomicBool::new(false));
        let key = format!("{ns}/{name}");
        self.outputs
            .lock()
            .unwrap()
            .insert(key, (log, ended.clone()));
        self.started.fetch_add(1, Ordering::SeqCst);
        let pid = child.id().unwrap_or(0);
        self.running.lock().unwrap().insert(uid.clone(), pid);
        self.status(
            &ns,
            &name,
            json!({"running": {"startedAt": now()}}),
            "Running",
        )
        .await;
        if self.stopping.lock().unwrap().remove(&uid) {
            // SAFETY: as in `stop`.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
        let exit = child.wait().await?;
        ended.store(true, Ordering::SeqCst);
        self.running.lock().unwrap().remove(&uid);
        self.finish(pod, exit.code()).await;
        Ok(())
    }

    /// The process of `pod` ended with `code` (none: it never ran): the pod is Succeeded or
    /// Failed, as a kubelet reports it (the Job controller waits for that before it starts the
    /// next pod, and removes its tracking finalizer), and a pod being deleted then goes.
    async fn finish(&self, pod: &Pod, code: Option<i32>) {
        let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        let code = code.unwrap_or(128);
        let phase = if code == 0 { "Succeeded" } else { "Failed" };
        let state = json!({"terminated": {"exitCode": code, "finishedAt": now()}});
        self.status(&ns, &name, state, phase).await;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let deleting = (api.get_opt(&name).await.ok().flatten())
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some());
        if deleting {
            self.remove(pod).await;
        }
    }

    async fn remove(&self, pod: &Pod) {
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        let _ = api.delete(&pod.name_any(), &now).await;
    }

    async fn status(&self, ns: &str, name: &str, state: serde_json::Value, phase: &str) {
        let running = phase == "Running";
        let t = now();
        let cond = |type_: &str| json!({"type": type_, "status": if running { "True" } else { "False" }, "lastTransitionTime": t});
        let status = json!({"status": {
            "phase": phase, "hostIP": "127.0.0.1", "podIP": "10.244.0.2", "startTime": t,
            "conditions": [cond("Ready"), cond("ContainersReady")],
            "containerStatuses": [{"name": "run", "image": "sim://runner", "imageID": "sim://runner",
                "ready": running, "restartCount": 0, "started": running, "state": state}],
        }});
        // Strategic: conditions merge by type, so the server's own (DisruptionTarget on an
        // evicted pod, which the Job's pod failure policy reads) stay.
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let _ = api
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(&status))
            .await;
    }
}

fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string()
}
