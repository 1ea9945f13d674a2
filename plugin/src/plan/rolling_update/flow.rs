//! The step vocabulary every workload flow shares: the controller pair's scale loop, the
//! StatefulSet's partition loop and the DaemonSet's node loop each ask the size of a step and
//! the gates' verdict after it, hold for a hook's pause or wait, and end finished or aborted;
//! besides, each asks and does its own things ([`Ask::Own`], [`Act::Own`]). One planner loop and
//! one executor loop drive any of them; the pacing that follows a size or a verdict is one
//! piece of code ([`Pace`]).

use crate::plan::decide::{BatchDecision, GateDecision, Verdict};
use crate::plan::hook::DecidedBy;

/// A question of a flow.
#[derive(Debug, Clone, PartialEq)]
pub enum Ask<S, G, Q> {
    /// How much the next step takes.
    Size(Sizing<S>),
    /// The gates' verdict after a step.
    Gate(Gating<G>),
    /// A question of the flow's own.
    Own(Q),
}

/// The size question: at most `max` (the built-in size), after `attempt` pauses a batching hook
/// asked for; `about` is what the flow says of the step.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizing<S> {
    pub step: u32,
    pub max: u32,
    pub attempt: u32,
    pub about: S,
}

/// The gate question after step `step` (from 0), asked again after `attempt` waits; `about` is
/// what the flow says the step did.
#[derive(Debug, Clone, PartialEq)]
pub struct Gating<G> {
    pub step: u32,
    pub attempt: u32,
    pub about: G,
}

/// An action of a flow.
#[derive(Debug, Clone, PartialEq)]
pub enum Act<A> {
    /// Hold for a hook, then ask the same question again.
    Wait(Hold),
    Own(A),
}

/// A hook's pause (before a step's size is asked again) or a gate's wait (before the gate is
/// asked again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub seconds: u32,
    pub reason: String,
    pub decided_by: DecidedBy,
    pub held_by: Held,
}

/// Which question a hold defers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// A batching hook's pause: the step's size is asked again.
    Pause,
    /// A gate's wait: the gate is asked again.
    Gate,
}

/// What a driver tells a flow.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer<R> {
    Start,
    Sized(BatchDecision),
    Judged(GateDecision),
    /// The last action was carried out.
    Done,
    /// The answer to a question of the flow's own, or what its own action left.
    Own(R),
}

/// How a flow ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<T> {
    Finished,
    /// A gate stopped the flow after step `step` (from 0); `at` is where it left things.
    Aborted {
        step: u32,
        decided_by: DecidedBy,
        reason: String,
        at: T,
    },
}

/// What a flow needs next.
pub type Step<S, G, Q, A, T> = crate::plan::Step<Ask<S, G, Q>, Act<A>, Outcome<T>>;

/// A workload flow as a step machine: told what was answered or done, it says what to ask or do
/// next. No I/O, no clock, no hooks: the planner and the executor drive it.
pub trait Flow {
    /// What a size question says of the step.
    type Sizing;
    /// What a gate question says the step did.
    type Gating;
    type Ask;
    type Act;
    type Answer;
    /// Where an abort leaves things.
    type Stop;

    /// Advances the flow with the outcome of the last step.
    ///
    /// # Panics
    /// When `input` does not answer the last step: a driver bug, never a cluster condition.
    fn step(&mut self, input: Answer<Self::Answer>) -> StepOf<Self>;

    /// The steps still to come, a step being sized included, for the estimates hooks are
    /// told: counted where the flow knows them, estimated where it cannot (a controller
    /// pair's steps depend on when its new pods become available).
    fn steps_left(&self) -> u32;
}

/// What flow `F` needs next.
pub type StepOf<F> = Step<
    <F as Flow>::Sizing,
    <F as Flow>::Gating,
    <F as Flow>::Ask,
    <F as Flow>::Act,
    <F as Flow>::Stop,
>;

/// What a size or a verdict leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Paced<T> {
    /// Go on (with the size, or past the gate).
    Go(T),
    Hold(Hold),
    /// A gate's abort.
    Stop {
        decided_by: DecidedBy,
        reason: String,
    },
}

/// A step's size as a flow takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepSize {
    pub size: u32,
    pub reason: String,
    pub by: DecidedBy,
}

/// The pacing every flow shares: a batching hook's pause holds and asks the size again; a
/// gate's wait holds and asks the gate again, its abort stops the flow. It counts the attempts.
#[derive(Debug, Clone, Default)]
pub struct Pace {
    attempt: u32,
}

impl Pace {
    /// Pauses and waits asked for before the question at hand.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// A question is asked afresh (a new step's size, or the gate after a new step).
    pub fn fresh(&mut self) {
        self.attempt = 0;
    }

    /// The question is asked again after a hold.
    pub fn again(&mut self) {
        self.attempt += 1;
    }

    /// The size to take, or the batching hook's pause to hold for (a size never stops a flow).
    pub fn sized(&self, decision: BatchDecision) -> Result<StepSize, Hold> {
        match decision {
            BatchDecision::Size { size, reason, by } => Ok(StepSize { size, reason, by }),
            BatchDecision::Pause {
                seconds,
                reason,
                by,
            } => Err(Hold {
                seconds,
                reason,
                decided_by: by,
                held_by: Held::Pause,
            }),
        }
    }

    pub fn judged(&self, decision: GateDecision) -> Paced<DecidedBy> {
        match decision.verdict {
            Verdict::Proceed => Paced::Go(decision.by),
            Verdict::Wait { seconds, reason } => Paced::Hold(Hold {
                seconds,
                reason,
                decided_by: decision.by,
                held_by: Held::Gate,
            }),
            Verdict::Abort(reason) => Paced::Stop {
                decided_by: decision.by,
                reason,
            },
        }
    }
}

/// Where a flow that goes step by step (a StatefulSet's partitions, a DaemonSet's nodes) stands
/// in what such flows do alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The step's size is asked.
    Sizing,
    /// A batching hook's pause is held; then the size is asked again.
    Pausing,
    /// The step's pods are awaited; then the gate is asked.
    Awaiting,
    /// The gates' verdict on the step is asked.
    Gating,
    /// A gate's wait is held; then the gate is asked again.
    Waiting,
}

/// Where a stepwise flow stands: at a [`Stage`], in a state of its own, or over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At<S> {
    Stage(Stage),
    Own(S),
    Over,
}

/// Where a stepwise flow stands, and what it counts: the steps passed (the step at hand, from
/// 0) and the holds of the question at hand.
#[derive(Debug, Clone)]
pub struct Stepping<S> {
    pub at: At<S>,
    pub steps: u32,
    pub pace: Pace,
}

impl<S> Stepping<S> {
    /// A flow that starts in its own state `state`.
    pub fn new(state: S) -> Self {
        Stepping {
            at: At::Own(state),
            steps: 0,
            pace: Pace::default(),
        }
    }
}

/// A flow that goes step by step: size a step, carry it out, await its pods, ask the gate.
/// The flow says what is its own (what its questions say, its act, where an abort leaves
/// things); how the stages follow one another is written once, in the provided methods.
pub trait Stepwise: Flow {
    /// The flow's states of its own, besides the stages.
    type Own;

    fn stepping(&mut self) -> &mut Stepping<Self::Own>;
    /// The built-in size of the step at hand: the most it may take.
    fn max_size(&self) -> u32;
    /// What the size question says of the step at hand.
    fn sizing(&self) -> Self::Sizing;
    /// Carries out the step at hand with `size`.
    fn take(&mut self, size: StepSize) -> StepOf<Self>;
    /// What the gate question says the step did.
    fn gating(&self) -> Self::Gating;
    /// The gates let the step pass: the next step, or the end.
    fn passed(&mut self) -> StepOf<Self>;
    /// Where an abort now leaves things.
    fn stop(&self) -> Self::Stop;

    /// Asks the size of the step at hand.
    fn size(&mut self) -> StepOf<Self> {
        let at = self.stepping();
        at.at = At::Stage(Stage::Sizing);
        let (step, attempt) = (at.steps, at.pace.attempt());
        Step::Ask(Ask::Size(Sizing {
            step,
            max: self.max_size(),
            attempt,
            about: self.sizing(),
        }))
    }

    /// Takes a size, or holds for a batching hook's pause.
    fn sized(&mut self, decision: BatchDecision) -> StepOf<Self> {
        match self.stepping().pace.sized(decision) {
            Ok(size) => self.take(size),
            Err(hold) => {
                self.stepping().at = At::Stage(Stage::Pausing);
                Step::Do(Act::Wait(hold))
            }
        }
    }

    /// Asks the gates about the step just carried out.
    fn gate(&mut self) -> StepOf<Self> {
        let at = self.stepping();
        at.at = At::Stage(Stage::Gating);
        let (step, attempt) = (at.steps, at.pace.attempt());
        Step::Ask(Ask::Gate(Gating {
            step,
            attempt,
            about: self.gating(),
        }))
    }

    /// Goes on, holds for a gate's wait, or stops at a gate's abort.
    fn judged(&mut self, decision: GateDecision) -> StepOf<Self> {
        match self.stepping().pace.judged(decision) {
            Paced::Go(_) => self.passed(),
            Paced::Hold(hold) => {
                self.stepping().at = At::Stage(Stage::Waiting);
                Step::Do(Act::Wait(hold))
            }
            Paced::Stop { decided_by, reason } => Step::Done(Outcome::Aborted {
                step: self.stepping().steps,
                decided_by,
                reason,
                at: self.stop(),
            }),
        }
    }

    /// The step `input` leads to at `stage`; `input` back when it does not answer what
    /// `stage` asked or did (a driver bug).
    #[allow(clippy::result_large_err)]
    fn staged(
        &mut self,
        stage: Stage,
        input: Answer<Self::Answer>,
    ) -> Result<StepOf<Self>, Answer<Self::Answer>> {
        Ok(match (stage, input) {
            (Stage::Sizing, Answer::Sized(decision)) => self.sized(decision),
            (Stage::Pausing, Answer::Done) => {
                self.stepping().pace.again();
                self.size()
            }
            (Stage::Awaiting, Answer::Done) => {
                self.stepping().pace.fresh();
                self.gate()
            }
            (Stage::Gating, Answer::Judged(decision)) => self.judged(decision),
            (Stage::Waiting, Answer::Done) => {
                self.stepping().pace.again();
                self.gate()
            }
            (_, input) => return Err(input),
        })
    }

    /// `step`, the flow marked over when it is the end.
    fn ended(&mut self, step: StepOf<Self>) -> StepOf<Self> {
        if let Step::Done(_) = step {
            self.stepping().at = At::Over;
        }
        step
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_and_a_wait_hold_and_an_abort_stops() {
        let pace = Pace::default();
        let hook = DecidedBy::Hook("h".into());
        let pause = BatchDecision::Pause {
            seconds: 60,
            reason: "window".into(),
            by: hook.clone(),
        };
        assert!(matches!(
            pace.sized(pause),
            Err(Hold {
                seconds: 60,
                held_by: Held::Pause,
                ..
            })
        ));
        let wait = GateDecision {
            verdict: Verdict::Wait {
                seconds: 30,
                reason: "burning".into(),
            },
            by: hook.clone(),
        };
        assert!(matches!(
            pace.judged(wait),
            Paced::Hold(Hold {
                held_by: Held::Gate,
                ..
            })
        ));
        let abort = GateDecision {
            verdict: Verdict::Abort("no".into()),
            by: hook.clone(),
        };
        assert_eq!(
            pace.judged(abort),
            Paced::Stop {
                decided_by: hook,
                reason: "no".into()
            }
        );
    }

    #[test]
    fn attempts_count_the_holds_of_one_question() {
        let mut pace = Pace::default();
        pace.again();
        pace.again();
        assert_eq!(pace.attempt(), 2);
        pace.fresh();
        assert_eq!(pace.attempt(), 0);
    }
}
