//! Each event as one line for a person. The rolling update's lines keep legacy
//! `kubectl rolling-update`'s wording.

use super::Event;
use crate::duration::human_duration;

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
            Event::Paused { by, reason, at } => {
                let why = if reason.is_empty() {
                    String::new()
                } else {
                    format!(": {reason}")
                };
                format!("paused {at} by {by}{why}; `kubectl rollout-ext resume` continues")
            }
            Event::Resumed { at } => format!("resumed {at}"),
            Event::Waiting { seconds, reason } => {
                format!("waiting {}: {reason}", human_duration(*seconds as i64))
            }
            Event::Terminated { node, output } if output.is_empty() => {
                format!("terminated {node}")
            }
            Event::Terminated { node, output } => format!("terminated {node}: {output}"),
            Event::Uncordoned { node } => {
                format!("uncordoned node {node} (abort --uncordon)")
            }
            Event::NodeGone { group, node } => format!(
                "node {node} of group {group} is gone: removed by someone else; the run goes on without it"
            ),
            Event::OthersDisrupting {
                disrupting,
                room: 0,
                budget,
                ..
            } => format!(
                "{disrupting}: the run holds until they leave room in the group's budget ({budget} at once)"
            ),
            Event::OthersDisrupting {
                disrupting,
                room,
                budget,
                ..
            } => format!(
                "{disrupting}: the next batch takes {room} of the group's budget of {budget}"
            ),
            Event::KuredLockHeld {
                daemon_set,
                holders,
            } => format!(
                "kured's reboot lock on DaemonSet {daemon_set} is held by {}: the run takes it before it takes nodes out",
                holders.join(", ")
            ),
            Event::Quarantined { node, reason } => format!(
                "set node {node} aside: it stays cordoned with its pods and is not terminated ({reason})"
            ),
            Event::Replaced { group, ready } => {
                format!("group {group}: replacements Ready ({ready} nodes Ready)")
            }
            Event::PodsBack { group, pods } => {
                format!("group {group}: the evicted pods are Ready again ({pods} Ready)")
            }
            Event::GroupDone { group } => format!("group {group} is up to date"),
            Event::Estimate {
                elapsed_seconds,
                remaining_seconds,
                remaining_p90_seconds,
                ends_at,
                basis,
            } => {
                let mut line = format!(
                    "{} elapsed; about {} left",
                    human_duration(*elapsed_seconds as i64),
                    human_duration(*remaining_seconds as i64)
                );
                if remaining_p90_seconds > remaining_seconds {
                    line += &format!(" (up to {})", human_duration(*remaining_p90_seconds as i64));
                }
                if let Some(ends) = ends_at {
                    line += &format!(", ends about {ends}");
                }
                format!("{line} [{basis}]")
            }
            Event::Done => "rotation complete".into(),
            Event::Cordoned {
                node,
                excluded_from_load_balancers,
            } => match excluded_from_load_balancers {
                true => format!("cordoned node {node}, excluded from external load balancers"),
                false => format!("cordoned node {node}"),
            },
            Event::Tainted { node, key } => {
                format!("tainted node {node} with {key}:PreferNoSchedule")
            }
            Event::DrainStarted {
                node,
                pods,
                skipped,
                held,
            } => {
                let mut line = format!("draining node {node}: {pods} pod(s) to evict");
                if !held.is_empty() {
                    line.push_str(&format!(", waiting for {}", held.join(", ")));
                }
                if !skipped.is_empty() {
                    line.push_str(&format!(", leaving {}", skipped.join(", ")));
                }
                line
            }
            Event::PodHeld {
                node,
                pod,
                reason,
                timeout_seconds,
            } => format!(
                "draining node {node}: pod {pod} {reason}, for up to {}",
                human_duration(*timeout_seconds as i64)
            ),
            Event::HoldExpired { node, pod, then } => {
                format!("draining node {node}: pod {pod} was waited for long enough; {then}")
            }
            Event::DrainEscalated {
                node,
                pod,
                rung,
                reason,
            } => format!("draining node {node}: escalation rung {rung} for pod {pod}: {reason}"),
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
            Event::PartitionUpdateStarted {
                workload,
                replicas,
                partition,
                floor,
                revision,
                max_unavailable,
            } => {
                let settled = if *floor > 0 {
                    format!(", ordinals below {floor} on it already")
                } else {
                    String::new()
                };
                format!(
                    "Updating {workload} ({replicas} replicas) to revision {revision} from partition {partition}{settled}, at most {max_unavailable} pods at a time"
                )
            }
            Event::PartitionSet {
                step,
                workload,
                to,
                pods,
                canary,
                decided_by,
                ..
            } => format!(
                "Setting the partition of {workload} to {to}: updating {} [step {}{}, size: {decided_by}]",
                if pods.is_empty() {
                    "no pod (the rest run the revision already)".to_string()
                } else {
                    pods.join(", ")
                },
                step + 1,
                if *canary { ", canary" } else { "" }
            ),
            Event::NodeUpdateStarted {
                workload,
                nodes,
                revision,
                max_unavailable,
            } => format!(
                "Updating {workload} to revision {revision} node by node: {nodes} nodes run an old pod, at most {max_unavailable} at a time"
            ),
            Event::NodesReplacing {
                step,
                workload,
                nodes,
                decided_by,
                ordered_by,
            } => format!(
                "Replacing the pods of {workload} on {} [step {}, size: {decided_by}, order: {ordered_by}]",
                nodes.join(", "),
                step + 1
            ),
            Event::NodesReplaced {
                step,
                workload,
                nodes,
            } => format!(
                "step {} done: the new pods of {workload} on {} are Ready",
                step + 1,
                nodes.join(", ")
            ),
            Event::PodsUpdated {
                step,
                workload,
                partition,
            } => format!(
                "step {} done: the pods of {workload} from ordinal {partition} up run the new revision",
                step + 1
            ),
        }
    }
}
