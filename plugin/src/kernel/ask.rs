//! Asking the hooks: once per decision, off the async workers (hooks run synchronously and may
//! block on `list-objects`), with every decision a hook took part in reported, and beside it
//! what each shadow hook would have decided.

use super::{Kernel, KernelError};
use crate::events::Event;
use crate::plan::decide::{self, BatchDecision, GateDecision, HookFailed};
use crate::plan::hook::{CallContext, DecidedBy, Hook, Phase};
use crate::plan::shadow::ShadowDecision;
use crate::policy::HookPoint;

/// The decision a question is about: its point (and a gate's phase), and the batch or step it
/// concerns with how many times it was asked before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At {
    pub point: HookPoint,
    pub phase: Option<Phase>,
    pub batch: u32,
    pub attempt: u32,
}

impl Kernel<'_> {
    /// Whether any hook (shadow or not) serves `point`.
    pub fn serves(&self, point: HookPoint) -> bool {
        decide::serves_any(self.hooks, point)
    }

    /// Asks the hooks through `ask`, then reports the warnings it left, the decision
    /// (`describe` says who took it and what it was; nothing when no hook serves the point: the
    /// built-in behaviour is not a decision anyone asked for) and what shadow hooks would have
    /// said.
    pub fn ask<D>(
        &mut self,
        at: At,
        ask: impl Question<D>,
        describe: impl Fn(&D) -> (DecidedBy, String),
    ) -> Result<D, KernelError> {
        let ctx = self.ctx();
        let mut warnings = Vec::new();
        let hooks = &mut *self.hooks;
        let (decision, said) = tokio::task::block_in_place(|| ask(hooks, &ctx, &mut warnings))?;
        for message in warnings {
            if self.warned.insert(message.clone()) {
                self.warn(message);
            }
        }
        if self.serves(at.point) {
            let (by, decision) = describe(&decision);
            self.reporter.report(Event::Decided {
                point: at.point,
                phase: at.phase,
                batch: at.batch,
                attempt: at.attempt,
                decided_by: by.to_string(),
                decision,
            });
        }
        for said in said {
            self.reporter.report(Event::Shadow {
                batch: at.batch,
                attempt: at.attempt,
                said,
            });
        }
        Ok(decision)
    }
}

/// A question put to the hooks: given them, the call's context and a place for warnings, it
/// answers with the decision and what shadow hooks would have said.
pub trait Question<D>:
    FnOnce(
    &mut [Box<dyn Hook>],
    &CallContext,
    &mut Vec<String>,
) -> Result<(D, Vec<ShadowDecision>), HookFailed>
{
}

impl<D, F> Question<D> for F where
    F: FnOnce(
        &mut [Box<dyn Hook>],
        &CallContext,
        &mut Vec<String>,
    ) -> Result<(D, Vec<ShadowDecision>), HookFailed>
{
}

impl Kernel<'_> {
    /// Asks the batching hooks the size of batch (or step) `batch`, after `attempt` pauses.
    pub fn ask_size(
        &mut self,
        batch: u32,
        attempt: u32,
        ask: impl Question<BatchDecision>,
    ) -> Result<BatchDecision, KernelError> {
        let at = At {
            point: HookPoint::Batch,
            phase: None,
            batch,
            attempt,
        };
        self.ask(at, ask, |d| (d.by().clone(), d.to_string()))
    }

    /// Asks the gates of `phase` about batch (or step) `batch`, after `attempt` waits.
    pub fn ask_gate(
        &mut self,
        phase: Phase,
        batch: u32,
        attempt: u32,
        ask: impl Question<GateDecision>,
    ) -> Result<GateDecision, KernelError> {
        let at = At {
            point: HookPoint::Gate,
            phase: Some(phase),
            batch,
            attempt,
        };
        self.ask(at, ask, |g| (g.by.clone(), g.verdict.to_string()))
    }
}
