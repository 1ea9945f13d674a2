//! A DaemonSet's node-by-node update as a pure step machine (issue: DaemonSet rollouts).
//!
//! The DaemonSet is switched to `OnDelete` with its new template, so nothing moves by itself;
//! the order of the nodes running an old pod is asked once (the selection hooks' order; nodes
//! a hook leaves out come last, since every old pod must go). Then each step asks its size over
//! the nodes left in that order, deletes the old pods on the first ones (the controller starts
//! new ones there), awaits the new pods Ready, then asks the gate (a wait holds and asks again;
//! an abort stops, the nodes left untouched). No I/O, no clock, no hooks: the planner and the
//! executor are its two drivers, through the vocabulary every workload flow shares
//! ([`super::flow`]).

use super::flow::{self, Act, Answer, Ask, At, Flow, Outcome, Stage, StepSize, Stepping, Stepwise};
use crate::plan::hook::DecidedBy;

/// What the machine needs next: a size is asked over the nodes left, in update order; a gate
/// is told the nodes the step replaced; an abort leaves that many nodes on an old pod.
pub type Step = flow::Step<Vec<String>, Vec<String>, Question, Action, usize>;
pub type Input = Answer<Ordered>;

#[derive(Debug, Clone, PartialEq)]
pub enum Question {
    /// The order of the nodes running an old pod (`pending`, in their built-in order).
    Order { pending: Vec<String> },
}

/// The nodes in the order the selection decided, and who decided it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ordered(pub Vec<String>, pub DecidedBy);

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Delete the old pods on `nodes`: the DaemonSet controller starts new ones there.
    Replace {
        step: u32,
        nodes: Vec<String>,
        sized_by: DecidedBy,
        size_reason: String,
        ordered_by: DecidedBy,
    },
    /// Wait until each of `nodes` runs a new pod, Ready.
    AwaitReplaced { nodes: Vec<String> },
}

/// Where the machine stands, besides the stages every stepwise flow has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    New,
    Ordering,
    Replacing,
}

/// The node-by-node update of one DaemonSet.
#[derive(Debug, Clone)]
pub struct NodeLoop {
    /// Nodes still running an old pod, in the built-in order until ordered, then in update
    /// order.
    pending: Vec<String>,
    ordered_by: DecidedBy,
    max_unavailable: u32,
    stepping: Stepping<State>,
    /// The step at hand: its nodes.
    batch: Vec<String>,
    /// Whether the update order was asked.
    ordered: bool,
}

impl NodeLoop {
    /// The update of the pods on `pending` (the nodes running an old pod), at most
    /// `max_unavailable` (at least 1) nodes per step. `updated` are the nodes an update that
    /// resumes replaced already: their new pods are awaited and the gate asked about them
    /// before anything else moves (a run stopped during a step's wait or gate).
    pub fn new(pending: Vec<String>, updated: Vec<String>, max_unavailable: u32) -> Self {
        NodeLoop {
            pending,
            max_unavailable: max_unavailable.max(1),
            stepping: Stepping::new(State::New),
            batch: updated,
            ordered: false,
            ordered_by: DecidedBy::BuiltIn,
        }
    }

    fn await_replaced(&mut self) -> Step {
        self.stepping.at = At::Stage(Stage::Awaiting);
        Step::Do(Act::Own(Action::AwaitReplaced {
            nodes: self.batch.clone(),
        }))
    }

    fn next(&mut self) -> Step {
        if self.pending.is_empty() {
            return Step::Done(Outcome::Finished);
        }
        self.stepping.pace.fresh();
        if !self.ordered {
            self.stepping.at = At::Own(State::Ordering);
            return Step::Ask(Ask::Own(Question::Order {
                pending: self.pending.clone(),
            }));
        }
        self.size()
    }

    /// Takes `order` as the update order: the pending nodes it names, then the ones it leaves
    /// out in their built-in order.
    fn ordered(&mut self, order: Vec<String>, by: DecidedBy) {
        let mut update: Vec<String> = Vec::with_capacity(self.pending.len());
        for node in order {
            if self.pending.contains(&node) && !update.contains(&node) {
                update.push(node);
            }
        }
        for node in &self.pending {
            if !update.contains(node) {
                update.push(node.clone());
            }
        }
        self.pending = update;
        self.ordered_by = by;
        self.ordered = true;
    }
}

impl Stepwise for NodeLoop {
    type Own = State;

    fn stepping(&mut self) -> &mut Stepping<State> {
        &mut self.stepping
    }

    fn max_size(&self) -> u32 {
        let left = u32::try_from(self.pending.len()).unwrap_or(u32::MAX);
        self.max_unavailable.min(left)
    }

    fn sizing(&self) -> Vec<String> {
        self.pending.clone()
    }

    fn take(&mut self, size: StepSize) -> Step {
        let count = (size.size as usize).clamp(1, self.pending.len());
        self.batch = self.pending.drain(..count).collect();
        self.stepping.at = At::Own(State::Replacing);
        Step::Do(Act::Own(Action::Replace {
            step: self.stepping.steps,
            nodes: self.batch.clone(),
            sized_by: size.by,
            size_reason: size.reason,
            ordered_by: self.ordered_by.clone(),
        }))
    }

    fn gating(&self) -> Vec<String> {
        self.batch.clone()
    }

    fn passed(&mut self) -> Step {
        self.stepping.steps += 1;
        self.next()
    }

    fn stop(&self) -> usize {
        self.pending.len()
    }
}

impl Flow for NodeLoop {
    type Sizing = Vec<String>;
    type Gating = Vec<String>;
    type Ask = Question;
    type Act = Action;
    type Answer = Ordered;
    type Stop = usize;

    fn step(&mut self, input: Input) -> Step {
        let step = match (self.stepping.at, input) {
            (At::Own(State::New), Answer::Start) if !self.batch.is_empty() => self.await_replaced(),
            (At::Own(State::New), Answer::Start) => self.next(),
            (At::Own(State::Ordering), Answer::Own(Ordered(order, by))) => {
                self.ordered(order, by);
                self.size()
            }
            (At::Own(State::Replacing), Answer::Done) => self.await_replaced(),
            (At::Stage(stage), input) => self
                .staged(stage, input)
                .unwrap_or_else(|input| panic!("node loop at {stage:?} cannot take {input:?}")),
            (state, input) => panic!("node loop in state {state:?} cannot take {input:?}"),
        };
        self.ended(step)
    }

    fn steps_left(&self) -> u32 {
        let pending = u32::try_from(self.pending.len()).unwrap_or(u32::MAX);
        pending.div_ceil(self.max_unavailable.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::decide::Verdict;
    use crate::plan::decide::{BatchDecision, GateDecision};
    use crate::plan::rolling_update::flow::Hold;
    use crate::plan::rolling_update::flow::{Ask, Gating, Sizing};

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    /// Drives the machine: built-in sizes, `order` reversing the pending nodes, gates that
    /// proceed; the batches it replaces.
    fn batches(mut machine: NodeLoop, reverse: bool) -> Vec<Vec<String>> {
        let mut done = Vec::new();
        let mut input = Input::Start;
        loop {
            input = match machine.step(input) {
                Step::Ask(Ask::Size(Sizing { max, .. })) => Input::Sized(BatchDecision::Size {
                    size: max,
                    reason: "built-in".into(),
                    by: DecidedBy::BuiltIn,
                }),
                Step::Ask(Ask::Own(Question::Order { mut pending })) => {
                    if reverse {
                        pending.reverse();
                    }
                    Input::Own(Ordered(pending, DecidedBy::Hook("spread".into())))
                }
                Step::Do(Act::Own(Action::Replace { nodes, .. })) => {
                    done.push(nodes);
                    Input::Done
                }
                Step::Do(_) => Input::Done,
                Step::Ask(Ask::Gate(_)) => Input::Judged(GateDecision {
                    verdict: Verdict::Proceed,
                    by: DecidedBy::BuiltIn,
                }),
                Step::Done(Outcome::Finished) => return done,
                Step::Done(other) => panic!("{other:?}"),
            };
        }
    }

    #[test]
    fn every_node_goes_once_in_the_order_given_at_most_max_per_step() {
        let pending = names(&["a", "b", "c", "d", "e"]);
        assert_eq!(
            batches(NodeLoop::new(pending.clone(), Vec::new(), 2), false),
            [names(&["a", "b"]), names(&["c", "d"]), names(&["e"])]
        );
        assert_eq!(
            batches(NodeLoop::new(pending, Vec::new(), 2), true),
            [names(&["e", "d"]), names(&["c", "b"]), names(&["a"])]
        );
        assert!(batches(NodeLoop::new(Vec::new(), Vec::new(), 2), false).is_empty());
    }

    #[test]
    fn a_resumed_update_first_awaits_and_gates_the_nodes_it_replaced() {
        let mut m = NodeLoop::new(names(&["c"]), names(&["a", "b"]), 2);
        assert_eq!(
            m.step(Input::Start),
            Step::Do(Act::Own(Action::AwaitReplaced {
                nodes: names(&["a", "b"])
            }))
        );
        assert!(matches!(
            m.step(Input::Done),
            Step::Ask(Ask::Gate(Gating { step: 0, ref about, .. })) if about == &names(&["a", "b"])
        ));
        let order = m.step(Input::Judged(GateDecision {
            verdict: Verdict::Proceed,
            by: DecidedBy::BuiltIn,
        }));
        assert_eq!(
            order,
            Step::Ask(Ask::Own(Question::Order {
                pending: names(&["c"])
            }))
        );
    }

    #[test]
    fn nodes_an_order_leaves_out_come_last_and_a_gate_abort_leaves_the_rest() {
        let mut m = NodeLoop::new(names(&["a", "b", "c"]), Vec::new(), 1);
        m.step(Input::Start);
        let size = m.step(Input::Own(Ordered(
            names(&["c", "z"]),
            DecidedBy::Hook("h".into()),
        )));
        assert!(
            matches!(size, Step::Ask(Ask::Size(Sizing { ref about, .. })) if about == &names(&["c", "a", "b"])),
            "{size:?}"
        );

        let mut m = NodeLoop::new(names(&["a", "b"]), Vec::new(), 1);
        m.step(Input::Start);
        m.step(Input::Own(Ordered(names(&["b", "a"]), DecidedBy::BuiltIn)));
        let replace = m.step(Input::Sized(BatchDecision::Size {
            size: 5,
            reason: "r".into(),
            by: DecidedBy::BuiltIn,
        }));
        // A size beyond what is left is held to it.
        assert!(
            matches!(replace, Step::Do(Act::Own(Action::Replace { ref nodes, .. })) if nodes.len() == 2)
        );
        assert_eq!(
            m.step(Input::Done),
            Step::Do(Act::Own(Action::AwaitReplaced {
                nodes: names(&["b", "a"])
            }))
        );
        assert!(matches!(
            m.step(Input::Done),
            Step::Ask(Ask::Gate(Gating { attempt: 0, .. }))
        ));
        let wait = m.step(Input::Judged(GateDecision {
            verdict: Verdict::Wait {
                seconds: 5,
                reason: "hot".into(),
            },
            by: DecidedBy::Hook("g".into()),
        }));
        assert!(matches!(wait, Step::Do(Act::Wait(Hold { seconds: 5, .. }))));
        assert!(matches!(
            m.step(Input::Done),
            Step::Ask(Ask::Gate(Gating { attempt: 1, .. }))
        ));
        let stop = m.step(Input::Judged(GateDecision {
            verdict: Verdict::Abort("bad".into()),
            by: DecidedBy::Hook("g".into()),
        }));
        assert!(matches!(stop, Step::Done(Outcome::Aborted { at: 0, .. })));
    }
}
