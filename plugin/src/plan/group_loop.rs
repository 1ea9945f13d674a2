//! kops' group update loop as a pure step machine: told what happened last, it says what to ask
//! or do next. It owns the order of a group's rotation (selection, validation, gates, surges,
//! canary, waves) and nothing else: no I/O, no clock, no hooks. Two drivers run it: the planner
//! answers with simulated outcomes and records a plan; the executor answers with real effects.
//! Because both follow the same steps, the plan is what the run does when nothing goes wrong,
//! and every question is asked once, when its decision is due.
//!
//! The loop of one group: ask the selection; validate the cluster (not for a bastion, nor with
//! `--cloudonly`); ask the `before-group` gate until it proceeds; ask the first batch's size
//! (so that a closed window or a broken batching hook stops the group before anything changed);
//! begin (the instances are fixed from here on); surge (a canary surge alone first when nothing
//! is up to date); then per batch: its size (asked already for the first), the `before-batch`
//! gate, the replacement, a soak (when one is set, after every batch but the last: hold, then
//! validate again), the `after-batch` gate. A wait or pause is an action, after which the same
//! question is asked again with the attempt counted.

use std::sync::Arc;

use super::budget::{Budget, BudgetRule};
use super::decide::{BatchDecision, GateDecision, Selected, Verdict};
use super::hook::{BatchInfo, Candidate, DecidedBy, GroupInfo, Instances, Phase, Progress};
use crate::keys;

/// What a group's loop starts from, read from one snapshot.
#[derive(Debug, Clone)]
pub struct GroupStart {
    /// The group as hooks see it; `selected` counts the built-in choice.
    pub info: GroupInfo,
    /// Every instance of the group, those the built-in rules would update (with a reason) first.
    pub candidates: Vec<Candidate>,
    pub budget: BudgetRule,
    pub cloud_only: bool,
    /// How long to hold after each batch but the last before judging it; 0 for no soak.
    pub soak_seconds: u32,
}

/// What the loop needs next.
pub type Step = super::Step<Question, Action, Outcome>;

/// A decision the policy makes: the driver asks the hooks (or uses the built-in answer).
#[derive(Debug, Clone, PartialEq)]
pub enum Question {
    /// Which candidates to update, in which order: see [`GroupLoop::candidates`].
    Select,
    /// How many of the pending instances the next batch takes: see [`GroupLoop::progress`].
    BatchSize(Sizing),
    Gate {
        phase: Phase,
        batch: BatchInfo,
    },
}

/// Where the group stands when its next batch is sized.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizing {
    pub batches_done: u32,
    pub updated: u32,
    /// The instances the next batch can take, in update order.
    pub pending: Instances,
    /// The built-in size of the next batch, and the most a hook may answer.
    pub max_batch: u32,
    /// Why `max_batch` is what it is.
    pub max_batch_reason: String,
    /// The budget's room now: the group's concurrency less the nodes set aside, before the
    /// canary's one and the last batch's cap. Others' disruptions count against it.
    pub room: u32,
    /// How many pauses the batching hooks already asked for before this batch.
    pub attempt: u32,
}

/// Something to carry out.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Check the cluster's health before the group starts.
    Validate,
    /// The group starts: these instances, in this order, are the whole of its update.
    Begin { instances: Vec<String> },
    /// Create new instances for these before any is drained (detach them from the group).
    Surge {
        instances: Vec<String>,
        canary: bool,
    },
    /// Cordon, drain and replace a batch; then wait for the replacements and validate.
    Replace(BatchStep),
    /// Hold the rotation, then ask the same question again.
    Wait(WaitStep),
    /// Hold after batch `batch` for the soak time; the cluster is validated again next.
    Soak { batch: u32, seconds: u32 },
}

/// One batch of a group's update.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchStep {
    pub index: u32,
    pub instances: Vec<String>,
    pub canary: bool,
    /// Who sized it, and why.
    pub decided_by: DecidedBy,
    pub size_reason: String,
}

/// A hold asked for by a hook.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitStep {
    pub seconds: u32,
    pub reason: String,
    pub decided_by: DecidedBy,
    /// The question asked again afterwards: a batch size (a pause) or a gate.
    pub then: Asked,
}

/// Which question a wait defers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    BatchSize,
    Gate(Phase),
}

/// How a group's loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every chosen instance was replaced (or none was chosen).
    Finished,
    /// A gate stopped the rotation; nothing of `batch` (nor after it) was touched.
    Aborted {
        phase: Phase,
        batch: u32,
        decided_by: DecidedBy,
        reason: String,
    },
    /// The nodes set aside take the whole of the group's budget: each stays cordoned, so no
    /// further batch fits in it. Nothing after them was touched.
    NoRoomLeft {
        set_aside: Vec<String>,
        concurrency: u32,
    },
}

/// What the driver reports back after a step.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// The first call.
    Start,
    Selected(Selected),
    Sized(BatchDecision),
    Judged(GateDecision),
    /// The last action was carried out.
    Done,
    /// The batch was replaced but for these of its nodes, set aside because their drain could
    /// not finish (`drain.undrainable: Quarantine`): cordoned, they count against the budget of
    /// every batch after.
    Replaced {
        set_aside: Vec<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    New,
    Selecting,
    Validating,
    Gating(Phase, u32),
    /// A wait is being held; then `Asked` is asked again with the next attempt.
    Waiting(Asked, u32),
    Beginning,
    Surging,
    Sizing(u32),
    Replacing,
    Soaking,
    /// Validating again after a soak.
    Settling,
    Over,
}

/// The loop of one group. Drive it with [`GroupLoop::step`] until it is done.
#[derive(Debug, Clone)]
pub struct GroupLoop {
    start: GroupStart,
    state: State,
    /// Set once the selection is known.
    selected: Option<Selected>,
    budget: Option<Budget>,
    /// The chosen instances in update order, shared with every batch's sizing.
    order: Instances,
    surges: Vec<(Vec<String>, bool)>,
    canary_wave: bool,
    /// Instances replaced so far, and batches run.
    done: usize,
    batches: u32,
    /// The batch at hand: sized, then replaced, then judged.
    current: Option<BatchStep>,
    /// `current` is sized and not replaced yet.
    sized: bool,
    begun: bool,
    /// The nodes set aside so far.
    set_aside: Vec<String>,
}

impl GroupLoop {
    pub fn new(start: GroupStart) -> GroupLoop {
        GroupLoop {
            start,
            state: State::New,
            selected: None,
            budget: None,
            order: Instances::from(Vec::new()),
            surges: Vec::new(),
            canary_wave: false,
            done: 0,
            batches: 0,
            current: None,
            sized: false,
            begun: false,
            set_aside: Vec::new(),
        }
    }

    /// The group, with `selected` updated once the selection is known.
    pub fn group(&self) -> &GroupInfo {
        &self.start.info
    }

    /// Every instance of the group, for the selection.
    pub fn candidates(&self) -> &[Candidate] {
        &self.start.candidates
    }

    /// The selection, once made.
    pub fn selected(&self) -> Option<&Selected> {
        self.selected.as_ref()
    }

    /// The budget resolved against the selection, once made.
    pub fn budget(&self) -> Option<Budget> {
        self.budget
    }

    /// What a batching hook is shown for `sizing`.
    pub fn progress<'a>(&'a self, sizing: &Sizing) -> Progress<'a> {
        Progress {
            group: &self.start.info,
            batches_done: sizing.batches_done,
            updated: sizing.updated,
            pending: sizing.pending.clone(),
            max_batch: sizing.max_batch,
            max_batch_reason: sizing.max_batch_reason.clone(),
        }
    }

    /// Advances the loop with the outcome of the last step.
    ///
    /// # Panics
    /// When `input` does not answer the last step: a driver bug, never a cluster condition.
    pub fn step(&mut self, input: Input) -> Step {
        let state = self.state;
        let step = match (state, input) {
            (State::New, Input::Start) => {
                self.state = State::Selecting;
                Step::Ask(Question::Select)
            }
            (State::Selecting, Input::Selected(selected)) => self.chose(selected),
            (State::Validating, Input::Done) => self.gate(Phase::BeforeGroup, 0),
            (State::Gating(phase, attempt), Input::Judged(decision)) => {
                self.judged(phase, attempt, decision)
            }
            (State::Waiting(Asked::Gate(phase), attempt), Input::Done) => {
                self.gate(phase, attempt + 1)
            }
            (State::Waiting(Asked::BatchSize, attempt), Input::Done) => self.size(attempt + 1),
            (State::Beginning | State::Surging, Input::Done) => self.next_surge_or_batch(),
            (State::Replacing, Input::Replaced { set_aside }) => {
                self.set_aside.extend(set_aside);
                self.step(Input::Done)
            }
            (State::Replacing, Input::Done) => {
                let batch = self.current.as_ref().expect("a batch is being replaced");
                self.done += batch.instances.len();
                self.batches += 1;
                let soaks = self.start.soak_seconds > 0 && self.done < self.order.len();
                if !soaks {
                    return self.gate(Phase::AfterBatch, 0);
                }
                self.state = State::Soaking;
                Step::Do(Action::Soak {
                    batch: batch.index,
                    seconds: self.start.soak_seconds,
                })
            }
            (State::Soaking, Input::Done) => {
                self.state = State::Settling;
                Step::Do(Action::Validate)
            }
            (State::Settling, Input::Done) => self.gate(Phase::AfterBatch, 0),
            (State::Sizing(attempt), Input::Sized(decision)) => self.sized(attempt, decision),
            (state, input) => panic!("group loop in state {state:?} cannot take {input:?}"),
        };
        if let Step::Done(_) = step {
            self.state = State::Over;
        }
        step
    }

    fn chose(&mut self, mut selected: Selected) -> Step {
        // Instances an earlier run set aside are tried again first; those it detached always
        // go last.
        let candidates = &self.start.candidates;
        selected.chosen.sort_by_key(|c| {
            let annotations = &candidates[c.index].annotations;
            (
                annotations.contains_key(keys::DETACHED),
                !annotations.contains_key(keys::QUARANTINED),
            )
        });
        let count = selected.chosen.len() as u32;
        self.start.info.selected = count;
        let budget = self
            .start
            .budget
            .resolve(count)
            .expect("the group's settings resolved when it was prepared");
        let order: Vec<Candidate> = selected
            .chosen
            .iter()
            .map(|c| candidates[c.index].clone())
            .collect();
        self.plan_surges(&order, budget);
        self.order = Instances::new(Arc::from(order));
        self.budget = Some(budget);
        self.selected = Some(selected);
        if self.order.is_empty() {
            return Step::Done(Outcome::Finished);
        }
        if self.start.info.role == super::Role::Bastion || self.start.cloud_only {
            return self.gate(Phase::BeforeGroup, 0);
        }
        self.state = State::Validating;
        Step::Do(Action::Validate)
    }

    /// Surges detach the last instances of the update order (the canary alone first when no
    /// instance is up to date); those detached by an earlier run need no new instance. With no
    /// surge, a canary is a first wave of one.
    fn plan_surges(&mut self, order: &[Candidate], budget: Budget) {
        let canary = self.start.info.up_to_date == 0;
        let surge = if self.start.cloud_only {
            0
        } else {
            budget.surge
        };
        let targets: Vec<String> = order
            .iter()
            .rev()
            .take(surge as usize)
            .filter(|c| !c.annotations.contains_key(keys::DETACHED))
            .map(|c| c.name.clone())
            .collect();
        let mut rest = targets.as_slice();
        if canary && let Some((first, others)) = rest.split_first() {
            self.surges.push((vec![first.clone()], true));
            rest = others;
        }
        if !rest.is_empty() {
            self.surges.push((rest.to_vec(), false));
        }
        self.surges.reverse();
        self.canary_wave = canary && surge == 0;
    }

    fn gate(&mut self, phase: Phase, attempt: u32) -> Step {
        let batch = match phase {
            Phase::BeforeGroup => BatchInfo {
                index: 0,
                instances: self.order.iter().map(|c| c.name.clone()).collect(),
                canary: false,
                attempt,
            },
            Phase::BeforeBatch | Phase::AfterBatch => {
                let current = self.current.as_ref().expect("a batch is at hand");
                BatchInfo {
                    index: current.index,
                    instances: current.instances.clone(),
                    canary: current.canary,
                    attempt,
                }
            }
        };
        self.state = State::Gating(phase, attempt);
        Step::Ask(Question::Gate { phase, batch })
    }

    fn judged(&mut self, phase: Phase, attempt: u32, decision: GateDecision) -> Step {
        match decision.verdict {
            Verdict::Proceed => match phase {
                Phase::BeforeGroup => self.size(0),
                Phase::BeforeBatch => {
                    self.sized = false;
                    self.state = State::Replacing;
                    Step::Do(Action::Replace(
                        self.current.clone().expect("a batch is at hand"),
                    ))
                }
                Phase::AfterBatch => self.next_surge_or_batch(),
            },
            Verdict::Wait { seconds, reason } => {
                self.state = State::Waiting(Asked::Gate(phase), attempt);
                Step::Do(Action::Wait(WaitStep {
                    seconds,
                    reason,
                    decided_by: decision.by,
                    then: Asked::Gate(phase),
                }))
            }
            Verdict::Abort(reason) => Step::Done(Outcome::Aborted {
                phase,
                batch: self.current.as_ref().map_or(0, |b| b.index),
                decided_by: decision.by,
                reason,
            }),
        }
    }

    fn next_surge_or_batch(&mut self) -> Step {
        if let Some((instances, canary)) = self.surges.pop() {
            self.state = State::Surging;
            return Step::Do(Action::Surge { instances, canary });
        }
        if self.sized {
            return self.gate(Phase::BeforeBatch, 0);
        }
        if self.done >= self.order.len() {
            return Step::Done(Outcome::Finished);
        }
        self.size(0)
    }

    fn size(&mut self, attempt: u32) -> Step {
        let remaining = self.order.len() - self.done;
        let concurrency = self.budget.map_or(1, |b| b.concurrency);
        // Nodes set aside stay cordoned: each takes a place of the budget.
        let set_aside = self.set_aside.len() as u32;
        let room = concurrency.saturating_sub(set_aside);
        if room == 0 {
            return Step::Done(Outcome::NoRoomLeft {
                set_aside: self.set_aside.clone(),
                concurrency,
            });
        }
        let limit = if self.canary_wave && self.done == 0 {
            1
        } else {
            room
        };
        let max_batch = limit.min(remaining as u32);
        let info = &self.start.info;
        let max_batch_reason = if self.canary_wave && self.done == 0 {
            "canary: one instance first".to_string()
        } else if max_batch < room {
            format!("the last {max_batch} to update")
        } else if set_aside > 0 {
            format!(
                "the budget allows {concurrency} at once (maxSurge {}, maxUnavailable {}), less {set_aside} node(s) set aside",
                info.max_surge, info.max_unavailable
            )
        } else {
            format!(
                "the budget allows {concurrency} at once (maxSurge {}, maxUnavailable {})",
                info.max_surge, info.max_unavailable
            )
        };
        self.state = State::Sizing(attempt);
        Step::Ask(Question::BatchSize(Sizing {
            batches_done: self.batches,
            updated: self.done as u32,
            pending: self.order.window(self.done, max_batch as usize),
            max_batch,
            max_batch_reason,
            room,
            attempt,
        }))
    }

    fn sized(&mut self, attempt: u32, decision: BatchDecision) -> Step {
        match decision {
            BatchDecision::Size { size, reason, by } => {
                let end = (self.done + size as usize).min(self.order.len());
                self.current = Some(BatchStep {
                    index: self.batches,
                    instances: self.order[self.done..end]
                        .iter()
                        .map(|c| c.name.clone())
                        .collect(),
                    canary: self.canary_wave && self.done == 0,
                    decided_by: by,
                    size_reason: reason,
                });
                self.sized = true;
                if !self.begun {
                    self.begun = true;
                    self.state = State::Beginning;
                    return Step::Do(Action::Begin {
                        instances: self.order.iter().map(|c| c.name.clone()).collect(),
                    });
                }
                self.gate(Phase::BeforeBatch, 0)
            }
            BatchDecision::Pause {
                seconds,
                reason,
                by,
            } => {
                self.state = State::Waiting(Asked::BatchSize, attempt);
                Step::Do(Action::Wait(WaitStep {
                    seconds,
                    reason,
                    decided_by: by,
                    then: Asked::BatchSize,
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests;
