//! Answering the group loop's questions with the hooks, live: each question once, when it is
//! due, about the batch at hand only, with the cluster read just before (so hooks see it as it
//! is) and `dryRun = false`. Every decision a hook takes part in is reported, and beside it
//! what each shadow hook would have decided.

use std::collections::{HashMap, HashSet};

use super::{GroupRun, RotateError, Rotation};
use crate::events::Event;
use crate::plan::decide::{self, BatchDecision, GateDecision, HookFailed, Selected, Verdict};
use crate::plan::drain::classify;
use crate::plan::group_loop::{BatchStep, GroupLoop, Sizing};
use crate::plan::health::{self, Index};
use crate::plan::hook::{BatchInfo, CallContext, DecidedBy, HealthSummary, Instances, Phase};
use crate::plan::prepare;
use crate::plan::shadow::{self, ShadowDecision};
use crate::policy::HookPoint;
use crate::snapshot::Pod;

/// Runs sync hook calls off the async workers' hot path (hooks may block on `list-objects`).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

impl Rotation<'_> {
    fn ctx(&self) -> CallContext {
        CallContext {
            now: jiff::Timestamp::now().as_second(),
            run_id: self.lock.identity().to_string(),
            dry_run: false,
        }
    }

    fn serves(&self, point: HookPoint) -> bool {
        decide::serves_any(self.hooks, point)
    }

    /// Reports the warnings a decision left (hooks ignored under `failurePolicy: Ignore`).
    fn report_warnings(&self, warnings: Vec<String>) {
        for message in warnings {
            self.warn(message);
        }
    }

    fn decided(
        &self,
        point: HookPoint,
        phase: Option<Phase>,
        batch: &BatchInfo,
        by: &DecidedBy,
        decision: String,
    ) {
        self.reporter.report(Event::Decided {
            point,
            phase,
            batch: batch.index,
            attempt: batch.attempt,
            decided_by: by.to_string(),
            decision,
        });
    }

    fn shadowed(&self, batch: &BatchInfo, said: Vec<ShadowDecision>) {
        for said in said {
            self.reporter.report(Event::Shadow {
                batch: batch.index,
                attempt: batch.attempt,
                said,
            });
        }
    }

    /// The selection, from the candidates the group started with (read just before).
    pub(super) fn select(&mut self, machine: &GroupLoop) -> Result<Selected, RotateError> {
        let ctx = self.ctx();
        let mut warnings = Vec::new();
        let hooks = &mut *self.hooks;
        let (group, candidates) = (machine.group(), machine.candidates());
        let (selected, said) = blocking(|| {
            let selected = decide::select(hooks, &ctx, group, candidates, &mut warnings)?;
            let said = shadow::select(hooks, &ctx, group, candidates, &selected);
            Ok::<_, HookFailed>((selected, said))
        })?;
        self.report_warnings(warnings);
        if self.serves(HookPoint::Select) {
            let names: Vec<&str> = selected
                .chosen
                .iter()
                .map(|c| machine.candidates()[c.index].name.as_str())
                .collect();
            let batch = BatchInfo {
                index: 0,
                instances: Vec::new(),
                canary: false,
                attempt: 0,
            };
            let decision = format!("order {}", names.join(", "));
            self.decided(HookPoint::Select, None, &batch, &selected.by, decision);
            self.shadowed(&batch, said);
        }
        Ok(selected)
    }

    /// The next batch's size. For a batching hook the cluster is read again first, so that it
    /// sees the pending instances as they are now.
    pub(super) async fn size(
        &mut self,
        machine: &GroupLoop,
        sizing: &Sizing,
        run: &mut GroupRun,
    ) -> Result<BatchDecision, RotateError> {
        let mut progress = machine.progress(sizing);
        if !self.serves(HookPoint::Batch) {
            return Ok(BatchDecision::Size {
                size: sizing.max_batch,
                reason: sizing.max_batch_reason.clone(),
                by: DecidedBy::BuiltIn,
            });
        }
        self.refresh(run).await?;
        let index = Index::new(&run.latest);
        let label = prepare::group_label(self.policy, &self.settings.plan);
        let groups = crate::plan::groups::collect(&run.latest.nodes, label);
        if let Some(group) = groups.iter().find(|g| g.name == run.name) {
            let fresh = prepare::refresh(&index, &self.settings.plan.drain, group, &sizing.pending);
            progress.pending = Instances::from(fresh);
        }
        let ctx = self.ctx();
        let mut warnings = Vec::new();
        let hooks = &mut *self.hooks;
        let (decision, said) = blocking(|| {
            let decision = decide::batch_size(hooks, &ctx, &progress, &mut warnings)?;
            let said = shadow::batch_size(hooks, &ctx, &progress, &decision);
            Ok::<_, HookFailed>((decision, said))
        })?;
        self.report_warnings(warnings);
        let batch = BatchInfo {
            index: sizing.batches_done,
            instances: Vec::new(),
            canary: false,
            attempt: sizing.attempt,
        };
        self.decided(
            HookPoint::Batch,
            None,
            &batch,
            decision.by(),
            decision.to_string(),
        );
        self.shadowed(&batch, said);
        Ok(decision)
    }

    /// A gate's verdict about the group or the batch at hand. Without a gate hook the built-in
    /// verdict is to go on, and the health it would be shown need not be read.
    pub(super) async fn judge(
        &mut self,
        phase: Phase,
        batch: &BatchInfo,
        run: &mut GroupRun,
    ) -> Result<GateDecision, RotateError> {
        if !self.serves(HookPoint::Gate) {
            return Ok(GateDecision {
                verdict: Verdict::Proceed,
                by: DecidedBy::BuiltIn,
            });
        }
        let summary = match phase {
            // The budgets covering the batch, as they are now.
            Phase::BeforeBatch => {
                self.refresh(run).await?;
                let index = Index::new(&run.latest);
                let names: Vec<&str> = batch.instances.iter().map(String::as_str).collect();
                let drain = &self.settings.plan.drain;
                let health = health::summarize(&run.latest, &index, &[], &HashSet::new(), drain);
                HealthSummary {
                    budgets: health::budgets_covering(&index, &names, drain),
                    ..health
                }
            }
            // The view's pods, as a plan counts them.
            Phase::BeforeGroup => {
                self.refresh(run).await?;
                let index = Index::new(&run.latest);
                let drain = &self.settings.plan.drain;
                health::summarize(&run.latest, &index, &[], &HashSet::new(), drain)
            }
            Phase::AfterBatch => {
                self.view.caught_up().await?;
                self.view.health(&HashSet::new())?
            }
        };
        let ctx = self.ctx();
        let mut warnings = Vec::new();
        let hooks = &mut *self.hooks;
        let (decision, said) = blocking(|| {
            let decision = decide::gate(hooks, &ctx, phase, batch, &summary, &mut warnings)?;
            let said = shadow::gate(hooks, &ctx, phase, batch, &summary, &decision);
            Ok::<_, HookFailed>((decision, said))
        })?;
        self.report_warnings(warnings);
        let text = decision.verdict.to_string();
        self.decided(HookPoint::Gate, Some(phase), batch, &decision.by, text);
        self.shadowed(batch, said);
        Ok(decision)
    }

    /// The `drain-order` hooks' turns for each node of `batch`, asked once per node just before
    /// its drain, with the pods the drain will evict as they are now. Nodes the hooks leave to
    /// the policy's order have none.
    pub(super) async fn drain_orders(
        &mut self,
        batch: &BatchStep,
    ) -> Result<HashMap<String, Vec<Vec<String>>>, RotateError> {
        let mut orders = HashMap::new();
        if !self.serves(HookPoint::DrainOrder) {
            return Ok(orders);
        }
        let info = BatchInfo {
            index: batch.index,
            instances: batch.instances.clone(),
            canary: batch.canary,
            attempt: 0,
        };
        let snapshot = self.view.caught_up().await?;
        for node in &batch.instances {
            let pods: Vec<Pod> = (snapshot.pods.iter())
                .filter(|p| p.node_name.as_deref() == Some(node.as_str()))
                .filter(|p| classify(p, &self.settings.drain.options).is_evicted())
                .map(|p| Pod::clone(p))
                .collect();
            let ctx = self.ctx();
            let mut warnings = Vec::new();
            let hooks = &mut *self.hooks;
            let (ordered, said) = blocking(|| {
                let ordered = decide::drain_order(hooks, &ctx, node, &pods, &mut warnings)?;
                let said = shadow::drain_order(hooks, &ctx, node, &pods, &ordered);
                Ok::<_, HookFailed>((ordered, said))
            })?;
            self.report_warnings(warnings);
            let decision = format!("node {node}: {}", ordered.describe());
            self.decided(HookPoint::DrainOrder, None, &info, &ordered.by, decision);
            self.shadowed(&info, said);
            if let Some(turns) = ordered.turns {
                orders.insert(node.clone(), turns);
            }
        }
        Ok(orders)
    }
}
