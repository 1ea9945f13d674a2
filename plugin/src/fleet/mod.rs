//! `fleet run`: the fleet's step machine ([`crate::plan::fleet`]) driven live. Each cluster's
//! rotation runs as a child process; where each cluster stands is recorded in that cluster
//! ([`crate::cluster::fleet_record`]), so running the same command again resumes the fleet:
//! finished clusters stay finished, a stage past its gates is not gated again, a soak goes on
//! from its stage's last end, and an interrupted cluster resumes from its own lock.

pub mod child;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::cluster::fleet_record::{FleetAbort, FleetRecord, RecordState};
use crate::cluster::runner::RunnerPod;
use crate::cluster::{Cluster, ClusterError};
use crate::plan::decide::{HookFailed, Verdict};
use crate::plan::fleet::{
    ClusterState, Ended, EndedHow, FleetProgress, Next, StageQuestion, ask_stage_gate, next,
    stage_info,
};
use crate::plan::hook::Hook;
use crate::policy::fleet::Fleet;

pub use child::{ChildExit, ClusterCommand, HandedOver};

/// What a fleet run says, as a line of its output.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum FleetEvent {
    FleetStarted {
        fleet: String,
        stages: usize,
        clusters: usize,
    },
    /// What an earlier run recorded in a cluster.
    FleetResumed {
        cluster: String,
        state: String,
    },
    /// An operator's abort left by an earlier run, withdrawn as the fleet resumes.
    AbortWithdrawn {
        cluster: String,
        by: String,
    },
    StageGate {
        stage: String,
        attempt: u32,
        verdict: String,
        decided_by: String,
    },
    ClusterStarted {
        stage: String,
        cluster: String,
    },
    ClusterEnded {
        stage: String,
        cluster: String,
        outcome: String,
        exit_code: Option<i32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    Soaking {
        stage: String,
        until: String,
    },
    FleetStopped {
        message: String,
    },
    FleetFinished {
        set_aside: Vec<String>,
    },
    Warning {
        message: String,
    },
}

/// Where a fleet run's output goes.
pub trait FleetOutput: Send + Sync {
    fn event(&self, event: &FleetEvent);
    /// A line a cluster's rotation printed (on its stderr when `stderr`).
    fn cluster_line(&self, cluster: &str, line: &str, stderr: bool);
}

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("cluster {context}: {source}")]
    Cluster {
        context: String,
        #[source]
        source: ClusterError,
    },
    #[error(transparent)]
    Hook(#[from] HookFailed),
    #[error("a cluster's rotation task failed: {0}")]
    Task(String),
}

/// How a fleet run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetEnd {
    /// Every stage done; `set_aside` names the clusters that set nodes aside.
    Done { set_aside: Vec<String> },
    /// Stopped, resumable: `code` is the exit code (3 aborted, else the failed cluster's).
    Stopped { code: u8, message: String },
}

/// What a fleet run needs.
pub struct FleetRun<'a> {
    pub fleet: &'a Fleet,
    /// A connection to each cluster, by kubeconfig context.
    pub clusters: BTreeMap<String, Cluster>,
    /// How each cluster's rotation is run, by context.
    pub commands: BTreeMap<String, ClusterCommand>,
    /// The fleet policy's hooks, asked before each stage.
    pub hooks: Vec<Box<dyn Hook>>,
    /// Who runs it, as records name it.
    pub identity: String,
    pub output: Arc<dyn FleetOutput>,
    /// Turns to a reason when the fleet is asked to stop (Ctrl-C, SIGTERM).
    pub interrupted: watch::Receiver<Option<String>>,
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

fn at(seconds: i64) -> String {
    jiff::Timestamp::from_second(seconds)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| seconds.to_string())
}

impl FleetRun<'_> {
    fn cluster(&self, context: &str) -> &Cluster {
        &self.clusters[context]
    }

    fn failed(context: &str) -> impl FnOnce(ClusterError) -> FleetError + '_ {
        move |source| FleetError::Cluster {
            context: context.to_string(),
            source,
        }
    }

    fn stage_of(&self, context: &str) -> usize {
        (self.fleet.stage_of(context)).expect("every cluster is in a stage")
    }

    /// Reads what earlier runs recorded in each cluster, and withdraws an abort they left.
    async fn resume(&self) -> Result<FleetProgress, FleetError> {
        let mut records = Vec::new();
        for c in self.fleet.clusters() {
            let cluster = self.cluster(&c.context);
            let (record, abort) =
                (cluster.fleet_record(&self.fleet.name).await).map_err(Self::failed(&c.context))?;
            if let Some(abort) = abort {
                (cluster.write_fleet_abort(&self.fleet.name, None).await)
                    .map_err(Self::failed(&c.context))?;
                self.output.event(&FleetEvent::AbortWithdrawn {
                    cluster: c.context.clone(),
                    by: abort.by,
                });
            }
            let Some(record) = record else { continue };
            self.output.event(&FleetEvent::FleetResumed {
                cluster: c.context.clone(),
                state: record.state.to_string(),
            });
            records.push((c.context.clone(), record.recorded()));
        }
        Ok(FleetProgress::recorded(self.fleet, records))
    }

    /// Runs the fleet to its end, or until it stops.
    pub async fn run(mut self) -> Result<FleetEnd, FleetError> {
        self.output.event(&FleetEvent::FleetStarted {
            fleet: self.fleet.name.clone(),
            stages: self.fleet.stages.len(),
            clusters: self.fleet.clusters().count(),
        });
        let mut progress = self.resume().await?;
        let (stop_tx, mut stop) = watch::channel::<Option<String>>(None);
        let mut watches = JoinSet::new();
        for (context, cluster) in &self.clusters {
            let mut aborts = Box::pin(cluster.fleet_aborts(&self.fleet.name));
            let (tx, context) = (stop_tx.clone(), context.clone());
            watches.spawn(async move {
                if let Some(abort) = aborts.next().await {
                    let FleetAbort { by, reason, .. } = abort;
                    let reason = if reason.is_empty() {
                        String::new()
                    } else {
                        format!(": {reason}")
                    };
                    let _ = tx.send(Some(format!(
                        "aborted by {by} (recorded in cluster {context}){reason}"
                    )));
                }
            });
        }
        let mut interrupted = self.interrupted.clone();
        watches.spawn(async move {
            if let Ok(reason) = interrupted.wait_for(Option::is_some).await {
                let _ = stop_tx.send(reason.clone());
            }
        });
        let result = self.drive(&mut progress, &mut stop).await;
        watches.abort_all();
        result
    }

    async fn drive(
        &mut self,
        progress: &mut FleetProgress,
        stop: &mut watch::Receiver<Option<String>>,
    ) -> Result<FleetEnd, FleetError> {
        let mut running: JoinSet<ChildExit> = JoinSet::new();
        let mut children: BTreeMap<String, child::Child> = BTreeMap::new();
        let mut attempts: BTreeMap<usize, u32> = BTreeMap::new();
        let mut started: BTreeMap<String, i64> = BTreeMap::new();
        let mut soaking = None;
        loop {
            let stopping = stop.borrow().clone();
            if let Some(reason) = stopping.filter(|_| running.is_empty()) {
                return Ok(self.stopped(3, format!("the fleet stopped: {reason}")));
            }
            let step = match stop.borrow().is_some() {
                // Asked to stop: nothing new starts; the running rotations stop at a safe point.
                true => Next::AwaitRunning,
                false => next(self.fleet, progress, now()),
            };
            match step {
                Next::Done => {
                    let set_aside: Vec<String> = (progress.clusters.iter())
                        .filter(|(_, s)| {
                            matches!(s, ClusterState::Ended(e) if e.how == EndedHow::NodesSetAside)
                        })
                        .map(|(c, _)| c.clone())
                        .collect();
                    self.output.event(&FleetEvent::FleetFinished {
                        set_aside: set_aside.clone(),
                    });
                    return Ok(FleetEnd::Done { set_aside });
                }
                Next::Stop {
                    stage,
                    cluster,
                    how,
                } => {
                    let (code, what) = match &how {
                        EndedHow::Aborted { message } => (3, format!("was aborted: {message}")),
                        EndedHow::Failed { code, message } => (*code, format!("failed: {message}")),
                        _ => unreachable!("a stop is for a cluster that did not finish"),
                    };
                    let message = format!(
                        "cluster {cluster} of stage {:?} {what}; the fleet stops before its next \
                         stage (run the same command again to resume)",
                        self.fleet.stages[stage].name
                    );
                    return Ok(self.stopped(code, message));
                }
                Next::AskGate { stage, previous } => {
                    let attempt = attempts.entry(stage).or_default();
                    let question = StageQuestion {
                        stage: stage_info(self.fleet, stage, *attempt),
                        previous,
                        now: now(),
                        run_id: self.fleet.name.clone(),
                        dry_run: false,
                    };
                    let mut warnings = Vec::new();
                    let decision = ask_stage_gate(&mut self.hooks, &question, &mut warnings)?;
                    for message in warnings {
                        self.output.event(&FleetEvent::Warning { message });
                    }
                    let name = self.fleet.stages[stage].name.clone();
                    self.output.event(&FleetEvent::StageGate {
                        stage: name.clone(),
                        attempt: *attempt,
                        verdict: decision.verdict.to_string(),
                        decided_by: decision.by.to_string(),
                    });
                    match decision.verdict {
                        Verdict::Proceed => {
                            progress.gates_passed.insert(stage);
                        }
                        Verdict::Wait { seconds, .. } => {
                            *attempt += 1;
                            let wait = std::time::Duration::from_secs(u64::from(seconds));
                            let _ =
                                tokio::time::timeout(wait, stop.wait_for(Option::is_some)).await;
                        }
                        Verdict::Abort(reason) => {
                            let message = format!(
                                "{} aborted the fleet before stage {name:?}: {reason} (stage \
                                 {name:?} is untouched; run the same command again to ask again)",
                                decision.by
                            );
                            return Ok(self.stopped(3, message));
                        }
                    }
                }
                Next::Start { stage, clusters } => {
                    for context in clusters {
                        self.start(stage, &context, &mut running, &mut children)
                            .await?;
                        progress.clusters.insert(context, ClusterState::Running);
                    }
                }
                Next::Soak { stage, until } => {
                    if soaking != Some(stage) {
                        soaking = Some(stage);
                        self.output.event(&FleetEvent::Soaking {
                            stage: self.fleet.stages[stage].name.clone(),
                            until: at(until),
                        });
                    }
                    let left = (until - now()).max(0) as u64;
                    let wait = std::time::Duration::from_secs(left);
                    let _ = tokio::time::timeout(wait, stop.wait_for(Option::is_some)).await;
                }
                Next::AwaitRunning => {
                    let exit = tokio::select! {
                        exit = running.join_next() => exit,
                        _ = stop.wait_for(Option::is_some), if stop.borrow().is_none() => {
                            // Interrupted: the rotations stop at a safe point too.
                            if self.interrupted.borrow().is_some() {
                                children.values().for_each(child::Child::terminate);
                            }
                            continue;
                        }
                    };
                    let Some(exit) = exit else {
                        // Nothing runs: the step machine moves on.
                        continue;
                    };
                    let exit = exit.map_err(|e| FleetError::Task(e.to_string()))?;
                    children.remove(&exit.cluster);
                    let started_at = started.remove(&exit.cluster).unwrap_or_else(now);
                    let ended = self.ended(&exit, started_at).await?;
                    progress
                        .clusters
                        .insert(exit.cluster.clone(), ClusterState::Ended(ended));
                }
            }
        }
    }

    fn stopped(&self, code: u8, message: String) -> FleetEnd {
        self.output.event(&FleetEvent::FleetStopped {
            message: message.clone(),
        });
        FleetEnd::Stopped { code, message }
    }

    /// Records the cluster as running, then starts its rotation; returns when it started.
    async fn start(
        &self,
        stage: usize,
        context: &str,
        running: &mut JoinSet<ChildExit>,
        children: &mut BTreeMap<String, child::Child>,
    ) -> Result<i64, FleetError> {
        let stage_name = self.fleet.stages[stage].name.clone();
        let record = FleetRecord {
            stage: stage_name.clone(),
            state: RecordState::Running,
            started_at: now(),
            ended_at: None,
            message: None,
            by: self.identity.clone(),
        };
        (self.cluster(context))
            .write_fleet_record(&self.fleet.name, Some(&record))
            .await
            .map_err(Self::failed(context))?;
        self.output.event(&FleetEvent::ClusterStarted {
            stage: stage_name,
            cluster: context.to_string(),
        });
        let command = &self.commands[context];
        let handed = match command.follow {
            Some(_) => self.handed_over(context).await?,
            None => None,
        };
        let (child, task) = child::spawn(context, command, handed, self.output.clone());
        children.insert(context.to_string(), child);
        running.spawn(task);
        Ok(record.started_at)
    }

    /// The run an earlier fleet handed to the cluster of `context` that still holds its lock:
    /// followed again rather than handed over twice.
    async fn handed_over(&self, context: &str) -> Result<Option<child::HandedOver>, FleetError> {
        let lease = (self.cluster(context).controls().await).map_err(Self::failed(context))?;
        let runner = lease.and_then(|l| RunnerPod::of_holder(&l.holder));
        Ok(runner.and_then(|r| {
            let job = r.job.rsplit('/').next()?.to_string();
            Some(child::HandedOver {
                namespace: r.namespace,
                job,
            })
        }))
    }

    /// Records how a cluster's rotation ended, and says it.
    async fn ended(&self, exit: &ChildExit, started_at: i64) -> Result<Ended, FleetError> {
        let context = exit.cluster.as_str();
        let said = || {
            exit.error
                .clone()
                .unwrap_or_else(|| "no error printed".into())
        };
        let (how, state) = match exit.code {
            Some(0) => (EndedHow::Succeeded, RecordState::Succeeded),
            Some(6) => (EndedHow::NodesSetAside, RecordState::NodesSetAside),
            Some(3) => {
                let message = said();
                (EndedHow::Aborted { message }, RecordState::Aborted)
            }
            Some(code) => {
                let message = format!("exit code {code}: {}", said());
                let code = u8::try_from(code).unwrap_or(1).max(1);
                (EndedHow::Failed { code, message }, RecordState::Failed)
            }
            None => {
                let message = format!("killed by a signal: {}", said());
                (EndedHow::Failed { code: 1, message }, RecordState::Failed)
            }
        };
        let stage = self.stage_of(context);
        let ended = Ended { how, at: now() };
        let message = match &ended.how {
            EndedHow::Aborted { message } | EndedHow::Failed { message, .. } => {
                Some(message.clone())
            }
            _ => None,
        };
        let cluster = self.cluster(context);
        let record = FleetRecord {
            stage: self.fleet.stages[stage].name.clone(),
            state,
            started_at,
            ended_at: Some(ended.at),
            message: message.clone(),
            by: self.identity.clone(),
        };
        (cluster
            .write_fleet_record(&self.fleet.name, Some(&record))
            .await)
            .map_err(Self::failed(context))?;
        self.output.event(&FleetEvent::ClusterEnded {
            stage: record.stage,
            cluster: context.to_string(),
            outcome: state.to_string(),
            exit_code: exit.code,
            message,
        });
        Ok(ended)
    }
}
