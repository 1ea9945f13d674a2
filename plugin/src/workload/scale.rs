//! The executor of the scale loop: drives [`ScaleLoop`] against the cluster. Each question is
//! answered once, when it is due, from the pods as they are then: the step's size by the
//! batching hooks, the order of the old pods (as deletion costs) by the selection hooks, the
//! verdict after each step by the gates. Without hooks (a rollback after an abort) every answer
//! is the built-in one.

use std::time::{Duration, Instant};

use serde_json::json;

use super::driving::{self, Live};
use super::execute::{Pair, UpdateError, Updater};
use crate::cluster::controllers::Write;
use crate::cluster::controls::Workload;
use crate::events::Event;
use crate::kernel::{At, ControlsAt};
use crate::keys;
use crate::plan::decide::{self, BatchDecision, GateDecision, HookFailed, Selected};
use crate::plan::hook::{DecidedBy, Phase};
use crate::plan::rolling_update::asks::{
    LoopState, ScaleGate, ask_scale_gate, group_info, step_amount,
};
use crate::plan::rolling_update::controller::Controller;
use crate::plan::rolling_update::flow::{Gating, Sizing};
use crate::plan::rolling_update::planner::Side;
use crate::plan::rolling_update::pods::{self, PodInfo};
use crate::plan::rolling_update::scale_loop::{Action, Input, Question, ScaleLoop, Seen, Told};
use crate::plan::rolling_update::steps::{self, Budgets};
use crate::plan::shadow;
use crate::policy::HookPoint;

/// The two controllers as the loop last saw them.
struct Sides {
    from: Controller,
    to: Controller,
    ns: String,
    desired: i32,
    budgets: Budgets,
    pods: Vec<PodInfo>,
    /// How long the loop may go without moving, and when it gives up.
    timeout: Duration,
    deadline: Instant,
}

impl Sides {
    fn of(&self, side: Side) -> &Controller {
        match side {
            Side::Next => &self.to,
            Side::Old => &self.from,
        }
    }

    /// The old pods, as the hooks see them.
    fn candidates(&self) -> Vec<crate::plan::hook::Candidate> {
        (pods::owned_by(&self.pods, self.from.uid()).iter())
            .map(|p| p.candidate(self.from.name()))
            .collect()
    }
}

impl Updater<'_> {
    /// Scales `to` up and `from` down until `to` has `desired` replicas and `from` none.
    pub(super) async fn scale_loop(
        &mut self,
        pair: &Pair,
        ns: &str,
        with_hooks: bool,
    ) -> Result<(), UpdateError> {
        let desired = pair.desired;
        let budgets = steps::budgets(
            self.settings.max_surge,
            self.settings.max_unavailable,
            desired,
            pair.from.replicas(),
        );
        self.kernel.reporter.report(Event::UpdateStarted {
            old: pair.from.name().to_string(),
            old_replicas: pair.from.replicas(),
            next: pair.to.name().to_string(),
            next_replicas: pair.to.replicas(),
            desired,
            min_available: budgets.min_available,
            max_total: desired + budgets.max_surge,
        });
        if with_hooks {
            for message in decide::left_out_warnings(self.kernel.hooks) {
                self.kernel.warn(message);
            }
        }
        // The operator's requests stand on the controller scaled down.
        self.kernel.control_at(ControlsAt::Workload {
            workload: Workload::Controller(pair.from.kind, pair.from.name().to_string()),
            namespace: ns.to_string(),
        });
        let mut sides = Sides {
            from: pair.from.clone(),
            to: pair.to.clone(),
            ns: ns.to_string(),
            desired,
            budgets,
            pods: Vec::new(),
            timeout: self.settings.timeout,
            deadline: Instant::now() + self.settings.timeout,
        };
        let machine = ScaleLoop::new(budgets, desired);
        driving::drive(self, &mut sides, machine, with_hooks).await
    }

    /// The pods of both controllers (their selectors may differ in any key with `-f`).
    async fn pods_of(
        &self,
        from: &Controller,
        to: &Controller,
        ns: &str,
    ) -> Result<Vec<PodInfo>, UpdateError> {
        let mut pods: Vec<PodInfo> = Vec::new();
        for c in [from, to] {
            for pod in self.pods_now(ns, &c.selector_string()).await? {
                if !pods.iter().any(|p| p.name == pod.name) {
                    pods.push(pod);
                }
            }
        }
        Ok(pods)
    }
}

impl Live for Sides {
    type Flow = ScaleLoop;

    /// The size of a step: what the batching hooks say, offered the old pods.
    async fn size(
        &mut self,
        u: &mut Updater<'_>,
        sizing: &Sizing<Seen>,
    ) -> Result<BatchDecision, UpdateError> {
        let candidates = self.candidates();
        let state = &sizing.about.state;
        let group = group_info(self.from.name(), state, &self.budgets);
        let max = i32::try_from(sizing.max).unwrap_or(i32::MAX);
        Ok(u.kernel
            .ask_size(state.steps_done, sizing.attempt, |hooks, ctx, warnings| {
                let pending = candidates.into();
                step_amount(hooks, ctx, &group, state, pending, max, warnings)
            })?)
    }

    /// The gates' verdict after a step, from the pods as they are now.
    async fn gate(
        &mut self,
        u: &mut Updater<'_>,
        gating: &Gating<Seen>,
    ) -> Result<GateDecision, UpdateError> {
        let pods = u.pods_of(&self.from, &self.to, &self.ns).await?;
        let not_ready = pods.iter().filter(|p| !p.ready && !p.terminating).count() as u32;
        let name = self.of(gating.about.side).name().to_string();
        let asked = ScaleGate {
            controller: &name,
            state: &gating.about.state,
            pods_not_ready: not_ready,
            attempt: gating.attempt,
        };
        let (step, attempt) = (gating.step, gating.attempt);
        Ok(u.kernel
            .ask_gate(Phase::AfterBatch, step, attempt, |hooks, ctx, warnings| {
                ask_scale_gate(asked, hooks, ctx, warnings)
            })?)
    }

    /// A step passed its gate: it is complete.
    fn passed(&mut self, u: &mut Updater<'_>, gating: &Gating<Seen>) {
        u.kernel.reporter.report(Event::StepDone {
            step: gating.step,
            old: self.from.name().to_string(),
            old_replicas: self.from.replicas(),
            next: self.to.name().to_string(),
            next_replicas: self.to.replicas(),
            desired: self.desired,
        });
    }

    async fn answer(
        &mut self,
        u: &mut Updater<'_>,
        ask: Question,
        with_hooks: bool,
    ) -> Result<Input, UpdateError> {
        let told = match ask {
            Question::Observe => Told::Observed(self.observe(u).await?),
            Question::Order { state, amount } => {
                if with_hooks {
                    self.order_deletions(u, &state, amount).await?;
                }
                Told::Ordered
            }
        };
        Ok(Input::Own(told))
    }

    fn safe_point(&self, act: &Action) -> Option<String> {
        match act {
            Action::Scale { step, .. } => Some(driving::before_step(*step, &self.from.display())),
            Action::UpdatePeriod | Action::AwaitChange => None,
        }
    }

    async fn act(&mut self, u: &mut Updater<'_>, act: Action) -> Result<Input, UpdateError> {
        match act {
            Action::Scale {
                side,
                step,
                replicas,
                decided_by,
                ..
            } => {
                let now = self.scale(u, side, step, replicas, decided_by).await?;
                return Ok(Input::Own(Told::Scaled(now)));
            }
            Action::UpdatePeriod if !u.settings.update_period.is_zero() => {
                let reason = "update period between scaling up and scaling down".into();
                u.kernel.hold(u.settings.update_period, reason).await?;
            }
            Action::UpdatePeriod => {}
            Action::AwaitChange => {
                if Instant::now() > self.deadline {
                    return Err(UpdateError::NoProgress(u.settings.timeout));
                }
                let selector = self.to.selector_string();
                let what = format!("waiting for the pods of {}", self.to.display());
                u.next_pod_change(&self.ns, &selector, what).await?;
            }
        }
        Ok(Input::Done)
    }

    /// A hook's hold is a decision, not a lack of progress.
    fn held(&mut self) {
        self.deadline = Instant::now() + self.timeout;
    }

    async fn finish(&mut self, _: &mut Updater<'_>) -> Result<(), UpdateError> {
        Ok(())
    }

    fn aborted(&self, step: u32, decided_by: &DecidedBy, reason: &str, _: Seen) -> String {
        format!(
            "{decided_by} aborted the update of {} after step {}: {reason}",
            self.from.display(),
            step + 1
        )
    }
}

impl Sides {
    /// Reads the pods of both controllers: how far the loop stands.
    async fn observe(&mut self, u: &Updater<'_>) -> Result<LoopState, UpdateError> {
        self.pods = u.pods_of(&self.from, &self.to, &self.ns).await?;
        let now = jiff::Timestamp::now().as_second();
        let next_available = pods::owned_by(&self.pods, self.to.uid())
            .iter()
            .filter(|p| p.available(self.to.min_ready_seconds(), now))
            .count() as i32;
        Ok(LoopState {
            old: self.from.replicas(),
            next: self.to.replicas(),
            next_available,
            desired: self.desired,
            steps_done: 0,
        })
    }

    /// Puts the selection hook's order on the old pods as deletion costs before a scale-down.
    async fn order_deletions(
        &mut self,
        u: &mut Updater<'_>,
        state: &LoopState,
        amount: i32,
    ) -> Result<(), UpdateError> {
        let candidates = self.candidates();
        if candidates.is_empty() {
            return Ok(());
        }
        let group = group_info(self.from.name(), state, &self.budgets);
        let at = At {
            point: HookPoint::Select,
            phase: None,
            batch: state.steps_done,
            attempt: 0,
        };
        let going = |selected: &Selected| -> Vec<String> {
            (selected.chosen.iter())
                .take(amount.max(0) as usize)
                .map(|c| candidates[c.index].name.clone())
                .collect()
        };
        let selected = u.kernel.ask(
            at,
            |hooks, ctx, warnings| {
                let selected = decide::select(hooks, ctx, &group, &candidates, warnings)?;
                let said = shadow::select(hooks, ctx, &group, &candidates, &selected);
                Ok::<_, HookFailed>((selected, said))
            },
            |selected| match selected.by {
                DecidedBy::BuiltIn => (DecidedBy::BuiltIn, "order left to the controller".into()),
                _ => (
                    selected.by.clone(),
                    format!("order {}", going(selected).join(", ")),
                ),
            },
        )?;
        if selected.by == DecidedBy::BuiltIn {
            return Ok(());
        }
        let first = going(&selected);
        for (i, name) in first.iter().enumerate() {
            let cost = ((i as i64) - (first.len() as i64)).to_string();
            let key = keys::POD_DELETION_COST;
            (u.kernel.cluster)
                .annotate_pod(&self.ns, name, key, Some(&cost))
                .await?;
        }
        Ok(())
    }

    /// Scales one side and waits until its controller settled; returns its replicas then.
    async fn scale(
        &mut self,
        u: &Updater<'_>,
        side: Side,
        step: u32,
        replicas: i32,
        decided_by: DecidedBy,
    ) -> Result<i32, UpdateError> {
        let c = self.of(side).clone();
        u.kernel.reporter.report(Event::StepStarted {
            step,
            controller: c.name().to_string(),
            from: c.replicas(),
            to: replicas,
            decided_by: decided_by.to_string(),
        });
        let patch = json!({"spec": {"replicas": replicas}});
        (u.kernel.cluster)
            .patch_controller(c.kind, &self.ns, c.name(), &patch, Write::Apply)
            .await?;
        let scaled = (u.kernel.cluster)
            .wait_settled(c.kind, &self.ns, c.name(), u.settings.timeout)
            .await?;
        u.kernel.reporter.report(Event::Scaled {
            controller: scaled.name().to_string(),
            from: c.replicas(),
            to: scaled.replicas(),
        });
        let now = scaled.replicas();
        match side {
            Side::Next => self.to = scaled,
            Side::Old => self.from = scaled,
        }
        self.deadline = Instant::now() + self.timeout;
        Ok(now)
    }
}
