//! `nodes`: plan a rotation (and, later, run it with --yes).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::{Failure, KubeFlags, PlanFormat, output, timeline};
use crate::cluster::{Cluster, LiveObjects};
use crate::hooks::{HookRuntime, NoObjects, ObjectSource, SnapshotObjects};
use crate::labels::LabelSelector;
use crate::plan::drain::DrainOptions;
use crate::plan::estimate::{Durations, FixedWaits, History};
use crate::plan::groups::Staleness;
use crate::plan::{PlanOptions, Role};
use crate::policy::drain::UndrainableAction;
use crate::policy::{IntOrPercent, Policy};
use crate::snapshot::Snapshot;

#[derive(Debug, Args)]
pub struct NodesArgs {
    /// Plan offline from a v1 List (`kubectl get nodes,pods,poddisruptionbudgets -A -o json`).
    #[arg(long, value_name = "FILE")]
    pub from_snapshot: Option<PathBuf>,

    /// The RolloutPolicy file (budgets, groups, hooks).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,

    /// Perform the rotation. Without it only the plan is shown.
    #[arg(long, conflicts_with = "dry_run")]
    pub yes: bool,

    /// `client` (the default without --yes): show the plan. `server`: also send the plan's
    /// cordons, evictions and node deletions to the API server as dry-run requests and report
    /// what it would refuse now (PodDisruptionBudgets, permissions). Nothing changes.
    #[arg(long, value_enum, value_name = "MODE", num_args = 0..=1, default_missing_value = "client")]
    pub dry_run: Option<DryRun>,

    /// Rotate every instance of the chosen groups, outdated or not (kops' --force).
    #[arg(long)]
    pub force: bool,

    /// Do not validate, cordon or drain: terminate instances without moving their pods first.
    #[arg(long = "cloudonly")]
    pub cloud_only: bool,

    /// Only these instance groups (repeatable or comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "GROUP")]
    pub instance_group: Vec<String>,

    /// Only groups of these roles: bastion, control-plane (or master), node.
    #[arg(long, value_delimiter = ',', value_name = "ROLE", value_parser = Role::parse)]
    pub instance_group_roles: Vec<Role>,

    /// The node label whose value names the group (default: the policy's, else the first of
    /// kops.k8s.io/instancegroup, eks.amazonaws.com/nodegroup, cloud.google.com/gke-nodepool,
    /// kubernetes.azure.com/agentpool, karpenter.sh/nodepool, else the role).
    #[arg(long, value_name = "KEY")]
    pub group_label: Option<String>,

    /// Cluster-wide maxSurge, over the policy's (a number or a percentage like 25%).
    #[arg(long, allow_negative_numbers = true, value_name = "N|P%")]
    pub max_surge: Option<IntOrPercent>,

    /// Cluster-wide maxUnavailable, over the policy's (a number or a percentage like 25%).
    #[arg(long, allow_negative_numbers = true, value_name = "N|P%")]
    pub max_unavailable: Option<IntOrPercent>,

    /// Instances whose kubelet runs another version are out of date.
    #[arg(long, value_name = "VERSION")]
    pub kubelet_version: Option<String>,

    /// Instances without this label value are out of date (repeatable).
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub expect_label: Vec<(String, String)>,

    /// Instances older than this are out of date (e.g. 720h, 30d).
    #[arg(long, value_name = "DURATION", value_parser = parse_age)]
    pub max_age: Option<i64>,

    /// How long an instance may go without registering as a node before it counts as broken
    /// and is replaced; a younger one is booting and left alone (Cluster API Machines).
    #[arg(long, value_name = "DURATION", value_parser = parse_age, default_value = "10m")]
    pub node_startup_timeout: i64,

    /// Update one instance at a time and ask before each batch.
    #[arg(short = 'i', long)]
    pub interactive: bool,

    /// Delete pods using emptyDir volumes when draining (their data is lost).
    #[arg(long)]
    pub delete_emptydir_data: bool,

    /// Delete pods that no controller manages when draining (kubectl drain's --force).
    #[arg(long)]
    pub drain_force: bool,

    /// Only drain pods matching this label selector.
    #[arg(long, value_name = "SELECTOR", value_parser = LabelSelector::parse)]
    pub pod_selector: Option<LabelSelector>,

    /// Delete pods instead of evicting them, bypassing PodDisruptionBudgets.
    #[arg(long)]
    pub disable_eviction: bool,

    /// Plan: exit 5 when the forecast says a batch's drain is blocked by a PodDisruptionBudget
    /// (the plan is printed first), for pipelines that gate on the plan.
    #[arg(long, conflicts_with = "yes")]
    pub fail_on_forecast: bool,

    /// Rotation: how long the cluster may take to validate after a batch.
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = crate::policy::parse_duration)]
    pub validation_timeout: Duration,

    /// Rotation: consecutive successful validations required after a batch.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub validate_count: u32,

    /// Rotation: how long to wait for a batch's replacements to be Ready; then the run stops
    /// (resumably) and no further node is cordoned.
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = crate::policy::parse_duration)]
    pub replacement_timeout: Duration,

    /// Hold this long after each batch but the last, then validate again, before the next
    /// batch (over the policy's soakTime; at most 24h).
    #[arg(long, value_name = "DURATION", value_parser = parse_soak)]
    pub soak: Option<Duration>,

    /// Rotation: how long draining one node may take.
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = crate::policy::parse_duration)]
    pub drain_timeout: Duration,

    /// Rotation: how long a drain waits for a pod that asks not to be disrupted to go away
    /// (over the policy's drain.doNotDisruptTimeout, default 1h); then the run stops, or
    /// evicts it with drain.afterTimeout: Evict.
    #[arg(long, value_name = "DURATION", value_parser = crate::policy::parse_duration)]
    pub do_not_disrupt_timeout: Option<Duration>,

    /// Rotation: wait after draining, for connections to the evicted pods to close.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = crate::policy::parse_duration)]
    pub post_drain_delay: Duration,

    /// Rotation: wait after terminating a bastion instance.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = crate::policy::parse_duration)]
    pub bastion_interval: Duration,

    /// Rotation: wait after terminating a control-plane instance.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = crate::policy::parse_duration)]
    pub master_interval: Duration,

    /// Rotation: wait after terminating a node instance.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = crate::policy::parse_duration)]
    pub node_interval: Duration,

    /// Rotation: stop when a drain fails (false: terminate the node anyway, as kops does).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub fail_on_drain_error: bool,

    /// Rotation: what to do with a node whose drain cannot finish (a budget that never allows,
    /// the drain timeout, a held pod's wait, the escalation ladder's end), over the policy's
    /// drain.undrainable.action: `stop` the run, or `quarantine` the node (it stays cordoned
    /// with its pods, labelled rollout-ext.io/quarantined, not terminated) and go on, up to
    /// drain.undrainable.maxQuarantined nodes (default 1); a run that set nodes aside exits 6.
    #[arg(long, value_enum, value_name = "ACTION")]
    pub undrainable: Option<UndrainableArg>,

    /// Uncordon the nodes of the chosen groups that a run set aside (quarantined), remove the
    /// labels and annotations this tool put on them, and exit; without --yes, list them.
    #[arg(long, conflicts_with_all = ["from_snapshot", "dry_run"])]
    pub release_quarantined: bool,

    /// Rotation: stop when validation fails (false: go on with a warning).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub fail_on_validate_error: bool,

    /// Rotation: the PreferNoSchedule taint put on the nodes chosen for replacement
    /// (kops' is kops.k8s.io/scheduled-for-update).
    #[arg(long, value_name = "KEY", default_value = crate::keys::SCHEDULED_FOR_UPDATE)]
    pub taint_key: String,

    /// Rotation: seconds each evicted pod gets to terminate (negative: the pod's own).
    #[arg(long, value_name = "SECONDS", default_value_t = -1, allow_negative_numbers = true)]
    pub grace_period: i64,

    /// Rotation: how instances are terminated, over the policy's provider.
    #[arg(long, value_enum, value_name = "PROVIDER")]
    pub provider: Option<ProviderArg>,

    /// Rotation: take the lock over from a run that holds it (check it is really gone first).
    #[arg(long)]
    pub force_unlock: bool,

    /// With --yes: hand the run to the cluster, as a Job in kube-system (or -n) running the
    /// same command with the runner's ServiceAccount; it outlives this terminal, and its own
    /// node's rotation (the Job's next pod resumes it).
    #[arg(long, requires_all = ["yes", "runner_image"], conflicts_with = "release_quarantined")]
    pub in_cluster: bool,

    /// --in-cluster: the image of this binary that the Job runs (see deploy/Containerfile).
    #[arg(long, value_name = "IMAGE", requires = "in_cluster")]
    pub runner_image: Option<String>,

    /// --in-cluster: create (or update) the runner's ServiceAccount, the ClusterRole of
    /// deploy/clusterrole.yaml and their binding first; without it they are checked.
    #[arg(long, requires = "in_cluster")]
    pub create_rbac: bool,

    /// Evaluate time-based rules (--max-age, hook windows) at this RFC 3339 instant instead of now.
    #[arg(long, value_name = "TIME", value_parser = parse_instant)]
    pub now: Option<i64>,

    /// Output format: html and svg draw the plan's timeline (a page for change review, or the
    /// picture alone).
    #[arg(short = 'o', long, value_enum, default_value_t = PlanFormat::Table)]
    pub output: PlanFormat,

    /// Write the plan's picture (-o html or -o svg) to this file instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub output_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UndrainableArg {
    Stop,
    Quarantine,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DryRun {
    None,
    Client,
    Server,
}

/// Providers that need no configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProviderArg {
    /// Delete the Node object; an autoscaler or machine controller replaces it.
    DeleteNode,
    /// Cluster API: scale each Machine's MachineDeployment down (removing exactly that
    /// Machine) and back up.
    ClusterApi,
    /// Karpenter: delete each node's NodeClaim; Karpenter launches nodes for the evicted pods.
    Karpenter,
}

impl ProviderArg {
    /// The providers this flag stands for, for every group.
    pub fn providers(self) -> crate::provider::Providers {
        use crate::provider::{CapiTerminate, Provider, Providers};
        Providers::one(match self {
            ProviderArg::DeleteNode => Provider::DeleteNode,
            ProviderArg::ClusterApi => Provider::ClusterApi {
                terminate: CapiTerminate::ScaleDown,
                timeout: std::time::Duration::from_secs(600),
            },
            ProviderArg::Karpenter => Provider::Karpenter,
        })
    }
}

/// Connects for a plan: with the cluster's Cluster API Machines when a provider the run
/// would use works with them (`--provider cluster-api`, or a `clusterAPI` provider in the
/// policy), so that the plan shows the groups and instances the run would see.
pub(super) async fn connect(
    kube: &KubeFlags,
    args: &NodesArgs,
    policy: &Policy,
) -> Result<Cluster, Failure> {
    let cluster = Cluster::connect(&kube.connect_options()?).await?;
    let providers = match args.provider {
        Some(arg) => Some(arg.providers()),
        None => crate::provider::Providers::from_policy(policy)
            .ok()
            .flatten(),
    };
    let cluster = match providers {
        Some(p) => p.inventory(cluster),
        None => cluster,
    };
    Ok(match policy.others_disruptions {
        crate::policy::OthersDisruptions::Count => cluster.with_others().await?,
        crate::policy::OthersDisruptions::Ignore => cluster,
    })
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}

fn parse_age(text: &str) -> Result<i64, String> {
    if let Some(days) = text.strip_suffix('d') {
        return days
            .parse::<i64>()
            .map(|d| d * 86_400)
            .map_err(|_| format!("invalid duration {text:?}: expected e.g. 30d or 720h"));
    }
    crate::policy::parse_duration(text).map(|d| d.as_secs() as i64)
}

pub(super) fn parse_instant(text: &str) -> Result<i64, String> {
    text.parse::<jiff::Timestamp>()
        .map(|t| t.as_second())
        .map_err(|e| {
            format!("invalid time {text:?}: {e} (expected RFC 3339, e.g. 2026-01-03T22:00:00Z)")
        })
}

pub fn run(kube: &KubeFlags, args: &NodesArgs) -> Result<(), Failure> {
    if args.yes && args.from_snapshot.is_some() {
        return Err(Failure::usage(
            "--yes is not implemented with --from-snapshot: a snapshot can only be planned; \
             run without --from-snapshot against a cluster to rotate it",
        ));
    }
    args.output.check_output_file(args.output_file.as_deref())?;
    if args.yes || args.in_cluster || args.release_quarantined {
        args.output.refuse_picture(if args.release_quarantined {
            "--release-quarantined"
        } else if args.in_cluster {
            "--in-cluster"
        } else {
            "--yes"
        })?;
    }
    if args.dry_run == Some(DryRun::Server) {
        args.output.refuse_picture("--dry-run=server")?;
    }
    let policy = match &args.policy {
        Some(p) => Policy::load(p)?,
        None => Policy {
            source: "<built-in>".into(),
            ..Default::default()
        },
    };
    if args.release_quarantined {
        return super::release::run(kube, args, &policy);
    }
    // Before anything else: a module that cannot be fetched stops here, nothing changed.
    let mut policy = policy;
    super::pull_modules(&mut policy)?;
    let undrainable = drain_rules(args, &policy).undrainable.action;
    if undrainable == UndrainableAction::Quarantine && !args.fail_on_drain_error {
        return Err(Failure::usage(
            "--fail-on-drain-error=false terminates a node whose drain failed, and drain.undrainable: Quarantine (or --undrainable quarantine) sets it aside: choose one",
        ));
    }
    if args.in_cluster {
        return super::in_cluster::run(kube, args, &policy);
    }
    if args.yes {
        return super::rotate_cmd::run(kube, args, &policy, plan_options(args, &policy));
    }
    if args.dry_run == Some(DryRun::Server) {
        if args.from_snapshot.is_some() {
            return Err(Failure::usage(
                "--dry-run=server asks the API server: it cannot be used with --from-snapshot",
            ));
        }
        return super::server_dry_run::run(kube, args, &policy, plan_options(args, &policy));
    }
    let options = plan_options(args, &policy);
    let now = options.now;
    let plan = match &args.from_snapshot {
        Some(path) => {
            let bytes = std::fs::read(path).map_err(|e| {
                Failure::usage(format!("cannot read snapshot {}: {e}", path.display()))
            })?;
            let snapshot = Snapshot::from_json(&bytes)
                .map_err(|e| Failure::usage(format!("snapshot {}: {e}", path.display())))?;
            // Hooks list only the kinds the policy grants: with none granted the file is not
            // read again, and its bytes go before planning (a fifth of the plan's peak memory).
            let (objects, absent): (Arc<dyn ObjectSource>, _) =
                if policy.context_resources.is_empty() {
                    drop(bytes);
                    (Arc::new(NoObjects), Vec::new())
                } else {
                    let objects = SnapshotObjects::new(bytes);
                    let absent = objects.absent(&policy.context_resources);
                    (Arc::new(objects), absent)
                };
            // A snapshot carries no history: the estimates rest on the policy or the defaults.
            let mut plan = plan_with_hooks(&snapshot, &policy, &options, objects)?;
            plan.warnings.extend(absent);
            plan
        }
        None => {
            let runtime = super::tokio_runtime()?;
            let cluster = runtime.block_on(connect(kube, args, &policy))?;
            let snapshot = runtime.block_on(cluster.snapshot())?;
            let (history, unread) = runtime.block_on(cluster.history_or_note());
            let objects: Arc<dyn ObjectSource> = Arc::new(LiveObjects {
                cluster,
                handle: runtime.handle().clone(),
            });
            let options = PlanOptions {
                durations: Durations {
                    history,
                    ..options.durations
                },
                ..options
            };
            let mut plan = plan_with_hooks(&snapshot, &policy, &options, objects)?;
            plan.warnings.extend(unread);
            plan
        }
    };
    match args.output.picture() {
        Some(picture) => {
            let facts = timeline::plan_facts(kube, args.from_snapshot.as_deref(), &policy);
            let drawn = timeline::of_node_plan(&plan, now, facts).draw(picture);
            timeline::write_out(&drawn, args.output_file.as_deref())?;
        }
        None => output::print_plan(&plan, args.output.text())?,
    }
    let blocked: Vec<String> = plan
        .groups
        .iter()
        .flat_map(|g| {
            g.batches.iter().enumerate().filter_map(|(i, b)| {
                let blocks = &b.forecast.as_ref()?.blocks;
                let pdbs: Vec<&str> = blocks.iter().map(|s| s.pdb.as_str()).collect();
                (!pdbs.is_empty()).then(|| {
                    format!(
                        "group {} batch {}: {}",
                        g.group.name,
                        i + 1,
                        pdbs.join(", ")
                    )
                })
            })
        })
        .collect();
    if args.fail_on_forecast && !blocked.is_empty() {
        return Err(Failure {
            code: 5,
            message: format!(
                "the forecast says these drains are blocked by PodDisruptionBudgets that allow no disruption now: {}",
                blocked.join("; ")
            ),
        });
    }
    Ok(())
}

/// The run's configured holds, as the flags and the policy set them.
pub fn fixed_waits(args: &NodesArgs, policy: &Policy) -> FixedWaits {
    let rules = drain_rules(args, policy);
    FixedWaits {
        post_drain_delay: args.post_drain_delay,
        load_balancer_delay: match rules.exclude_from_load_balancers {
            true => rules.load_balancer_drain_delay,
            false => Duration::ZERO,
        },
        bastion_interval: args.bastion_interval,
        master_interval: args.master_interval,
        node_interval: args.node_interval,
        cloud_only: args.cloud_only,
    }
}

/// Loads the policy's hooks and plans.
pub fn plan_with_hooks(
    snapshot: &Snapshot,
    policy: &Policy,
    options: &PlanOptions,
    objects: Arc<dyn ObjectSource>,
) -> Result<crate::plan::Plan, Failure> {
    let mut hooks = if policy.hooks.is_empty() {
        Vec::new()
    } else {
        let runtime = HookRuntime::shared()
            .map_err(|e| Failure::failed(format!("cannot start the WebAssembly runtime: {e}")))?;
        crate::hooks::load_all(runtime, policy, objects)?
    };
    Ok(crate::plan::plan_nodes(
        snapshot, policy, options, &mut hooks,
    )?)
}

pub fn plan_options(args: &NodesArgs, policy: &Policy) -> PlanOptions {
    let now = args
        .now
        .unwrap_or_else(|| jiff::Timestamp::now().as_second());
    let mut rolling_update = policy.rolling_update;
    if args.max_surge.is_some() {
        rolling_update.max_surge = args.max_surge;
    }
    if args.max_unavailable.is_some() {
        rolling_update.max_unavailable = args.max_unavailable;
    }
    PlanOptions {
        now,
        run_id: "plan".into(),
        dry_run: true,
        group_label: args.group_label.clone(),
        rolling_update,
        instance_groups: args.instance_group.clone(),
        roles: args.instance_group_roles.clone(),
        staleness: Staleness {
            kubelet_version: args.kubelet_version.clone(),
            expect_labels: args.expect_label.clone(),
            max_age: args.max_age,
            node_startup_timeout: args.node_startup_timeout,
            now,
        },
        force: args.force,
        interactive: args.interactive,
        cloud_only: args.cloud_only,
        drain: DrainOptions {
            delete_emptydir_data: args.delete_emptydir_data,
            force: args.drain_force,
            pod_selector: args.pod_selector.clone(),
            disable_eviction: args.disable_eviction,
            rules: drain_rules(args, policy),
        },
        soak: args.soak,
        ask_after_batch: true,
        durations: Durations {
            history: History::default(),
            stated: policy.estimates,
            fixed: fixed_waits(args, policy),
        },
    }
}

/// The policy's `drain` section, with the flags that override it.
fn drain_rules(args: &NodesArgs, policy: &Policy) -> crate::policy::drain::DrainPolicy {
    let mut rules = policy.drain.clone();
    if let Some(timeout) = args.do_not_disrupt_timeout {
        rules.do_not_disrupt_timeout = timeout;
    }
    match args.undrainable {
        Some(UndrainableArg::Stop) => rules.undrainable.action = UndrainableAction::Stop,
        Some(UndrainableArg::Quarantine) => {
            rules.undrainable.action = UndrainableAction::Quarantine
        }
        None => {}
    }
    rules
}

fn parse_soak(text: &str) -> Result<Duration, String> {
    crate::policy::parse_duration(text).and_then(crate::policy::check_soak)
}
