//! The seed's scale loop as a pure step machine: told what the two controllers look like and
//! what the hooks answered, it says what to ask or do next. No I/O, no clock, no hooks; the
//! planner drives it with simulated pods (every new pod available at once), the executor with
//! the cluster. It owns the order of the loop and nothing else.
//!
//! Each round tries the next controller, then the old one: observe both, work out the
//! built-in step (`steps::scale_up` / `steps::scale_down`), ask its size (a pause holds and asks
//! again), for a scale-down ask the order of the old pods, scale, ask the gate (a wait holds and
//! asks again), and after a scale-up hold the update period. A round in which nothing could
//! move waits for a change. The loop ends when the next controller has the desired replicas
//! and the old one none.

use super::planner::{LoopState, Side};
use super::steps::{self, Budgets};
use crate::plan::decide::{BatchDecision, GateDecision, Verdict};
use crate::plan::hook::DecidedBy;

/// What the loop needs next.
pub type Step = crate::plan::Step<Question, Action, Outcome>;

#[derive(Debug, Clone, PartialEq)]
pub enum Question {
    /// The controllers' replicas and how many of the next one's pods are available.
    Observe,
    /// The size of a step of `side`: at most `max`, the built-in amount.
    StepSize {
        side: Side,
        state: LoopState,
        max: i32,
        /// Pauses the batching hooks already asked for before this step.
        attempt: u32,
    },
    /// Which old pods go in a scale-down of `amount` (a selection).
    Order { state: LoopState, amount: i32 },
    /// The gates' verdict after step `step` (from 0), which scaled `side`.
    Gate {
        side: Side,
        step: u32,
        state: LoopState,
        attempt: u32,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Scale `side` to `replicas`; report the replicas it has afterwards.
    Scale {
        side: Side,
        step: u32,
        from: i32,
        replicas: i32,
        decided_by: DecidedBy,
    },
    /// Hold for a hook, then ask the same question again.
    Wait {
        seconds: u32,
        reason: String,
        decided_by: DecidedBy,
        held_by: Held,
    },
    /// The update period after a scale-up, before the old controller shrinks.
    UpdatePeriod,
    /// Nothing could move this round: wait for the pods to change.
    AwaitChange,
}

/// Which question a wait defers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// A batching hook's pause: the step's size is asked again.
    Pause,
    /// A gate's wait: the gate is asked again.
    Gate,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Finished,
    /// A gate stopped the loop after step `step` (from 0), which scaled `side`.
    Aborted {
        side: Side,
        step: u32,
        replicas: i32,
        decided_by: DecidedBy,
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Start,
    Observed(LoopState),
    Sized(BatchDecision),
    Ordered,
    /// The last scale is done: the controller's replicas now.
    Scaled(i32),
    Judged(GateDecision),
    /// The last action other than a scale was carried out.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    New,
    Observing,
    Sizing,
    Ordering,
    Scaling,
    Gating,
    /// A pause is held; then the same side is observed and sized again.
    Pausing,
    /// A gate's wait is held; then the gate is asked again.
    Waiting,
    Settling,
    Awaiting,
    Over,
}

/// The loop of one rolling update.
#[derive(Debug, Clone)]
pub struct ScaleLoop {
    budgets: Budgets,
    desired: i32,
    state: State,
    side: Side,
    observed: Option<LoopState>,
    steps: u32,
    pauses: u32,
    attempt: u32,
    /// The step at hand: its size and who decided it, and the replicas it left.
    amount: i32,
    sized_by: DecidedBy,
    replicas: i32,
    /// Whether anything moved or was held this round.
    moved: bool,
}

impl ScaleLoop {
    pub fn new(budgets: Budgets, desired: i32) -> ScaleLoop {
        ScaleLoop {
            budgets,
            desired,
            state: State::New,
            side: Side::Next,
            observed: None,
            steps: 0,
            pauses: 0,
            attempt: 0,
            amount: 0,
            sized_by: DecidedBy::BuiltIn,
            replicas: 0,
            moved: false,
        }
    }

    /// Advances the loop with the outcome of the last step.
    ///
    /// # Panics
    /// When `input` does not answer the last step: a driver bug, never a cluster condition.
    pub fn step(&mut self, input: Input) -> Step {
        let step = match (self.state, input) {
            (State::New, Input::Start) => self.observe(),
            (State::Observing, Input::Observed(observed)) => self.observed(observed),
            (State::Sizing, Input::Sized(decision)) => self.sized(decision),
            (State::Ordering, Input::Ordered) => self.scale(),
            (State::Scaling, Input::Scaled(replicas)) => {
                self.replicas = replicas;
                self.steps += 1;
                self.moved = true;
                self.gate(0)
            }
            (State::Gating, Input::Judged(decision)) => self.judged(decision),
            (State::Pausing, Input::Done) => {
                self.pauses += 1;
                self.moved = true;
                self.observe()
            }
            (State::Waiting, Input::Done) => self.gate(self.attempt + 1),
            (State::Settling, Input::Done) => self.next_side(),
            (State::Awaiting, Input::Done) => self.observe(),
            (state, input) => panic!("scale loop in state {state:?} cannot take {input:?}"),
        };
        if let Step::Done(_) = step {
            self.state = State::Over;
        }
        step
    }

    fn observe(&mut self) -> Step {
        self.state = State::Observing;
        Step::Ask(Question::Observe)
    }

    fn current(&self) -> LoopState {
        LoopState {
            steps_done: self.steps,
            ..self.observed.expect("observed before any step")
        }
    }

    fn observed(&mut self, observed: LoopState) -> Step {
        self.observed = Some(observed);
        let state = self.current();
        if self.side == Side::Next && state.next == self.desired && state.old == 0 {
            return Step::Done(Outcome::Finished);
        }
        let built_in = match self.side {
            Side::Next => steps::scale_up(state.old, state.next, self.desired, &self.budgets),
            Side::Old => steps::scale_down(
                state.old,
                state.next,
                state.next_available,
                self.desired,
                &self.budgets,
            ),
        };
        let Some(max) = built_in else {
            return self.next_side();
        };
        self.state = State::Sizing;
        Step::Ask(Question::StepSize {
            side: self.side,
            state,
            max,
            attempt: self.pauses,
        })
    }

    fn sized(&mut self, decision: BatchDecision) -> Step {
        match decision {
            BatchDecision::Size { size, by, .. } => {
                self.pauses = 0;
                self.amount = size as i32;
                self.sized_by = by;
                if self.side == Side::Old {
                    self.state = State::Ordering;
                    return Step::Ask(Question::Order {
                        state: self.current(),
                        amount: self.amount,
                    });
                }
                self.scale()
            }
            BatchDecision::Pause {
                seconds,
                reason,
                by,
            } => {
                self.state = State::Pausing;
                Step::Do(Action::Wait {
                    seconds,
                    reason,
                    decided_by: by,
                    held_by: Held::Pause,
                })
            }
        }
    }

    fn scale(&mut self) -> Step {
        let state = self.current();
        let (from, replicas) = match self.side {
            Side::Next => (state.next, state.next + self.amount),
            Side::Old => (state.old, state.old - self.amount),
        };
        self.state = State::Scaling;
        Step::Do(Action::Scale {
            side: self.side,
            step: self.steps,
            from,
            replicas,
            decided_by: self.sized_by.clone(),
        })
    }

    fn gate(&mut self, attempt: u32) -> Step {
        self.attempt = attempt;
        self.state = State::Gating;
        let mut state = self.current();
        match self.side {
            Side::Next => state.next = self.replicas,
            Side::Old => state.old = self.replicas,
        }
        Step::Ask(Question::Gate {
            side: self.side,
            step: self.steps - 1,
            state,
            attempt,
        })
    }

    fn judged(&mut self, decision: GateDecision) -> Step {
        match decision.verdict {
            Verdict::Proceed if self.side == Side::Next => {
                self.state = State::Settling;
                Step::Do(Action::UpdatePeriod)
            }
            Verdict::Proceed => self.next_side(),
            Verdict::Wait { seconds, reason } => {
                self.state = State::Waiting;
                Step::Do(Action::Wait {
                    seconds,
                    reason,
                    decided_by: decision.by,
                    held_by: Held::Gate,
                })
            }
            Verdict::Abort(reason) => Step::Done(Outcome::Aborted {
                side: self.side,
                step: self.steps - 1,
                replicas: self.replicas,
                decided_by: decision.by,
                reason,
            }),
        }
    }

    /// The other side of the round; after the old side, a new round, or a wait for a change
    /// when nothing moved.
    fn next_side(&mut self) -> Step {
        match self.side {
            Side::Next => {
                self.side = Side::Old;
                self.observe()
            }
            Side::Old => {
                self.side = Side::Next;
                if std::mem::take(&mut self.moved) {
                    return self.observe();
                }
                self.state = State::Awaiting;
                Step::Do(Action::AwaitChange)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::IntOrPercent::Int;

    fn proceed() -> GateDecision {
        GateDecision {
            verdict: Verdict::Proceed,
            by: DecidedBy::BuiltIn,
        }
    }

    /// Drives the loop with every new pod available at once; returns the steps as lines.
    fn simulate(
        old: i32,
        desired: i32,
        surge: i32,
        unavailable: i32,
        mut gate: impl FnMut(u32, u32) -> GateDecision,
    ) -> (Vec<String>, Outcome) {
        let budgets = steps::budgets(Int(surge as u32), Int(unavailable as u32), desired, old);
        let mut machine = ScaleLoop::new(budgets, desired);
        let (mut old, mut next) = (old, 0);
        let mut trace = Vec::new();
        let mut input = Input::Start;
        for _ in 0..1000 {
            input = match machine.step(input) {
                Step::Ask(Question::Observe) => Input::Observed(LoopState {
                    old,
                    next,
                    next_available: next,
                    desired,
                    steps_done: 0,
                }),
                Step::Ask(Question::StepSize { max, .. }) => Input::Sized(BatchDecision::Size {
                    size: max as u32,
                    reason: "built-in".into(),
                    by: DecidedBy::BuiltIn,
                }),
                Step::Ask(Question::Order { .. }) => Input::Ordered,
                Step::Ask(Question::Gate { step, attempt, .. }) => {
                    trace.push(format!("gate {step}#{attempt}"));
                    Input::Judged(gate(step, attempt))
                }
                Step::Do(Action::Scale { side, replicas, .. }) => {
                    trace.push(format!("{side:?} {replicas}"));
                    match side {
                        Side::Next => next = replicas,
                        Side::Old => old = replicas,
                    }
                    Input::Scaled(replicas)
                }
                Step::Do(Action::Wait { seconds, .. }) => {
                    trace.push(format!("wait {seconds}"));
                    Input::Done
                }
                Step::Do(Action::UpdatePeriod | Action::AwaitChange) => Input::Done,
                Step::Done(outcome) => return (trace, outcome),
            };
        }
        panic!("no end: {trace:?}");
    }

    fn scales(trace: &[String]) -> Vec<&str> {
        trace
            .iter()
            .map(String::as_str)
            .filter(|t| !t.starts_with("gate"))
            .collect()
    }

    #[test]
    fn the_loop_follows_the_seed_arithmetic() {
        let (trace, outcome) = simulate(3, 3, 1, 0, |_, _| proceed());
        assert_eq!(
            scales(&trace),
            ["Next 1", "Old 2", "Next 2", "Old 1", "Next 3", "Old 0"]
        );
        assert_eq!(outcome, Outcome::Finished);
        // One gate per step, each asked once.
        assert_eq!(trace.iter().filter(|t| t.starts_with("gate")).count(), 6);
    }

    #[test]
    fn a_gate_wait_asks_again_and_an_abort_stops_after_its_step() {
        let (trace, outcome) = simulate(2, 2, 1, 0, |step, attempt| match (step, attempt) {
            (0, 0) => GateDecision {
                verdict: Verdict::Wait {
                    seconds: 5,
                    reason: "settling".into(),
                },
                by: DecidedBy::Hook("g".into()),
            },
            (1, _) => GateDecision {
                verdict: Verdict::Abort("enough".into()),
                by: DecidedBy::Hook("g".into()),
            },
            _ => proceed(),
        });
        assert_eq!(
            trace,
            [
                "Next 1", "gate 0#0", "wait 5", "gate 0#1", "Old 1", "gate 1#0"
            ]
        );
        assert_eq!(
            outcome,
            Outcome::Aborted {
                side: Side::Old,
                step: 1,
                replicas: 1,
                decided_by: DecidedBy::Hook("g".into()),
                reason: "enough".into(),
            }
        );
    }

    #[test]
    fn nothing_to_move_waits_for_a_change() {
        let budgets = steps::budgets(Int(0), Int(1), 2, 2);
        let mut machine = ScaleLoop::new(budgets, 2);
        assert_eq!(machine.step(Input::Start), Step::Ask(Question::Observe));
        // The old controller is down to 1 but the next one's pod is not available yet.
        let stuck = LoopState {
            old: 1,
            next: 1,
            next_available: 0,
            desired: 2,
            steps_done: 0,
        };
        assert_eq!(
            machine.step(Input::Observed(stuck)),
            Step::Ask(Question::Observe)
        );
        assert_eq!(
            machine.step(Input::Observed(stuck)),
            Step::Do(Action::AwaitChange)
        );
        assert_eq!(machine.step(Input::Done), Step::Ask(Question::Observe));
    }
}
