//! What the executors tell the operator while they work, as typed events, and the [`Reporter`]
//! that receives them. The vocabulary only: how events are shown (lines, bars, JSON) is
//! `crate::progress`'s job, so that `cluster` can report without depending on it. Tests collect
//! events instead of reading log text.

use std::sync::Mutex;

use serde::Serialize;

use crate::duration::human_duration;
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
    Waiting {
        seconds: u64,
        reason: String,
    },
    Terminated {
        node: String,
        output: String,
    },
    /// The replacements of a batch are Ready.
    Replaced {
        group: String,
        ready: usize,
    },
    GroupDone {
        group: String,
    },
    /// Every chosen instance is replaced.
    Done,
    Cordoned {
        node: String,
    },
    Tainted {
        node: String,
        key: String,
    },
    /// A drain starts: how many pods it moves and which it leaves.
    DrainStarted {
        node: String,
        pods: usize,
        skipped: Vec<String>,
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

impl Event {
    /// One line for a person.
    pub fn describe(&self) -> String {
        match self {
            Event::GroupStarted { group, instances } => {
                format!("rotating group {group}: {}", instances.join(", "))
            }
            Event::Surging {
                group,
                detached,
                canary,
            } => format!(
                "surging group {group}{}: detached {}",
                if *canary { " (canary)" } else { "" },
                detached.join(", ")
            ),
            Event::BatchStarted {
                group,
                index,
                nodes,
                canary,
                decided_by,
            } => format!(
                "group {group} batch {}{}: {} [size: {decided_by}]",
                index + 1,
                if *canary { " (canary)" } else { "" },
                nodes.join(", ")
            ),
            Event::Waiting { seconds, reason } => {
                format!("waiting {}: {reason}", human_duration(*seconds as i64))
            }
            Event::Terminated { node, output } if output.is_empty() => {
                format!("terminated {node}")
            }
            Event::Terminated { node, output } => format!("terminated {node}: {output}"),
            Event::Replaced { group, ready } => {
                format!("group {group}: replacements Ready ({ready} nodes Ready)")
            }
            Event::GroupDone { group } => format!("group {group} is up to date"),
            Event::Done => "rotation complete".into(),
            Event::Cordoned { node } => format!("cordoned node {node}"),
            Event::Tainted { node, key } => {
                format!("tainted node {node} with {key}:PreferNoSchedule")
            }
            Event::DrainStarted {
                node,
                pods,
                skipped,
            } => {
                let mut line = format!("draining node {node}: {pods} pod(s) to evict");
                if !skipped.is_empty() {
                    line.push_str(&format!(", leaving {}", skipped.join(", ")));
                }
                line
            }
            Event::Evicted { node, pod } => format!("evicted pod {pod} from {node}"),
            Event::EvictionBlocked {
                pod,
                reason,
                retry_seconds,
                seconds_left,
                ..
            } => format!(
                "eviction of pod {pod} blocked: {reason}; retrying every {retry_seconds}s, {} left",
                human_duration(*seconds_left as i64)
            ),
            Event::PodGone { node, pod } => format!("pod {pod} is gone from {node}"),
            Event::Drained { node } => format!("drained node {node}"),
            Event::Validated { passed, needed } => {
                format!("cluster validated ({passed} of {needed} checks)")
            }
            Event::ValidationFailed {
                failures,
                seconds_left,
            } => format!(
                "cluster does not validate: {}; waiting for a change, {} left",
                failures.join("; "),
                human_duration(*seconds_left as i64)
            ),
            Event::Warning { message } => format!("warning: {message}"),
            Event::Shadow { batch, said, .. } => {
                let phase = said
                    .phase
                    .map(|p| format!(" {}", p.as_str()))
                    .unwrap_or_default();
                format!(
                    "{}{phase} for batch {}: {}",
                    said.point,
                    batch + 1,
                    said.describe()
                )
            }
            Event::Decided {
                point,
                phase,
                batch,
                attempt,
                decided_by,
                decision,
            } => {
                let phase = phase
                    .map(|p| format!(" {}", p.as_str()))
                    .unwrap_or_default();
                let again = if *attempt > 0 {
                    format!(", attempt {}", attempt + 1)
                } else {
                    String::new()
                };
                format!(
                    "{point}{phase} for batch {}{again}: {decision} [{decided_by}]",
                    batch + 1
                )
            }
            // The rolling update's lines keep legacy `kubectl rolling-update`'s wording.
            Event::UpdateStarted {
                old,
                old_replicas,
                next,
                next_replicas,
                desired,
                min_available,
                max_total,
            } => format!(
                "Scaling up {next} from {next_replicas} to {desired}, scaling down {old} from {old_replicas} to 0 (keep {min_available} pods available, don't exceed {max_total} pods)"
            ),
            Event::ControllerCreated { controller } => format!("Created {controller}"),
            Event::UpdateContinued { controller } => {
                format!("Continuing update with existing controller {controller}.")
            }
            Event::RollbackStarted {
                controller,
                replicas,
            } => format!("Setting {controller:?} replicas to {replicas}"),
            Event::StepStarted {
                step,
                controller,
                from,
                to,
                decided_by,
            } => format!(
                "Scaling {controller} {} to {to} [step {}, size: {decided_by}]",
                if to >= from { "up" } else { "down" },
                step + 1
            ),
            Event::Scaled {
                controller,
                from,
                to,
            } => format!("scaled {controller} from {from} to {to} replicas"),
            Event::StepDone {
                step,
                old,
                old_replicas,
                next,
                next_replicas,
                desired,
            } => format!(
                "step {} done: {old} has {old_replicas}, {next} {next_replicas} of {desired} replicas",
                step + 1
            ),
            Event::Deleting { controller } => format!("Update succeeded. Deleting {controller}"),
            Event::Renaming { from, to } => format!("Renaming {from} to {to}"),
            Event::RenameResumed { controller, pod } => {
                format!("Finishing an interrupted rename to {controller} (recorded on pod {pod})")
            }
            Event::OldGone { old, next } => format!("{old} is gone; continuing with {next}"),
            Event::RollingBackOnAbort { reason } => {
                format!("{reason}; rolling back (--on-abort=rollback)")
            }
            Event::UpdateDone {
                controller,
                next: Some(next),
            } => format!("{controller} rolling updated to {next:?}"),
            Event::UpdateDone {
                controller,
                next: None,
            } => format!("{controller} rolling updated"),
            Event::RolledBack { controller } => format!("{controller} rolled back"),
        }
    }
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
mod tests {
    use super::*;

    #[test]
    fn rolling_update_events_read_as_legacy_kubectl_printed_them() {
        let cases = [
            (
                Event::UpdateStarted {
                    old: "foo".into(),
                    old_replicas: 3,
                    next: "foo-2".into(),
                    next_replicas: 0,
                    desired: 3,
                    min_available: 3,
                    max_total: 4,
                },
                "Scaling up foo-2 from 0 to 3, scaling down foo from 3 to 0 (keep 3 pods available, don't exceed 4 pods)",
            ),
            (
                Event::ControllerCreated {
                    controller: "foo-2".into(),
                },
                "Created foo-2",
            ),
            (
                Event::UpdateContinued {
                    controller: "foo-2".into(),
                },
                "Continuing update with existing controller foo-2.",
            ),
            (
                Event::RollbackStarted {
                    controller: "foo".into(),
                    replicas: 3,
                },
                "Setting \"foo\" replicas to 3",
            ),
            (
                Event::StepStarted {
                    step: 0,
                    controller: "foo-2".into(),
                    from: 0,
                    to: 1,
                    decided_by: "hook/window".into(),
                },
                "Scaling foo-2 up to 1 [step 1, size: hook/window]",
            ),
            (
                Event::StepStarted {
                    step: 1,
                    controller: "foo".into(),
                    from: 3,
                    to: 2,
                    decided_by: "built-in".into(),
                },
                "Scaling foo down to 2 [step 2, size: built-in]",
            ),
            (
                Event::Scaled {
                    controller: "foo".into(),
                    from: 3,
                    to: 2,
                },
                "scaled foo from 3 to 2 replicas",
            ),
            (
                Event::StepDone {
                    step: 1,
                    old: "foo".into(),
                    old_replicas: 2,
                    next: "foo-2".into(),
                    next_replicas: 1,
                    desired: 3,
                },
                "step 2 done: foo has 2, foo-2 1 of 3 replicas",
            ),
            (
                Event::Deleting {
                    controller: "foo".into(),
                },
                "Update succeeded. Deleting foo",
            ),
            (
                Event::Renaming {
                    from: "foo-2".into(),
                    to: "foo".into(),
                },
                "Renaming foo-2 to foo",
            ),
            (
                Event::RenameResumed {
                    controller: "rc/foo".into(),
                    pod: "foo-2-abcde".into(),
                },
                "Finishing an interrupted rename to rc/foo (recorded on pod foo-2-abcde)",
            ),
            (
                Event::OldGone {
                    old: "rc/foo".into(),
                    next: "foo-2".into(),
                },
                "rc/foo is gone; continuing with foo-2",
            ),
            (
                Event::RollingBackOnAbort {
                    reason: "hook/stop aborted".into(),
                },
                "hook/stop aborted; rolling back (--on-abort=rollback)",
            ),
            (
                Event::UpdateDone {
                    controller: "rc/foo".into(),
                    next: Some("foo-2".into()),
                },
                "rc/foo rolling updated to \"foo-2\"",
            ),
            (
                Event::UpdateDone {
                    controller: "rc/foo".into(),
                    next: None,
                },
                "rc/foo rolling updated",
            ),
            (
                Event::RolledBack {
                    controller: "rc/foo".into(),
                },
                "rc/foo rolled back",
            ),
        ];
        for (event, line) in cases {
            assert_eq!(event.describe(), line, "{event:?}");
        }
    }

    #[test]
    fn a_shadow_event_carries_the_hook_its_words_and_whether_it_agrees() {
        let event = Event::Shadow {
            batch: 1,
            attempt: 0,
            said: ShadowDecision {
                hook: "next-policy".into(),
                point: HookPoint::Gate,
                phase: Some(Phase::AfterBatch),
                decision: "abort: payments not ready".into(),
                agrees: false,
                error: None,
            },
        };
        assert_eq!(
            event.describe(),
            "gate after-batch for batch 2: hook/next-policy (shadow) would abort: payments not ready; differs from the decision taken"
        );
        assert_eq!(
            serde_json::to_value(event).unwrap(),
            serde_json::json!({"event": "shadow", "batch": 1, "attempt": 0, "hook": "next-policy",
                               "point": "gate", "phase": "after-batch",
                               "decision": "abort: payments not ready", "agrees": false})
        );
    }

    #[test]
    fn rolling_update_events_serialize_with_their_kind() {
        let step = Event::StepStarted {
            step: 0,
            controller: "foo-2".into(),
            from: 0,
            to: 1,
            decided_by: "built-in".into(),
        };
        assert_eq!(
            serde_json::to_value(step).unwrap(),
            serde_json::json!({"event": "step-started", "step": 0, "controller": "foo-2",
                               "from": 0, "to": 1, "decided_by": "built-in"})
        );
        let done = Event::UpdateDone {
            controller: "rc/foo".into(),
            next: None,
        };
        assert_eq!(
            serde_json::to_value(done).unwrap(),
            serde_json::json!({"event": "update-done", "controller": "rc/foo"})
        );
    }
}
