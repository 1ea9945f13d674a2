//! A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager and
//! kube-scheduler (the release of `tests/cluster/k8s/go.mod`, built from its Go modules and cached
//! by `tests/cluster/install-control-plane.sh`), kwok doing the kubelets' job for the nodes, a
//! simulated cloud, Karpenter (its kwok cloud provider, started when a test first asks for it)
//! and a Cluster API stand-in.
//!
//! `TestCluster::start()` takes a few seconds; `TestCluster::shared()` starts one per test binary,
//! which tests share by working in their own namespaces and node groups.

mod capi;
mod cloud;
mod crds;
mod karpenter;
mod kubelet_logs;
mod kwok;
mod node_maintenance;
mod nodes;
mod ports;
mod process;
mod runner_pods;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use rollout_ext::cluster::retry::RetryLayer;

pub use capi::{CapiSim, Kind as CapiKind, MachineDeletion, POOL_LABEL};
pub use cloud::{CloudCall, GroupSpec, SimCloud};
pub use karpenter::{
    BOOT, Karpenter, NODEPOOL_LABEL, NodeClaimDeletion, OLD_KUBELET, POOL_TAINT, new_kubelet,
    nodeclaims, nodepools,
};
pub use kwok::{READINESS_LABEL, TERMINATION_LABEL};
pub use node_maintenance::node_maintenances;
pub use nodes::{GROUP_LABEL, NodeSim, NodeSpec};
pub use ports::free_ports;
pub use process::Processes;
pub use runner_pods::{RUNNER_LABEL, RunnerPods};

/// The Kubernetes release the test control plane runs: the one the wrapper module requires.
pub fn k8s_version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        (include_str!("../../cluster/k8s/go.mod").lines())
            .find_map(|l| l.trim().strip_prefix("k8s.io/kubernetes v"))
            .and_then(|rest| rest.split_whitespace().next())
            .expect("tests/cluster/k8s/go.mod requires k8s.io/kubernetes")
            .to_string()
    })
}
const ADMIN_TOKEN: &str = "rollout-ext-test-admin-token";
/// A user with no permissions of its own, for RBAC tests (bind roles to `operator`).
pub const OPERATOR_TOKEN: &str = "rollout-ext-test-operator-token";
pub const OPERATOR_USER: &str = "operator";

/// krew, built by `install-control-plane.sh` at `tests/cluster/krew/VERSION`, or why it is
/// missing: it installs the release archive as users install the plugin (its manifest
/// validator, `validate-krew-manifest`, sits beside it).
pub fn krew_binary() -> anyhow::Result<PathBuf> {
    let version = include_str!("../../cluster/krew/VERSION");
    installed(peer_tool_dir("KREW", "krew", version).join("bin/krew"))
}

/// actionlint, built by `install-control-plane.sh` at `tests/cluster/actionlint/VERSION`, or
/// why it is missing: it checks the release workflow.
pub fn actionlint_binary() -> anyhow::Result<PathBuf> {
    let version = include_str!("../../cluster/actionlint/VERSION");
    installed(peer_tool_dir("ACTIONLINT", "actionlint", version).join("bin/actionlint"))
}

/// Where `install-control-plane.sh` keeps the peer tool `name` of `version`:
/// `ROLLOUT_EXT_<VAR>_DIR`, else `<cache>/<name>-<version without its v>`.
fn peer_tool_dir(var: &str, name: &str, version: &str) -> PathBuf {
    match std::env::var_os(format!("ROLLOUT_EXT_{var}_DIR")) {
        Some(dir) => PathBuf::from(dir),
        None => cache_root().join(format!("{name}-{}", version.trim().trim_start_matches('v'))),
    }
}

/// Where `install-control-plane.sh` caches what it builds.
fn cache_root() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache")
        });
    cache.join("rollout-ext")
}

/// Where the control-plane binaries are cached.
pub fn binaries_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ROLLOUT_EXT_K8S_DIR") {
        return PathBuf::from(dir).join("bin");
    }
    cache_root().join(format!("k8s-{}/bin", k8s_version()))
}

fn binary(name: &str) -> anyhow::Result<PathBuf> {
    installed(binaries_dir().join(name))
}

/// `path`, which `install-control-plane.sh` puts in the cache, or why it is missing.
fn installed(path: PathBuf) -> anyhow::Result<PathBuf> {
    if !path.exists() {
        bail!(
            "{} is missing: run `bash tests/cluster/install-control-plane.sh` (the README's test command does)",
            path.display()
        );
    }
    Ok(path)
}

/// Working directories are named `rollout-ext-cluster-<pid>-…` after the test process.
const DIR_PREFIX: &str = "rollout-ext-cluster-";

/// Removes the working directories of test processes that are gone. A shared cluster lives in a
/// static, which is never dropped, so its directory outlives its process.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        let owner = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let alive = owner.is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Flags for a test cluster's servers beyond its own.
#[derive(Debug, Clone, Default)]
pub struct ExtraFlags {
    pub apiserver: Vec<String>,
    pub controller_manager: Vec<String>,
    pub scheduler: Vec<String>,
}

/// A running control plane with simulated nodes and cloud.
pub struct TestCluster {
    dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    pub server: String,
    pub processes: Processes,
    runtime: Option<tokio::runtime::Runtime>,
    pub nodes: NodeSim,
    pub cloud: SimCloud,
    /// Karpenter, once a test asked for it ([`TestCluster::karpenter`]).
    karpenter: tokio::sync::OnceCell<Karpenter>,
    /// The Cluster API stand-in (MachineDeployments, MachineSets and Machines of
    /// cluster.x-k8s.io/v1beta1).
    pub capi: CapiSim,
}

impl TestCluster {
    /// One cluster per test binary, started on first use.
    pub fn shared() -> &'static TestCluster {
        static SHARED: OnceLock<TestCluster> = OnceLock::new();
        SHARED.get_or_init(|| TestCluster::start().expect("the test cluster starts"))
    }

    /// Starts etcd, the apiserver, the controller-manager, the scheduler and kwok; waits until
    /// the apiserver is ready; starts the simulated cloud.
    pub fn start() -> anyhow::Result<TestCluster> {
        TestCluster::start_with(ExtraFlags::default())
    }

    /// A cluster whose kube-apiserver also gets `flags` (say, `--runtime-config=…=false` to
    /// serve a cluster without an API group).
    pub fn start_with_apiserver_flags(flags: &[&str]) -> anyhow::Result<TestCluster> {
        TestCluster::start_with(ExtraFlags {
            apiserver: flags.iter().map(|f| f.to_string()).collect(),
            ..Default::default()
        })
    }

    /// A cluster whose servers also get `flags`.
    pub fn start_with(flags: ExtraFlags) -> anyhow::Result<TestCluster> {
        // Its own thread, so that it may be called from sync and async tests alike.
        std::thread::spawn(move || TestCluster::start_here(flags))
            .join()
            .map_err(|_| anyhow::anyhow!("starting the test cluster panicked"))?
    }

    fn start_here(extra: ExtraFlags) -> anyhow::Result<TestCluster> {
        remove_stale_dirs();
        let dir = tempfile::Builder::new()
            .prefix(&format!("{DIR_PREFIX}{}-", std::process::id()))
            .tempdir()?;
        let root = dir.path();
        let processes = Processes::new();

        let [etcd_port, peer_port, api_port] = ports::free_ports()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        processes.spawn(
            "etcd",
            &binary("etcd")?,
            &[
                format!("--data-dir={}", root.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=default={peer_url}"),
                "--name=default".into(),
                "--quota-backend-bytes=1073741824".into(),
            ],
            &root.join("etcd.log"),
        )?;

        let key = root.join("sa.key");
        let status = std::process::Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(&key)
            .arg("2048")
            .stderr(std::process::Stdio::null())
            .status()
            .context("openssl generates the service-account key")?;
        if !status.success() {
            bail!("openssl genrsa failed: {status}");
        }
        let client_ca = root.join("client-ca");
        openssl(&format!(
            "req -x509 {NEW_KEY} -days 2 -subj /CN=rollout-ext-test-client-ca -keyout {0}.key -out {0}.crt",
            client_ca.display()
        ))?;
        let tokens = root.join("tokens.csv");
        std::fs::write(
            &tokens,
            format!(
                "{ADMIN_TOKEN},admin,admin,\"system:masters\"\n{OPERATOR_TOKEN},{OPERATOR_USER},operator\n"
            ),
        )?;

        let mut flags = vec![
            format!("--etcd-servers={etcd_url}"),
            format!("--cert-dir={}", root.join("certs").display()),
            format!("--secure-port={api_port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            "--endpoint-reconciler-type=none".into(),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!("--service-account-key-file={}", key.display()),
            format!("--service-account-signing-key-file={}", key.display()),
            "--service-cluster-ip-range=10.96.0.0/24".into(),
            "--authorization-mode=RBAC".into(),
            format!("--token-auth-file={}", tokens.display()),
            format!("--client-ca-file={}.crt", client_ca.display()),
            "--allow-privileged=true".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
            // Simulated nodes' kubelets (the runner pods' log endpoint) answer on loopback.
            "--kubelet-preferred-address-types=InternalIP".into(),
        ];
        flags.extend(extra.apiserver);
        processes.spawn(
            "kube-apiserver",
            &binary("kube-apiserver")?,
            &flags,
            &root.join("kube-apiserver.log"),
        )?;

        let server = format!("https://127.0.0.1:{api_port}");
        let kubeconfig = root.join("kubeconfig");
        write_kubeconfig(&kubeconfig, &server, ADMIN_TOKEN, "admin")?;

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("test-cluster")
            .enable_all()
            .build()?;
        let client = runtime.block_on(wait_ready(&kubeconfig, &processes, root))?;

        for (name, own, more) in [
            (
                "kube-controller-manager",
                vec![
                    format!("--service-account-private-key-file={}", key.display()),
                    "--controllers=*,-nodeipam".to_string(),
                    "--secure-port=0".into(),
                ],
                &extra.controller_manager,
            ),
            (
                "kube-scheduler",
                vec!["--secure-port=0".to_string()],
                &extra.scheduler,
            ),
        ] {
            let mut args = vec![
                format!("--kubeconfig={}", kubeconfig.display()),
                "--leader-elect=false".into(),
            ];
            args.extend(own);
            args.extend(more.iter().cloned());
            processes.spawn(
                name,
                &binary(name)?,
                &args,
                &root.join(format!("{name}.log")),
            )?;
        }

        let kwok_config = root.join("kwok.yaml");
        std::fs::write(
            &kwok_config,
            kwok::config(&kwok::dir().join("stages"), &new_kubelet())?,
        )?;
        processes.spawn(
            "kwok",
            &kwok::binary()?,
            &kwok::args(&kubeconfig, &kwok_config),
            &root.join("kwok.log"),
        )?;
        let nodes = runtime.block_on(NodeSim::start(client.clone()))?;
        let cloud = runtime.block_on(SimCloud::start(root.join("cloud.sock"), nodes.clone()))?;
        runtime.block_on(crds::load_crds(&client, &karpenter::crds()?))?;
        runtime.block_on(crds::load_crds(&client, &node_maintenance::crd()?))?;
        runtime.block_on(crds::load_crds(
            &client,
            include_str!("../../cluster/crds/cluster-api.yaml"),
        ))?;
        let capi = runtime.block_on(CapiSim::start(client.clone(), nodes.clone()))?;
        Ok(TestCluster {
            dir,
            kubeconfig,
            server,
            processes,
            runtime: Some(runtime),
            nodes,
            cloud,
            karpenter: tokio::sync::OnceCell::new(),
            capi,
        })
    }

    /// Karpenter, started on first use (a few seconds): tests of other things do without it.
    pub async fn karpenter(&self) -> &Karpenter {
        let start = async {
            Karpenter::spawn(&self.processes, &self.kubeconfig, self.dir.path())?;
            let kubeconfig = self.kubeconfig.clone();
            let runtime = self.runtime.as_ref().expect("runtime alive").handle();
            runtime
                .spawn(async move { Karpenter::connect(client_for(&kubeconfig).await?).await })
                .await?
        };
        (self.karpenter.get_or_try_init(|| start).await).expect("Karpenter starts")
    }

    /// A client for the calling test's runtime.
    pub async fn client(&self) -> Client {
        client_for(&self.kubeconfig)
            .await
            .expect("a client from the test kubeconfig")
    }

    /// The plugin's own connection to this cluster, as the admin, for the calling test's
    /// runtime.
    pub async fn live(&self) -> rollout_ext::cluster::Cluster {
        rollout_ext::cluster::Cluster::connect(&rollout_ext::cluster::ConnectOptions {
            kubeconfig: Some(self.kubeconfig.clone()),
            ..Default::default()
        })
        .await
        .expect("the plugin connects with the test kubeconfig")
    }

    /// `nodes --yes` of `group` under `policy` against this cluster, with the test timings
    /// ([`crate::FAST_ROTATION`]) and events as JSON lines.
    pub fn rotate_args(&self, policy: &Path, group: &str) -> Vec<String> {
        [
            "nodes",
            "--yes",
            "--kubeconfig",
            self.kubeconfig.to_str().expect("a UTF-8 path"),
            "--policy",
            policy.to_str().expect("a UTF-8 path"),
            "--instance-group",
            group,
            "--kubelet-version",
            "v1.20.2",
            "-o",
            "json",
        ]
        .iter()
        .chain(crate::FAST_ROTATION)
        .map(|s| s.to_string())
        .collect()
    }

    /// [`TestCluster::rotate_args`] one node at a time, through an exec policy written into
    /// `dir` with `spec` lines under its `spec:`, and `flags`.
    pub fn rotate_one_at_a_time(
        &self,
        dir: &Path,
        group: &str,
        spec: &str,
        flags: &[&str],
    ) -> Vec<String> {
        let policy = self.exec_policy(dir, spec);
        let mut args = self.rotate_args(&policy, group);
        args.extend(
            ["--max-unavailable", "1"]
                .iter()
                .chain(flags)
                .map(|s| s.to_string()),
        );
        args
    }

    /// Waits until the API server answers `/readyz` again (after a restart or a pause).
    pub async fn ready(&self) -> anyhow::Result<()> {
        wait_ready(&self.kubeconfig, &self.processes, self.dir.path())
            .await
            .map(|_| ())
    }

    /// The cluster's working directory (logs, kubeconfig, cloud socket).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `future` on the cluster's own runtime (where the simulators live).
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime
            .as_ref()
            .expect("runtime alive")
            .block_on(future)
    }

    /// The nodes of `group` that are cordoned now.
    pub async fn cordoned(&self, group: &str) -> Vec<String> {
        self.cordoned_by_label(GROUP_LABEL, group).await
    }

    /// The nodes labelled `label=value` that are cordoned now.
    pub async fn cordoned_by_label(&self, label: &str, value: &str) -> Vec<String> {
        use k8s_openapi::api::core::v1::Node;
        use kube::api::{Api, ListParams};
        let nodes: Api<Node> = Api::all(self.client().await);
        let selector = format!("{label}={value}");
        nodes
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
            .filter_map(|n| n.metadata.name)
            .collect()
    }

    /// Adds `n` nodes `<group>-1…n` (zones a and b alternating) running an old kubelet
    /// (v1.19.7); the simulated cloud boots their replacements with v1.20.2.
    pub async fn outdated_group(&self, group: &str, n: usize) -> anyhow::Result<Vec<String>> {
        self.cloud.set_group_spec(
            group,
            GroupSpec {
                kubelet_version: Some("v1.20.2".into()),
                ..Default::default()
            },
        );
        let mut names = Vec::new();
        for i in 1..=n {
            let name = format!("{group}-{i}");
            self.nodes
                .add(
                    NodeSpec::new(&name, group)
                        .zone(["a", "b"][i % 2])
                        .kubelet("v1.19.7"),
                )
                .await?;
            names.push(name);
        }
        Ok(names)
    }

    /// Runs `future` in the background on the cluster's own runtime.
    pub fn spawn<F>(&self, future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.runtime.as_ref().expect("runtime alive").spawn(future)
    }

    /// Writes `policy.yaml` into `dir`: an exec provider driving this cluster's simulated cloud
    /// through the `sim-cloud` binary, plus `extra` lines under `spec:`.
    pub fn exec_policy(&self, dir: &Path, extra: &str) -> PathBuf {
        let cloud = crate::helper_binary("sim-cloud");
        let (cloud, socket) = (cloud.display(), self.cloud.socket.display());
        let text = format!(
            "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  provider:\n    exec:\n      terminate: [\"{cloud}\", --socket, \"{socket}\", terminate, \"{{node}}\"]\n      detach: [\"{cloud}\", --socket, \"{socket}\", detach, \"{{node}}\"]\n{extra}"
        );
        let path = dir.join("policy.yaml");
        std::fs::write(&path, text).expect("the policy is written");
        path
    }

    /// Runs the pods of runs handed to this cluster (`--in-cluster`) as local processes, as a
    /// kubelet would run them (see [`RunnerPods`]).
    pub async fn run_runner_pods(&self) -> std::sync::Arc<RunnerPods> {
        let dir = self.dir().join("runner-pods");
        // Made on the cluster's runtime, where the simulator that uses it lives.
        let kubeconfig = self.kubeconfig.clone();
        let client = self.spawn(async move { client_for(&kubeconfig).await });
        let client = client
            .await
            .unwrap()
            .expect("a client from the test kubeconfig");
        let runners = RunnerPods::new(client, self.server.clone(), dir.clone());
        let (certs, served) = (dir.join("kubelet"), runners.clone());
        let serving = self.spawn(async move { kubelet_logs::start(&certs, served).await });
        let port = serving
            .await
            .unwrap()
            .expect("the kubelet's log endpoint starts");
        let (nodes, given) = (self.nodes.clone(), runners.clone());
        let told = self.spawn(async move { nodes.run_runner_pods(given, port).await });
        told.await.unwrap();
        runners
    }

    /// The CA file of the API server's serving certificate (it writes both into its cert dir).
    pub fn server_ca(&self) -> PathBuf {
        self.dir().join("certs/apiserver.crt")
    }

    /// A client certificate and key (PEM files) for `user` in `group`, signed by the CA the
    /// API server trusts for clients; named after `name` in the cluster's directory.
    pub fn client_certificate(
        &self,
        name: &str,
        user: &str,
        group: &str,
    ) -> anyhow::Result<(PathBuf, PathBuf)> {
        let base = self.dir().join(name);
        let ca = self.dir().join("client-ca");
        openssl(&format!(
            "req -new {NEW_KEY} -subj /O={group}/CN={user} -keyout {0}.key -out {0}.csr",
            base.display()
        ))?;
        // With an extension, as every issuer writes them: a version 1 certificate is refused.
        std::fs::write(base.with_extension("ext"), "extendedKeyUsage=clientAuth\n")?;
        openssl(&format!(
            "x509 -req -days 1 -in {0}.csr -CA {1}.crt -CAkey {1}.key -CAcreateserial -extfile {0}.ext -out {0}.crt",
            base.display(),
            ca.display()
        ))?;
        Ok((base.with_extension("crt"), base.with_extension("key")))
    }

    /// Writes a kubeconfig for another user of this cluster (for RBAC tests).
    pub fn kubeconfig_for(&self, path: &Path, token: &str, user: &str) -> anyhow::Result<()> {
        write_kubeconfig(path, &self.server, token, user)
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        // Dropping may happen inside a test's async context, where a blocking shutdown panics.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A kubeconfig with a context per cluster, named as `clusters` name them (a fleet's file names
/// its clusters by context), each as the admin.
pub fn fleet_kubeconfig(path: &Path, clusters: &[(&str, &TestCluster)]) -> anyhow::Result<()> {
    let mut text = String::from("apiVersion: v1\nkind: Config\nclusters:\n");
    for (name, cluster) in clusters {
        text += &format!(
            "- name: {name}\n  cluster:\n    server: {}\n    insecure-skip-tls-verify: true\n",
            cluster.server
        );
    }
    text += &format!("users:\n- name: admin\n  user:\n    token: {ADMIN_TOKEN}\ncontexts:\n");
    for (name, _) in clusters {
        text += &format!("- name: {name}\n  context:\n    cluster: {name}\n    user: admin\n");
    }
    text += &format!("current-context: {}\n", clusters[0].0);
    std::fs::write(path, text)?;
    Ok(())
}

/// A new P-256 key, unencrypted, as `openssl req` makes it.
const NEW_KEY: &str = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";

/// Runs `openssl ARGS` (split on spaces: the paths are the cluster's temporary directory's);
/// its error output on failure.
fn openssl(args: &str) -> anyhow::Result<()> {
    let out = std::process::Command::new("openssl")
        .args(args.split_whitespace())
        .output()
        .context("openssl runs")?;
    if !out.status.success() {
        bail!("openssl {args}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

fn write_kubeconfig(path: &Path, server: &str, token: &str, user: &str) -> anyhow::Result<()> {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\nusers:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: {user}\n    namespace: default\ncurrent-context: test\n"
    );
    std::fs::write(path, text)?;
    Ok(())
}

async fn client_for(kubeconfig: &Path) -> anyhow::Result<Client> {
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    // The plugin's own HTTP stack (kube is built without a TLS stack of its own), never retrying:
    // a test sees each failure.
    let never = RetryLayer::new(Duration::ZERO, std::sync::Arc::new(|_: &str| {}));
    Ok(rollout_ext::cluster::transport::client(config, &never)?)
}

/// Waits for `/readyz`, failing early (with the log's tail) if the apiserver dies.
async fn wait_ready(
    kubeconfig: &Path,
    processes: &Processes,
    root: &Path,
) -> anyhow::Result<Client> {
    let client = client_for(kubeconfig).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    loop {
        ticker.tick().await;
        if let Err(e) = processes.check_alive() {
            let log = std::fs::read_to_string(root.join("kube-apiserver.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            bail!(
                "{e}; kube-apiserver log tail:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        let req = http::Request::get("/readyz").body(Vec::new())?;
        if let Ok(body) = client.request_text(req).await
            && body.trim() == "ok"
        {
            return Ok(client);
        }
        if Instant::now() > deadline {
            bail!(
                "kube-apiserver was not ready within 60s (logs in {})",
                root.display()
            );
        }
    }
}
