//! What `status` shows of a rotation, as a model: the Lease's record of the run (what holds it,
//! its estimate, its progress, the operator's requests) and, for `status --watch`, the nodes it
//! marks, the pods left on those it drains and its Events, kept from what a follow of the
//! rotation says. Pure: `screen` draws it, `live` says it as lines, `status` prints it once.

use std::collections::BTreeMap;

use crate::cluster::controls::Controls;
use crate::cluster::follow::{Followed, NodeMarks, RunEvent};
use crate::cluster::lock::LockStatus;
use crate::duration::human_duration;
use crate::keys;
use crate::rotate::progress::RunProgress;

/// How many Events the view keeps.
const EVENTS_KEPT: usize = 200;

/// Reasons of the Events that say why a drain waits.
const DRAIN_WAITS: &[&str] = &[
    "EvictionBlocked",
    "PodHeld",
    "HoldExpired",
    "DrainEscalated",
];

/// Reasons of the Event that ends a run.
pub const RUN_ENDS: &[&str] = &["Finished", "Aborted", "Stopped"];

/// What holds a rotation, as the executor recorded it on the lock.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Holding {
    pub what: String,
    /// RFC 3339.
    pub since: String,
}

impl Holding {
    /// How long it has held, at `now`.
    pub fn for_how_long(&self, now: jiff::Timestamp) -> String {
        (self.since.parse::<jiff::Timestamp>())
            .map(|t| now.duration_since(t).as_secs().max(0))
            .map_or_else(|_| self.since.clone(), human_duration)
    }
}

/// The run's last `estimate` event, as it recorded it on the lock.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct EstimateNote {
    pub elapsed_seconds: u64,
    pub remaining_seconds: u64,
    pub remaining_p90_seconds: u64,
    pub ends_at: Option<String>,
    pub basis: String,
}

impl EstimateNote {
    pub fn describe(&self) -> String {
        crate::events::Event::Estimate {
            elapsed_seconds: self.elapsed_seconds,
            remaining_seconds: self.remaining_seconds,
            remaining_p90_seconds: self.remaining_p90_seconds,
            ends_at: self.ends_at.clone(),
            basis: self.basis.clone(),
        }
        .describe()
    }
}

/// The run's records on the Lease, read.
pub struct LeaseRecords<'a>(pub Option<&'a LockStatus>);

impl LeaseRecords<'_> {
    fn state(&self, key: &str) -> Option<&String> {
        self.0.and_then(|l| l.state.get(key))
    }

    /// A run holds the lock.
    pub fn running(&self) -> bool {
        self.0.is_some_and(|l| !l.holder.is_empty())
    }

    /// A run stopped before its end and left its state for the next (a Lease that carries only
    /// an operator's request is no rotation).
    pub fn left_unfinished(&self) -> bool {
        !self.running()
            && self
                .0
                .is_some_and(|l| (l.state.keys()).any(|k| k != keys::PAUSE && k != keys::ABORT))
    }

    pub fn holding(&self) -> Option<Holding> {
        serde_json::from_str(self.state(keys::HOLDING)?).ok()
    }

    pub fn controls(&self) -> Controls {
        self.0
            .map(|l| Controls::from_annotations(&l.state))
            .unwrap_or_default()
    }

    pub fn estimate(&self) -> Option<EstimateNote> {
        serde_json::from_str(self.state(keys::ESTIMATE)?).ok()
    }

    pub fn progress(&self) -> Option<RunProgress> {
        RunProgress::from_record(self.state(keys::PROGRESS)?)
    }

    pub fn slow(&self) -> Option<String> {
        self.state(keys::SLOW).cloned()
    }

    /// Each group being rotated and the Ready nodes it expects.
    pub fn expected(&self) -> Vec<(String, String)> {
        (self.0.iter().flat_map(|l| &l.state))
            .filter_map(|(k, v)| Some((k.strip_prefix("rollout-ext.io/expected.")?, v)))
            .map(|(g, v)| (g.to_string(), v.clone()))
            .collect()
    }

    /// The headline and what holds, paces and was asked of the run, as lines.
    pub fn lines(&self, now: jiff::Timestamp) -> Vec<String> {
        let mut lines = vec![match self.0 {
            Some(l) if self.running() => format!(
                "Rotation running: {} (lock renewed {} ago)",
                l.holder,
                (l.renewed_seconds_ago).map_or_else(|| "never".into(), human_duration)
            ),
            _ if self.left_unfinished() => "No rotation is running; an unfinished one left its \
                state (run the same command again to resume)."
                .into(),
            _ => "No rotation is running, and none was left unfinished.".into(),
        }];
        if let (Some(h), true) = (self.holding(), self.0.is_some()) {
            let when = if self.running() {
                "Now"
            } else {
                "It stopped while"
            };
            lines.push(format!(
                "  {when}: {} (for {})",
                h.what,
                h.for_how_long(now)
            ));
        }
        if let (Some(e), true) = (self.estimate(), self.running()) {
            lines.push(format!("  Estimate: {}", e.describe()));
        }
        if let Some(slow) = self.slow() {
            lines.push(format!("  Slow: {slow}"));
        }
        let controls = self.controls();
        if let Some(pause) = &controls.pause {
            let who = match self.running() {
                true => "the run holds at its next safe point",
                false => "the next run waits before it changes anything",
            };
            lines.push(format!(
                "  Paused {} ({who}; `kubectl rollout-ext resume` continues)",
                pause.describe()
            ));
        }
        if let Some(abort) = &controls.abort {
            lines.push(format!(
                "  Abort requested {} (the run stops after its current step)",
                abort.describe()
            ));
        }
        lines
    }
}

/// An Event as the view keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenEvent {
    pub event: RunEvent,
    /// Published after the view began (not one of those it found).
    pub fresh: bool,
}

/// A node of the batch in flight, or one the run marks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLine {
    pub name: String,
    /// `draining`, `drained`, `set aside`, `detached`, `waiting` (chosen, not cordoned yet).
    pub state: String,
    /// The pods its drain still has to move, while it drains.
    pub pods_left: Option<Vec<String>>,
    /// What its drain waits on.
    pub blocked: Option<String>,
}

/// The view of a rotation, kept from what a follow of it says.
#[derive(Debug, Default)]
pub struct Scene {
    /// The Lease as last seen; `None` before the first list or when there is none.
    pub lease: Option<LockStatus>,
    /// Every watch that is failing now, and how.
    pub problems: BTreeMap<&'static str, String>,
    nodes: BTreeMap<String, NodeMarks>,
    pods_left: BTreeMap<String, Vec<String>>,
    /// Newest last.
    events: Vec<SeenEvent>,
    events_listed: bool,
    /// A run held the lock while the view watched.
    seen_running: bool,
    /// The Lease was listed.
    lease_known: bool,
}

impl Scene {
    pub fn apply(&mut self, change: Followed) {
        if let Some(watch) = change.watch() {
            self.problems.remove(watch);
        }
        match change {
            Followed::Lease(lease) => {
                self.lease_known = true;
                self.lease = lease;
                self.seen_running |= self.records().running();
            }
            Followed::Nodes(all) => {
                self.nodes = all.into_iter().map(|m| (m.name.clone(), m)).collect();
                self.pods_left
                    .retain(|n, _| self.nodes.get(n).is_some_and(NodeMarks::draining));
            }
            Followed::Node(marks) => {
                if !marks.draining() {
                    self.pods_left.remove(&marks.name);
                }
                match marks.marked() {
                    true => self.nodes.insert(marks.name.clone(), marks),
                    false => self.nodes.remove(&marks.name),
                };
            }
            Followed::NodeGone(name) => {
                self.nodes.remove(&name);
                self.pods_left.remove(&name);
            }
            Followed::PodsLeft { node, pods } => {
                if self.nodes.get(&node).is_some_and(NodeMarks::draining) {
                    self.pods_left.insert(node, pods);
                }
            }
            Followed::Event(event) => {
                let fresh = self.events_listed;
                self.events.retain(|e| e.event.name != event.name);
                self.events.push(SeenEvent { event, fresh });
                self.events.sort_by_key(|e| e.event.at);
                let over = self.events.len().saturating_sub(EVENTS_KEPT);
                self.events.drain(..over);
            }
            Followed::EventsListed => self.events_listed = true,
            Followed::Failed { what, message } => {
                self.problems.insert(what, message);
            }
        }
    }

    pub fn records(&self) -> LeaseRecords<'_> {
        LeaseRecords(self.lease.as_ref())
    }

    /// Whether the Lease has been read yet.
    pub fn known(&self) -> bool {
        self.lease_known
    }

    /// The last `n` Events, newest last.
    pub fn last_events(&self, n: usize) -> &[SeenEvent] {
        &self.events[self.events.len().saturating_sub(n)..]
    }

    /// The Event that ended the run this view saw running, once it is published.
    pub fn ended(&self) -> Option<&RunEvent> {
        if !self.seen_running || self.records().running() {
            return None;
        }
        (self.events.iter().rev())
            .find(|e| {
                e.fresh && e.event.regarding == "run" && RUN_ENDS.contains(&e.event.reason.as_str())
            })
            .map(|e| &e.event)
    }

    /// Whether the run this view saw running let go of the lock.
    pub fn let_go(&self) -> bool {
        self.seen_running && !self.records().running()
    }

    /// The nodes of the batches in flight, then any other the run marks.
    pub fn node_lines(&self) -> Vec<NodeLine> {
        let in_flight: Vec<String> = (self.records().progress().into_iter())
            .flat_map(|p| p.groups)
            .filter_map(|g| g.batch)
            .flat_map(|b| b.nodes)
            .collect();
        let marked = self
            .nodes
            .keys()
            .filter(|n| !in_flight.contains(n))
            .cloned();
        let holding = self.records().holding();
        in_flight
            .iter()
            .cloned()
            .chain(marked)
            .map(|name| {
                let marks = self.nodes.get(&name);
                let state = match marks {
                    Some(m) if m.quarantine.is_some() => "set aside",
                    Some(m) if m.draining() => "draining",
                    Some(m) if m.phase.as_deref() == Some("drained") => "drained",
                    Some(m) if m.detached => "detached",
                    Some(m) => m.phase.as_deref().unwrap_or("marked"),
                    None => "waiting",
                };
                let draining = state == "draining";
                let from_holding = (holding.as_ref())
                    .and_then(|h| h.what.strip_prefix(&format!("draining node {name}: ")))
                    .map(str::to_string);
                let from_events = || {
                    let about = format!("node {name}");
                    (self.events.iter().rev())
                        .find(|e| {
                            e.event.regarding == about
                                && DRAIN_WAITS.contains(&e.event.reason.as_str())
                        })
                        .map(|e| e.event.note.clone())
                };
                let quarantined = marks
                    .and_then(|m| m.quarantine.as_ref())
                    .map(|q| q.reason.clone());
                NodeLine {
                    pods_left: self.pods_left.get(&name).cloned().filter(|_| draining),
                    blocked: match draining {
                        true => from_holding.or_else(from_events),
                        false => quarantined,
                    },
                    state: state.to_string(),
                    name,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rotate::progress::{BatchInFlight, GroupProgress};

    fn lease(holder: &str, state: &[(&str, String)]) -> Followed {
        Followed::Lease(Some(LockStatus {
            holder: holder.into(),
            renewed_seconds_ago: Some(2),
            state: state
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        }))
    }

    fn event(name: &str, regarding: &str, reason: &str, note: &str) -> Followed {
        Followed::Event(RunEvent {
            name: name.into(),
            at: Some(jiff::Timestamp::from_second(1_800_000_000 + name.len() as i64).unwrap()),
            reason: reason.into(),
            regarding: regarding.into(),
            note: note.into(),
            warning: false,
            count: 1,
        })
    }

    fn progress(nodes: &[&str]) -> String {
        RunProgress {
            groups: vec![GroupProgress {
                group: "web".into(),
                instances: 4,
                replaced: 1,
                batch: Some(BatchInFlight {
                    number: 2,
                    nodes: nodes.iter().map(|n| n.to_string()).collect(),
                }),
                done: false,
            }],
        }
        .record()
    }

    #[test]
    fn a_draining_node_shows_its_pods_left_and_what_its_drain_waits_on() {
        let mut scene = Scene::default();
        scene.apply(lease("me", &[(keys::PROGRESS, progress(&["a", "b"]))]));
        let draining = NodeMarks {
            name: "a".into(),
            phase: Some("cordoned".into()),
            ..Default::default()
        };
        scene.apply(Followed::Nodes(vec![draining]));
        scene.apply(Followed::PodsLeft {
            node: "a".into(),
            pods: vec!["shop/web-1".into()],
        });
        scene.apply(event(
            "e1",
            "node a",
            "EvictionBlocked",
            "budget shop/web allows none",
        ));
        let lines = scene.node_lines();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].state, "draining");
        assert_eq!(lines[0].pods_left, Some(vec!["shop/web-1".to_string()]));
        assert_eq!(
            lines[0].blocked.as_deref(),
            Some("budget shop/web allows none")
        );
        // Chosen for the batch, not cordoned yet.
        assert_eq!(
            (lines[1].state.as_str(), lines[1].blocked.clone()),
            ("waiting", None)
        );
        // Drained: its pods are no longer counted.
        scene.apply(Followed::Node(NodeMarks {
            phase: Some("drained".into()),
            ..scene.nodes["a"].clone()
        }));
        let lines = scene.node_lines();
        assert_eq!(
            (lines[0].state.as_str(), lines[0].pods_left.clone()),
            ("drained", None)
        );
    }

    #[test]
    fn the_run_ends_with_the_first_fresh_end_event_after_it_let_go() {
        let mut scene = Scene::default();
        scene.apply(event("old", "run", "Finished", "an earlier run"));
        scene.apply(Followed::EventsListed);
        scene.apply(lease("me", &[]));
        assert!(scene.ended().is_none());
        scene.apply(Followed::Lease(None));
        assert!(scene.let_go());
        assert!(
            scene.ended().is_none(),
            "the earlier run's end is not this one's"
        );
        scene.apply(event("newer", "run", "Aborted", "aborted by alice"));
        assert_eq!(scene.ended().unwrap().note, "aborted by alice");
    }
}
