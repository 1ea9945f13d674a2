//! `fleet status --watch`: every cluster of the fleet followed live, by watches on its rotation's
//! Lease and its fleet record: where each stands, what holds its rotation, how far it is and
//! what is left. On a terminal, a full-screen view whose keys pause, resume and abort the fleet
//! (as `fleet pause|resume|abort`); otherwise a line per change, until the fleet ends.

use std::collections::BTreeMap;

use futures::StreamExt;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::status::{Act, control_clusters};
use super::{FleetArgs, connect_all, load};
use crate::cli::status::keys::Command;
use crate::cli::status::scene::LeaseRecords;
use crate::cli::status::screen::{footer_lines, rows_of, tint};
use crate::cli::status::terminal::{Footer, LiveScreen, full_screen};
use crate::cli::{Failure, KubeFlags, tokio_runtime};
use crate::cluster::Cluster;
use crate::cluster::fleet_record::{FleetAbort, FleetRecord, RecordState};
use crate::cluster::follow::Followed;
use crate::cluster::lock::LockStatus;
use crate::policy::fleet::Fleet;

/// A change in one cluster (by its place in the fleet).
enum Change {
    Lease(Followed),
    Record(Result<(Option<FleetRecord>, Option<FleetAbort>), String>),
}

/// One cluster as the view knows it.
struct ClusterRow {
    stage: String,
    context: String,
    lease: Option<LockStatus>,
    record: Option<FleetRecord>,
    abort: Option<FleetAbort>,
    problem: Option<String>,
    /// Its Lease and record were both read.
    lease_known: bool,
    record_known: bool,
}

impl ClusterRow {
    fn records(&self) -> LeaseRecords<'_> {
        LeaseRecords(self.lease.as_ref())
    }

    fn state(&self) -> String {
        (self.record.as_ref()).map_or("not-started".into(), |r| r.state.to_string())
    }

    /// Who holds its rotation, and what was asked of it.
    fn rotation(&self) -> String {
        let records = self.records();
        let mut text = match self.lease.as_ref().filter(|_| records.running()) {
            Some(l) => format!("held by {}", l.holder),
            None => "-".to_string(),
        };
        let controls = records.controls();
        if controls.pause.is_some() {
            text.push_str("; paused");
        }
        if controls.abort.is_some() {
            text.push_str("; abort requested");
        }
        text
    }

    /// Replaced of all its groups' instances, and the batches in flight.
    fn progress(&self) -> Option<String> {
        let progress = self.records().progress()?;
        let replaced: usize = progress.groups.iter().map(|g| g.replaced).sum();
        let instances: usize = progress.groups.iter().map(|g| g.instances).sum();
        let mut text = format!("{replaced}/{instances} replaced");
        for g in &progress.groups {
            if let Some(b) = &g.batch {
                text.push_str(&format!(", {} batch {} in flight", g.group, b.number));
            }
        }
        Some(text)
    }

    /// Its rotation runs, or its record says it does.
    fn rotating(&self) -> bool {
        self.records().running()
            || (self.record.as_ref()).is_some_and(|r| r.state == RecordState::Running)
    }

    /// Its line in the plain output.
    fn said(&self) -> String {
        let mut text = format!(
            "cluster {}: {}; {}",
            self.context,
            self.state(),
            self.rotation()
        );
        if let Some(p) = self.progress().filter(|_| self.records().running()) {
            text.push_str(&format!("; {p}"));
        }
        if let Some(h) = self
            .records()
            .holding()
            .filter(|_| self.records().running())
        {
            text.push_str(&format!("; now: {}", h.what));
        }
        if let Some(m) = self.record.as_ref().and_then(|r| r.message.as_ref()) {
            text.push_str(&format!("; {m}"));
        }
        if let Some(p) = &self.problem {
            text.push_str(&format!("; not seen: {p}"));
        }
        text
    }
}

/// The fleet as the view knows it.
struct FleetScene {
    name: String,
    rows: Vec<ClusterRow>,
    /// A cluster was seen rotating while the view watched.
    seen_running: bool,
}

impl FleetScene {
    fn apply(&mut self, at: usize, change: Change) {
        let row = &mut self.rows[at];
        match change {
            Change::Lease(Followed::Lease(lease)) => {
                row.lease = lease;
                row.lease_known = true;
                row.problem = None;
            }
            Change::Lease(Followed::Failed { message, .. }) => row.problem = Some(message),
            Change::Lease(_) => {}
            Change::Record(Ok((record, abort))) => {
                row.record = record;
                row.abort = abort;
                row.record_known = true;
                row.problem = None;
            }
            Change::Record(Err(message)) => row.problem = Some(message),
        }
        self.seen_running |= self.rows.iter().any(ClusterRow::rotating);
    }

    fn known(&self) -> bool {
        self.rows.iter().all(|r| r.lease_known && r.record_known)
    }

    /// An abort of the fleet, and the cluster it is recorded in.
    fn abort(&self) -> Option<(&str, &FleetAbort)> {
        (self.rows.iter()).find_map(|r| Some((r.context.as_str(), r.abort.as_ref()?)))
    }

    /// How the fleet ended, once it has: every cluster done, or one stopped (or the fleet
    /// aborted) with none rotating any more.
    fn ended(&self) -> Option<Result<String, String>> {
        if !self.known() {
            return None;
        }
        let rotating = self.rows.iter().any(ClusterRow::rotating);
        if rotating {
            return None;
        }
        let done =
            |r: &ClusterRow| (r.record.as_ref()).is_some_and(|r| r.state == RecordState::Succeeded);
        if self.rows.iter().all(done) {
            return Some(Ok(format!("fleet {}: every cluster succeeded", self.name)));
        }
        let stopped = (self.rows.iter())
            .find(|r| (r.record.as_ref()).is_some_and(|r| r.state != RecordState::Succeeded));
        match (stopped, self.abort()) {
            (Some(r), _) => Some(Err(format!("fleet {} stopped: {}", self.name, r.said()))),
            (None, Some((_, a))) if self.seen_running => Some(Err(format!(
                "fleet {} stopped: aborted by {}{}",
                self.name,
                a.by,
                match a.reason.is_empty() {
                    true => String::new(),
                    false => format!(": {}", a.reason),
                }
            ))),
            _ => None,
        }
    }
}

pub(super) fn watch(kube: &KubeFlags, args: &FleetArgs) -> Result<(), Failure> {
    let fleet = load(&args.file)?;
    let runtime = tokio_runtime()?;
    runtime.block_on(async {
        let clusters = connect_all(kube, &fleet).await?;
        let (tx, changes) = unbounded_channel();
        let mut rows = Vec::new();
        for stage in &fleet.stages {
            for c in &stage.clusters {
                let at = rows.len();
                let cluster = &clusters[&c.context];
                let (leases, records) = (tx.clone(), tx.clone());
                let mut followed = cluster.follow_lease();
                tokio::spawn(async move {
                    while let Some(f) = followed.recv().await {
                        if leases.send((at, Change::Lease(f))).is_err() {
                            return;
                        }
                    }
                });
                let changes = cluster.fleet_record_changes(&fleet.name);
                tokio::spawn(async move {
                    let mut changes = std::pin::pin!(changes);
                    while let Some(r) = changes.next().await {
                        if records.send((at, Change::Record(r))).is_err() {
                            return;
                        }
                    }
                });
                rows.push(ClusterRow {
                    stage: stage.name.clone(),
                    context: c.context.clone(),
                    lease: None,
                    record: None,
                    abort: None,
                    problem: None,
                    lease_known: false,
                    record_known: false,
                });
            }
        }
        let scene = FleetScene {
            name: fleet.name.clone(),
            rows,
            seen_running: false,
        };
        match crate::cli::status::terminal::on_a_terminal() {
            true => {
                let mut screen = FleetScreen {
                    clusters: &clusters,
                    fleet: &fleet,
                    scene,
                };
                full_screen(&mut screen, changes).await
            }
            false => lines(scene, changes).await,
        }
    })
}

/// A line per change of a cluster, until the fleet ends (exit status as the fleet's).
async fn lines(
    mut scene: FleetScene,
    mut changes: UnboundedReceiver<(usize, Change)>,
) -> Result<(), Failure> {
    let mut said: BTreeMap<usize, String> = BTreeMap::new();
    let mut abort_said = false;
    loop {
        let (at, change) = (changes.recv().await)
            .ok_or_else(|| Failure::failed("the watches of the fleet stopped"))?;
        scene.apply(at, change);
        if !scene.known() {
            continue;
        }
        let clock = jiff::Timestamp::now().strftime("%H:%M:%S").to_string();
        for (i, row) in scene.rows.iter().enumerate() {
            let line = row.said();
            if said.get(&i) != Some(&line) {
                println!("{clock} {line}");
                said.insert(i, line);
            }
        }
        if let (Some((cluster, a)), false) = (scene.abort(), abort_said) {
            println!(
                "{clock} abort of the fleet requested by {} (recorded in {cluster})",
                a.by
            );
            abort_said = true;
        }
        match scene.ended() {
            Some(Ok(how)) => {
                println!("{clock} {how}");
                return Ok(());
            }
            Some(Err(how)) => return Err(Failure::failed(how)),
            None => {}
        }
    }
}

/// The fleet's view, as the terminal driver runs it.
struct FleetScreen<'a> {
    clusters: &'a BTreeMap<String, Cluster>,
    fleet: &'a Fleet,
    scene: FleetScene,
}

impl LiveScreen for FleetScreen<'_> {
    type Change = (usize, Change);

    fn apply(&mut self, (at, change): (usize, Change)) {
        self.scene.apply(at, change);
    }

    fn draw(&self, frame: &mut Frame, footer: &Footer, now: jiff::Timestamp) {
        draw(frame, &self.scene, footer, now);
    }

    async fn act(&self, command: Command) -> String {
        let (act, reason) = match command {
            Command::Pause { reason } => (Act::Pause, reason),
            Command::Resume => (Act::Resume, String::new()),
            Command::Abort { reason } => (Act::Abort, reason),
            Command::Quit => return String::new(),
        };
        match control_clusters(self.clusters, self.fleet, act, &reason).await {
            Ok(said) => said.join("\n"),
            Err(refused) => format!("refused: {}", refused.message),
        }
    }
}

fn draw(frame: &mut Frame, scene: &FleetScene, footer: &Footer, now: jiff::Timestamp) {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let tint = |c: Color| tint(footer.colour, c);
    let mut lines: Vec<Line> = Vec::new();
    for row in &scene.rows {
        let records = row.records();
        let state_colour = match row.record.as_ref().map(|r| r.state) {
            Some(RecordState::Succeeded) => Color::Green,
            Some(RecordState::Running) => Color::Cyan,
            Some(_) => Color::Red,
            None => Color::Reset,
        };
        lines.push(Line::from(vec![
            Span::raw(format!("{:<10} ", row.stage)),
            Span::styled(format!("{:<14} ", row.context), bold),
            Span::styled(format!("{:<16} ", row.state()), tint(state_colour)),
            Span::raw(format!("{:<22} ", row.progress().unwrap_or_default())),
            Span::raw(row.rotation()),
        ]));
        if let Some(h) = records.holding().filter(|_| records.running()) {
            lines.push(Line::styled(
                format!("    now: {} (for {})", h.what, h.for_how_long(now)),
                tint(Color::Yellow),
            ));
        }
        if let Some(e) = records.estimate().filter(|_| records.running()) {
            lines.push(Line::from(format!("    estimate: {}", e.describe())));
        }
        if let Some(m) = row.record.as_ref().and_then(|r| r.message.as_ref()) {
            lines.push(Line::from(format!("    {m}")));
        }
        if let Some(p) = &row.problem {
            lines.push(Line::styled(format!("    not seen: {p}"), tint(Color::Red)));
        }
    }
    if let Some((cluster, a)) = scene.abort() {
        lines.push(Line::styled(
            format!(
                "Abort of the fleet requested by {} (recorded in {cluster}): {}",
                a.by, a.reason
            ),
            tint(Color::Red),
        ));
    }
    match scene.ended() {
        Some(Ok(how)) => lines.push(Line::styled(how, tint(Color::Green))),
        Some(Err(how)) => lines.push(Line::styled(how, tint(Color::Red))),
        None => {}
    }
    let footer_lines = footer_lines(footer, "the fleet");
    let areas = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(rows_of(&footer_lines, frame.area().width)),
    ])
    .split(frame.area());
    let header = format!(
        " kubectl rollout-ext fleet status --watch · fleet {} · {} UTC",
        scene.name,
        now.strftime("%H:%M:%S")
    );
    frame.render_widget(Paragraph::new(Line::styled(header, bold)), areas[0]);
    let title = format!(
        " {:<10} {:<14} {:<16} {:<22} ROTATION ",
        "STAGE", "CLUSTER", "STATE", "PROGRESS"
    );
    frame.render_widget(
        Paragraph::new(lines)
            .block(Block::bordered().title(Span::styled(title, bold)))
            .wrap(Wrap { trim: false }),
        areas[1],
    );
    frame.render_widget(
        Paragraph::new(footer_lines).wrap(Wrap { trim: false }),
        areas[2],
    );
}
