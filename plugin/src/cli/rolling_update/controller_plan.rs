//! The plan of a controller rolling update: the controllers and pods it is made from (a
//! snapshot or the live cluster), the planner run over them, what `--dry-run=server` sends, and
//! the table.

use super::render::{Row, Table};
use super::{Failure, RollingUpdateArgs};
use crate::cluster::Cluster;
use crate::plan::estimate::StepEstimates;
use crate::plan::hook::Hook;
use crate::plan::rolling_update::controller::{Controller, Kind};
use crate::plan::rolling_update::planner::{self, PlanInput, RollingUpdatePlan, Side};
use crate::plan::rolling_update::pods::PodInfo;
use crate::plan::rolling_update::prepare::{NextSource, PairView, view_pair};
use crate::plan::rolling_update::steps;

/// The objects a plan is made from: the two controllers (if they exist) and the pods.
pub(super) struct SnapshotView {
    controllers: Vec<Controller>,
    pods: Vec<PodInfo>,
}

impl SnapshotView {
    pub(super) fn from_list(
        list: &serde_json::Value,
        namespace: &str,
    ) -> Result<SnapshotView, String> {
        let items = super::items_in(list, namespace)?;
        Ok(SnapshotView {
            controllers: items
                .clone()
                .filter_map(|i| Controller::from_value(i.clone()).ok())
                .collect(),
            pods: items
                .filter(|i| i["kind"] == "Pod")
                .map(PodInfo::from_value)
                .collect(),
        })
    }

    pub(super) async fn live(
        cluster: &Cluster,
        kind: Kind,
        namespace: &str,
        old_name: &str,
        args: &RollingUpdateArgs,
    ) -> Result<SnapshotView, Failure> {
        let mut controllers = Vec::new();
        let old = cluster.get_controller(kind, namespace, old_name).await?;
        let next_name = args.next_name().or_else(|| {
            old.as_ref()
                .and_then(|o| o.annotation(crate::keys::LEGACY_NEXT_CONTROLLER))
                .map(String::from)
        });
        let mut pods = Vec::new();
        if let Some(old) = old {
            pods.extend(
                cluster
                    .list_pods(namespace, &old.selector_string())
                    .await?
                    .into_iter()
                    .map(|(_, p)| p),
            );
            controllers.push(old);
        }
        if let Some(name) = next_name
            && let Some(next) = cluster.get_controller(kind, namespace, &name).await?
        {
            pods.extend(
                cluster
                    .list_pods(namespace, &next.selector_string())
                    .await?
                    .into_iter()
                    .map(|(_, p)| p),
            );
            controllers.push(next);
        }
        Ok(SnapshotView { controllers, pods })
    }

    fn find(&self, kind: Kind, name: &str) -> Option<&Controller> {
        self.controllers
            .iter()
            .find(|c| c.kind == kind && c.name() == name)
    }
}

pub(super) fn plan_from(
    view: &SnapshotView,
    kind: Kind,
    old_name: &str,
    args: &RollingUpdateArgs,
    source: Option<&NextSource>,
    mut hooks: Vec<Box<dyn Hook>>,
    estimates: &StepEstimates,
) -> Result<(RollingUpdatePlan, PairView), Failure> {
    let old = view.find(kind, old_name).ok_or_else(|| {
        Failure::usage(format!(
            "{} {old_name:?} not found{}",
            kind.as_str(),
            if args.from_snapshot.is_some() {
                " in the snapshot"
            } else {
                ""
            }
        ))
    })?;
    let next_name = args.next_name().or_else(|| {
        old.annotation(crate::keys::LEGACY_NEXT_CONTROLLER)
            .map(String::from)
    });
    let existing = next_name.as_deref().and_then(|n| view.find(kind, n));
    let pair = view_pair(
        old,
        next_name.as_deref(),
        existing,
        source,
        args.deployment_label_key(),
        planner::Cleanup::for_next(args.next.is_some()),
    )
    .map_err(Failure::usage)?;
    let input = PlanInput {
        old: &pair.from,
        old_pods: &view.pods,
        next_name: pair.to_name.clone(),
        next_replicas: pair.to_replicas,
        next_exists: pair.to_exists,
        desired: pair.desired,
        budgets: steps::budgets(
            args.max_surge(),
            args.max_unavailable(),
            pair.desired,
            pair.from.replicas(),
        ),
        cleanup: pair.cleanup,
        ctx: super::plan_context(args),
        estimates: estimates.clone(),
    };
    let plan = planner::plan(&input, &mut hooks).map_err(|e| Failure::failed(e.to_string()))?;
    Ok((plan, pair))
}

/// Sends what initialization would write (the next controller's creation, the old one's
/// annotation) as server dry runs; nothing when the next controller exists already.
pub(super) async fn server_dry_run(
    cluster: &Cluster,
    pair: &PairView,
    namespace: &str,
) -> Result<(), Failure> {
    let Some(next) = &pair.to_create else {
        return Ok(());
    };
    use crate::cluster::controllers::Write;
    let old = &pair.from;
    cluster
        .create_controller(namespace, next, Write::ServerDryRun)
        .await?;
    cluster
        .patch_controller(
            old.kind,
            namespace,
            old.name(),
            &serde_json::json!({"metadata": {"annotations": {crate::keys::LEGACY_NEXT_CONTROLLER: next.name()}}}),
            Write::ServerDryRun,
        )
        .await?;
    eprintln!(
        "server dry run: the API server accepts creating {} and annotating {}",
        next.display(),
        old.display()
    );
    Ok(())
}

/// The table of a controller rolling update's plan.
pub(super) fn table(plan: &RollingUpdatePlan) -> Table<'_> {
    let next = if plan.next.exists {
        format!("exists with {} replicas", plan.next.replicas)
    } else {
        "to be created".to_string()
    };
    let rows = plan.steps.iter().map(|step| Row {
        cells: vec![
            match step.controller {
                Side::Old => plan.old.name.clone(),
                Side::Next => plan.next.name.clone(),
            },
            step.replicas.to_string(),
            step.decisions.decided_by.to_string(),
        ],
        decisions: &step.decisions,
        canary: false,
    });
    let order = plan.deletion_order.iter().map(|order| {
        format!(
            "Old pods go in the order of {}: {}",
            order.decided_by,
            order.pods.join(", ")
        )
    });
    let (old, next_name) = (&plan.old.name, &plan.next.name);
    Table {
        heading: format!(
            "Rolling {} {old} ({} replicas) to {next_name} ({next}, {} desired); maxSurge {}, maxUnavailable {}",
            plan.old.kind.as_str(),
            plan.old.replicas,
            plan.next.desired,
            plan.max_surge,
            plan.max_unavailable
        ),
        columns: &["CONTROLLER", "REPLICAS", "DECIDED BY"],
        rows: rows.collect(),
        after: order.collect(),
        shadow: &plan.shadow,
        stopped: plan.stopped.as_deref(),
        estimate: plan.estimate.as_ref(),
        then: match plan.cleanup {
            planner::Cleanup::Rename => {
                format!("delete {old} and rename {next_name} to {old}")
            }
            planner::Cleanup::DeleteOld => format!("delete {old}"),
        },
    }
}
