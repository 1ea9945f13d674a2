//! `nodes --yes`: check the permissions the run needs, load the hooks against the live cluster,
//! take the lock, rotate, give the lock back. Ctrl-C stops between API calls; the same command
//! resumes.

use std::sync::Arc;

use super::nodes::NodesArgs;
use super::{Failure, KubeFlags, OutputFormat, RESUME, tokio_runtime};
use crate::cluster::access;
use crate::cluster::drain::DrainSettings;
use crate::cluster::lock::{LeaseRef, LockError, LockGuard};
use crate::cluster::recorder::{EventRecorder, Scope};
use crate::cluster::runner::{NODE_ENV, POD_ENV, RUNNER_ENV, RunnerPod};
use crate::cluster::validate::ValidationSettings;
use crate::cluster::view::LiveView;
use crate::cluster::{Cluster, LiveObjects, Others};
use crate::hooks::{HookRuntime, ObjectSource};
use crate::kernel::{ControlsAt, Kernel, Parts};
use crate::plan::PlanOptions;
use crate::plan::hook::Hook;
use crate::policy::{OthersDisruptions, Policy};
use crate::progress::{Bars, JsonLines, Lines, Reporter};
use crate::provider::Providers;
use crate::rotate::{RotateSettings, Rotation, RunClock, RunEstimates, Steps};

/// Kops waits this long between two successful validations.
const VALIDATE_SUCCESS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Who is at the keyboard: user and host, as pause and abort requests record it.
pub(super) fn operator() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".into());
    format!("{user}@{host}")
}

/// Who holds the lock: user, host and process, for the message a second run shows; in a pod of
/// a run handed to the cluster, its Job and pod (`job/NAMESPACE/NAME/pod-POD`).
pub(super) fn identity() -> String {
    let runner = (std::env::var(RUNNER_ENV).ok()).zip(std::env::var(POD_ENV).ok());
    match runner {
        Some((job, pod)) => format!("{job}/pod-{pod}"),
        None => format!("{}/pid-{}", operator(), std::process::id()),
    }
}

/// Whether `holder` is a pod of the same Job as `identity` that no longer runs (evicted with
/// its node, or gone): the Job's next pod takes the run over where it stopped.
async fn runner_gone(cluster: &Cluster, holder: &str, identity: &str) -> bool {
    let (Some(theirs), Some(ours)) = (RunnerPod::of_holder(holder), RunnerPod::of_holder(identity))
    else {
        return false;
    };
    theirs.job == ours.job && cluster.runner_gone(&theirs).await.unwrap_or(false)
}

fn lock_failure(e: LockError) -> Failure {
    match e {
        LockError::Held { .. } => Failure {
            code: 4,
            message: e.to_string(),
        },
        LockError::Cluster(c) => Failure::from(c),
    }
}

/// Whether `holder` is a process of this user on this machine that is no longer running.
fn holder_is_dead_here(holder: &str) -> bool {
    let mine = identity();
    let (Some((here, _)), Some((there, pid))) =
        (mine.rsplit_once("/pid-"), holder.rsplit_once("/pid-"))
    else {
        return false;
    };
    here == there && pid.parse::<u32>().is_ok_and(|pid| !process_runs(pid))
}

/// Whether process `pid` of this machine still runs: a zombie (killed, not yet reaped by its
/// new parent, as a fleet's rotation killed with its fleet is for a moment) does not.
fn process_runs(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) state …`: the state follows the last ')' (comm may hold one).
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X' | 'x') | None)
}

/// Takes the lock `lease` for `identity`; a holder that was a process of this machine that
/// died (SIGKILL, crash) cannot renew, so its lock is taken over, with a warning.
pub(super) async fn take_lock(
    cluster: &Cluster,
    lease: &LeaseRef,
    identity: &str,
    force_unlock: bool,
    reporter: &dyn Reporter,
) -> Result<LockGuard, Failure> {
    let every = crate::cluster::lock::RENEW_EVERY;
    match cluster
        .lock_lease(lease, identity, force_unlock, every)
        .await
    {
        Ok(lock) => Ok(lock),
        Err(LockError::Held { holder, .. })
            if holder_is_dead_here(&holder) || runner_gone(cluster, &holder, identity).await =>
        {
            reporter.report(crate::progress::Event::Warning {
                message: format!("taking over the lock of {holder}, which is no longer running"),
            });
            cluster
                .lock_lease(lease, identity, true, every)
                .await
                .map_err(lock_failure)
        }
        Err(e) => Err(lock_failure(e)),
    }
}

/// The providers that replace instances: the flag's, else the policy's.
pub(super) fn providers_of(args: &NodesArgs, policy: &Policy) -> Result<Providers, Failure> {
    match args.provider {
        Some(arg) => Ok(arg.providers()),
        None => Providers::from_policy(policy)
            .map_err(Failure::usage)?
            .ok_or_else(|| {
                Failure::usage(
                    "--yes needs a provider to terminate instances: set spec.provider in the policy file, \
                     or pass --provider delete-node, cluster-api or karpenter",
                )
            }),
    }
}

/// Every permission a rotation with `providers` uses.
pub(super) fn permissions_of(
    args: &NodesArgs,
    providers: &Providers,
    others: Others,
) -> Vec<access::Permission> {
    let mut needed = access::for_rotation(args.cloud_only, args.disable_eviction);
    needed.extend(access::for_others(others));
    if providers.reads_machines() {
        needed.extend(access::for_cluster_api());
    }
    if providers.reads_node_pools() {
        needed.extend(access::for_karpenter());
    }
    needed
}

pub fn run(
    kube: &KubeFlags,
    args: &NodesArgs,
    policy: &Policy,
    plan: PlanOptions,
) -> Result<(), Failure> {
    let started = super::command_started();
    let providers = providers_of(args, policy)?;
    use std::io::IsTerminal;
    let reporter: Arc<dyn Reporter> = match args.output.text() {
        OutputFormat::Json => Arc::new(JsonLines),
        _ if std::io::stderr().is_terminal() => Arc::new(Bars::new(
            crate::progress::color_allowed(crate::report::no_color()),
        )),
        _ => Arc::new(Lines),
    };
    let mut plan = plan;
    plan.dry_run = false;
    let runtime = tokio_runtime()?;
    runtime.block_on(async {
        let cluster = providers.inventory(Cluster::connect(&kube.connect_options()?).await?);
        let cluster = match policy.others_disruptions {
            OthersDisruptions::Count => cluster.with_others().await?,
            OthersDisruptions::Ignore => cluster,
        };
        let needed = permissions_of(args, &providers, cluster.others());
        // Nothing changes before every permission the run needs is known to be granted, and
        // every hook has loaded. The run's view of the cluster (reads only) starts meanwhile.
        let (access, view) = tokio::join!(cluster.check_access(&needed), LiveView::start(&cluster));
        access?;
        let view = view?;
        let policy_version = cluster.policy_version().await?;
        let objects: Arc<dyn ObjectSource> = Arc::new(LiveObjects {
            cluster: cluster.clone(),
            handle: tokio::runtime::Handle::current(),
        });
        let hooks = tokio::task::block_in_place(|| {
            if policy.hooks.is_empty() {
                return Ok(Vec::new());
            }
            let runtime = HookRuntime::shared().map_err(|e| {
                Failure::failed(format!("cannot start the WebAssembly runtime: {e}"))
            })?;
            crate::hooks::load_all(runtime, policy, objects).map_err(Failure::from)
        })?;
        let identity = identity();
        plan.run_id = identity.clone();
        let lease = LeaseRef::rotation();
        let lock = take_lock(&cluster, &lease, &identity, args.force_unlock, &*reporter).await?;
        let recorder = EventRecorder::start(&cluster, &identity, Scope::Rotation, reporter.clone());
        let run = Run {
            cluster: &cluster,
            view: &view,
            policy,
            args,
            providers: &providers,
            reporter: &recorder,
            lock: &lock,
            policy_version,
            started,
        };
        let result = rotate(run, hooks, plan).await;
        // A finished run removes its state; a stopped one keeps it for the next run.
        let released = match &result {
            Ok(()) => lock.release().await,
            Err(_) => lock.abandon().await,
        };
        let outcome = result.and_then(|()| released.map_err(Failure::from));
        let stopped = match &outcome {
            Ok(()) => {
                recorder.report(crate::progress::Event::Done);
                None
            }
            Err(f) if f.code == 3 => Some(("Aborted", f.message.clone())),
            Err(f) => Some(("Stopped", f.message.clone())),
        };
        recorder.finish(stopped).await;
        outcome
    })
}

/// In a runner pod on a node this run replaces, what becomes of the pod: said when the run
/// starts.
async fn own_node_note(view: &LiveView, policy: &Policy, plan: &PlanOptions) -> Option<String> {
    use crate::plan::prepare::{self, Prepared};
    let node = std::env::var(NODE_ENV).ok().filter(|n| !n.is_empty())?;
    let snapshot = view.caught_up().await.ok()?;
    let index = crate::plan::health::Index::new(&snapshot);
    let survey = prepare::survey(&snapshot, &index, policy, plan).ok()?;
    let replaced = survey.groups.iter().find_map(|group| {
        let Ok(Prepared::Ready(start)) = prepare::prepare_group(&index, policy, plan, group) else {
            return None;
        };
        let outdated = (start.candidates.iter()).any(|c| c.name == node && c.reason.is_some());
        outdated.then(|| group.name.clone())
    })?;
    Some(format!(
        "this run's pod runs on node {node} of group {replaced}, which the run replaces: when {node} is drained the pod is evicted with the others, and the Job's next pod resumes the run"
    ))
}

/// What a rotation runs with, once connected, checked and locked.
struct Run<'a> {
    cluster: &'a Cluster,
    /// The run's watched view of the cluster, which every state question reads.
    view: &'a LiveView,
    policy: &'a Policy,
    args: &'a NodesArgs,
    providers: &'a Providers,
    reporter: &'a dyn Reporter,
    lock: &'a LockGuard,
    policy_version: &'static str,
    /// When the command started: the run's setup counts from here.
    started: tokio::time::Instant,
}

async fn rotate(
    run: Run<'_>,
    mut hooks: Vec<Box<dyn Hook>>,
    plan: PlanOptions,
) -> Result<(), Failure> {
    let Run {
        cluster,
        view,
        policy,
        args,
        providers,
        reporter,
        lock,
        policy_version,
        started,
    } = run;
    // What the run estimates from: the cluster's history (else the policy's figures, the
    // defaults: a history that cannot be read is said, never a reason to stop).
    let (history, unread) = cluster.history_or_note().await;
    if let Some(message) = unread {
        reporter.report(crate::progress::Event::Warning { message });
    }
    if let Some(message) = own_node_note(view, policy, &plan).await {
        reporter.report(crate::progress::Event::Warning { message });
    }
    let estimates = RunEstimates::new(crate::plan::estimate::Durations {
        history,
        ..plan.durations.clone()
    });
    let settings = RotateSettings {
        drain: DrainSettings {
            options: plan.drain.clone(),
            grace_period: args.grace_period,
            timeout: args.drain_timeout,
            policy_version,
        },
        plan,
        validation: ValidationSettings {
            count: args.validate_count,
            success_interval: VALIDATE_SUCCESS_INTERVAL,
            timeout: args.validation_timeout,
        },
        post_drain_delay: args.post_drain_delay,
        replacement_timeout: args.replacement_timeout,
        bastion_interval: args.bastion_interval,
        master_interval: args.master_interval,
        node_interval: args.node_interval,
        taint_key: args.taint_key.clone(),
        fail_on_drain_error: args.fail_on_drain_error,
        fail_on_validate_error: args.fail_on_validate_error,
    };
    let steps = Steps::default();
    let mut rotation = Rotation {
        cluster,
        view,
        policy,
        settings: &settings,
        kernel: Kernel::new(Parts {
            cluster,
            hooks: &mut hooks,
            reporter,
            run_id: lock.identity().to_string(),
            controls: ControlsAt::Lease,
            lock: Some(lock),
        }),
        providers,
        lock,
        steps: &steps,
        set_aside: Vec::new(),
        clock: RunClock::new(started),
        estimates,
        marks_refused: Default::default(),
        kured_refused: Default::default(),
        paused_pools: Default::default(),
    };
    let run = rotation.run();
    tokio::pin!(run);
    let result = tokio::select! {
        result = &mut run => result,
        _ = super::interrupted() => {
            // A termination or surge in progress is finished first, so that the next run does
            // not repeat its provider call; anything else stops where it is. A second Ctrl-C
            // stops at once.
            if steps.busy() {
                crate::report::log(
                    crate::report::Level::Warn,
                    "interrupted: finishing the provider call in progress (Ctrl-C again to stop at once; the next run then repeats that call)",
                );
            }
            tokio::select! {
                result = &mut run => result,
                _guard = steps.settled() => {
                    return Err(Failure::failed(format!("interrupted; {RESUME}")));
                }
                _ = super::interrupted() => {
                    return Err(Failure::failed(format!(
                        "interrupted during a provider call, which the next run repeats; {RESUME}"
                    )));
                }
            }
        }
    };
    match result {
        Ok(()) => Ok(()),
        Err(e) if e.is_abort() => Err(Failure {
            code: 3,
            message: format!("{e}; {RESUME}"),
        }),
        Err(e @ crate::rotate::RotateError::SetAside { .. }) => Err(Failure {
            code: 6,
            message: e.to_string(),
        }),
        Err(crate::rotate::RotateError::Plan(
            e @ (crate::plan::PlanError::Policy(_) | crate::plan::PlanError::UnknownGroup { .. }),
        )) => Err(Failure::usage(e.to_string())),
        Err(
            e @ (crate::rotate::RotateError::NoProvider(_)
            | crate::rotate::RotateError::CannotSurge(_)),
        ) => Err(Failure::usage(e.to_string())),
        Err(e) => Err(Failure::failed(format!("{e}; {RESUME}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::process_runs;

    #[test]
    fn a_zombie_is_not_running() {
        assert!(process_runs(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        // Not reaped yet: a zombie once it has exited.
        let stat = format!("/proc/{}/stat", child.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while process_runs(child.id()) {
            assert!(
                std::time::Instant::now() < deadline,
                "{:?}",
                std::fs::read_to_string(&stat)
            );
            std::thread::yield_now();
        }
        assert!(
            std::path::Path::new(&stat).exists(),
            "still there, as a zombie"
        );
        child.wait().unwrap();
        assert!(!process_runs(child.id()));
    }
}
