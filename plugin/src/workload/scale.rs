//! The executor of the scale loop: drives [`ScaleLoop`] against the cluster. Each question is
//! answered once, when it is due, from the pods as they are then: the step's size by the
//! batching hooks, the order of the old pods (as deletion costs) by the selection hooks, the
//! verdict after each step by the gates. Without hooks (a rollback after an abort) every answer
//! is the built-in one.

use std::time::{Duration, Instant};

use serde_json::json;

use super::execute::{Pair, UpdateError, Updater};
use crate::cluster::controllers::Write;
use crate::cluster::controls::Workload;
use crate::events::Event;
use crate::kernel::{At, ControlsAt};
use crate::keys;
use crate::plan::decide::{self, BatchDecision, GateDecision, HookFailed, Selected, Verdict};
use crate::plan::hook::{DecidedBy, Phase};
use crate::plan::rolling_update::controller::Controller;
use crate::plan::rolling_update::planner::{self, LoopState, Side};
use crate::plan::rolling_update::pods::{self, PodInfo};
use crate::plan::rolling_update::scale_loop::{Action, Input, Outcome, Question, ScaleLoop, Step};
use crate::plan::rolling_update::steps::{self, Budgets};
use crate::plan::shadow;
use crate::policy::HookPoint;

/// The two controllers as the loop last saw them.
struct Sides {
    from: Controller,
    to: Controller,
    ns: String,
    budgets: Budgets,
    pods: Vec<PodInfo>,
    with_hooks: bool,
    /// When a loop that no longer moves gives up.
    deadline: Instant,
}

impl Sides {
    fn of(&self, side: Side) -> &Controller {
        match side {
            Side::Next => &self.to,
            Side::Old => &self.from,
        }
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
        let mut sides = Sides {
            from: pair.from.clone(),
            to: pair.to.clone(),
            ns: ns.to_string(),
            budgets,
            pods: Vec::new(),
            with_hooks,
            deadline: Instant::now() + self.settings.timeout,
        };
        // The operator's requests stand on the controller scaled down.
        self.kernel.control_at(ControlsAt::Workload {
            workload: Workload::Controller(pair.from.kind, pair.from.name().to_string()),
            namespace: ns.to_string(),
        });
        let mut machine = ScaleLoop::new(budgets, desired);
        let mut input = Input::Start;
        loop {
            input = match machine.step(input) {
                Step::Ask(Question::Observe) => {
                    Input::Observed(self.observe(&mut sides, desired).await?)
                }
                Step::Ask(Question::StepSize {
                    state,
                    max,
                    attempt,
                    ..
                }) => Input::Sized(self.step_size(&sides, &state, max, attempt)?),
                Step::Ask(Question::Order { state, amount }) => {
                    self.order_deletions(&sides, &state, amount).await?;
                    Input::Ordered
                }
                Step::Ask(Question::Gate {
                    side,
                    step,
                    state,
                    attempt,
                }) => Input::Judged(self.judge(&sides, side, (step, attempt), &state).await?),
                Step::Do(action) => {
                    if let Action::Scale { step, .. } = &action {
                        let at = format!(
                            "before step {} of the update of {}",
                            step + 1,
                            sides.from.display()
                        );
                        self.kernel.checkpoint(&at).await?;
                    }
                    self.carry_out(&mut sides, action).await?
                }
                Step::Done(Outcome::Finished) => return Ok(()),
                Step::Done(Outcome::Aborted {
                    step,
                    decided_by,
                    reason,
                    ..
                }) => {
                    return Err(UpdateError::Aborted(format!(
                        "{decided_by} aborted the update of {} after step {}: {reason}",
                        sides.from.display(),
                        step + 1
                    )));
                }
            };
        }
    }

    /// Carries out one action of the loop; returns what the loop is told next.
    async fn carry_out(&mut self, sides: &mut Sides, action: Action) -> Result<Input, UpdateError> {
        match action {
            Action::Scale {
                side,
                step,
                replicas,
                decided_by,
                ..
            } => {
                let now = self
                    .scale(sides, side, (step, replicas), decided_by)
                    .await?;
                return Ok(Input::Scaled(now));
            }
            Action::Wait {
                seconds,
                reason,
                decided_by,
                ..
            } => {
                let reason = format!("{reason} [{decided_by}]");
                self.kernel
                    .hold(Duration::from_secs(u64::from(seconds)), reason)
                    .await?;
                // A hook's hold is a decision, not a lack of progress.
                sides.deadline = Instant::now() + self.settings.timeout;
            }
            Action::UpdatePeriod if !self.settings.update_period.is_zero() => {
                let reason = "update period between scaling up and scaling down".into();
                self.kernel
                    .hold(self.settings.update_period, reason)
                    .await?;
            }
            Action::UpdatePeriod => {}
            Action::AwaitChange => {
                if Instant::now() > sides.deadline {
                    return Err(UpdateError::NoProgress(self.settings.timeout));
                }
                let selector = sides.to.selector_string();
                self.kernel
                    .cluster
                    .wait_pod_change(&sides.ns, &selector, self.settings.poll_interval)
                    .await;
            }
        }
        Ok(Input::Done)
    }

    /// Reads the pods of both controllers: how far the loop stands.
    async fn observe(&self, sides: &mut Sides, desired: i32) -> Result<LoopState, UpdateError> {
        sides.pods = self.pods_of(&sides.from, &sides.to, &sides.ns).await?;
        let now = jiff::Timestamp::now().as_second();
        let next_available = pods::owned_by(&sides.pods, sides.to.uid())
            .iter()
            .filter(|p| p.available(sides.to.min_ready_seconds(), now))
            .count() as i32;
        Ok(LoopState {
            old: sides.from.replicas(),
            next: sides.to.replicas(),
            next_available,
            desired,
            steps_done: 0,
        })
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
            for (_, pod) in self
                .kernel
                .cluster
                .list_pods(ns, &c.selector_string())
                .await?
            {
                if !pods.iter().any(|p| p.name == pod.name) {
                    pods.push(pod);
                }
            }
        }
        Ok(pods)
    }

    /// The size of a step: built in, or what the batching hooks say.
    fn step_size(
        &mut self,
        sides: &Sides,
        state: &LoopState,
        max: i32,
        attempt: u32,
    ) -> Result<BatchDecision, UpdateError> {
        if !sides.with_hooks {
            return Ok(BatchDecision::Size {
                size: max.max(0) as u32,
                reason: "built-in".into(),
                by: DecidedBy::BuiltIn,
            });
        }
        let candidates: Vec<_> = pods::owned_by(&sides.pods, sides.from.uid())
            .iter()
            .map(|p| p.candidate(sides.from.name()))
            .collect();
        let group = planner::group_info(sides.from.name(), state, &sides.budgets);
        let at = At {
            point: HookPoint::Batch,
            phase: None,
            batch: state.steps_done,
            attempt,
        };
        Ok(self.kernel.ask(
            at,
            |hooks, ctx, warnings| {
                let pending = candidates.into();
                planner::step_amount(hooks, ctx, &group, state, pending, max, warnings)
            },
            |d| (d.by().clone(), d.to_string()),
        )?)
    }

    /// Puts the selection hook's order on the old pods as deletion costs before a scale-down.
    async fn order_deletions(
        &mut self,
        sides: &Sides,
        state: &LoopState,
        amount: i32,
    ) -> Result<(), UpdateError> {
        let owned = pods::owned_by(&sides.pods, sides.from.uid());
        let candidates: Vec<_> = owned
            .iter()
            .map(|p| p.candidate(sides.from.name()))
            .collect();
        if !sides.with_hooks || candidates.is_empty() {
            return Ok(());
        }
        let group = planner::group_info(sides.from.name(), state, &sides.budgets);
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
        let selected = self.kernel.ask(
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
            let cost = (i as i64) - (first.len() as i64);
            let cost = cost.to_string();
            let key = keys::POD_DELETION_COST;
            (self.kernel.cluster)
                .annotate_pod(&sides.ns, name, key, Some(&cost))
                .await?;
        }
        Ok(())
    }

    /// Scales one side and waits until its controller settled; returns its replicas then.
    async fn scale(
        &mut self,
        sides: &mut Sides,
        side: Side,
        (step, replicas): (u32, i32),
        decided_by: DecidedBy,
    ) -> Result<i32, UpdateError> {
        let c = sides.of(side).clone();
        self.kernel.reporter.report(Event::StepStarted {
            step,
            controller: c.name().to_string(),
            from: c.replicas(),
            to: replicas,
            decided_by: decided_by.to_string(),
        });
        let patch = json!({"spec": {"replicas": replicas}});
        self.kernel
            .cluster
            .patch_controller(c.kind, &sides.ns, c.name(), &patch, Write::Apply)
            .await?;
        let scaled = self
            .kernel
            .cluster
            .wait_settled(c.kind, &sides.ns, c.name(), self.settings.timeout)
            .await?;
        self.kernel.reporter.report(Event::Scaled {
            controller: scaled.name().to_string(),
            from: c.replicas(),
            to: scaled.replicas(),
        });
        let now = scaled.replicas();
        match side {
            Side::Next => sides.to = scaled,
            Side::Old => sides.from = scaled,
        }
        sides.deadline = Instant::now() + self.settings.timeout;
        Ok(now)
    }

    /// The gates' verdict after a step, from the pods as they are now; a proceed completes the
    /// step.
    async fn judge(
        &mut self,
        sides: &Sides,
        side: Side,
        (step, attempt): (u32, u32),
        state: &LoopState,
    ) -> Result<GateDecision, UpdateError> {
        let decision = if sides.with_hooks {
            let pods = self.pods_of(&sides.from, &sides.to, &sides.ns).await?;
            let not_ready = pods.iter().filter(|p| !p.ready && !p.terminating).count() as u32;
            let name = sides.of(side).name().to_string();
            let at = At {
                point: HookPoint::Gate,
                phase: Some(Phase::AfterBatch),
                batch: step,
                attempt,
            };
            self.kernel.ask(
                at,
                |hooks, ctx, warnings| {
                    planner::gate_after(hooks, ctx, &name, state, not_ready, attempt, warnings)
                },
                |g| (g.by.clone(), g.verdict.to_string()),
            )?
        } else {
            GateDecision {
                verdict: Verdict::Proceed,
                by: DecidedBy::BuiltIn,
            }
        };
        if decision.verdict == Verdict::Proceed {
            self.kernel.reporter.report(Event::StepDone {
                step,
                old: sides.from.name().to_string(),
                old_replicas: sides.from.replicas(),
                next: sides.to.name().to_string(),
                next_replicas: sides.to.replicas(),
                desired: state.desired,
            });
        }
        Ok(decision)
    }
}
