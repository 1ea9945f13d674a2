//! `rolling-update sts/NAME`: a StatefulSet rolled through its own partition, in steps the
//! policy's hooks size and gate, with the same plan, dry runs, lock and resume as the other
//! flows. The controller flags that have no meaning here are refused, not ignored.

use std::sync::Arc;
use std::time::Duration;

use super::{
    Failure, KubeFlags, OutputFormat, RESUME, RollingUpdateArgs, dry_run_mode, failure, load_hooks,
    output, policy_of, read_snapshot, reporter,
};
use crate::cli::nodes::DryRun;
use crate::cli::rotate_cmd::{identity, take_lock};
use crate::cluster::lock::LeaseRef;
use crate::cluster::recorder::EventRecorder;
use crate::cluster::{Cluster, LiveObjects};
use crate::hooks::{ObjectSource, SnapshotObjects};
use crate::plan::hook::{CallContext, Hook};
use crate::plan::rolling_update::partition_planner::{self, PartitionInput, PartitionPlan};
use crate::plan::rolling_update::pods::PodInfo;
use crate::plan::rolling_update::stateful_set::{
    self, PartitionAction, Start, StatefulSet, TemplateChange,
};
use crate::policy::IntOrPercent;
use crate::workload::execute::{Settings, Updater};
use crate::workload::partitioned::{PartitionRequest, pods_at_a_time};

/// The name in `sts/NAME` (and the resource names kubectl accepts for StatefulSets).
pub fn named(text: &str) -> Option<String> {
    let (resource, name) = text.split_once('/')?;
    matches!(
        resource.to_ascii_lowercase().as_str(),
        "sts" | "statefulset" | "statefulsets" | "statefulset.apps" | "statefulsets.apps"
    )
    .then(|| name.to_string())
}

/// Refuses the controller flags a StatefulSet has no use for.
fn check_flags(args: &RollingUpdateArgs, name: &str) -> Result<(), Failure> {
    if name.is_empty() || name.contains('/') {
        return Err(Failure::usage(format!(
            "invalid StatefulSet name {:?}",
            args.name
        )));
    }
    let refused = [
        (
            args.next.is_some(),
            "NEXT: a StatefulSet is updated in place and keeps its name",
        ),
        (
            args.max_surge.is_some(),
            "--max-surge: a StatefulSet replaces its pods in place, never above its replica count",
        ),
        (
            args.update_period.is_some(),
            "--update-period: each step waits for its pods to be Ready instead",
        ),
        (
            args.deployment_label_key.is_some(),
            "--deployment-label-key: a StatefulSet tells its revisions apart itself",
        ),
    ];
    match refused.into_iter().find(|(given, _)| *given) {
        Some((_, why)) => Err(Failure::usage(format!("{} cannot take {why}", args.name))),
        None => Ok(()),
    }
}

/// What the flags ask: a new image, a template from a file, or a rollback.
fn action(args: &RollingUpdateArgs) -> Result<PartitionAction, Failure> {
    match (&args.image, &args.filename, args.rollback) {
        (Some(image), None, false) => Ok(PartitionAction::Roll(TemplateChange::Image {
            image: image.clone(),
            container: args.container.clone(),
            pull_policy: args.image_pull_policy.map(|p| p.as_str().to_string()),
        })),
        (None, Some(path), false) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
            let value: serde_json::Value = serde_saphyr::from_str(&text)
                .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
            if value["kind"] != "StatefulSet" {
                return Err(Failure::usage(format!(
                    "{} holds a {}, but {} names a StatefulSet",
                    path.display(),
                    value["kind"].as_str().unwrap_or("document without a kind"),
                    args.name
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

fn max_unavailable(args: &RollingUpdateArgs) -> IntOrPercent {
    args.max_unavailable.unwrap_or(IntOrPercent::Int(1))
}

pub fn run(kube: &KubeFlags, args: &RollingUpdateArgs, name: String) -> Result<(), Failure> {
    check_flags(args, &name)?;
    let action = action(args)?;
    let policy = policy_of(args)?;
    let dry_run = dry_run_mode(args)?;
    if let Some(path) = &args.from_snapshot {
        let (bytes, list) = read_snapshot(path)?;
        let namespace = kube.namespace.clone().unwrap_or_else(|| "default".into());
        let (set, pods) = from_list(&list, &namespace, &name)
            .map_err(|e| Failure::usage(format!("snapshot {}: {e}", path.display())))?;
        let hooks = load_hooks(&policy, Arc::new(SnapshotObjects::new(bytes)))?;
        let plan = plan(&set, &pods, &action, args, hooks)?;
        return print(&plan, args.output);
    }
    let runtime = super::super::tokio_runtime()?;
    runtime.block_on(async {
        let cluster = Cluster::connect(&kube.connect_options()?).await?;
        let namespace = kube
            .namespace
            .clone()
            .unwrap_or_else(|| cluster.default_namespace.clone());
        if dry_run == DryRun::None {
            cluster
                .check_access(&crate::cluster::access::for_stateful_set_update(&namespace))
                .await?;
        }
        let objects: Arc<dyn ObjectSource> = Arc::new(LiveObjects {
            cluster: cluster.clone(),
            handle: tokio::runtime::Handle::current(),
        });
        let mut hooks = tokio::task::block_in_place(|| load_hooks(&policy, objects))?;
        if dry_run != DryRun::None {
            let set = cluster
                .get_stateful_set(&namespace, &name)
                .await?
                .ok_or_else(|| {
                    Failure::usage(format!(
                        "statefulset {name:?} not found in namespace {namespace:?}"
                    ))
                })?;
            let pods: Vec<PodInfo> = cluster
                .list_pods(&namespace, &set.selector_string())
                .await?
                .into_iter()
                .map(|(_, p)| p)
                .collect();
            let plan = tokio::task::block_in_place(|| {
                plan(&set, &pods, &action, args, std::mem::take(&mut hooks))
            })?;
            if dry_run == DryRun::Server {
                server_dry_run(&cluster, &namespace, &set, &pods, &action).await?;
            }
            return print(&plan, args.output);
        }
        let settings = Settings {
            update_period: Duration::ZERO,
            poll_interval: args.poll_interval,
            timeout: args.timeout,
            max_surge: IntOrPercent::Int(0),
            max_unavailable: max_unavailable(args),
            deployment_key: String::new(),
            rollback_on_abort: args.on_abort == super::OnAbort::Rollback,
        };
        let request = PartitionRequest {
            namespace: namespace.clone(),
            name: name.clone(),
            action,
            canary: args.canary.unwrap_or(1),
        };
        let reporter = reporter(args.output);
        let identity = identity();
        let lease = LeaseRef::workload("sts", &namespace, &name);
        let lock = take_lock(&cluster, &lease, &identity, false, &*reporter).await?;
        let recorder = EventRecorder::start(
            &cluster,
            &identity,
            crate::cluster::recorder::Scope::Workload {
                kind: "StatefulSet",
                api_version: "apps/v1",
                namespace: namespace.clone(),
            },
            reporter,
        );
        let mut updater = Updater {
            cluster: &cluster,
            settings: &settings,
            hooks: &mut hooks,
            run_id: identity,
            reporter: &recorder,
        };
        let result = tokio::select! {
            result = updater.run_partitioned(&request) => result.map_err(failure),
            _ = tokio::signal::ctrl_c() => Err(Failure::failed(format!("interrupted; {RESUME}"))),
        };
        // The update's state is on the StatefulSet: the lock holds none.
        let released = lock.release().await.map_err(Failure::from);
        recorder.finish(None).await;
        result.and(released)
    })
}

/// The StatefulSet `name` of `namespace` in a v1 List, and its pods.
fn from_list(
    list: &serde_json::Value,
    namespace: &str,
    name: &str,
) -> Result<(StatefulSet, Vec<PodInfo>), String> {
    let items = list["items"]
        .as_array()
        .ok_or("not a v1 List: there is no items array")?;
    let here = |item: &&serde_json::Value| {
        item["metadata"]["namespace"]
            .as_str()
            .is_none_or(|n| n == namespace)
    };
    let set = items
        .iter()
        .filter(here)
        .find(|i| i["kind"] == "StatefulSet" && i["metadata"]["name"] == name)
        .ok_or_else(|| format!("statefulset {name:?} not found in namespace {namespace:?}"))?;
    let set = StatefulSet::from_value(set.clone())?;
    let pods = items
        .iter()
        .filter(here)
        .filter(|i| i["kind"] == "Pod")
        .map(PodInfo::from_value)
        .filter(|p| stateful_set::ordinal(set.name(), &p.name).is_some())
        .collect();
    Ok((set, pods))
}

/// Plans the update: where it starts (as the run would start it), then the partition machine
/// with the hooks.
fn plan(
    set: &StatefulSet,
    pods: &[PodInfo],
    action: &PartitionAction,
    args: &RollingUpdateArgs,
    mut hooks: Vec<Box<dyn Hook>>,
) -> Result<PartitionPlan, Failure> {
    let start = stateful_set::start(set, pods, action).map_err(Failure::usage)?;
    let replicas = set.replicas();
    let update = set.update_revision().unwrap_or_default();
    let (partition, floor) = match &start {
        Start::Resume => (set.partition(), stateful_set::floor(set, pods, update)),
        // A new template's revision is named by the controller once it is written: every pod
        // is taken to need it.
        Start::Write(Some(_)) => (replicas, 0),
        Start::Write(None) => (replicas, stateful_set::floor(set, pods, update)),
        Start::Revert(revision) => (replicas, stateful_set::floor(set, pods, revision)),
    };
    let input = PartitionInput {
        name: set.name(),
        replicas,
        partition,
        floor,
        max_unavailable: pods_at_a_time(max_unavailable(args), replicas),
        canary: args.canary.unwrap_or(1),
        pods,
        ctx: CallContext {
            now: jiff::Timestamp::now().as_second(),
            run_id: "plan".into(),
            dry_run: true,
        },
    };
    let mut plan =
        partition_planner::plan(&input, &mut hooks).map_err(|e| Failure::failed(e.to_string()))?;
    if matches!(start, Start::Resume) {
        plan.warnings.push(format!(
            "an update of {} is under way at partition {partition}: the run goes on from there",
            set.display()
        ));
    }
    if set.on_delete() {
        plan.warnings.push(format!(
            "{} updates OnDelete: the run switches it to partitioned RollingUpdate for the steps and back to OnDelete at the end",
            set.display()
        ));
    }
    Ok(plan)
}

/// Sends the write that starts the update as a server dry run (a rollback's template is read
/// from its ControllerRevision first).
async fn server_dry_run(
    cluster: &Cluster,
    namespace: &str,
    set: &StatefulSet,
    pods: &[PodInfo],
    action: &PartitionAction,
) -> Result<(), Failure> {
    let template = match stateful_set::start(set, pods, action).map_err(Failure::usage)? {
        Start::Resume => return Ok(()),
        Start::Write(template) => template,
        Start::Revert(revision) => Some(
            cluster
                .revision_template(namespace, &revision)
                .await?
                .ok_or_else(|| Failure::usage(format!("the revision {revision} is gone")))?,
        ),
    };
    use crate::cluster::controllers::Write;
    cluster
        .replace_stateful_set(namespace, &set.begun(template), Write::ServerDryRun)
        .await?;
    eprintln!(
        "server dry run: the API server accepts the new template of {} with the partition at {}",
        set.display(),
        set.replicas()
    );
    Ok(())
}

fn print(plan: &PartitionPlan, format: OutputFormat) -> Result<(), Failure> {
    for w in &plan.warnings {
        crate::report::log(crate::report::Level::Warn, w);
    }
    match format {
        OutputFormat::Json | OutputFormat::Yaml => super::super::print_structured(plan, format),
        OutputFormat::Table | OutputFormat::Wide => {
            println!(
                "Updating StatefulSet {} ({} replicas) through its partition, highest ordinals first",
                plan.target.name, plan.target.replicas
            );
            let mut rows = vec![vec![
                "STEP".to_string(),
                "PARTITION".into(),
                "PODS".into(),
                "DECIDED BY".into(),
                "NOTE".into(),
            ]];
            for (i, step) in plan.steps.iter().enumerate() {
                let mut note = Vec::new();
                if step.canary {
                    note.push("canary".to_string());
                }
                if let Some(reason) = &step.size_reason {
                    note.push(format!("size: {reason}"));
                }
                if let Some(p) = &step.pause {
                    note.push(format!(
                        "after a {}s pause ({}): {}",
                        p.seconds, p.decided_by, p.reason
                    ));
                }
                if let Some(g) = &step.gate {
                    note.push(format!(
                        "gate {} ({}){}",
                        g.verdict,
                        g.decided_by,
                        g.reason
                            .as_ref()
                            .map(|r| format!(": {r}"))
                            .unwrap_or_default()
                    ));
                }
                rows.push(vec![
                    (i + 1).to_string(),
                    step.partition.to_string(),
                    step.pods.join(","),
                    step.decided_by.to_string(),
                    note.join("; "),
                ]);
            }
            print!("{}", output::align(&rows));
            if let Some(floor) = plan.settle {
                println!("Then: partition 0 (the ordinals below {floor} run the revision already)");
            }
            match &plan.stopped {
                Some(reason) => println!("Stops: {reason}"),
                None => println!("Then: the original update strategy is restored"),
            }
            Ok(())
        }
    }
}
