//! `rolling-update sts/NAME`: a StatefulSet rolled through its own partition, in steps the
//! policy's hooks size and gate, with the same plan, dry runs, lock and resume as the other
//! flows. The controller flags that have no meaning here are refused, not ignored.

use std::sync::Arc;

use super::in_place::{InPlace, LiveRequest, action, check_flags, connect, run_live};
use super::render::{Destination, Row, Table, print};
use super::{
    Failure, KubeFlags, RollingUpdateArgs, dry_run_mode, estimate_update, history_for_plan,
    load_hooks, policy_of, read_snapshot, step_estimates,
};
use crate::cli::nodes::DryRun;
use crate::cluster::Cluster;
use crate::cluster::controllers::Write;
use crate::hooks::SnapshotObjects;
use crate::plan::estimate::History;
use crate::plan::estimate::StepEstimates;
use crate::plan::hook::Hook;
use crate::plan::rolling_update::asks::pods_at_a_time;
use crate::plan::rolling_update::in_place::InPlaceWorkload;
use crate::plan::rolling_update::partition_planner::{self, PartitionInput, PartitionPlan};
use crate::plan::rolling_update::pods::PodInfo;
use crate::plan::rolling_update::stateful_set::{self, PartitionAction, Start, StatefulSet};
use crate::workload::partitioned::PartitionRequest;

pub fn run(kube: &KubeFlags, args: &RollingUpdateArgs, name: String) -> Result<(), Failure> {
    check_flags(args, InPlace::StatefulSet, &name)?;
    let action = action(args, InPlace::StatefulSet)?;
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
        let (set, pods) = from_list(&list, &namespace, &name)
            .map_err(|e| Failure::usage(format!("snapshot {}: {e}", path.display())))?;
        let hooks = load_hooks(&policy, Arc::new(SnapshotObjects::new(bytes)))?;
        let workload = format!("sts/{namespace}/{name}");
        let estimates = step_estimates(History::default(), &policy, workload);
        let mut plan = plan(&set, &pods, &action, args, hooks, &estimates)?;
        let steps = plan.steps.iter_mut().map(|s| &mut s.decisions);
        plan.estimate = Some(estimate_update(&estimates, steps, args));
        return print(&plan, &plan.warnings, to, table);
    }
    let runtime = super::super::tokio_runtime()?;
    runtime.block_on(async {
        let access = crate::cluster::access::for_stateful_set_update;
        let (cluster, namespace, mut hooks) = connect(kube, &policy, dry_run, access).await?;
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
            let mut unread = Vec::new();
            let history = history_for_plan(&cluster, &mut unread).await;
            let workload = format!("sts/{namespace}/{name}");
            let estimates = step_estimates(history, &policy, workload);
            let hooks = std::mem::take(&mut hooks);
            let mut plan = tokio::task::block_in_place(|| {
                plan(&set, &pods, &action, args, hooks, &estimates)
            })?;
            plan.warnings.append(&mut unread);
            if dry_run == DryRun::Server {
                server_dry_run(&cluster, &namespace, &set, &pods, &action).await?;
            }
            let steps = plan.steps.iter_mut().map(|s| &mut s.decisions);
            plan.estimate = Some(estimate_update(&estimates, steps, args));
            return print(&plan, &plan.warnings, to, table);
        }
        let request = LiveRequest::Partition(PartitionRequest {
            namespace: namespace.clone(),
            name: name.clone(),
            action,
            canary: args.canary.unwrap_or(1),
            max_unavailable: args.max_unavailable,
        });
        run_live(&cluster, args, &policy, hooks, request).await
    })
}

/// The StatefulSet `name` of `namespace` in a v1 List, and its pods.
fn from_list(
    list: &serde_json::Value,
    namespace: &str,
    name: &str,
) -> Result<(StatefulSet, Vec<PodInfo>), String> {
    let items = super::items_in(list, namespace)?;
    let set = super::named_in(items.clone(), "StatefulSet", name, namespace)?;
    let set = StatefulSet::from_value(set.clone())?;
    let pods = items
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
    estimates: &StepEstimates,
) -> Result<PartitionPlan, Failure> {
    let start = stateful_set::start(set, pods, action).map_err(Failure::usage)?;
    let replicas = set.replicas();
    let update = set.update_revision().unwrap_or_default();
    let (partition, floor) = match &start {
        Start::Resume => (
            stateful_set::partition_of(set, pods, update),
            stateful_set::floor(set, pods, update),
        ),
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
        max_unavailable: pods_at_a_time(set.budget(args.max_unavailable), replicas),
        canary: args.canary.unwrap_or(1),
        pods,
        ctx: super::plan_context(args),
        estimates: estimates.clone(),
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
            "{} updates OnDelete: the run deletes the pods of each step itself, highest ordinal first",
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
    let (template, rollback) =
        match stateful_set::start(set, pods, action).map_err(Failure::usage)? {
            Start::Resume => return Ok(()),
            Start::Write(template) => (template, false),
            Start::Revert(revision) => {
                let template = cluster
                    .revision_template(namespace, &revision)
                    .await?
                    .ok_or_else(|| Failure::usage(format!("the revision {revision} is gone")))?;
                (Some(template), true)
            }
        };
    cluster
        .replace_stateful_set(
            namespace,
            &set.begun(template, rollback),
            Write::ServerDryRun,
        )
        .await?;
    let holding = if set.on_delete() {
        "OnDelete, so nothing moves before the run deletes a pod".to_string()
    } else {
        format!("the partition at {}", set.replicas())
    };
    eprintln!(
        "server dry run: the API server accepts the new template of {} with {holding}",
        set.display()
    );
    Ok(())
}

/// The table of a StatefulSet's plan.
fn table(plan: &PartitionPlan) -> Table<'_> {
    let rows = plan.steps.iter().map(|step| Row {
        cells: vec![
            step.partition.to_string(),
            step.pods.join(","),
            step.decisions.decided_by.to_string(),
        ],
        decisions: &step.decisions,
        canary: step.canary,
    });
    let settle = plan.settle.map(|floor| {
        format!("Then: partition 0 (the ordinals below {floor} run the revision already)")
    });
    Table {
        heading: format!(
            "Updating StatefulSet {} ({} replicas) through its partition, highest ordinals first",
            plan.target.name, plan.target.replicas
        ),
        columns: &["PARTITION", "PODS", "DECIDED BY"],
        rows: rows.collect(),
        after: settle.into_iter().collect(),
        shadow: &[],
        stopped: plan.stopped.as_deref(),
        estimate: plan.estimate.as_ref(),
        then: "the original update strategy is restored".into(),
    }
}
