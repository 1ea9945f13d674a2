//! `rolling-update`: the "simple rolling update" of a ReplicationController or ReplicaSet, with
//! legacy kubectl's flags and annotations, the policy's hooks at every step, and a plan with
//! `--dry-run`. A StatefulSet (`sts/NAME`) is rolled through its partition instead
//! ([`stateful_set`]), a DaemonSet (`ds/NAME`) node by node ([`daemon_set`]).

mod controller_plan;
mod daemon_set;
mod estimates;
mod in_place;
mod render;
mod stateful_set;

pub use in_place::{InPlace, named as in_place_named};

use controller_plan::{SnapshotView, plan_from, server_dry_run, table};
use estimates::{estimate_update, history_for_plan, live_estimates, step_estimates};
use render::{Destination, print};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::nodes::DryRun;
use super::{Failure, KubeFlags, OutputFormat, PlanFormat, RESUME, output};
use crate::cluster::access;
use crate::cluster::controls::Workload;
use crate::cluster::recorder::{EventRecorder, Scope};
use crate::cluster::{Cluster, LiveObjects};
use crate::hooks::{HookRuntime, ObjectSource, SnapshotObjects};
use crate::kernel::{ControlsAt, Kernel, Parts};
use crate::plan::estimate::History;
use crate::plan::hook::{CallContext, Hook};
use crate::plan::rolling_update::controller::{Controller, Kind};
use crate::plan::rolling_update::prepare::NextSource;
use crate::policy::{IntOrPercent, Policy, parse_duration};
use crate::progress::{Bars, JsonLines, Lines, Reporter};
use crate::workload::execute::{Action, Request, Settings, UpdateError, Updater};
use crate::workload::timing::StepClock;

#[derive(Debug, Args)]
pub struct RollingUpdateArgs {
    /// The workload to update: NAME or rc/NAME (a ReplicationController), rs/NAME (a
    /// ReplicaSet), sts/NAME (a StatefulSet, through its partition), ds/NAME (a DaemonSet, node
    /// by node).
    #[arg(value_name = "NAME")]
    pub name: String,

    /// Name of the next controller. Given: it keeps its name and the old controller is deleted.
    /// Omitted: NAME-<hash> (or the name an update in progress recorded), renamed to NAME at
    /// the end.
    #[arg(value_name = "NEXT")]
    pub next: Option<String>,

    /// The new image of the container.
    #[arg(long, conflicts_with = "filename")]
    pub image: Option<String>,

    /// The container whose image changes (needed when the pod has several).
    #[arg(long, requires = "image")]
    pub container: Option<String>,

    /// The next controller, from a file (JSON or YAML); its selector must differ from the old
    /// one's in the value of some key. For sts/NAME and ds/NAME: a workload of that kind whose
    /// pod template to roll to.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub filename: Option<PathBuf>,

    /// Roll an update in progress back to the old controller, at its original size (sts/NAME,
    /// ds/NAME: to the revision the pods not yet updated run).
    #[arg(long, conflicts_with_all = ["image", "filename"])]
    pub rollback: bool,

    /// Time to wait between scaling up and scaling down [default: 1m; not for sts/NAME or
    /// ds/NAME].
    #[arg(long, value_parser = parse_duration)]
    pub update_period: Option<Duration>,

    /// How long to wait for a change before checking the pods again.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub poll_interval: Duration,

    /// Give up when no step was possible for this long.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,

    /// The label that tells the old pods from the new ones [default: deployment; not for
    /// sts/NAME or ds/NAME].
    #[arg(long, value_name = "KEY")]
    pub deployment_label_key: Option<String>,

    /// The next container's imagePullPolicy (required to roll to the image already running).
    #[arg(long, value_enum, requires = "image")]
    pub image_pull_policy: Option<PullPolicy>,

    /// Pods above the desired count during the update (count or percent, rounded up)
    /// [default: 1; not for sts/NAME or ds/NAME, which update pods in place].
    #[arg(long, allow_negative_numbers = true, value_parser = str::parse::<IntOrPercent>)]
    pub max_surge: Option<IntOrPercent>,

    /// Pods below the desired count during the update (count or percent, rounded down)
    /// [default: 0; for sts/NAME the pods one step updates, default 1; for ds/NAME the nodes,
    /// default the DaemonSet's own maxUnavailable].
    #[arg(long, allow_negative_numbers = true, value_parser = str::parse::<IntOrPercent>)]
    pub max_unavailable: Option<IntOrPercent>,

    /// sts/NAME: pods in a first step of their own, before the others (0: none).
    #[arg(long, value_name = "N")]
    pub canary: Option<u32>,

    /// sts/NAME, ds/NAME: take over the update's lock from a holder that stopped renewing it
    /// (a run killed on another machine).
    #[arg(long)]
    pub force_unlock: bool,

    /// Hand the update to the cluster: a Job in kube-system runs the same command with the
    /// runner's ServiceAccount (see `nodes --in-cluster`).
    #[arg(long, requires = "runner_image", conflicts_with_all = ["dry_run", "from_snapshot", "now"])]
    pub in_cluster: bool,

    /// --in-cluster: the image of this binary that the Job runs (see deploy/Containerfile).
    #[arg(long, value_name = "IMAGE", requires = "in_cluster")]
    pub runner_image: Option<String>,

    /// --in-cluster: create (or update) the runner's ServiceAccount, ClusterRole and binding
    /// first; without it they are checked.
    #[arg(long, requires = "in_cluster")]
    pub create_rbac: bool,

    /// `client`: print the plan. `server`: also send the first write (the next controller's
    /// creation; the workload's new template) to the API server as a dry run. `none` (the default): perform the update.
    #[arg(long, value_enum, value_name = "MODE", num_args = 0..=1, default_missing_value = "client")]
    pub dry_run: Option<DryRun>,

    /// Plan offline from a v1 List holding the controllers (or the StatefulSet or DaemonSet, its
    /// ControllerRevisions and nodes) and their pods (implies --dry-run=client).
    #[arg(long, value_name = "FILE")]
    pub from_snapshot: Option<PathBuf>,

    /// The RolloutPolicy file whose hooks size the steps, gate them and order the pods.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,

    /// What to do when a gate aborts: stop (resumable), or roll back to the old controller.
    #[arg(long, value_enum, default_value_t = OnAbort::Stop)]
    pub on_abort: OnAbort,

    /// Plan as of this RFC 3339 instant instead of now: what hooks are told the time is (their
    /// windows) and where the estimate starts. Plans only (--dry-run, --from-snapshot).
    #[arg(long, value_name = "TIME", value_parser = super::nodes::parse_instant)]
    pub now: Option<i64>,

    /// Output format of the plan (html and svg draw its steps on a timeline: a page for change
    /// review, or the picture alone); a live update with `json` prints its progress as one JSON
    /// event per line.
    #[arg(short = 'o', long, value_enum, default_value_t = PlanFormat::Table)]
    pub output: PlanFormat,

    /// Write the plan's picture (-o html or -o svg) to this file instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub output_file: Option<PathBuf>,
}

impl RollingUpdateArgs {
    /// The instant a plan is made as of: `--now`, else now.
    fn plan_time(&self) -> i64 {
        self.now
            .unwrap_or_else(|| jiff::Timestamp::now().as_second())
    }

    fn max_surge(&self) -> IntOrPercent {
        self.max_surge.unwrap_or(IntOrPercent::Int(1))
    }

    fn max_unavailable(&self) -> IntOrPercent {
        self.max_unavailable.unwrap_or(IntOrPercent::Int(0))
    }

    fn deployment_label_key(&self) -> &str {
        self.deployment_label_key.as_deref().unwrap_or("deployment")
    }

    /// NEXT without its kind prefix: `rs/web-v2` names the ReplicaSet `web-v2` (the prefix is
    /// checked against NAME's kind when the command starts).
    fn next_name(&self) -> Option<String> {
        self.next
            .as_deref()
            .map(|n| n.split_once('/').map_or(n, |(_, name)| name).to_string())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PullPolicy {
    Always,
    Never,
    IfNotPresent,
}

impl PullPolicy {
    fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::Never => "Never",
            PullPolicy::IfNotPresent => "IfNotPresent",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnAbort {
    Stop,
    Rollback,
}

fn source(args: &RollingUpdateArgs, kind: Kind) -> Result<Option<NextSource>, Failure> {
    match (&args.image, &args.filename, args.rollback) {
        (Some(image), None, false) => Ok(Some(NextSource::Image {
            image: image.clone(),
            container: args.container.clone(),
            pull_policy: args.image_pull_policy.map(|p| p.as_str().to_string()),
        })),
        (None, Some(path), false) => {
            let file = Controller::from_value(read_manifest(path)?)
                .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
            if file.kind != kind {
                return Err(Failure::usage(format!(
                    "{} holds a {}, but {} names a {} (write rs/NAME for a ReplicaSet)",
                    path.display(),
                    file.kind.as_str(),
                    args.name,
                    kind.as_str()
                )));
            }
            Ok(Some(NextSource::File(file)))
        }
        (None, None, true) => Ok(None),
        _ => Err(Failure::usage(
            "give exactly one of --image or -f/--filename (or --rollback, alone)",
        )),
    }
}

pub fn run(kube: &KubeFlags, args: &RollingUpdateArgs) -> Result<(), Failure> {
    args.output.check_output_file(args.output_file.as_deref())?;
    if args.in_cluster {
        args.output.refuse_picture("--in-cluster")?;
    } else if args.dry_run.is_none() && args.from_snapshot.is_none() {
        args.output
            .refuse_picture("an update (add --dry-run for its plan)")?;
    }
    if args.in_cluster {
        return hand_over(kube, args);
    }
    match in_place::named(&args.name) {
        Some((InPlace::StatefulSet, name)) => return stateful_set::run(kube, args, name),
        Some((InPlace::DaemonSet, name)) => return daemon_set::run(kube, args, name),
        None => {}
    }
    if args.force_unlock {
        return Err(Failure::usage(
            "--force-unlock is for StatefulSets and DaemonSets (sts/NAME, ds/NAME): a controller rolling update holds no lock",
        ));
    }
    if args.canary.is_some() {
        return Err(Failure::usage(
            "--canary is for StatefulSets (sts/NAME): a controller rolling update grows the next controller step by step",
        ));
    }
    let (kind, old_name) = Kind::parse_ref(&args.name).map_err(Failure::usage)?;
    if let Some(next) = args.next.as_deref().filter(|n| n.contains('/')) {
        let (next_kind, _) = Kind::parse_ref(next).map_err(Failure::usage)?;
        if next_kind != kind {
            return Err(Failure::usage(format!(
                "NEXT {next} names a {}, but NAME {} names a {}: both controllers are of one kind",
                next_kind.as_str(),
                args.name,
                kind.as_str()
            )));
        }
    }
    if args.next_name().as_deref() == Some(old_name.as_str()) {
        return Err(Failure::usage(format!(
            "the next controller cannot have the same name as the old one ({old_name})"
        )));
    }
    let source = source(args, kind)?;
    let policy = policy_of(args)?;
    let to = Destination {
        kube,
        args,
        policy: &policy,
    };
    let dry_run = dry_run_mode(args)?;
    if let Some(path) = &args.from_snapshot {
        let (bytes, list) = read_snapshot(path)?;
        let namespace = kube.namespace.clone().unwrap_or_else(|| "default".into());
        let objects = SnapshotView::from_list(&list, &namespace)
            .map_err(|e| Failure::usage(format!("snapshot {}: {e}", path.display())))?;
        let hooks = load_hooks(&policy, Arc::new(SnapshotObjects::new(bytes)))?;
        let workload = format!("{}/{namespace}/{old_name}", kind.short());
        let estimates = step_estimates(History::default(), &policy, workload);
        let (mut plan, _) = plan_from(
            &objects,
            kind,
            &old_name,
            args,
            source.as_ref(),
            hooks,
            &estimates,
        )?;
        let steps = plan.steps.iter_mut().map(|s| &mut s.decisions);
        plan.estimate = Some(estimate_update(&estimates, steps, args));
        return print(&plan, &plan.warnings, to, table);
    }
    let runtime = super::tokio_runtime()?;
    runtime.block_on(async {
        let cluster = Cluster::connect(&kube.connect_options()?).await?;
        let namespace = kube
            .namespace
            .clone()
            .unwrap_or_else(|| cluster.default_namespace.clone());
        if dry_run == DryRun::None {
            // Nothing changes before every permission the update needs is known to be granted.
            cluster
                .check_access(&crate::cluster::access::for_rolling_update(kind, &namespace))
                .await?;
        }
        let objects: Arc<dyn ObjectSource> = Arc::new(LiveObjects {
            cluster: cluster.clone(),
            handle: tokio::runtime::Handle::current(),
        });
        let mut hooks = tokio::task::block_in_place(|| load_hooks(&policy, objects))?;
        if dry_run != DryRun::None {
            let view = SnapshotView::live(&cluster, kind, &namespace, &old_name, args).await?;
            let mut unread = Vec::new();
            let history = history_for_plan(&cluster, &mut unread).await;
            let workload = format!("{}/{namespace}/{old_name}", kind.short());
            let estimates = step_estimates(history, &policy, workload);
            let hooks = std::mem::take(&mut hooks);
            let (mut plan, pair) = tokio::task::block_in_place(|| {
                plan_from(&view, kind, &old_name, args, source.as_ref(), hooks, &estimates)
            })?;
            plan.warnings.append(&mut unread);
            if let Some(minor) = cluster.server_minor_version().await
                && minor < 22
                && plan.deletion_order.is_some()
            {
                plan.warnings.push(format!(
                    "this server (1.{minor}) ignores {}: the hook's pod order is applied but not honoured before 1.22",
                    crate::keys::POD_DELETION_COST
                ));
            }
            if dry_run == DryRun::Server {
                server_dry_run(&cluster, &pair, &namespace).await?;
            }
            let steps = plan.steps.iter_mut().map(|s| &mut s.decisions);
            plan.estimate = Some(estimate_update(&estimates, steps, args));
            return print(&plan, &plan.warnings, Destination { kube, args, policy: &policy }, table);
        }
        let settings = Settings {
            update_period: args.update_period.unwrap_or(Duration::from_secs(60)),
            poll_interval: args.poll_interval,
            timeout: args.timeout,
            max_surge: args.max_surge(),
            max_unavailable: args.max_unavailable(),
            deployment_key: args.deployment_label_key().to_string(),
            rollback_on_abort: args.on_abort == OnAbort::Rollback,
        };
        let request = Request {
            kind,
            namespace,
            old_name,
            next_name: args.next_name(),
            action: match source {
                Some(s) => Action::Roll(s),
                None => Action::Rollback,
            },
        };
        let run_id = format!("rolling-update-{}", std::process::id());
        let scope = Scope::RollingUpdate {
            kind,
            namespace: request.namespace.clone(),
        };
        let recorder = EventRecorder::start(&cluster, &run_id, scope, reporter(args.output.text()));
        let subject = format!("{}/{}/{}", kind.short(), request.namespace, request.old_name);
        let estimates = live_estimates(&cluster, &policy, subject, &recorder).await;
        let mut updater = Updater {
            settings: &settings,
            kernel: Kernel::new(Parts {
                cluster: &cluster,
                hooks: &mut hooks,
                reporter: &recorder,
                run_id,
                controls: ControlsAt::Workload {
                    workload: Workload::Controller(kind, request.old_name.clone()),
                    namespace: request.namespace.clone(),
                },
                lock: None,
            }),
            pods: Default::default(),
            timing: StepClock::new(estimates, super::command_started()),
        };
        let result = tokio::select! {
            result = updater.run(&request) => result.map_err(failure),
            _ = crate::cli::interrupted() => Err(Failure::failed(format!("interrupted; {RESUME}"))),
        };
        recorder.finish(None).await;
        result
    })
}

/// Progress as `nodes --yes` shows it: NDJSON events on stdout with `-o json`, bars on a
/// terminal, timestamped lines on stderr otherwise.
fn reporter(output: OutputFormat) -> Arc<dyn Reporter> {
    use std::io::IsTerminal;
    match output {
        OutputFormat::Json => Arc::new(JsonLines),
        _ if std::io::stderr().is_terminal() => Arc::new(Bars::new(
            crate::progress::color_allowed(crate::report::no_color()),
        )),
        _ => Arc::new(Lines),
    }
}

/// `--dry-run` as given with `--from-snapshot` (which can only plan).
fn dry_run_mode(args: &RollingUpdateArgs) -> Result<DryRun, Failure> {
    match (args.dry_run, &args.from_snapshot) {
        (Some(DryRun::Server), Some(_)) => Err(Failure::usage(
            "--dry-run=server asks the API server: it cannot be used with --from-snapshot",
        )),
        (Some(DryRun::None), Some(_)) => Err(Failure::usage(
            "--from-snapshot can only be planned: drop --dry-run=none",
        )),
        (None | Some(DryRun::Client), Some(_)) => Ok(DryRun::Client),
        (None | Some(DryRun::None), None) if args.now.is_some() => Err(Failure::usage(
            "--now sets the time of a plan: add --dry-run (a live update runs now)",
        )),
        (mode, None) => Ok(mode.unwrap_or(DryRun::None)),
    }
}

/// The snapshot file's bytes (for hooks' `list-objects`) and its v1 List.
/// The items of a snapshot's v1 List that stand in `namespace` (or in none).
fn items_in<'a>(
    list: &'a serde_json::Value,
    namespace: &'a str,
) -> Result<impl Iterator<Item = &'a serde_json::Value> + Clone, String> {
    let items = list["items"]
        .as_array()
        .ok_or("not a v1 List: there is no items array")?;
    Ok(items.iter().filter(move |item| {
        item["metadata"]["namespace"]
            .as_str()
            .is_none_or(|n| n == namespace)
    }))
}

/// The `kind` named `name` among a snapshot's `items` of `namespace`.
fn named_in<'a>(
    mut items: impl Iterator<Item = &'a serde_json::Value>,
    kind: &str,
    name: &str,
    namespace: &str,
) -> Result<&'a serde_json::Value, String> {
    items
        .find(|i| i["kind"] == kind && i["metadata"]["name"] == name)
        .ok_or_else(|| {
            let kind = kind.to_lowercase();
            format!("{kind} {name:?} not found in namespace {namespace:?}")
        })
}

/// The manifest (YAML or JSON) a `-f/--filename` names.
fn read_manifest(path: &std::path::Path) -> Result<serde_json::Value, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    serde_saphyr::from_str(&text).map_err(|e| crate::cli::bad_yaml(path, e))
}

fn read_snapshot(path: &std::path::Path) -> Result<(Vec<u8>, serde_json::Value), Failure> {
    let bytes = std::fs::read(path)
        .map_err(|e| Failure::usage(format!("cannot read snapshot {}: {e}", path.display())))?;
    let list = serde_json::from_slice(&bytes)
        .map_err(|e| Failure::usage(format!("snapshot {}: {e}", path.display())))?;
    Ok((bytes, list))
}

/// The context of a plan's hook calls, as of the plan's time.
fn plan_context(args: &RollingUpdateArgs) -> CallContext {
    CallContext {
        now: args.plan_time(),
        run_id: "plan".into(),
        dry_run: true,
        timing: Default::default(),
        others: Vec::new(),
    }
}

/// `--in-cluster`: the update handed to the cluster, its runner checked for what the update of
/// its workload needs.
fn hand_over(kube: &KubeFlags, args: &RollingUpdateArgs) -> Result<(), Failure> {
    let target = in_place::named(&args.name);
    let kind = match target {
        Some(_) => None,
        None => Some(Kind::parse_ref(&args.name).map_err(Failure::usage)?.0),
    };
    let policy = policy_of(args)?;
    let hand_over = super::in_cluster::HandOver {
        namespace: crate::cluster::lock::LOCK_NAMESPACE.into(),
        image: super::in_cluster::runner_image(args.runner_image.as_deref())?,
        create_rbac: args.create_rbac,
        force_unlock: args.force_unlock,
        policy_path: args.policy.as_deref(),
        policy: &policy,
        command_namespace: Some(kube.namespace.clone().unwrap_or_default()),
        takes_rotation_lock: false,
        json: matches!(args.output.text(), OutputFormat::Json | OutputFormat::Yaml),
    };
    super::in_cluster::hand(kube, hand_over, |namespace| match (target, kind) {
        (Some((InPlace::StatefulSet, _)), _) => access::for_stateful_set_update(namespace),
        (Some((InPlace::DaemonSet, _)), _) => access::for_daemon_set_update(namespace),
        (None, Some(kind)) => access::for_rolling_update(kind, namespace),
        (None, None) => Vec::new(),
    })
}

/// The policy file given, or the built-in policy (no hooks), its registry modules pulled.
fn policy_of(args: &RollingUpdateArgs) -> Result<Policy, Failure> {
    let mut policy = match &args.policy {
        Some(p) => Policy::load(p)?,
        None => Policy {
            source: "<built-in>".into(),
            ..Default::default()
        },
    };
    super::pull_modules(&mut policy)?;
    Ok(policy)
}

fn failure(e: UpdateError) -> Failure {
    match e {
        UpdateError::Invalid(m) => Failure::usage(m),
        UpdateError::Aborted(m) | UpdateError::Stopped(m) => Failure {
            code: 3,
            message: format!("{m}; {RESUME}"),
        },
        other => Failure::failed(format!("{other}; {RESUME}")),
    }
}

fn load_hooks(
    policy: &Policy,
    objects: Arc<dyn ObjectSource>,
) -> Result<Vec<Box<dyn Hook>>, Failure> {
    if policy.hooks.is_empty() {
        return Ok(Vec::new());
    }
    let runtime = HookRuntime::shared()
        .map_err(|e| Failure::failed(format!("cannot start the WebAssembly runtime: {e}")))?;
    Ok(crate::hooks::load_all(runtime, policy, objects)?)
}
