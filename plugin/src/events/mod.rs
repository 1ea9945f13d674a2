//! What the executors tell the operator while they work, as typed events, and the [`Reporter`]
//! that receives them. The vocabulary only: how events are shown (lines, bars, JSON) is
//! `crate::progress`'s job, so that `cluster` can report without depending on it. Tests collect
//! events instead of reading log text.

mod describe;

use std::sync::Mutex;

use serde::Serialize;

use crate::plan::hook::Phase;
use crate::plan::shadow::ShadowDecision;
use crate::policy::HookPoint;

/// Something an executor did or is waiting for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// A group's rotation starts.
    GroupStarted {
        group: String,
        instances: Vec<String>,
    },
    /// New instances are being created before old ones go.
    Surging {
        group: String,
        detached: Vec<String>,
        canary: bool,
    },
    BatchStarted {
        group: String,
        index: u32,
        nodes: Vec<String>,
        canary: bool,
        decided_by: String,
    },
    /// Waiting, for a reason that is not a failure (a hook's pause or wait, an interval).
    /// An operator's pause request holds the run at a safe point until `resume`.
    Paused {
        by: String,
        reason: String,
        /// Where the run holds: "before batch 2 of group nodes".
        at: String,
    },
    /// The pause was withdrawn; the run goes on from where it held.
    Resumed {
        at: String,
    },
    Waiting {
        seconds: u64,
        reason: String,
    },
    Terminated {
        node: String,
        output: String,
    },
    /// `abort --uncordon`: a node the stopped run had cordoned is schedulable again.
    Uncordoned {
        node: String,
    },
    /// A node of the batch was removed by someone else (another tool, a person) before the run
    /// was done with it: dropped from the run, never a stop.
    NodeGone {
        group: String,
        node: String,
    },
    /// Other tools are disrupting nodes of the group (see [`crate::plan::ledger`]): the next
    /// batch takes `room` of the group's `budget`; with none left the run holds until they
    /// are done.
    OthersDisrupting {
        group: String,
        /// Who disrupts which nodes, in words.
        disrupting: String,
        nodes: Vec<String>,
        room: u32,
        budget: u32,
    },
    /// kured's reboot lock (on `daemon_set`) has no room for the run: held by `holders`, it
    /// holds until they let go, then takes it before the batch's cordons.
    KuredLockHeld {
        daemon_set: String,
        holders: Vec<String>,
    },
    /// A node whose drain could not finish is set aside (`drain.undrainable: Quarantine`):
    /// cordoned with the pods it still has, not terminated, back in load balancers.
    Quarantined {
        node: String,
        reason: String,
    },
    /// The replacements of a batch are Ready.
    Replaced {
        group: String,
        ready: usize,
    },
    /// The pods evicted from a group's batch are Ready again (groups whose node manager
    /// launches nodes for pods, as Karpenter does).
    PodsBack {
        group: String,
        pods: usize,
    },
    GroupDone {
        group: String,
    },
    /// How long the rest of the run likely takes: said when it starts and after each batch,
    /// re-estimated from the cluster's history with what this run measured so far.
    Estimate {
        elapsed_seconds: u64,
        remaining_seconds: u64,
        remaining_p90_seconds: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        ends_at: Option<String>,
        basis: String,
    },
    /// Every chosen instance is replaced.
    Done,
    Cordoned {
        node: String,
        /// Labelled out of external load balancers in the same write.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        excluded_from_load_balancers: bool,
    },
    Tainted {
        node: String,
        key: String,
    },
    /// A drain starts: how many pods it moves, which it leaves and which it waits for.
    DrainStarted {
        node: String,
        pods: usize,
        skipped: Vec<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        held: Vec<String>,
    },
    /// The drain waits for a pod rather than evicting it: it asks not to be disrupted, or runs
    /// to completion.
    PodHeld {
        node: String,
        pod: String,
        reason: String,
        timeout_seconds: u64,
    },
    /// A held pod was still there at its timeout; `then` says what the drain does now.
    HoldExpired {
        node: String,
        pod: String,
        then: String,
    },
    /// An eviction refused for long enough took the next rung of the policy's escalation
    /// ladder (`DeleteUnready`, `Delete`).
    DrainEscalated {
        node: String,
        pod: String,
        rung: String,
        reason: String,
    },
    Evicted {
        node: String,
        pod: String,
    },
    /// An eviction was refused for now; it is retried after `retry_seconds`.
    EvictionBlocked {
        node: String,
        pod: String,
        reason: String,
        retry_seconds: u64,
        seconds_left: u64,
    },
    PodGone {
        node: String,
        pod: String,
    },
    Drained {
        node: String,
    },
    /// A validation check passed.
    Validated {
        passed: u32,
        needed: u32,
    },
    /// A validation check failed; the next change to the cluster triggers another.
    ValidationFailed {
        failures: Vec<String>,
        seconds_left: u64,
    },
    Warning {
        message: String,
    },
    /// A policy decision was taken: one per question a flow asked (a batch size, a gate
    /// verdict, a selection), with who answered it. Hooks are called once per decision.
    Decided {
        point: HookPoint,
        #[serde(skip_serializing_if = "Option::is_none")]
        phase: Option<Phase>,
        /// The batch (or scale step) the decision is about, counted from 0.
        batch: u32,
        /// How many times this question was already answered with a wait or pause.
        attempt: u32,
        decided_by: String,
        /// What was decided, in words: `size 2`, `pause 60s: …`, `proceed`, `wait 30s: …`,
        /// `abort: …`, `order a, b, c`.
        decision: String,
    },
    /// What a shadow hook would have decided, reported after the decision taken.
    Shadow {
        /// The batch (or scale step) the decision is about, counted from 0.
        batch: u32,
        attempt: u32,
        #[serde(flatten)]
        said: ShadowDecision,
    },
    /// A controller rolling update starts its scale loop: `next` grows to `desired` while `old`
    /// shrinks to 0 (in a rollback, `next` is the controller rolled back to).
    UpdateStarted {
        old: String,
        old_replicas: i32,
        next: String,
        next_replicas: i32,
        desired: i32,
        /// Pods that stay available throughout (desired minus maxUnavailable).
        min_available: i32,
        /// The most pods at once (desired plus maxSurge).
        max_total: i32,
    },
    /// The next controller of a rolling update was created.
    ControllerCreated {
        controller: String,
    },
    /// A rolling update found its next controller from an earlier (or legacy kubectl's) run.
    UpdateContinued {
        controller: String,
    },
    /// A rollback starts: the old controller is to be scaled back to its original size.
    RollbackStarted {
        controller: String,
        replicas: i32,
    },
    /// A scale step of a rolling update starts (steps count from 0).
    StepStarted {
        step: u32,
        controller: String,
        from: i32,
        to: i32,
        /// Who sized the step.
        decided_by: String,
    },
    /// A controller runs its new replica count.
    Scaled {
        controller: String,
        from: i32,
        to: i32,
    },
    /// A scale step is done and the gates let the update go on.
    StepDone {
        step: u32,
        old: String,
        old_replicas: i32,
        next: String,
        next_replicas: i32,
        desired: i32,
    },
    /// The controller scaled down to 0 is deleted.
    Deleting {
        controller: String,
    },
    /// The next controller takes the old one's name (its pods are orphaned, then adopted).
    Renaming {
        from: String,
        to: String,
    },
    /// A rename stopped midway is finished from the record it left on a pod.
    RenameResumed {
        controller: String,
        pod: String,
    },
    /// The old controller is already gone: only the cleanup of `next` is left.
    OldGone {
        old: String,
        next: String,
    },
    /// A gate aborted and `--on-abort=rollback` rolls back.
    RollingBackOnAbort {
        reason: String,
    },
    /// A StatefulSet's partitioned update starts (or resumes) at `partition`, towards
    /// `revision`; ordinals below `floor` run it already.
    PartitionUpdateStarted {
        workload: String,
        replicas: i32,
        partition: i32,
        floor: i32,
        revision: String,
        max_unavailable: u32,
    },
    /// A step lowers the partition: the controller updates `pods`, highest ordinal first.
    PartitionSet {
        step: u32,
        workload: String,
        from: i32,
        to: i32,
        pods: Vec<String>,
        canary: bool,
        /// Who sized the step.
        decided_by: String,
    },
    /// The ordinals at or above `partition` are available on the new revision.
    PodsUpdated {
        step: u32,
        workload: String,
        partition: i32,
    },
    /// A DaemonSet's node-by-node update starts (or resumes): `nodes` run an old pod.
    NodeUpdateStarted {
        workload: String,
        nodes: usize,
        revision: String,
        max_unavailable: u32,
    },
    /// A step replaces the pods on `nodes`: the old ones are deleted, the controller starts new
    /// ones.
    NodesReplacing {
        step: u32,
        workload: String,
        nodes: Vec<String>,
        /// Who sized the step, and who ordered the nodes.
        decided_by: String,
        ordered_by: String,
    },
    /// The new pods on `nodes` are Ready.
    NodesReplaced {
        step: u32,
        workload: String,
        nodes: Vec<String>,
    },
    /// The rolling update is complete; `next` is set when the next controller kept its name.
    UpdateDone {
        controller: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        next: Option<String>,
    },
    /// A rollback is complete.
    RolledBack {
        controller: String,
    },
}

/// Receives events. Implementations must be cheap: executors call this inline.
pub trait Reporter: Send + Sync {
    fn report(&self, event: Event);
}

/// Keeps every event, for tests and summaries.
#[derive(Default)]
pub struct Collect(pub Mutex<Vec<Event>>);

impl Reporter for Collect {
    fn report(&self, event: Event) {
        self.0.lock().unwrap().push(event);
    }
}

impl Collect {
    pub fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }
}

#[cfg(test)]
mod tests;
