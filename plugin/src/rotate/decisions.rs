//! Answering the group loop's questions with the hooks, live: each question once, when it is
//! due, about the batch at hand only, with the cluster read just before (so hooks see it as it
//! is) and `dryRun = false`. The kernel asks them and reports each decision a hook takes part
//! in, and beside it what each shadow hook would have decided.

use std::collections::{HashMap, HashSet};

use super::{GroupRun, RotateError, Rotation};
use crate::kernel::At;
use crate::plan::decide::{self, BatchDecision, GateDecision, HookFailed, Selected, Verdict};
use crate::plan::drain::classify;
use crate::plan::estimate::AskedAbout;
use crate::plan::group_loop::{BatchStep, GroupLoop, Sizing};
use crate::plan::health::{self, Index};
use crate::plan::hook::{BatchInfo, DecidedBy, HealthSummary, Instances, Phase};
use crate::plan::prepare;
use crate::plan::shadow;
use crate::policy::HookPoint;
use crate::snapshot::Pod;

impl GroupRun {
    /// A question about this group's next batch.
    pub(super) fn asking_batch(&self) -> AskedAbout<'_> {
        AskedAbout::Batch {
            group: &self.name,
            role: self.role,
        }
    }
}

impl Rotation<'_> {
    /// The selection, from the candidates the group started with (read just before).
    pub(super) fn select(&mut self, machine: &GroupLoop) -> Result<Selected, RotateError> {
        let (group, candidates) = (machine.group(), machine.candidates());
        let at = At {
            point: HookPoint::Select,
            phase: None,
            batch: 0,
            attempt: 0,
        };
        self.kernel.tell(self.estimates.timing(AskedAbout::Other));
        let selected = self.kernel.ask(
            at,
            |hooks, ctx, warnings| {
                let selected = decide::select(hooks, ctx, group, candidates, warnings)?;
                let said = shadow::select(hooks, ctx, group, candidates, &selected);
                Ok::<_, HookFailed>((selected, said))
            },
            |selected| {
                let names: Vec<&str> = (selected.chosen.iter())
                    .map(|c| candidates[c.index].name.as_str())
                    .collect();
                (selected.by.clone(), format!("order {}", names.join(", ")))
            },
        )?;
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
        if !self.kernel.serves(HookPoint::Batch) {
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
        let (batch, attempt) = (sizing.batches_done, sizing.attempt);
        self.tell_others(run);
        let timing = self.estimates.timing(run.asking_batch());
        self.kernel.tell(timing);
        let decision = self
            .kernel
            .ask_size(batch, attempt, |hooks, ctx, warnings| {
                let decision = decide::batch_size(hooks, ctx, &progress, warnings)?;
                let said = shadow::batch_size(hooks, ctx, &progress, &decision);
                Ok((decision, said))
            })?;
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
        if !self.kernel.serves(HookPoint::Gate) {
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
        let (index, attempt) = (batch.index, batch.attempt);
        self.tell_others(run);
        let timing = match phase {
            Phase::BeforeBatch => self.estimates.timing(run.asking_batch()),
            Phase::BeforeGroup | Phase::AfterBatch => self.estimates.timing(AskedAbout::Other),
        };
        self.kernel.tell(timing);
        let decision = self
            .kernel
            .ask_gate(phase, index, attempt, |hooks, ctx, warnings| {
                let decision = decide::gate(hooks, ctx, phase, batch, &summary, warnings)?;
                let said = shadow::gate(hooks, ctx, phase, batch, &summary, &decision);
                Ok((decision, said))
            })?;
        Ok(decision)
    }

    /// The `drain-order` hooks' turns for each node of `batch`, asked once per node just before
    /// its drain, with the pods the drain will evict as they are now. Nodes the hooks leave to
    /// the policy's order have none.
    pub(super) async fn drain_orders(
        &mut self,
        batch: &BatchStep,
        asking: AskedAbout<'_>,
    ) -> Result<HashMap<String, Vec<Vec<String>>>, RotateError> {
        let mut orders = HashMap::new();
        if !self.kernel.serves(HookPoint::DrainOrder) {
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
            let at = At {
                point: HookPoint::DrainOrder,
                phase: None,
                batch: info.index,
                attempt: info.attempt,
            };
            self.kernel.tell(self.estimates.timing(asking));
            let ordered = self.kernel.ask(
                at,
                |hooks, ctx, warnings| {
                    let ordered = decide::drain_order(hooks, ctx, node, &pods, warnings)?;
                    let said = shadow::drain_order(hooks, ctx, node, &pods, &ordered);
                    Ok::<_, HookFailed>((ordered, said))
                },
                |o| (o.by.clone(), format!("node {node}: {}", o.describe())),
            )?;
            if let Some(turns) = ordered.turns {
                orders.insert(node.clone(), turns);
            }
        }
        Ok(orders)
    }
}
