//! `pause`, `resume` and `abort`: an operator's requests to the node rotation, from any terminal.
//! Each is recorded on the rotation's Lease, where the running executor (or the next run) reads
//! it; a request that makes no sense now (resume when nothing is paused, abort when nothing
//! runs) is refused and changes nothing, as `kubectl rollout pause/resume` do.

use super::rotate_cmd::operator;
use super::{Failure, KubeFlags, tokio_runtime};
use crate::cluster::Cluster;
use crate::cluster::controls::{Control, ControlRequest, LeaseView};

/// Connects and reads the Lease, then runs `act` on what it holds.
fn with_lease<F>(kube: &KubeFlags, act: F) -> Result<(), Failure>
where
    F: AsyncFnOnce(&Cluster, LeaseView) -> Result<String, Failure>,
{
    let runtime = tokio_runtime()?;
    let message = runtime.block_on(async {
        let cluster = Cluster::connect(&kube.connect_options()?).await?;
        let lease = cluster.controls().await?.unwrap_or_default();
        act(&cluster, lease).await
    })?;
    println!("{message}");
    Ok(())
}

pub fn pause(kube: &KubeFlags, reason: &str) -> Result<(), Failure> {
    with_lease(kube, async |cluster, lease| {
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
    })
}

pub fn resume(kube: &KubeFlags) -> Result<(), Failure> {
    with_lease(kube, async |cluster, lease| {
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
    })
}

pub fn abort(kube: &KubeFlags, reason: &str) -> Result<(), Failure> {
    with_lease(kube, async |cluster, lease| {
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
        let request = ControlRequest::now(&operator(), reason);
        cluster.set_control(Control::Abort, Some(&request)).await?;
        Ok(format!(
            "abort requested: the rotation of {} stops after its current step (a drain or \
             termination in progress finishes first); running the same command again resumes it",
            lease.holder
        ))
    })
}
