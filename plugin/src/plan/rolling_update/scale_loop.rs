//! The seed's scale loop as a pure step machine: told what the two controllers look like and
//! what the hooks answered, it says what to ask or do next. No I/O, no clock, no hooks; the
//! planner drives it with simulated pods (every new pod available at once), the executor with
//! the cluster, both through the vocabulary every workload flow shares ([`super::flow`]). It
//! owns the order of the loop and nothing else.
//!
//! Each round tries the next controller, then the old one: observe both, work out the
//! built-in step (`steps::scale_up` / `steps::scale_down`), ask its size (a pause holds and asks
//! again), for a scale-down ask the order of the old pods, scale, ask the gate (a wait holds and
//! asks again), and after a scale-up hold the update period. A round in which nothing could
//! move waits for a change. The loop ends when the next controller has the desired replicas
//! and the old one none.

use super::asks::LoopState;
use super::flow::{self, Act, Answer, Ask, Flow, Gating, Outcome, Pace, Paced, Sizing};
use super::planner::Side;
use super::steps::{self, Budgets};
use crate::plan::decide::{BatchDecision, GateDecision};
use crate::plan::hook::DecidedBy;

/// What the loop needs next. A size and a gate are asked about a side of the pair as the loop
/// last saw it; an abort leaves that side at a number of replicas.
pub type Step = flow::Step<Seen, Seen, Question, Action, Seen>;
pub type Input = Answer<Told>;

/// A side of the pair and where the loop stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub side: Side,
    pub state: LoopState,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Question {
    /// The controllers' replicas and how many of the next one's pods are available.
    Observe,
    /// Which old pods go in a scale-down of `amount` (a selection).
    Order { state: LoopState, amount: i32 },
}

/// What a driver tells the loop of its own questions and actions.
#[derive(Debug, Clone, PartialEq)]
pub enum Told {
    Observed(LoopState),
    Ordered,
    /// The last scale is done: the controller's replicas now.
    Scaled(i32),
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
    /// The update period after a scale-up, before the old controller shrinks.
    UpdatePeriod,
    /// Nothing could move this round: wait for the pods to change.
    AwaitChange,
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
    /// The pauses before a step's size, and the waits before a gate's verdict.
    sizing: Pace,
    gating: Pace,
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
            sizing: Pace::default(),
            gating: Pace::default(),
            amount: 0,
            sized_by: DecidedBy::BuiltIn,
            replicas: 0,
            moved: false,
        }
    }

    fn observe(&mut self) -> Step {
        self.state = State::Observing;
        Step::Ask(Ask::Own(Question::Observe))
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
        Step::Ask(Ask::Size(Sizing {
            step: self.steps,
            max: u32::try_from(max).unwrap_or(0),
            attempt: self.sizing.attempt(),
            about: Seen {
                side: self.side,
                state,
            },
        }))
    }

    fn sized(&mut self, decision: BatchDecision) -> Step {
        match self.sizing.sized(decision) {
            Ok(sized) => {
                self.sizing.fresh();
                self.amount = i32::try_from(sized.size).unwrap_or(i32::MAX);
                self.sized_by = sized.by;
                if self.side == Side::Old {
                    self.state = State::Ordering;
                    return Step::Ask(Ask::Own(Question::Order {
                        state: self.current(),
                        amount: self.amount,
                    }));
                }
                self.scale()
            }
            Err(hold) => {
                self.state = State::Pausing;
                Step::Do(Act::Wait(hold))
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
        Step::Do(Act::Own(Action::Scale {
            side: self.side,
            step: self.steps,
            from,
            replicas,
            decided_by: self.sized_by.clone(),
        }))
    }

    /// Where the loop stands after the step at hand.
    fn after_step(&self) -> Seen {
        let mut state = self.current();
        match self.side {
            Side::Next => state.next = self.replicas,
            Side::Old => state.old = self.replicas,
        }
        Seen {
            side: self.side,
            state,
        }
    }

    fn gate(&mut self) -> Step {
        self.state = State::Gating;
        Step::Ask(Ask::Gate(Gating {
            step: self.steps - 1,
            attempt: self.gating.attempt(),
            about: self.after_step(),
        }))
    }

    fn judged(&mut self, decision: GateDecision) -> Step {
        match self.gating.judged(decision) {
            Paced::Go(_) if self.side == Side::Next => {
                self.state = State::Settling;
                Step::Do(Act::Own(Action::UpdatePeriod))
            }
            Paced::Go(_) => self.next_side(),
            Paced::Hold(hold) => {
                self.state = State::Waiting;
                Step::Do(Act::Wait(hold))
            }
            Paced::Stop { decided_by, reason } => Step::Done(Outcome::Aborted {
                step: self.steps - 1,
                decided_by,
                reason,
                at: self.after_step(),
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
                Step::Do(Act::Own(Action::AwaitChange))
            }
        }
    }
}

impl Flow for ScaleLoop {
    type Sizing = Seen;
    type Gating = Seen;
    type Ask = Question;
    type Act = Action;
    type Answer = Told;
    type Stop = Seen;

    fn step(&mut self, input: Input) -> Step {
        let step = match (self.state, input) {
            (State::New, Answer::Start) => self.observe(),
            (State::Observing, Answer::Own(Told::Observed(observed))) => self.observed(observed),
            (State::Sizing, Answer::Sized(decision)) => self.sized(decision),
            (State::Ordering, Answer::Own(Told::Ordered)) => self.scale(),
            (State::Scaling, Answer::Own(Told::Scaled(replicas))) => {
                self.replicas = replicas;
                self.steps += 1;
                self.moved = true;
                self.gating.fresh();
                self.gate()
            }
            (State::Gating, Answer::Judged(decision)) => self.judged(decision),
            (State::Pausing, Answer::Done) => {
                self.sizing.again();
                self.moved = true;
                self.observe()
            }
            (State::Waiting, Answer::Done) => {
                self.gating.again();
                self.gate()
            }
            (State::Settling, Answer::Done) => self.next_side(),
            (State::Awaiting, Answer::Done) => self.observe(),
            (state, input) => panic!("scale loop in state {state:?} cannot take {input:?}"),
        };
        if let Step::Done(_) = step {
            self.state = State::Over;
        }
        step
    }

    fn steps_left(&self) -> u32 {
        let Some(state) = self.observed else {
            return 0;
        };
        let count = |n: i32| u32::try_from(n.max(0)).unwrap_or(0);
        let per = count(self.budgets.max_surge + self.budgets.max_unavailable).max(1);
        let (up, down) = (count(self.desired - state.next), count(state.old));
        up.div_ceil(per) + down.div_ceil(per)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::decide::Verdict;
    use crate::plan::rolling_update::flow::Hold;
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
    ) -> (Vec<String>, Outcome<Seen>) {
        let budgets = steps::budgets(Int(surge as u32), Int(unavailable as u32), desired, old);
        let mut machine = ScaleLoop::new(budgets, desired);
        let (mut old, mut next) = (old, 0);
        let mut trace = Vec::new();
        let mut input = Input::Start;
        for _ in 0..1000 {
            input = match machine.step(input) {
                Step::Ask(Ask::Own(Question::Observe)) => Input::Own(Told::Observed(LoopState {
                    old,
                    next,
                    next_available: next,
                    desired,
                    steps_done: 0,
                })),
                Step::Ask(Ask::Size(Sizing { max, .. })) => Input::Sized(BatchDecision::Size {
                    size: max,
                    reason: "built-in".into(),
                    by: DecidedBy::BuiltIn,
                }),
                Step::Ask(Ask::Own(Question::Order { .. })) => Input::Own(Told::Ordered),
                Step::Ask(Ask::Gate(Gating { step, attempt, .. })) => {
                    trace.push(format!("gate {step}#{attempt}"));
                    Input::Judged(gate(step, attempt))
                }
                Step::Do(Act::Own(Action::Scale { side, replicas, .. })) => {
                    trace.push(format!("{side:?} {replicas}"));
                    match side {
                        Side::Next => next = replicas,
                        Side::Old => old = replicas,
                    }
                    Input::Own(Told::Scaled(replicas))
                }
                Step::Do(Act::Wait(Hold { seconds, .. })) => {
                    trace.push(format!("wait {seconds}"));
                    Input::Done
                }
                Step::Do(Act::Own(Action::UpdatePeriod | Action::AwaitChange)) => Input::Done,
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
        match outcome {
            Outcome::Aborted {
                step,
                decided_by,
                reason,
                at,
            } => {
                assert_eq!((step, at.side, at.state.old), (1, Side::Old, 1));
                assert_eq!(decided_by, DecidedBy::Hook("g".into()));
                assert_eq!(reason, "enough");
            }
            other => panic!("expected an abort, got {other:?}"),
        }
    }

    #[test]
    fn nothing_to_move_waits_for_a_change() {
        let budgets = steps::budgets(Int(0), Int(1), 2, 2);
        let mut machine = ScaleLoop::new(budgets, 2);
        let observe = Step::Ask(Ask::Own(Question::Observe));
        assert_eq!(machine.step(Input::Start), observe);
        // The old controller is down to 1 but the next one's pod is not available yet.
        let stuck = LoopState {
            old: 1,
            next: 1,
            next_available: 0,
            desired: 2,
            steps_done: 0,
        };
        let stuck = Input::Own(Told::Observed(stuck));
        assert_eq!(machine.step(stuck.clone()), observe);
        assert_eq!(machine.step(stuck), Step::Do(Act::Own(Action::AwaitChange)));
        assert_eq!(machine.step(Input::Done), observe);
    }
}
