//! `pause`, `resume` and `abort`: an operator's requests to the node rotation, or to the rolling
//! update of a controller, from any terminal. Each is recorded on the rotation's Lease (on the
//! controller), where the running executor (or the next run) reads it; a request that makes no
//! sense now (resume when nothing is paused, abort when nothing runs) is refused and changes
//! nothing, as `kubectl rollout pause/resume` do.

use super::rotate_cmd::operator;
use super::{Failure, KubeFlags, tokio_runtime};
use crate::cluster::Cluster;
use crate::cluster::controls::{Control, ControlRequest, LeaseView, Workload};
use crate::plan::rolling_update::controller::Kind;

/// Connects, runs `act` and prints what it says was done.
fn connected<F>(kube: &KubeFlags, act: F) -> Result<(), Failure>
where
    F: AsyncFnOnce(&Cluster) -> Result<String, Failure>,
{
    let runtime = tokio_runtime()?;
    let message = runtime.block_on(async {
        let cluster = Cluster::connect(&kube.connect_options()?).await?;
        act(&cluster).await
    })?;
    println!("{message}");
    Ok(())
}

/// Connects and reads the Lease, then runs `act` on what it holds.
fn with_lease<F>(kube: &KubeFlags, act: F) -> Result<(), Failure>
where
    F: AsyncFnOnce(&Cluster, LeaseView) -> Result<String, Failure>,
{
    connected(kube, async |cluster| {
        let lease = cluster.controls().await?.unwrap_or_default();
        act(cluster, lease).await
    })
}

pub fn pause(kube: &KubeFlags, target: Option<&str>, reason: &str) -> Result<(), Failure> {
    if let Some(target) = target {
        return on_controller(kube, target, Request::Pause(reason));
    }
    with_lease(kube, async |cluster, lease| {
        pause_rotation(cluster, &lease, reason).await
    })
}

/// Records a pause of the node rotation, as `pause` does.
pub(super) async fn pause_rotation(
    cluster: &Cluster,
    lease: &LeaseView,
    reason: &str,
) -> Result<String, Failure> {
    if let Some(pause) = &lease.controls.pause {
        return Err(Failure::failed(format!(
            "the rotation is already paused {} (`kubectl rollout-ext resume` withdraws it)",
            pause.describe()
        )));
    }
    let request = ControlRequest::now(&operator(), reason);
    cluster.set_control(Control::Pause, Some(&request)).await?;
    Ok(if lease.holder.is_empty() {
        "pause recorded: no rotation is running; the next one waits for \
         `kubectl rollout-ext resume` before it changes anything"
            .to_string()
    } else {
        format!(
            "pause requested: the rotation of {} holds at its next safe point (a drain or \
             termination in progress finishes first); `kubectl rollout-ext status` shows \
             it, `kubectl rollout-ext resume` continues",
            lease.holder
        )
    })
}

pub fn resume(kube: &KubeFlags, target: Option<&str>) -> Result<(), Failure> {
    if let Some(target) = target {
        return on_controller(kube, target, Request::Resume);
    }
    with_lease(kube, async |cluster, lease| {
        resume_rotation(cluster, &lease).await
    })
}

/// Withdraws the pause of the node rotation, as `resume` does.
pub(super) async fn resume_rotation(
    cluster: &Cluster,
    lease: &LeaseView,
) -> Result<String, Failure> {
    let Some(pause) = &lease.controls.pause else {
        return Err(Failure::failed(
            "the rotation is not paused: there is no pause to withdraw",
        ));
    };
    cluster.set_control(Control::Pause, None).await?;
    if lease.holder.is_empty() {
        cluster.drop_idle_lock().await?;
        return Ok(format!(
            "resumed: withdrew the pause {}; no rotation is running",
            pause.describe()
        ));
    }
    Ok(format!(
        "resumed: withdrew the pause {}; the rotation of {} goes on",
        pause.describe(),
        lease.holder
    ))
}

pub fn abort(
    kube: &KubeFlags,
    target: Option<&str>,
    reason: &str,
    uncordon: bool,
) -> Result<(), Failure> {
    if let Some(target) = target {
        if uncordon {
            return Err(Failure::usage(
                "--uncordon is for the node rotation: a rolling update cordons no node",
            ));
        }
        return on_controller(kube, target, Request::Abort(reason));
    }
    with_lease(kube, async |cluster, lease| {
        abort_rotation(cluster, &lease, reason, uncordon).await
    })
}

/// Requests that the running node rotation stop, as `abort` does.
pub(super) async fn abort_rotation(
    cluster: &Cluster,
    lease: &LeaseView,
    reason: &str,
    uncordon: bool,
) -> Result<String, Failure> {
    if lease.holder.is_empty() {
        return Err(Failure::failed(
            "no rotation is running: there is nothing to abort",
        ));
    }
    if let Some(abort) = &lease.controls.abort {
        return Err(Failure::failed(format!(
            "an abort is already requested {}; the run stops after its current step",
            abort.describe()
        )));
    }
    let request = ControlRequest {
        uncordon,
        ..ControlRequest::now(&operator(), reason)
    };
    cluster.set_control(Control::Abort, Some(&request)).await?;
    let then = match uncordon {
        true => ", then uncordons the nodes it cordoned and did not terminate",
        false => "",
    };
    Ok(format!(
        "abort requested: the rotation of {} stops after its current step (a drain or \
         termination in progress finishes first){then}; running the same command again resumes it",
        lease.holder
    ))
}

/// What an operator asks of a rolling update.
enum Request<'a> {
    Pause(&'a str),
    Resume,
    Abort(&'a str),
}

/// Records `request` on the controller `target` names, which a rolling update of it reads
/// before each step.
fn on_controller(kube: &KubeFlags, target: &str, request: Request) -> Result<(), Failure> {
    use super::rolling_update::{InPlace, in_place_named};
    let workload = match in_place_named(target) {
        Some((InPlace::StatefulSet, name)) => Workload::StatefulSet(name),
        Some((InPlace::DaemonSet, name)) => Workload::DaemonSet(name),
        None => {
            let (kind, name) = Kind::parse_ref(target).map_err(Failure::usage)?;
            Workload::Controller(kind, name)
        }
    };
    connected(kube, async |cluster| {
        let ns = kube
            .namespace
            .clone()
            .unwrap_or_else(|| cluster.default_namespace.clone());
        let shown = workload.shown();
        let Some(view) = cluster.controller_controls(&workload, &ns).await? else {
            return Err(Failure::failed(format!(
                "{shown} not found in namespace {ns}"
            )));
        };
        let set = |control, request: Option<ControlRequest>| {
            let cluster = cluster.clone();
            let (ns, workload) = (ns.clone(), workload.clone());
            async move {
                cluster
                    .set_controller_control(&workload, &ns, control, request.as_ref())
                    .await
            }
        };
        match request {
            Request::Pause(_) if view.controls.pause.is_some() => Err(Failure::failed(format!(
                "the rolling update of {shown} is already paused {}",
                view.controls
                    .pause
                    .as_ref()
                    .map(ControlRequest::describe)
                    .unwrap_or_default()
            ))),
            Request::Pause(reason) => {
                set(
                    Control::Pause,
                    Some(ControlRequest::now(&operator(), reason)),
                )
                .await?;
                Ok(if view.updating {
                    format!(
                        "pause requested: the rolling update of {shown} holds before its next step; `kubectl rollout-ext resume {shown}` continues"
                    )
                } else {
                    format!(
                        "pause recorded: no rolling update of {shown} is under way; the next one waits for `kubectl rollout-ext resume {shown}` before it scales anything"
                    )
                })
            }
            Request::Resume => {
                let Some(pause) = &view.controls.pause else {
                    return Err(Failure::failed(format!(
                        "the rolling update of {shown} is not paused: there is no pause to withdraw"
                    )));
                };
                set(Control::Pause, None).await?;
                Ok(format!(
                    "resumed: withdrew the pause {} on {shown}",
                    pause.describe()
                ))
            }
            Request::Abort(_) if !view.updating => Err(Failure::failed(format!(
                "no rolling update of {shown} is under way: there is nothing to abort"
            ))),
            Request::Abort(_) if view.controls.abort.is_some() => Err(Failure::failed(format!(
                "an abort of the rolling update of {shown} is already requested {}",
                view.controls
                    .abort
                    .as_ref()
                    .map(ControlRequest::describe)
                    .unwrap_or_default()
            ))),
            Request::Abort(reason) => {
                set(
                    Control::Abort,
                    Some(ControlRequest::now(&operator(), reason)),
                )
                .await?;
                Ok(format!(
                    "abort requested: the rolling update of {shown} stops before its next step; running the same command again resumes it"
                ))
            }
        }
    })
}
