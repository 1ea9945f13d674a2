//! A fleet's order of work as a pure step machine: which stage is next, when its gates are
//! asked, which clusters start, how long the fleet soaks, and when it stops. `fleet run` and
//! `fleet plan` are its two drivers; the planner here simulates the clock with each cluster's
//! estimate, the run (`crate::fleet`) lives it.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::plan::decide::{self, GateDecision, HookFailed, Verdict};
use crate::plan::hook::{
    CallContext, ClusterOutcome, ClusterResult, Hook, StageInfo, StageOutcome, Timing,
};
use crate::policy::fleet::Fleet;

/// Where one cluster of the fleet stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterState {
    /// Not started by this run (a cluster an earlier run started and did not finish is pending
    /// again: its rotation resumes from its own lock).
    Pending,
    Running,
    Ended(Ended),
}

/// How a cluster's rotation ended, and when (seconds since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ended {
    pub how: EndedHow,
    pub at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum EndedHow {
    Succeeded,
    /// Done but for nodes it set aside (exit code 6).
    NodesSetAside,
    /// Stopped by a gate or an operator's abort: resumable.
    Aborted {
        message: String,
    },
    /// Stopped on an error: `code` is the exit code the fleet ends with (the rotation's own, 1
    /// when it had none: killed by a signal).
    Failed {
        code: u8,
        message: String,
    },
}

impl EndedHow {
    /// Whether the fleet goes on past it.
    pub fn done(&self) -> bool {
        matches!(self, EndedHow::Succeeded | EndedHow::NodesSetAside)
    }
}

/// What the fleet knows of its clusters, and the stages whose gates proceeded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetProgress {
    pub clusters: BTreeMap<String, ClusterState>,
    /// Stages whose gates proceeded (a stage with a cluster started by an earlier run counts).
    pub gates_passed: BTreeSet<usize>,
}

impl FleetProgress {
    pub fn state(&self, context: &str) -> &ClusterState {
        self.clusters.get(context).unwrap_or(&ClusterState::Pending)
    }

    /// The progress earlier runs recorded: a cluster that finished stays finished; one started
    /// and not finished (still running when its run was killed, failed or aborted) is pending
    /// again, its stage past its gates.
    pub fn recorded(fleet: &Fleet, records: impl IntoIterator<Item = (String, Recorded)>) -> Self {
        let mut progress = FleetProgress::default();
        for (context, record) in records {
            match record {
                Recorded::Finished(ended) => {
                    progress
                        .clusters
                        .insert(context, ClusterState::Ended(ended));
                }
                Recorded::Started => {
                    progress.gates_passed.extend(fleet.stage_of(&context));
                }
            }
        }
        progress
    }

    /// The clusters that finished, in the fleet's order.
    pub fn finished<'a>(&'a self, fleet: &'a Fleet) -> impl Iterator<Item = &'a str> + 'a {
        (fleet.clusters())
            .filter(|c| matches!(self.state(&c.context), ClusterState::Ended(e) if e.how.done()))
            .map(|c| c.context.as_str())
    }
}

/// What a cluster's record says of an earlier run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    Finished(Ended),
    Started,
}

/// What the fleet does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Ask the gates before `stage`; `previous` is the stage before it as it ended.
    AskGate {
        stage: usize,
        previous: Option<StageOutcome>,
    },
    /// Start these clusters (kubeconfig contexts) of `stage`.
    Start {
        stage: usize,
        clusters: Vec<String>,
    },
    /// Wait for a running cluster to end.
    AwaitRunning,
    /// Hold after `stage` until `until`, its soak.
    Soak {
        stage: usize,
        until: i64,
    },
    /// A cluster of `stage` failed or was aborted, and nothing runs any more: the fleet stops.
    Stop {
        stage: usize,
        cluster: String,
        how: EndedHow,
    },
    Done,
}

/// The step after `progress` at `now`.
pub fn next(fleet: &Fleet, progress: &FleetProgress, now: i64) -> Next {
    for (i, stage) in fleet.stages.iter().enumerate() {
        let states: Vec<(&str, &ClusterState)> = (stage.clusters.iter())
            .map(|c| (c.context.as_str(), progress.state(&c.context)))
            .collect();
        let running = (states.iter())
            .filter(|(_, s)| **s == ClusterState::Running)
            .count();
        let stopped = states.iter().find_map(|(c, s)| match s {
            ClusterState::Ended(e) if !e.how.done() => Some((c, e)),
            _ => None,
        });
        if let Some((cluster, ended)) = stopped {
            if running > 0 {
                return Next::AwaitRunning;
            }
            return Next::Stop {
                stage: i,
                cluster: cluster.to_string(),
                how: ended.how.clone(),
            };
        }
        if let Some(last_end) = stage_ended(&states) {
            let next_touched = (fleet.stages.get(i + 1))
                .is_some_and(|n| touched(progress, i + 1, n.clusters.iter().map(|c| &c.context)));
            let until = last_end + stage.soak.as_secs() as i64;
            if i + 1 < fleet.stages.len() && !next_touched && now < until {
                return Next::Soak { stage: i, until };
            }
            continue;
        }
        if !touched(progress, i, stage.clusters.iter().map(|c| &c.context)) {
            let previous = i.checked_sub(1).map(|p| outcome(fleet, progress, p, now));
            return Next::AskGate { stage: i, previous };
        }
        let free = stage.max_parallel.saturating_sub(running);
        let pending: Vec<String> = (states.iter())
            .filter(|(_, s)| **s == ClusterState::Pending)
            .map(|(c, _)| c.to_string())
            .take(free)
            .collect();
        if pending.is_empty() {
            return Next::AwaitRunning;
        }
        return Next::Start {
            stage: i,
            clusters: pending,
        };
    }
    Next::Done
}

/// When the stage's last cluster ended, if every one ended done.
fn stage_ended(states: &[(&str, &ClusterState)]) -> Option<i64> {
    states.iter().try_fold(i64::MIN, |last, (_, s)| match s {
        ClusterState::Ended(e) if e.how.done() => Some(last.max(e.at)),
        _ => None,
    })
}

/// Whether the fleet has gone past stage `index`'s gates.
fn touched<'a>(
    progress: &FleetProgress,
    index: usize,
    mut clusters: impl Iterator<Item = &'a String>,
) -> bool {
    progress.gates_passed.contains(&index)
        || clusters.any(|c| *progress.state(c) != ClusterState::Pending)
}

/// Stage `index` as it ended, for the gates of the stage after it.
pub fn outcome(fleet: &Fleet, progress: &FleetProgress, index: usize, now: i64) -> StageOutcome {
    let stage = &fleet.stages[index];
    let clusters: Vec<ClusterResult> = (stage.clusters.iter())
        .filter_map(|c| match progress.state(&c.context) {
            ClusterState::Ended(e) => Some(ClusterResult {
                cluster: c.context.clone(),
                outcome: match e.how {
                    EndedHow::NodesSetAside => ClusterOutcome::NodesSetAside,
                    _ => ClusterOutcome::Succeeded,
                },
                finished: e.at,
            }),
            _ => None,
        })
        .collect();
    let last = clusters.iter().map(|c| c.finished).max().unwrap_or(now);
    StageOutcome {
        name: stage.name.clone(),
        clusters,
        soaked_seconds: now.saturating_sub(last).max(0) as u64,
    }
}

/// The stage a gate is asked about.
pub fn stage_info(fleet: &Fleet, index: usize, attempt: u32) -> StageInfo {
    let stage = &fleet.stages[index];
    StageInfo {
        fleet: fleet.name.clone(),
        index: index as u32,
        name: stage.name.clone(),
        clusters: stage.clusters.iter().map(|c| c.context.clone()).collect(),
        attempt,
    }
}

/// Asks the gates before `stage` at `now`.
pub fn ask_stage_gate(
    hooks: &mut [Box<dyn Hook>],
    question: &StageQuestion,
    warnings: &mut Vec<String>,
) -> Result<GateDecision, HookFailed> {
    let ctx = CallContext {
        now: question.now,
        run_id: question.run_id.clone(),
        dry_run: question.dry_run,
        timing: Timing::default(),
        others: Vec::new(),
    };
    decide::stage_gate(
        hooks,
        &ctx,
        &question.stage,
        question.previous.as_ref(),
        warnings,
    )
}

/// One question to the stage gates.
#[derive(Debug, Clone)]
pub struct StageQuestion {
    pub stage: StageInfo,
    pub previous: Option<StageOutcome>,
    pub now: i64,
    pub run_id: String,
    pub dry_run: bool,
}

/// The most waits a plan follows before a stage: a gate that keeps waiting is reported, not
/// simulated for ever.
const MAX_PLANNED_WAITS: u32 = 100;

/// A cluster's own plan, as the fleet plan needs it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPlan {
    /// Its plan's likely duration in seconds (none: the plan gave no estimate).
    pub seconds: Option<u64>,
    /// What stopped its plan (a gate's abort), if anything.
    pub stopped: Option<String>,
    /// Its plan as the cluster's `nodes` plan gives it.
    pub plan: serde_json::Value,
}

/// One step of the fleet's plan.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase", tag = "step")]
pub enum FleetStep {
    /// The gates before a stage.
    Gate {
        stage: String,
        at: i64,
        verdict: String,
        #[serde(rename = "decidedBy")]
        by: String,
    },
    /// A cluster's rotation, from `at` for its plan's estimate.
    Cluster {
        stage: String,
        cluster: String,
        at: i64,
        plan: Box<ClusterPlan>,
    },
    /// The soak after a stage.
    Soak { stage: String, at: i64, until: i64 },
}

impl FleetStep {
    /// When it starts.
    pub fn at(&self) -> i64 {
        match self {
            FleetStep::Gate { at, .. }
            | FleetStep::Cluster { at, .. }
            | FleetStep::Soak { at, .. } => *at,
        }
    }
}

/// The fleet's plan: its steps in the order the run takes them, and where it would stop.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetPlan {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub fleet: String,
    /// Clusters an earlier run finished: not rotated again.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub finished: Vec<String>,
    pub steps: Vec<FleetStep>,
    pub warnings: Vec<String>,
    /// What would stop the fleet (a gate's abort, a cluster's plan stopped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// The fleet's likely duration, from its start: clusters by their plans' estimates, waits
    /// and soaks as planned. None when a cluster's plan gave no estimate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u64>,
}

/// Plans `fleet` from `progress` at `now`: asks the gates at the simulated time of each stage,
/// plans each cluster (`plan_cluster`, at its simulated start) and moves the clock by its
/// estimate.
pub fn plan(
    fleet: &Fleet,
    mut progress: FleetProgress,
    hooks: &mut [Box<dyn Hook>],
    now: i64,
    mut plan_cluster: impl FnMut(&str, i64) -> ClusterPlan,
) -> Result<FleetPlan, HookFailed> {
    let start = now;
    let mut now = now;
    let finished: Vec<String> = progress.finished(fleet).map(String::from).collect();
    let mut steps = Vec::new();
    let mut warnings = Vec::new();
    let mut attempts: BTreeMap<usize, u32> = BTreeMap::new();
    let mut ends: BTreeMap<String, i64> = BTreeMap::new();
    let mut estimated = true;
    let stopped = loop {
        match next(fleet, &progress, now) {
            Next::Done => break None,
            Next::AskGate { stage, previous } => {
                let attempt = attempts.entry(stage).or_default();
                let question = StageQuestion {
                    stage: stage_info(fleet, stage, *attempt),
                    previous,
                    now,
                    run_id: fleet.name.clone(),
                    dry_run: true,
                };
                let decision = ask_stage_gate(hooks, &question, &mut warnings)?;
                steps.push(FleetStep::Gate {
                    stage: fleet.stages[stage].name.clone(),
                    at: now,
                    verdict: decision.verdict.to_string(),
                    by: decision.by.to_string(),
                });
                match decision.verdict {
                    Verdict::Proceed => {
                        progress.gates_passed.insert(stage);
                    }
                    Verdict::Wait { seconds, .. } if *attempt < MAX_PLANNED_WAITS => {
                        *attempt += 1;
                        now += i64::from(seconds);
                    }
                    Verdict::Wait { .. } => {
                        break Some(format!(
                            "the gates keep waiting before stage {:?} ({MAX_PLANNED_WAITS} waits planned)",
                            fleet.stages[stage].name
                        ));
                    }
                    Verdict::Abort(reason) => {
                        break Some(format!(
                            "a gate aborts the fleet before stage {:?} ({}): {reason}",
                            fleet.stages[stage].name, decision.by
                        ));
                    }
                }
            }
            Next::Start { stage, clusters } => {
                for cluster in clusters {
                    let planned = plan_cluster(&cluster, now);
                    if let Some(why) = &planned.stopped {
                        let why = format!("cluster {cluster}'s plan stops: {why}");
                        steps.push(FleetStep::Cluster {
                            stage: fleet.stages[stage].name.clone(),
                            cluster,
                            at: now,
                            plan: Box::new(planned),
                        });
                        let plan = FleetPlan::new(fleet, steps, warnings, Some(why), None);
                        return Ok(FleetPlan { finished, ..plan });
                    }
                    estimated &= planned.seconds.is_some();
                    ends.insert(cluster.clone(), now + planned.seconds.unwrap_or(0) as i64);
                    progress
                        .clusters
                        .insert(cluster.clone(), ClusterState::Running);
                    steps.push(FleetStep::Cluster {
                        stage: fleet.stages[stage].name.clone(),
                        cluster,
                        at: now,
                        plan: Box::new(planned),
                    });
                }
            }
            Next::AwaitRunning => {
                // The first running cluster to end, by its estimate.
                let (cluster, end) = (ends.iter())
                    .min_by_key(|(c, end)| (**end, (*c).clone()))
                    .map(|(c, end)| (c.clone(), *end))
                    .expect("a cluster runs while the fleet awaits one");
                ends.remove(&cluster);
                now = now.max(end);
                let ended = Ended {
                    how: EndedHow::Succeeded,
                    at: now,
                };
                progress
                    .clusters
                    .insert(cluster, ClusterState::Ended(ended));
            }
            Next::Soak { stage, until } => {
                steps.push(FleetStep::Soak {
                    stage: fleet.stages[stage].name.clone(),
                    at: now,
                    until,
                });
                now = until;
            }
            Next::Stop { cluster, how, .. } => {
                break Some(format!("cluster {cluster} ended {how:?} in an earlier run"));
            }
        }
    };
    let seconds = estimated.then(|| (now - start).max(0) as u64);
    let plan = FleetPlan::new(fleet, steps, warnings, stopped, seconds);
    Ok(FleetPlan { finished, ..plan })
}

impl FleetPlan {
    fn new(
        fleet: &Fleet,
        steps: Vec<FleetStep>,
        warnings: Vec<String>,
        stopped: Option<String>,
        seconds: Option<u64>,
    ) -> FleetPlan {
        FleetPlan {
            api_version: crate::policy::API_VERSION,
            kind: "FleetPlan",
            fleet: fleet.name.clone(),
            finished: Vec::new(),
            steps,
            warnings,
            seconds: seconds.filter(|_| stopped.is_none()),
            stopped,
        }
    }
}

#[cfg(test)]
mod tests;
