//! `fleet status` and `fleet pause|resume|abort`: every cluster of the fleet read, or asked,
//! in turn.

use std::collections::BTreeMap;

use super::output::when;
use super::{FleetArgs, FleetControlArgs, connect_all, in_cluster, load};
use crate::cli::rotate_cmd::operator;
use crate::cli::{Failure, KubeFlags, OutputFormat, RESUME, tokio_runtime};
use crate::cluster::Cluster;
use crate::cluster::controls::{Control, ControlRequest};
use crate::cluster::fleet_record::FleetAbort;
use crate::policy::fleet::Fleet;

/// One cluster's row of `fleet status`.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ClusterStatus {
    stage: String,
    cluster: String,
    /// The fleet's record in it: not-started, running, succeeded, …
    state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    /// Who holds its rotation lock now (empty: nobody).
    holder: String,
    paused: bool,
    abort_requested: bool,
}

pub(super) fn status(kube: &KubeFlags, args: &FleetArgs) -> Result<(), Failure> {
    let fleet = load(&args.file)?;
    let runtime = tokio_runtime()?;
    let (rows, aborts) = runtime.block_on(async {
        let clusters = connect_all(kube, &fleet).await?;
        let mut rows = Vec::new();
        let mut aborts = Vec::new();
        for stage in &fleet.stages {
            for c in &stage.clusters {
                let cluster = &clusters[&c.context];
                let named = in_cluster(&c.context);
                let (record, abort) = cluster.fleet_record(&fleet.name).await.map_err(named)?;
                let lease = cluster.controls().await.map_err(named)?.unwrap_or_default();
                aborts.extend(abort.map(|a| (c.context.clone(), a)));
                rows.push(ClusterStatus {
                    stage: stage.name.clone(),
                    cluster: c.context.clone(),
                    state: record
                        .as_ref()
                        .map_or("not-started".into(), |r| r.state.to_string()),
                    since: record
                        .as_ref()
                        .map(|r| when(r.ended_at.unwrap_or(r.started_at))),
                    message: record.and_then(|r| r.message),
                    holder: lease.holder,
                    paused: lease.controls.pause.is_some(),
                    abort_requested: lease.controls.abort.is_some(),
                });
            }
        }
        Ok::<_, Failure>((rows, aborts))
    })?;
    if matches!(args.output.text(), OutputFormat::Json | OutputFormat::Yaml) {
        let doc = serde_json::json!({"fleet": fleet.name, "clusters": rows});
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("status serialises")
        );
        return Ok(());
    }
    println!("Fleet {} ({})", fleet.name, fleet.source);
    println!(
        "{:<12} {:<16} {:<16} {:<22} ROTATION",
        "STAGE", "CLUSTER", "STATE", "SINCE"
    );
    for row in &rows {
        let mut rotation = match row.holder.as_str() {
            "" => "-".to_string(),
            holder => format!("held by {holder}"),
        };
        if row.paused {
            rotation.push_str("; paused");
        }
        if row.abort_requested {
            rotation.push_str("; abort requested");
        }
        if let Some(m) = &row.message {
            rotation.push_str(&format!("; {m}"));
        }
        println!(
            "{:<12} {:<16} {:<16} {:<22} {rotation}",
            row.stage,
            row.cluster,
            row.state,
            row.since.as_deref().unwrap_or("-")
        );
    }
    if let Some((cluster, abort)) = aborts.first() {
        println!(
            "Abort requested by {} (recorded in {cluster}){}",
            abort.by,
            if abort.reason.is_empty() {
                String::new()
            } else {
                format!(": {}", abort.reason)
            }
        );
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Act {
    Pause,
    Resume,
    Abort,
}

/// `fleet pause|resume|abort`: the same request to every cluster's rotation (and, for an abort,
/// to the fleet run itself, through each cluster's fleet record).
pub(super) fn control(kube: &KubeFlags, args: &FleetControlArgs, act: Act) -> Result<(), Failure> {
    let fleet = load(&args.file)?;
    let runtime = tokio_runtime()?;
    let said = runtime.block_on(async {
        let clusters = connect_all(kube, &fleet).await?;
        control_clusters(&clusters, &fleet, act, &args.reason).await
    })?;
    for line in said {
        println!("{line}");
    }
    if act == Act::Abort {
        println!("the fleet stops after the running rotations' current steps; {RESUME}");
    }
    Ok(())
}

/// Asks `act` of every cluster of `fleet`; a line per cluster says what was done.
pub(super) async fn control_clusters(
    clusters: &BTreeMap<String, Cluster>,
    fleet: &Fleet,
    act: Act,
    reason: &str,
) -> Result<Vec<String>, Failure> {
    let mut said = Vec::new();
    for c in fleet.clusters() {
        let cluster = &clusters[&c.context];
        let named = in_cluster(&c.context);
        let lease = cluster.controls().await.map_err(named)?.unwrap_or_default();
        let request = ControlRequest::now(&operator(), reason);
        let line = match act {
            Act::Pause if lease.controls.pause.is_some() => "already paused".to_string(),
            Act::Pause => {
                cluster
                    .set_control(Control::Pause, Some(&request))
                    .await
                    .map_err(named)?;
                match lease.holder.as_str() {
                    "" => "pause recorded: its rotation waits when it starts".into(),
                    holder => format!("pause requested of {holder}"),
                }
            }
            Act::Resume if lease.controls.pause.is_none() => "not paused".to_string(),
            Act::Resume => {
                cluster
                    .set_control(Control::Pause, None)
                    .await
                    .map_err(named)?;
                if lease.holder.is_empty() {
                    cluster.drop_idle_lock().await.map_err(named)?;
                }
                "resumed".into()
            }
            Act::Abort => {
                let abort = FleetAbort {
                    by: operator(),
                    at: jiff::Timestamp::now().as_second(),
                    reason: reason.to_string(),
                };
                cluster
                    .write_fleet_abort(&fleet.name, Some(&abort))
                    .await
                    .map_err(named)?;
                match lease.holder.as_str() {
                    "" => "abort recorded for the fleet".to_string(),
                    _ if lease.controls.abort.is_some() => {
                        "abort recorded; its rotation's abort was already requested".into()
                    }
                    holder => {
                        cluster
                            .set_control(Control::Abort, Some(&request))
                            .await
                            .map_err(named)?;
                        format!("abort requested of {holder}")
                    }
                }
            }
        };
        said.push(format!("cluster {}: {line}", c.context));
    }
    Ok(said)
}
