//! What `rolling-update` does the same for the workloads it updates in place (a StatefulSet
//! through its partition, a DaemonSet node by node): their names, the flags they refuse, what
//! the flags ask, and the live run (a lock beside the workload, events, Ctrl-C).

use std::sync::Arc;

use super::{
    Failure, KubeFlags, OnAbort, RESUME, RollingUpdateArgs, failure, load_hooks, reporter,
};
use crate::cli::nodes::DryRun;
use crate::cli::rotate_cmd::{identity, take_lock};
use crate::cluster::Cluster;
use crate::cluster::LiveObjects;
use crate::cluster::access::Permission;
use crate::cluster::controls::Workload;
use crate::cluster::lock::LeaseRef;
use crate::cluster::recorder::{EventRecorder, Scope};
use crate::hooks::ObjectSource;
use crate::kernel::{ControlsAt, Kernel, Parts};
use crate::plan::hook::Hook;
use crate::plan::rolling_update::stateful_set::PartitionAction;
use crate::plan::rolling_update::template::TemplateChange;
use crate::policy::IntOrPercent;
use crate::policy::Policy;
use crate::workload::execute::{Settings, Updater};
use crate::workload::node_by_node::NodeRequest;
use crate::workload::partitioned::PartitionRequest;
use crate::workload::timing::StepClock;

/// A workload updated in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InPlace {
    StatefulSet,
    DaemonSet,
}

impl InPlace {
    pub fn kind(self) -> &'static str {
        match self {
            InPlace::StatefulSet => "StatefulSet",
            InPlace::DaemonSet => "DaemonSet",
        }
    }

    fn short(self) -> &'static str {
        match self {
            InPlace::StatefulSet => "sts",
            InPlace::DaemonSet => "ds",
        }
    }
}

/// The kind and name in `sts/NAME` or `ds/NAME` (and the resource names kubectl accepts).
pub fn named(text: &str) -> Option<(InPlace, String)> {
    let (resource, name) = text.split_once('/')?;
    let kind = match resource.to_ascii_lowercase().as_str() {
        "sts" | "statefulset" | "statefulsets" | "statefulset.apps" | "statefulsets.apps" => {
            InPlace::StatefulSet
        }
        "ds" | "daemonset" | "daemonsets" | "daemonset.apps" | "daemonsets.apps" => {
            InPlace::DaemonSet
        }
        _ => return None,
    };
    Some((kind, name.to_string()))
}

/// Refuses the controller flags an in-place update has no use for.
pub fn check_flags(args: &RollingUpdateArgs, kind: InPlace, name: &str) -> Result<(), Failure> {
    if name.is_empty() || name.contains('/') {
        return Err(Failure::usage(format!(
            "invalid {} name {:?}",
            kind.kind(),
            args.name
        )));
    }
    let refused = [
        (
            args.next.is_some(),
            "NEXT: it is updated in place and keeps its name",
        ),
        (
            args.max_surge.is_some(),
            "--max-surge: it replaces its pods in place, never above its count",
        ),
        (
            args.update_period.is_some(),
            "--update-period: each step waits for its pods to be Ready instead",
        ),
        (
            args.deployment_label_key.is_some(),
            "--deployment-label-key: it tells its revisions apart itself",
        ),
        (
            matches!(
                args.max_unavailable,
                Some(IntOrPercent::Int(0) | IntOrPercent::Percent(0))
            ),
            "--max-unavailable 0: a step must let at least one pod go",
        ),
        (
            kind == InPlace::DaemonSet && args.canary.is_some(),
            "--canary: a DaemonSet's steps are sized by --max-unavailable and the hooks",
        ),
    ];
    match refused.into_iter().find(|(given, _)| *given) {
        Some((_, why)) => Err(Failure::usage(format!("{} cannot take {why}", args.name))),
        None => Ok(()),
    }
}

/// What the flags ask: a new image, a template from a file, or a rollback.
pub fn action(args: &RollingUpdateArgs, kind: InPlace) -> Result<PartitionAction, Failure> {
    match (&args.image, &args.filename, args.rollback) {
        (Some(image), None, false) => Ok(PartitionAction::Roll(TemplateChange::Image {
            image: image.clone(),
            container: args.container.clone(),
            pull_policy: args.image_pull_policy.map(|p| p.as_str().to_string()),
        })),
        (None, Some(path), false) => {
            let value = super::read_manifest(path)?;
            if value["kind"] != kind.kind() {
                return Err(Failure::usage(format!(
                    "{} holds a {}, but {} names a {}",
                    path.display(),
                    value["kind"].as_str().unwrap_or("document without a kind"),
                    args.name,
                    kind.kind()
                )));
            }
            Ok(PartitionAction::Roll(TemplateChange::File(value)))
        }
        (None, None, true) => Ok(PartitionAction::Rollback),
        _ => Err(Failure::usage(
            "give exactly one of --image or -f/--filename (or --rollback, alone)",
        )),
    }
}

/// The cluster, the namespace (`-n`, else the kubeconfig's), and the hooks loaded against the
/// live cluster; a live run (`dry_run` none) first checks every permission in `access`.
pub async fn connect(
    kube: &KubeFlags,
    policy: &Policy,
    dry_run: DryRun,
    access: fn(&str) -> Vec<Permission>,
) -> Result<(Cluster, String, Vec<Box<dyn Hook>>), Failure> {
    let cluster = Cluster::connect(&kube.connect_options()?).await?;
    let namespace = kube
        .namespace
        .clone()
        .unwrap_or_else(|| cluster.default_namespace.clone());
    if dry_run == DryRun::None {
        cluster.check_access(&access(&namespace)).await?;
    }
    let objects: Arc<dyn ObjectSource> = Arc::new(LiveObjects {
        cluster: cluster.clone(),
        handle: tokio::runtime::Handle::current(),
    });
    let hooks = tokio::task::block_in_place(|| load_hooks(policy, objects))?;
    Ok((cluster, namespace, hooks))
}

/// An update to run live.
pub enum LiveRequest {
    Partition(PartitionRequest),
    Nodes(NodeRequest),
}

/// Runs `request` under the workload's own lock, with events and Ctrl-C; the lock goes at the
/// end (the update's state is on the workload, not on the lock).
pub async fn run_live(
    cluster: &Cluster,
    args: &RollingUpdateArgs,
    policy: &Policy,
    mut hooks: Vec<Box<dyn Hook>>,
    request: LiveRequest,
) -> Result<(), Failure> {
    let (kind, namespace, name) = match &request {
        LiveRequest::Partition(r) => (InPlace::StatefulSet, &r.namespace, &r.name),
        LiveRequest::Nodes(r) => (InPlace::DaemonSet, &r.namespace, &r.name),
    };
    let settings = Settings {
        update_period: std::time::Duration::ZERO,
        poll_interval: args.poll_interval,
        timeout: args.timeout,
        max_surge: IntOrPercent::Int(0),
        // The request's budget is resolved against the workload by the executor.
        max_unavailable: args.max_unavailable.unwrap_or(IntOrPercent::Int(1)),
        deployment_key: String::new(),
        rollback_on_abort: args.on_abort == OnAbort::Rollback,
    };
    let reporter = reporter(args.output.text());
    let identity = identity();
    let lease = LeaseRef::workload(kind.short(), namespace, name);
    let mut lock = take_lock(cluster, &lease, &identity, args.force_unlock, &*reporter).await?;
    let scope = Scope::Workload {
        kind: kind.kind(),
        api_version: "apps/v1",
        namespace: namespace.clone(),
    };
    let recorder = EventRecorder::start(cluster, &identity, scope, Arc::clone(&reporter));
    let subject = format!("{}/{namespace}/{name}", kind.short());
    let estimates = super::live_estimates(cluster, policy, subject, &recorder).await;
    let workload = match &request {
        LiveRequest::Partition(r) => Workload::StatefulSet(r.name.clone()),
        LiveRequest::Nodes(r) => Workload::DaemonSet(r.name.clone()),
    };
    let mut updater = Updater {
        settings: &settings,
        kernel: Kernel::new(Parts {
            cluster,
            hooks: &mut hooks,
            reporter: &recorder,
            run_id: identity,
            controls: ControlsAt::Workload {
                workload,
                namespace: namespace.clone(),
            },
            // The lock is watched beside the run, which stops at once when it is lost.
            lock: None,
        }),
        pods: Default::default(),
        timing: StepClock::new(estimates, super::super::command_started()),
    };
    let run = async {
        match &request {
            LiveRequest::Partition(r) => updater.run_partitioned(r).await,
            LiveRequest::Nodes(r) => updater.run_node_by_node(r).await,
        }
    };
    let result = tokio::select! {
        result = run => result.map_err(failure),
        _ = crate::cli::interrupted() => Err(Failure::failed(format!("interrupted; {RESUME}"))),
        // Two runs must never drive one workload: a run that lost its lock stops at once.
        _ = lock.wait_lost() => Err(Failure::failed(format!(
            "the lock {lease} was taken over by another run; stopping here"
        ))),
    };
    let released = lock.release().await.map_err(Failure::from);
    recorder.finish(None).await;
    result.and(released)
}
