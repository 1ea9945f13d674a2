//! `rolling-update ds/NAME`: a DaemonSet updated node by node, in the order the selection hooks
//! give and in steps the batching hooks size, gated after each step, with the same plan, dry
//! runs, lock and resume as the other flows.

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
use crate::plan::rolling_update::daemon_set::{
    self, DaemonPod, DaemonSet, Revision, Start, UpdateAction, node_candidate,
};
use crate::plan::rolling_update::in_place::InPlaceWorkload;
use crate::plan::rolling_update::node_planner::{self, NodeInput, NodePlan};
use crate::plan::rolling_update::pods::PodInfo;
use crate::snapshot::{Node, Snapshot};
use crate::workload::node_by_node::NodeRequest;

/// A DaemonSet, its pods and revisions, and the cluster's nodes, as a plan reads them.
struct View {
    set: DaemonSet,
    pods: Vec<DaemonPod>,
    revisions: Vec<Revision>,
    nodes: Vec<Node>,
}

pub fn run(kube: &KubeFlags, args: &RollingUpdateArgs, name: String) -> Result<(), Failure> {
    check_flags(args, InPlace::DaemonSet, &name)?;
    let action = action(args, InPlace::DaemonSet)?;
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
        let fail = |e: String| Failure::usage(format!("snapshot {}: {e}", path.display()));
        let view = from_list(&list, &bytes, &namespace, &name).map_err(fail)?;
        let hooks = load_hooks(&policy, Arc::new(SnapshotObjects::new(bytes)))?;
        let workload = format!("ds/{namespace}/{name}");
        let estimates = step_estimates(History::default(), &policy, workload);
        let mut plan = plan(&view, &action, args, hooks, &estimates)?;
        let steps = plan.steps.iter_mut().map(|s| &mut s.decisions);
        plan.estimate = Some(estimate_update(&estimates, steps, args));
        return print(&plan, &plan.warnings, to, table);
    }
    let runtime = super::super::tokio_runtime()?;
    runtime.block_on(async {
        let access = crate::cluster::access::for_daemon_set_update;
        let (cluster, namespace, mut hooks) = connect(kube, &policy, dry_run, access).await?;
        if dry_run != DryRun::None {
            let set = cluster
                .get_daemon_set(&namespace, &name)
                .await?
                .ok_or_else(|| {
                    Failure::usage(format!(
                        "daemonset {name:?} not found in namespace {namespace:?}"
                    ))
                })?;
            let (pods, revisions) = cluster.daemon_set_state(&namespace, &set).await?;
            let nodes = cluster.snapshot_nodes().await?.nodes;
            let view = View {
                set,
                pods,
                revisions,
                nodes,
            };
            let mut unread = Vec::new();
            let history = history_for_plan(&cluster, &mut unread).await;
            let workload = format!("ds/{namespace}/{name}");
            let estimates = step_estimates(history, &policy, workload);
            let hooks = std::mem::take(&mut hooks);
            let mut plan =
                tokio::task::block_in_place(|| plan(&view, &action, args, hooks, &estimates))?;
            plan.warnings.append(&mut unread);
            if dry_run == DryRun::Server {
                server_dry_run(&cluster, &namespace, &view, &action).await?;
            }
            let steps = plan.steps.iter_mut().map(|s| &mut s.decisions);
            plan.estimate = Some(estimate_update(&estimates, steps, args));
            return print(&plan, &plan.warnings, to, table);
        }
        let request = LiveRequest::Nodes(NodeRequest {
            namespace: namespace.clone(),
            name: name.clone(),
            action,
            max_unavailable: args.max_unavailable,
        });
        run_live(&cluster, args, &policy, hooks, request).await
    })
}

/// The DaemonSet `name` of `namespace` in a v1 List, with its pods, its revisions and the nodes.
fn from_list(
    list: &serde_json::Value,
    bytes: &[u8],
    namespace: &str,
    name: &str,
) -> Result<View, String> {
    let items = super::items_in(list, namespace)?;
    let set = super::named_in(items.clone(), "DaemonSet", name, namespace)?;
    let set = DaemonSet::from_value(set.clone())?;
    let pods = items
        .clone()
        .filter(|i| i["kind"] == "Pod")
        .filter_map(|p| DaemonPod::owned(&PodInfo::from_value(p), set.uid()))
        .collect();
    let revisions = items
        .filter(|i| i["kind"] == "ControllerRevision")
        .filter_map(|r| Revision::owned(r, set.uid()))
        .collect();
    let nodes = Snapshot::from_json(bytes)
        .map(|s| s.nodes)
        .unwrap_or_default();
    Ok(View {
        set,
        pods,
        revisions,
        nodes,
    })
}

/// Plans the update: which nodes run an old pod once it starts, then the node machine with
/// the hooks.
fn plan(
    view: &View,
    action: &UpdateAction,
    args: &RollingUpdateArgs,
    mut hooks: Vec<Box<dyn Hook>>,
    estimates: &StepEstimates,
) -> Result<NodePlan, Failure> {
    let start = daemon_set::start(&view.set, &view.pods, &view.revisions, action)
        .map_err(Failure::usage)?;
    let newest = daemon_set::newest(&view.revisions).map_or("", |r| r.hash.as_str());
    let mut warnings = Vec::new();
    let pending = match &start {
        Start::Resume | Start::Write(None) => daemon_set::pending_nodes(&view.pods, newest),
        // A new template's revision is named by the controller once it is written: every node
        // running a pod is taken to need it.
        Start::Write(Some(_)) => daemon_set::pending_nodes(&view.pods, ""),
        Start::Revert(old) => daemon_set::pending_nodes(&view.pods, &old.hash),
    };
    if view.revisions.is_empty() && !matches!(start, Start::Write(Some(_))) {
        warnings.push(format!(
            "no ControllerRevision of {} is known: every node running one of its pods is taken to need the update",
            view.set.display()
        ));
    }
    if matches!(start, Start::Resume) {
        warnings.push(format!(
            "an update of {} is under way: the run goes on with the {} nodes still running an old pod",
            view.set.display(),
            pending.len()
        ));
    }
    let candidates: Vec<_> = pending
        .iter()
        .map(|n| {
            let ready = view.pods.iter().any(|p| &p.node == n && p.ready);
            let node = view.nodes.iter().find(|node| &node.name == n);
            node_candidate(node, n, view.set.name(), ready)
        })
        .collect();
    let desired = view.set.object["status"]["desiredNumberScheduled"]
        .as_i64()
        .unwrap_or(view.pods.len() as i64) as i32;
    let max = view
        .set
        .budget(args.max_unavailable)
        .map_err(Failure::usage)?;
    let updated = match start {
        Start::Resume => daemon_set::updated_nodes(&view.pods, newest),
        _ => Vec::new(),
    };
    let input = NodeInput {
        name: view.set.name(),
        candidates: &candidates,
        updated,
        max_unavailable: pods_at_a_time(max, desired),
        ctx: super::plan_context(args),
        estimates: estimates.clone(),
    };
    let mut plan =
        node_planner::plan(&input, &mut hooks).map_err(|e| Failure::failed(e.to_string()))?;
    warnings.append(&mut plan.warnings);
    plan.warnings = warnings;
    Ok(plan)
}

/// Sends the write that starts the update as a server dry run.
async fn server_dry_run(
    cluster: &Cluster,
    namespace: &str,
    view: &View,
    action: &UpdateAction,
) -> Result<(), Failure> {
    let start = daemon_set::start(&view.set, &view.pods, &view.revisions, action)
        .map_err(Failure::usage)?;
    let next = match start {
        Start::Resume => return Ok(()),
        Start::Write(template) => view.set.begun(template, false),
        Start::Revert(old) => view.set.begun(Some(old.template), true),
    };
    cluster
        .replace_daemon_set(namespace, &next, Write::ServerDryRun)
        .await?;
    eprintln!(
        "server dry run: the API server accepts the new template of {}, switched to OnDelete",
        view.set.display()
    );
    Ok(())
}

/// The table of a DaemonSet's plan.
fn table(plan: &NodePlan) -> Table<'_> {
    let rows = plan.steps.iter().map(|step| Row {
        cells: vec![
            step.nodes.join(","),
            step.decisions.decided_by.to_string(),
            step.ordered_by.to_string(),
        ],
        decisions: &step.decisions,
        canary: false,
    });
    Table {
        heading: format!(
            "Updating DaemonSet {} node by node: {} nodes run an old pod",
            plan.target.name, plan.target.nodes
        ),
        columns: &["NODES", "DECIDED BY", "ORDER"],
        rows: rows.collect(),
        after: Vec::new(),
        shadow: &[],
        stopped: plan.stopped.as_deref(),
        estimate: plan.estimate.as_ref(),
        then: "the original update strategy is restored".into(),
    }
}
