//! The command line: flags (defined once, with their docs, feeding `--help` and `completion`),
//! the commands, output formats and exit codes.
//!
//! Exit codes: 0 done, 1 failed, 2 usage or policy error, 3 aborted by a gate, 4 blocked by a
//! lock.

mod control;
mod fleet;
mod hooks_cmd;
mod hooks_entry;
mod hooks_new;
mod hooks_run;
mod hooks_test;
mod in_cluster;
mod nodes;
mod output;
mod release;
mod rolling_update;
mod rotate_cmd;
mod server_dry_run;
mod status;
mod timeline;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use crate::report;

/// Rotate Kubernetes nodes (kops rolling-update semantics) with site policy as sandboxed
/// WebAssembly hooks. Shows a plan unless --yes is given.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl rollout-ext",
    bin_name = "kubectl rollout-ext",
    version = version(),
    propagate_version = true
)]
pub struct Cli {
    #[command(flatten)]
    pub kube: KubeFlags,

    /// More detail on stderr (-v info, -vv debug, -vvv every API request with its latency).
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    /// No colour in the output (also when the NO_COLOR environment variable is set).
    #[arg(long, global = true)]
    pub no_color: bool,

    #[command(subcommand)]
    pub command: Command,
}

/// How every stopped run that can resume ends its message.
const RESUME: &str = "run the same command again to resume";

/// Names the hook contract, as read from the WIT package by build.rs.
const fn version() -> &'static str {
    concat!(
        env!("CARGO_PKG_VERSION"),
        " (hook contract ",
        env!("ROLLOUT_EXT_WIT_PACKAGE"),
        "@",
        env!("ROLLOUT_EXT_WIT_VERSION"),
        ")"
    )
}

/// kubectl's connection flags.
#[derive(Debug, Clone, Default, Args)]
pub struct KubeFlags {
    /// Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The kubeconfig cluster to use.
    #[arg(long, global = true)]
    pub cluster: Option<String>,
    /// The kubeconfig user to use.
    #[arg(long, global = true)]
    pub user: Option<String>,
    /// Namespace for namespaced commands (default: the context's).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Username to impersonate.
    #[arg(long = "as", global = true, value_name = "USER")]
    pub as_user: Option<String>,
    /// Group to impersonate (repeatable).
    #[arg(long = "as-group", global = true, value_name = "GROUP")]
    pub as_group: Vec<String>,
    /// Timeout of a single API request (e.g. 30s; 0 = none).
    #[arg(long, global = true, value_name = "DURATION")]
    pub request_timeout: Option<String>,
    /// How long a request failing transiently (connection refused or reset, timeout, 5xx, 429)
    /// is retried, with backoff and a message per retry, before the command stops (default 2m;
    /// 0 = never retry).
    #[arg(long, global = true, value_name = "DURATION")]
    pub retry_timeout: Option<String>,
}

impl KubeFlags {
    pub fn connect_options(&self) -> Result<crate::cluster::ConnectOptions, Failure> {
        let request_timeout = self
            .request_timeout
            .as_deref()
            .map(crate::policy::parse_duration)
            .transpose()
            .map_err(|e| Failure::usage(format!("--request-timeout: {e}")))?;
        let retry_for = self
            .retry_timeout
            .as_deref()
            .map(crate::policy::parse_duration)
            .transpose()
            .map_err(|e| Failure::usage(format!("--retry-timeout: {e}")))?;
        Ok(crate::cluster::ConnectOptions {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            cluster: self.cluster.clone(),
            user: self.user.clone(),
            as_user: self.as_user.clone(),
            as_groups: self.as_group.clone(),
            request_timeout,
            retry_for,
        })
    }
}

/// A file the command reads (`path`) that is not the YAML it should be: a usage error naming the
/// file and the parser's first line (without its own `error:`, which the command's adds).
pub fn bad_yaml(path: &std::path::Path, e: impl std::fmt::Display) -> Failure {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    Failure::usage(format!("{}: {first}", path.display()))
}

/// The async runtime for commands that talk to the cluster.
/// Pulls the policy's registry modules before anything else happens (a pull that fails is a
/// policy error, nothing changed) and says on stderr the digest each resolved to.
pub fn pull_modules(policy: &mut crate::policy::Policy) -> Result<(), Failure> {
    crate::hooks::registry::pull_modules(policy)?;
    for m in crate::plan::PlannedModule::of(policy) {
        eprintln!("hook {}: module {} is {}", m.hook, m.reference, m.digest);
    }
    Ok(())
}

/// When the command started: a run counts its setup (connecting, loading hooks, locking) from
/// here, for the cluster's history of durations.
pub fn command_started() -> tokio::time::Instant {
    static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    tokio::time::Instant::from_std(*STARTED.get_or_init(std::time::Instant::now))
}

/// Resolves when the process is asked to stop: Ctrl-C, or SIGTERM (a pod being stopped, as a
/// runner pod is when its node is drained).
pub async fn interrupted() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = async {
            match signal(SignalKind::terminate()) {
                Ok(mut term) => drop(term.recv().await),
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub fn tokio_runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(format!("cannot start the async runtime: {e}")))
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Plan (and with --yes, run) a rotation of the cluster's nodes.
    Nodes(Box<nodes::NodesArgs>),
    /// Roll a ReplicationController (NAME) or ReplicaSet (rs/NAME) to a new template step by
    /// step, legacy `kubectl rolling-update` style, a StatefulSet (sts/NAME) through its
    /// partition, or a DaemonSet (ds/NAME) node by node; resumable by running it again.
    RollingUpdate(Box<rolling_update::RollingUpdateArgs>),
    /// Show an ongoing or interrupted rotation: the lock's holder, the run's state, and the
    /// nodes it has touched.
    Status {
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Table)]
        output: OutputFormat,
        /// Follow the rotation live (by watches, from any terminal): on a terminal, a
        /// full-screen view with keys to pause, resume and abort it; otherwise a line per
        /// change, until the run ends (exit status as the run's).
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// Ask the node rotation (or the rolling update of TARGET) to hold at its next safe point
    /// (between two steps: a drain or a termination in progress finishes first). A run started
    /// while paused waits too.
    Pause {
        /// A rolling update's workload (NAME, rc/NAME, rs/NAME, sts/NAME or ds/NAME, in -n
        /// NAMESPACE); without it, the node rotation.
        target: Option<String>,
        /// Why, for whoever reads `status` or the run's output.
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Withdraw a pause: the run goes on from where it held.
    Resume {
        /// A rolling update's controller; without it, the node rotation.
        target: Option<String>,
    },
    /// Ask the running node rotation (or rolling update of TARGET) to stop after its current
    /// step; running the same command later resumes it.
    Abort {
        /// A rolling update's controller; without it, the node rotation.
        target: Option<String>,
        /// Why, for whoever reads `status` or the run's output.
        #[arg(long, default_value = "")]
        reason: String,
        /// Node rotation: once stopped, the run also uncordons the nodes it cordoned and did not
        /// terminate (and removes its load-balancer label and phase from them): their capacity
        /// comes back until the same command resumes the rotation.
        #[arg(long)]
        uncordon: bool,
    },
    /// Print the output of a run handed to the cluster (`nodes --yes --in-cluster`; the newest
    /// in kube-system, or -n, without JOB): each pod of its Job in turn, the one that resumed
    /// the run after an eviction after the evicted one.
    Logs {
        /// The run's Job (`rollout-ext-run-…`).
        job: Option<String>,
        /// Follow the output until the run ends.
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// Save the cluster's nodes, pods and PodDisruptionBudgets as a v1 List, for offline plans
    /// (and the kinds a policy grants its hooks, or any kind asked for: a snapshot may hold any).
    Snapshot {
        /// Where to write it ("-" for stdout).
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
        /// Also save every kind this policy's contextResources grants its hooks, so that an
        /// offline plan's hooks read what they would read live.
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        /// Also save the objects of this kind, as APIVERSION/KIND (apps/v1/Deployment,
        /// v1/ConfigMap), in every namespace (repeatable).
        #[arg(long, value_name = "APIVERSION/KIND", value_parser = parse_kind)]
        include: Vec<crate::policy::ContextResource>,
    },
    /// Rotate a fleet of clusters (kubeconfig contexts) in stages, with a soak between stages
    /// and the fleet policy's gates before each one: plan, run, status, pause, resume, abort.
    #[command(subcommand)]
    Fleet(fleet::FleetCommand),
    /// Work with policy hook modules.
    #[command(subcommand)]
    Hooks(hooks_cmd::HooksCommand),
    /// Print a shell completion script.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// How results are printed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    #[default]
    Table,
    Wide,
    Json,
    Yaml,
}

/// How a plan is printed: as other results are, or as a picture of its timeline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum PlanFormat {
    #[default]
    Table,
    Wide,
    Json,
    Yaml,
    /// A self-contained page: the timeline, a table of every batch, what the plan rests on.
    Html,
    /// The timeline alone.
    Svg,
}

impl PlanFormat {
    /// The picture asked for, if one is.
    pub fn picture(self) -> Option<timeline::Picture> {
        match self {
            PlanFormat::Html => Some(timeline::Picture::Html),
            PlanFormat::Svg => Some(timeline::Picture::Svg),
            _ => None,
        }
    }

    /// The format of what is not a picture (a live run's progress, a refusal's report).
    pub fn text(self) -> OutputFormat {
        match self {
            PlanFormat::Table | PlanFormat::Html | PlanFormat::Svg => OutputFormat::Table,
            PlanFormat::Wide => OutputFormat::Wide,
            PlanFormat::Json => OutputFormat::Json,
            PlanFormat::Yaml => OutputFormat::Yaml,
        }
    }

    /// Refuses `--output-file` without a picture to write into it.
    pub fn check_output_file(self, file: Option<&std::path::Path>) -> Result<(), Failure> {
        match (file, self.picture()) {
            (Some(_), None) => Err(Failure::usage(
                "--output-file writes a picture of the plan: add -o html or -o svg",
            )),
            _ => Ok(()),
        }
    }

    /// Refuses a picture where no plan is printed (`what`: "--yes").
    pub fn refuse_picture(self, what: &str) -> Result<(), Failure> {
        match self.picture() {
            Some(_) => Err(Failure::usage(format!(
                "-o html and -o svg draw a plan: they cannot be used with {what}"
            ))),
            None => Ok(()),
        }
    }
}

impl KubeFlags {
    /// The cluster a command talks to, as a reviewer reads it: the kubeconfig context and its
    /// server.
    pub fn describe_cluster(&self) -> String {
        let read = match &self.kubeconfig {
            Some(path) => kube::config::Kubeconfig::read_from(path),
            None => kube::config::Kubeconfig::read(),
        };
        let Ok(config) = read else {
            return "the kubeconfig's current context".into();
        };
        let context = (self.context.clone()).or(config.current_context.clone());
        let Some(context) = context else {
            return "the kubeconfig's current context".into();
        };
        let cluster = (config.contexts.iter())
            .find(|c| c.name == context)
            .and_then(|c| c.context.as_ref())
            .map(|c| self.cluster.clone().unwrap_or_else(|| c.cluster.clone()));
        let server = (config.clusters.iter())
            .find(|c| Some(&c.name) == cluster.as_ref())
            .and_then(|c| c.cluster.as_ref()?.server.clone());
        match server {
            Some(server) => format!("context {context} ({server})"),
            None => format!("context {context}"),
        }
    }
}

/// A failure with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Self {
        Failure {
            code: 2,
            message: message.into(),
        }
    }
    pub fn failed(message: impl Into<String>) -> Self {
        Failure {
            code: 1,
            message: message.into(),
        }
    }
}

impl From<crate::policy::PolicyError> for Failure {
    fn from(e: crate::policy::PolicyError) -> Self {
        Failure::usage(e.to_string())
    }
}

impl From<crate::cluster::ClusterError> for Failure {
    fn from(e: crate::cluster::ClusterError) -> Self {
        match e {
            crate::cluster::ClusterError::Kubeconfig(_) => Failure::usage(e.to_string()),
            _ => Failure::failed(e.to_string()),
        }
    }
}

impl From<crate::cluster::access::AccessError> for Failure {
    fn from(e: crate::cluster::access::AccessError) -> Self {
        use crate::cluster::access::AccessError;
        match e {
            AccessError::Missing(_) | AccessError::MissingForRunner { .. } => {
                Failure::failed(e.to_string())
            }
            AccessError::Review(c) => Failure::from(c),
        }
    }
}

impl From<crate::plan::PlanError> for Failure {
    fn from(e: crate::plan::PlanError) -> Self {
        use crate::plan::PlanError;
        match e {
            PlanError::Hook(_) => Failure::failed(e.to_string()),
            PlanError::Policy(_) | PlanError::UnknownGroup { .. } => Failure::usage(e.to_string()),
        }
    }
}

/// Parses the command line, runs the command, prints errors on stderr and returns the exit code.
pub fn main() -> ExitCode {
    command_started();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    report::set_no_color(cli.no_color);
    report::set_verbosity(match cli.verbose {
        0 => report::Level::Warn,
        1 => report::Level::Info,
        2 => report::Level::Debug,
        _ => report::Level::Trace,
    });
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Nodes(args) => nodes::run(&cli.kube, &args),
        Command::RollingUpdate(args) => rolling_update::run(&cli.kube, &args),
        Command::Hooks(cmd) => hooks_cmd::run(cmd),
        Command::Fleet(cmd) => fleet::run(&cli.kube, cli.verbose, cmd),
        Command::Snapshot {
            output,
            policy,
            include,
        } => snapshot(&cli.kube, &output, policy.as_deref(), include),
        Command::Status { output, watch } => match (watch, output) {
            (false, _) => status::run(&cli.kube, output),
            (true, OutputFormat::Table) => status::watch(&cli.kube),
            (true, _) => Err(Failure::usage(
                "status --watch shows a live view (or lines when not on a terminal); -o is for one reading",
            )),
        },
        Command::Logs { job, follow } => in_cluster::logs(&cli.kube, job.as_deref(), follow),
        Command::Pause { target, reason } => control::pause(&cli.kube, target.as_deref(), &reason),
        Command::Resume { target } => control::resume(&cli.kube, target.as_deref()),
        Command::Abort {
            target,
            reason,
            uncordon,
        } => control::abort(&cli.kube, target.as_deref(), &reason, uncordon),
        Command::Completion { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(
                shell,
                &mut cmd,
                "kubectl-rollout_ext",
                &mut std::io::stdout(),
            );
            Ok(())
        }
    }
}

/// `apps/v1/Deployment` → apps/v1 Deployment; `v1/ConfigMap` → v1 ConfigMap.
fn parse_kind(text: &str) -> Result<crate::policy::ContextResource, String> {
    match text.rsplit_once('/') {
        Some((api_version, kind)) if !api_version.is_empty() && !kind.is_empty() => {
            Ok(crate::policy::ContextResource {
                api_version: api_version.into(),
                kind: kind.into(),
                namespace: None,
            })
        }
        _ => Err(format!(
            "expected APIVERSION/KIND (apps/v1/Deployment, v1/ConfigMap), got {text:?}"
        )),
    }
}

fn snapshot(
    kube: &KubeFlags,
    output: &std::path::Path,
    policy: Option<&std::path::Path>,
    mut kinds: Vec<crate::policy::ContextResource>,
) -> Result<(), Failure> {
    if let Some(path) = policy {
        kinds.extend(crate::policy::Policy::load(path)?.context_resources);
    }
    let runtime = tokio_runtime()?;
    let list = runtime.block_on(async {
        let cluster = crate::cluster::Cluster::connect(&kube.connect_options()?).await?;
        let mut list = cluster.snapshot_list().await?;
        let items = list["items"].as_array_mut().expect("a snapshot is a List");
        let mut saved = std::collections::BTreeSet::new();
        for r in &kinds {
            // Nodes, pods and budgets are in already; a kind granted twice is saved once.
            let held = |i: &serde_json::Value| i["kind"] == r.kind.as_str();
            let key = (&r.api_version, &r.kind, r.namespace.as_deref());
            if items.iter().any(held) || !saved.insert(key) {
                continue;
            }
            let more = cluster
                .list_kind(&r.api_version, &r.kind, r.namespace.as_deref(), None)
                .await
                .map_err(|e| Failure::failed(format!("snapshot: {e}")))?;
            items.extend(more);
        }
        Ok::<_, Failure>(list)
    })?;
    let mut text = serde_json::to_string_pretty(&list)
        .map_err(|e| Failure::failed(format!("cannot render the snapshot: {e}")))?;
    text.push('\n');
    if output == std::path::Path::new("-") {
        print!("{text}");
        return Ok(());
    }
    std::fs::write(output, text)
        .map_err(|e| Failure::failed(format!("cannot write {}: {e}", output.display())))?;
    let count = list["items"].as_array().map_or(0, Vec::len);
    eprintln!("wrote {count} objects to {}", output.display());
    Ok(())
}

/// Prints `value` as JSON or YAML on stdout.
pub fn print_structured<T: serde::Serialize>(
    value: &T,
    format: OutputFormat,
) -> Result<(), Failure> {
    let text = match format {
        OutputFormat::Yaml => serde_saphyr::to_string(value)
            .map_err(|e| Failure::failed(format!("cannot render YAML: {e}")))?,
        _ => {
            let mut s = serde_json::to_string_pretty(value)
                .map_err(|e| Failure::failed(format!("cannot render JSON: {e}")))?;
            s.push('\n');
            s
        }
    };
    print!("{text}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_version_names_the_hook_contract_the_host_speaks() {
        assert!(version().ends_with(&format!(
            "rollout-ext:policy@{})",
            crate::hooks::WIT_VERSION
        )));
    }
}
