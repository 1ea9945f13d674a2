//! A StatefulSet's partitioned update as a pure step machine (issue: StatefulSet rollouts).
//!
//! The new template is set with the partition at the replica count, so nothing moves; then the
//! partition is lowered step by step, and the StatefulSet controller updates the ordinals at or
//! above it, highest first. Each step: ask its size (the canary is one pod; a pause holds and
//! asks again), lower the partition, await the updated pods Ready on the new revision, ask the
//! gate (a wait holds and asks again; an abort stops with the partition where it is). The
//! partition on the object is the state: a driver that resumes starts the machine from it.
//! The ordinals below the `floor` are on the new revision already (a rollback of a partial
//! update): once the partition reaches it, it drops to 0 with nothing to await or ask.
//! No I/O, no clock, no hooks: the planner and the executor are its two drivers, through the
//! vocabulary every workload flow shares ([`super::flow`]).

use std::convert::Infallible;
use std::ops::Range;

use super::flow::{self, Act, Answer, At, Flow, Outcome, Stage, StepSize, Stepping, Stepwise};
use crate::plan::hook::DecidedBy;

/// What the machine needs next.
pub type Step = flow::Step<bool, GateAbout, Infallible, Action, i32>;
pub type Input = Answer<Infallible>;

/// What a gate is told a step did: the ordinals it updated, and whether it was the canary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateAbout {
    pub ordinals: Range<i32>,
    pub canary: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Lower the partition from `from` to `to`: the ordinals `to..from` are updated.
    SetPartition {
        step: u32,
        from: i32,
        to: i32,
        canary: bool,
        decided_by: DecidedBy,
        reason: String,
    },
    /// Wait until every pod at or above `partition` is Ready on the new revision (for the
    /// StatefulSet's minReadySeconds).
    AwaitUpdated { partition: i32 },
    /// Set the partition to 0 from `from`: every ordinal below is on the new revision already.
    Settle { from: i32 },
}

/// Where the machine stands, besides the stages every stepwise flow has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    New,
    Lowering,
}

/// The partitioned update of one StatefulSet.
#[derive(Debug, Clone)]
pub struct PartitionLoop {
    /// The partition now: ordinals at or above it are updated.
    partition: i32,
    /// The lowest ordinal not on the new revision: steps stop there.
    floor: i32,
    /// The most ordinals one step updates (the budget of unavailable pods).
    max_unavailable: u32,
    /// The size of the canary step still to come (0: none).
    canary: u32,
    stepping: Stepping<State>,
    /// The step at hand: the partition it left and where it started.
    from: i32,
    /// Where an update that resumes stood: its updated pods are awaited and the gate asked
    /// about them before anything else moves (a run stopped during a step's wait or gate).
    resumed_from: Option<i32>,
}

impl PartitionLoop {
    /// The update of `replicas` pods from partition `partition` (the replica count for a new
    /// update, less for one that resumes) down to `floor` (0 unless the lower ordinals are
    /// updated already), at most `max_unavailable` (at least 1) per step, a first step of
    /// `canary` pods when nothing has moved yet (none when it would update every pod left).
    pub fn new(
        replicas: i32,
        partition: i32,
        floor: i32,
        max_unavailable: u32,
        canary: u32,
    ) -> Self {
        let partition = partition.clamp(0, replicas.max(0));
        let floor = floor.clamp(0, partition);
        let left = u32::try_from(partition - floor).unwrap_or(0);
        PartitionLoop {
            partition,
            floor,
            max_unavailable: max_unavailable.max(1),
            canary: if partition == replicas && canary < left {
                canary
            } else {
                0
            },
            stepping: Stepping::new(State::New),
            from: partition,
            resumed_from: (partition < replicas).then_some(replicas),
        }
    }

    fn await_updated(&mut self) -> Step {
        self.stepping.at = At::Stage(Stage::Awaiting);
        Step::Do(Act::Own(Action::AwaitUpdated {
            partition: self.partition,
        }))
    }

    /// The next step, or the end once every ordinal is updated.
    fn next(&mut self) -> Step {
        if self.partition == 0 {
            return Step::Done(Outcome::Finished);
        }
        if self.partition <= self.floor {
            self.stepping.at = At::Own(State::Lowering);
            self.from = self.floor;
            self.partition = 0;
            return Step::Do(Act::Own(Action::Settle { from: self.from }));
        }
        self.stepping.pace.fresh();
        self.size()
    }
}

impl Stepwise for PartitionLoop {
    type Own = State;

    fn stepping(&mut self) -> &mut Stepping<State> {
        &mut self.stepping
    }

    fn max_size(&self) -> u32 {
        let left = u32::try_from(self.partition - self.floor).unwrap_or(0);
        if self.canary > 0 {
            self.canary
        } else {
            self.max_unavailable.min(left)
        }
    }

    /// Whether the step is the canary.
    fn sizing(&self) -> bool {
        self.canary > 0
    }

    fn take(&mut self, size: StepSize) -> Step {
        let count = i32::try_from(size.size)
            .unwrap_or(i32::MAX)
            .clamp(1, self.partition - self.floor);
        self.from = self.partition;
        self.partition -= count;
        self.stepping.at = At::Own(State::Lowering);
        Step::Do(Act::Own(Action::SetPartition {
            step: self.stepping.steps,
            from: self.from,
            to: self.partition,
            canary: self.canary > 0,
            decided_by: size.by,
            reason: size.reason,
        }))
    }

    fn gating(&self) -> GateAbout {
        GateAbout {
            ordinals: self.partition..self.from,
            canary: self.canary > 0,
        }
    }

    fn passed(&mut self) -> Step {
        self.stepping.steps += 1;
        self.canary = 0;
        self.next()
    }

    fn stop(&self) -> i32 {
        self.partition
    }
}

impl Flow for PartitionLoop {
    type Sizing = bool;
    type Gating = GateAbout;
    type Ask = Infallible;
    type Act = Action;
    type Answer = Infallible;
    type Stop = i32;

    fn step(&mut self, input: Input) -> Step {
        let step = match (self.stepping.at, input) {
            (At::Own(State::New), Answer::Start) => match self.resumed_from {
                // The step a stopped run was in: its pods, then its gate, again.
                Some(top) => {
                    self.from = top;
                    self.await_updated()
                }
                None => self.next(),
            },
            (At::Own(State::Lowering), Answer::Done) if self.from == self.floor => {
                Step::Done(Outcome::Finished)
            }
            (At::Own(State::Lowering), Answer::Done) => self.await_updated(),
            (At::Stage(stage), input) => self.staged(stage, input).unwrap_or_else(|input| {
                panic!("partition loop at {stage:?} cannot take {input:?}")
            }),
            (state, input) => panic!("partition loop in state {state:?} cannot take {input:?}"),
        };
        self.ended(step)
    }

    fn steps_left(&self) -> u32 {
        let left = u32::try_from(self.partition - self.floor).unwrap_or(0);
        // The canary is still to come until its step lowers the partition.
        let canary = match self.from == self.partition {
            true => self.canary.min(left),
            false => 0,
        };
        u32::from(canary > 0) + (left - canary).div_ceil(self.max_unavailable.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::decide::{BatchDecision, GateDecision, Verdict};
    use crate::plan::rolling_update::flow::Hold;
    use crate::plan::rolling_update::flow::{Ask, Gating, Sizing};

    fn size(n: u32) -> Input {
        Input::Sized(BatchDecision::Size {
            size: n,
            reason: "built-in".into(),
            by: DecidedBy::BuiltIn,
        })
    }

    fn verdict(verdict: Verdict) -> Input {
        Input::Judged(GateDecision {
            verdict,
            by: DecidedBy::Hook("slo".into()),
        })
    }

    /// Drives the machine with built-in sizes and gates that proceed; the partitions it sets.
    fn partitions(mut machine: PartitionLoop) -> Vec<(i32, i32, bool)> {
        let mut set = Vec::new();
        let mut input = Input::Start;
        loop {
            input = match machine.step(input) {
                Step::Ask(Ask::Size(Sizing { max, .. })) => size(max),
                Step::Do(Act::Own(Action::SetPartition {
                    from, to, canary, ..
                })) => {
                    set.push((from, to, canary));
                    Input::Done
                }
                Step::Do(Act::Own(Action::Settle { from })) => {
                    set.push((from, 0, false));
                    Input::Done
                }
                Step::Do(_) => Input::Done,
                Step::Ask(Ask::Gate(_)) => verdict(Verdict::Proceed),
                Step::Done(Outcome::Finished) => return set,
                Step::Done(other) => panic!("{other:?}"),
            };
        }
    }

    #[test]
    fn partitions_fall_strictly_to_zero_canary_first() {
        // Five replicas, two at a time: 5 → 4 (canary) → 2 → 0.
        assert_eq!(
            partitions(PartitionLoop::new(5, 5, 0, 2, 1)),
            [(5, 4, true), (4, 2, false), (2, 0, false)]
        );
        assert_eq!(
            partitions(PartitionLoop::new(5, 5, 0, 2, 0)),
            [(5, 3, false), (3, 1, false), (1, 0, false)]
        );
        // One replica: no canary of one before a step of one.
        assert_eq!(
            partitions(PartitionLoop::new(1, 1, 0, 1, 1)),
            [(1, 0, false)]
        );
    }

    #[test]
    fn a_resumed_update_first_awaits_and_gates_what_moved_then_goes_on() {
        let mut m = PartitionLoop::new(5, 3, 0, 2, 1);
        assert_eq!(
            m.step(Input::Start),
            Step::Do(Act::Own(Action::AwaitUpdated { partition: 3 }))
        );
        assert_eq!(
            m.step(Input::Done),
            Step::Ask(Ask::Gate(Gating {
                step: 0,
                attempt: 0,
                about: GateAbout {
                    ordinals: 3..5,
                    canary: false
                }
            }))
        );
        let stop = m.step(verdict(Verdict::Abort("still failing".into())));
        assert!(matches!(stop, Step::Done(Outcome::Aborted { at: 3, .. })));
    }

    #[test]
    fn a_resumed_update_goes_on_from_its_partition_without_a_canary() {
        assert_eq!(
            partitions(PartitionLoop::new(5, 2, 0, 2, 1)),
            [(2, 0, false)]
        );
        assert!(partitions(PartitionLoop::new(5, 0, 0, 2, 1)).is_empty());
    }

    #[test]
    fn a_rollback_steps_through_the_updated_ordinals_then_settles_the_rest() {
        // Ordinals 3 and 4 were updated before the rollback; 0..3 are on its revision already.
        assert_eq!(
            partitions(PartitionLoop::new(5, 5, 3, 1, 1)),
            [(5, 4, true), (4, 3, false), (3, 0, false)]
        );
        // A canary as large as what is left is no canary.
        assert_eq!(
            partitions(PartitionLoop::new(5, 5, 4, 2, 1)),
            [(5, 4, false), (4, 0, false)]
        );
        // Nothing to update: only the partition drops.
        assert_eq!(
            partitions(PartitionLoop::new(5, 5, 5, 2, 1)),
            [(5, 0, false)]
        );
    }

    #[test]
    fn every_step_awaits_its_pods_then_asks_the_gate_and_a_wait_asks_again() {
        let mut m = PartitionLoop::new(3, 3, 0, 1, 0);
        assert!(matches!(
            m.step(Input::Start),
            Step::Ask(Ask::Size(Sizing { max: 1, .. }))
        ));
        assert!(matches!(
            m.step(size(1)),
            Step::Do(Act::Own(Action::SetPartition { from: 3, to: 2, .. }))
        ));
        assert_eq!(
            m.step(Input::Done),
            Step::Do(Act::Own(Action::AwaitUpdated { partition: 2 }))
        );
        let gate = m.step(Input::Done);
        assert_eq!(
            gate,
            Step::Ask(Ask::Gate(Gating {
                step: 0,
                attempt: 0,
                about: GateAbout {
                    ordinals: 2..3,
                    canary: false
                }
            }))
        );
        let wait = Verdict::Wait {
            seconds: 30,
            reason: "burning".into(),
        };
        assert!(matches!(
            m.step(verdict(wait)),
            Step::Do(Act::Wait(Hold { seconds: 30, .. }))
        ));
        assert!(matches!(
            m.step(Input::Done),
            Step::Ask(Ask::Gate(Gating { attempt: 1, .. }))
        ));
        let stop = m.step(verdict(Verdict::Abort("errors".into())));
        assert_eq!(
            stop,
            Step::Done(Outcome::Aborted {
                step: 0,
                decided_by: DecidedBy::Hook("slo".into()),
                reason: "errors".into(),
                at: 2,
            })
        );
    }

    #[test]
    fn a_pause_asks_the_size_again_and_a_size_never_passes_zero() {
        let mut m = PartitionLoop::new(4, 4, 0, 3, 0);
        assert!(matches!(
            m.step(Input::Start),
            Step::Ask(Ask::Size(Sizing {
                max: 3,
                attempt: 0,
                ..
            }))
        ));
        let pause = Input::Sized(BatchDecision::Pause {
            seconds: 60,
            reason: "window".into(),
            by: DecidedBy::Hook("window".into()),
        });
        assert!(matches!(
            m.step(pause),
            Step::Do(Act::Wait(Hold { seconds: 60, .. }))
        ));
        assert!(matches!(
            m.step(Input::Done),
            Step::Ask(Ask::Size(Sizing { attempt: 1, .. }))
        ));
        // A size beyond the partition is held to it.
        assert!(matches!(
            m.step(size(9)),
            Step::Do(Act::Own(Action::SetPartition { from: 4, to: 0, .. }))
        ));
    }
}
