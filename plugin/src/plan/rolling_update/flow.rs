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

    fn step(&mut self, input: Answer<Self::Answer>) -> StepOf<Self>;
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
pub struct Sized {
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
    pub fn sized(&self, decision: BatchDecision) -> Result<Sized, Hold> {
        match decision {
            BatchDecision::Size { size, reason, by } => Ok(Sized { size, reason, by }),
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
