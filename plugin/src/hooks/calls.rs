//! The hook points as [`Hook`] calls into a loaded module: arguments converted, the module's
//! answer read back and bounded, nothing judged (that is `plan::decide`).

use wasmtime::component::Resource;

use super::flat_selection::FlatAnswer;
use super::{WasmHook, check_size, convert, draining, refused, wit};
use crate::plan::hook::{
    BatchAnswer, BatchInfo, CallContext, DrainOrderAnswer, GateAnswer, GroupInfo, HealthSummary,
    Hook, HookFault, Instances, Phase, Progress, SelectAnswer, StageInfo, StageOutcome,
};
use crate::policy::{FailurePolicy, HookMode, HookPoint};
use crate::snapshot::Pod;

impl Hook for WasmHook {
    fn name(&self) -> &str {
        &self.name
    }

    fn points(&self) -> &[HookPoint] {
        &self.points
    }

    fn left_out(&self) -> &[HookPoint] {
        &self.left_out
    }

    fn failure_policy(&self) -> FailurePolicy {
        self.failure_policy
    }

    fn mode(&self) -> HookMode {
        self.mode
    }

    fn select(
        &mut self,
        ctx: &CallContext,
        group: &GroupInfo,
        candidates: &Instances,
    ) -> Result<SelectAnswer, HookFault> {
        let wctx = self.context(ctx);
        let wgroup = convert::group(group);
        if let Some(flat) = &self.exports.flat_selection {
            let answer = self.call(Some(ctx), self.timeout, |_, instance, store| {
                let list = store.data_mut().table.push(candidates.clone())?;
                flat.load(&mut *store, instance)?.call_select_flat(
                    store,
                    wctx,
                    wgroup,
                    Resource::new_borrow(list.rep()),
                )
            })?;
            return Ok(match refused(answer)? {
                FlatAnswer::Defer => SelectAnswer::Defer,
                FlatAnswer::Choose(flat) => {
                    check_size(flat.text.len())?;
                    SelectAnswer::ChooseAt(convert::picks(flat, candidates)?)
                }
            });
        }
        let answer = self.call(Some(ctx), self.timeout, |e, instance, store| {
            let list = store.data_mut().table.push(candidates.clone())?;
            e.selection.load(&mut *store, instance)?.call_select(
                store,
                wctx,
                wgroup,
                Resource::new_borrow(list.rep()),
            )
        })?;
        match refused(answer)? {
            wit::Selection::Defer => Ok(SelectAnswer::Defer),
            wit::Selection::Choose(choices) => {
                check_size(choices.iter().map(|c| c.name.len() + c.reason.len()).sum())?;
                Ok(SelectAnswer::Choose(convert::choices(choices)))
            }
        }
    }

    fn next_batch(
        &mut self,
        ctx: &CallContext,
        progress: &Progress,
    ) -> Result<BatchAnswer, HookFault> {
        let wctx = self.context(ctx);
        let wprogress = convert::progress(progress);
        let answer = self.call(Some(ctx), self.timeout, |e, instance, store| {
            let pending = store.data_mut().table.push(progress.pending.clone())?;
            e.batching.load(&mut *store, instance)?.call_next_batch(
                store,
                wctx,
                wprogress,
                Resource::new_borrow(pending.rep()),
            )
        })?;
        Ok(match refused(answer)? {
            wit::BatchSize::Defer => BatchAnswer::Defer,
            wit::BatchSize::Size(sized) => {
                check_size(sized.reason.len())?;
                BatchAnswer::Size {
                    count: sized.count,
                    reason: sized.reason,
                }
            }
            wit::BatchSize::Pause(p) => {
                check_size(p.reason.len())?;
                BatchAnswer::Pause {
                    seconds: p.seconds,
                    reason: p.reason,
                }
            }
        })
    }

    fn gate(
        &mut self,
        ctx: &CallContext,
        phase: Phase,
        batch: &BatchInfo,
        summary: &HealthSummary,
    ) -> Result<GateAnswer, HookFault> {
        let wctx = self.context(ctx);
        let instances = convert::strs(&batch.instances);
        let wbatch = convert::batch(batch, &instances);
        let budgets = convert::budgets(summary);
        let failures = convert::strs(&summary.failures);
        let wsummary = convert::summary(summary, &budgets, &failures);
        let wphase = convert::phase(phase);
        let answer = self.call(Some(ctx), self.timeout, |e, instance, store| {
            e.gates
                .load(&mut *store, instance)?
                .call_check(store, wctx, wphase, wbatch, wsummary)
        })?;
        gate_answer(refused(answer)?)
    }

    fn stage_gate(
        &mut self,
        ctx: &CallContext,
        stage: &StageInfo,
        previous: Option<&StageOutcome>,
    ) -> Result<GateAnswer, HookFault> {
        let wctx = self.context(ctx);
        let clusters = convert::strs(&stage.clusters);
        let wstage = convert::stage(stage, &clusters);
        let results = previous.map(convert::cluster_results).unwrap_or_default();
        let wprevious = previous.map(|p| convert::stage_outcome(p, &results));
        let answer = self.call(Some(ctx), self.timeout, |e, instance, store| {
            let Some(gates) = &e.stage_gates else {
                return Ok(Ok(wit::Verdict::Defer));
            };
            gates
                .load(&mut *store, instance)?
                .call_check_stage(store, wctx, wstage, wprevious)
        })?;
        gate_answer(refused(answer)?)
    }

    fn drain_order(
        &mut self,
        ctx: &CallContext,
        node: &str,
        pods: &[Pod],
    ) -> Result<DrainOrderAnswer, HookFault> {
        let wctx = self.context(ctx);
        let labels: Vec<Vec<wit::KeyValueParam>> = pods
            .iter()
            .map(|p| convert::borrowed_pairs(&p.labels))
            .collect();
        let annotations: Vec<Vec<wit::KeyValueParam>> = pods
            .iter()
            .map(|p| convert::borrowed_pairs(&p.annotations))
            .collect();
        let wpods: Vec<draining::DrainPod> = pods
            .iter()
            .zip(labels.iter().zip(&annotations))
            .map(|(p, (l, a))| convert::drain_pod(p, l, a))
            .collect();
        let answer = self.call(Some(ctx), self.timeout, |e, instance, store| {
            let Some(d) = &e.draining else {
                return Ok(Ok(draining::DrainOrder::Defer));
            };
            d.load(&mut *store, instance)?
                .call_order(store, wctx, node, &wpods)
        })?;
        Ok(match refused(answer)? {
            draining::DrainOrder::Defer => DrainOrderAnswer::Defer,
            draining::DrainOrder::Turns(turns) => {
                check_size(turns.iter().flatten().map(String::len).sum())?;
                DrainOrderAnswer::Turns(turns)
            }
        })
    }
}

/// A gate's verdict, its reason bounded.
fn gate_answer(verdict: wit::Verdict) -> Result<GateAnswer, HookFault> {
    Ok(match verdict {
        wit::Verdict::Defer => GateAnswer::Defer,
        wit::Verdict::Proceed => GateAnswer::Proceed,
        wit::Verdict::Wait(p) => {
            check_size(p.reason.len())?;
            GateAnswer::Wait {
                seconds: p.seconds,
                reason: p.reason,
            }
        }
        wit::Verdict::Abort(reason) => {
            check_size(reason.len())?;
            GateAnswer::Abort(reason)
        }
    })
}
