//! `status --watch`: the node rotation followed from any terminal (the run's own, another, or
//! none when the run was handed to the cluster), by watches on its Lease, the nodes, the pods of
//! the nodes it drains and its Events. On a terminal, a full-screen view with keys for pause,
//! resume and abort; otherwise a line for each change, ending with the run.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;

use super::keys::Command;
use super::scene::Scene;
use super::screen::{self, View};
use super::terminal::{Footer, LiveScreen, full_screen, on_a_terminal};
use crate::cli::control::{abort_rotation, pause_rotation, resume_rotation};
use crate::cli::{Failure, KubeFlags, tokio_runtime};
use crate::cluster::Cluster;
use crate::cluster::follow::Followed;

/// How long the end of a run that let go of its lock waits for the Event that says how it
/// ended (the run publishes it after it lets go, within its own flush timeout).
const END_EVENT_WAIT: Duration = Duration::from_secs(15);

pub fn watch(kube: &KubeFlags) -> Result<(), Failure> {
    let runtime = tokio_runtime()?;
    let shown = kube.describe_cluster();
    runtime.block_on(async {
        let cluster = Cluster::connect(&kube.connect_options()?).await?;
        let followed = cluster.follow_rotation();
        match on_a_terminal() {
            true => {
                let mut screen = RotationScreen {
                    cluster: &cluster,
                    shown: &shown,
                    scene: Scene::default(),
                };
                full_screen(&mut screen, followed).await
            }
            false => lines(followed).await,
        }
    })
}

/// Carries out what a key asked, as `pause`, `resume` and `abort` do; says what was done or
/// why it was refused.
async fn act(cluster: &Cluster, command: Command) -> String {
    let done = async {
        let lease = cluster.controls().await?.unwrap_or_default();
        match command {
            Command::Pause { reason } => pause_rotation(cluster, &lease, &reason).await,
            Command::Resume => resume_rotation(cluster, &lease).await,
            Command::Abort { reason } => abort_rotation(cluster, &lease, &reason, false).await,
            Command::Quit => Ok(String::new()),
        }
    };
    match done.await {
        Ok(said) => said,
        Err(refused) => format!("refused: {}", refused.message),
    }
}

/// Applies `change`, and every change already waiting after it.
fn apply_all(scene: &mut Scene, change: Followed, followed: &mut UnboundedReceiver<Followed>) {
    scene.apply(change);
    while let Ok(next) = followed.try_recv() {
        scene.apply(next);
    }
}

fn watch_stopped() -> Failure {
    Failure::failed("the watch of the rotation stopped")
}

/// The rotation's view, as the terminal driver runs it.
struct RotationScreen<'a> {
    cluster: &'a Cluster,
    shown: &'a str,
    scene: Scene,
}

impl LiveScreen for RotationScreen<'_> {
    type Change = Followed;

    fn apply(&mut self, change: Followed) {
        self.scene.apply(change);
    }

    fn draw(&self, frame: &mut ratatui::Frame, footer: &Footer, now: jiff::Timestamp) {
        let view = View {
            scene: &self.scene,
            footer,
            cluster: self.shown,
            now,
        };
        screen::draw(frame, &view);
    }

    async fn act(&self, command: Command) -> String {
        act(self.cluster, command).await
    }
}

/// What the plain lines last said, per subject, so that only a change is said again.
#[derive(Default)]
struct Said {
    facts: BTreeMap<String, String>,
    events: BTreeMap<String, i32>,
}

impl Said {
    /// The lines a change of `scene` makes.
    fn news(&mut self, scene: &Scene) -> Vec<String> {
        let records = scene.records();
        let mut facts: BTreeMap<String, String> = BTreeMap::new();
        let mut fact = |subject: &str, text: String| {
            facts.insert(subject.to_string(), text);
        };
        fact(
            "run",
            match (records.0, records.running()) {
                (Some(l), true) => format!("rotation running: {}", l.holder),
                _ if records.left_unfinished() => {
                    "no rotation is running; an unfinished one left its state".into()
                }
                _ => "no rotation is running".into(),
            },
        );
        if let Some(h) = records.holding().filter(|_| records.running()) {
            fact("now", format!("now: {}", h.what));
        }
        if let Some(e) = records.estimate().filter(|_| records.running()) {
            fact("estimate", format!("estimate: {}", e.describe()));
        }
        if let Some(slow) = records.slow() {
            fact("slow", format!("slow: {slow}"));
        }
        let controls = records.controls();
        if let Some(p) = controls.pause {
            fact("pause", format!("paused {}", p.describe()));
        }
        if let Some(a) = controls.abort {
            fact("abort", format!("abort requested {}", a.describe()));
        }
        for g in records.progress().into_iter().flat_map(|p| p.groups) {
            let mut text = format!("group {}: {}/{} replaced", g.group, g.replaced, g.instances);
            if let Some(b) = &g.batch {
                text.push_str(&format!(
                    ", batch {} in flight: {}",
                    b.number,
                    b.nodes.join(", ")
                ));
            } else if g.done {
                text.push_str(", done");
            }
            fact(&format!("group {}", g.group), text);
        }
        for n in scene.node_lines() {
            let mut text = format!("node {}: {}", n.name, n.state);
            if let Some(pods) = &n.pods_left {
                text.push_str(&format!(", {} pods left", pods.len()));
            }
            if let Some(blocked) = &n.blocked {
                text.push_str(&format!("; waits: {blocked}"));
            }
            fact(&format!("node {}", n.name), text);
        }
        for (what, problem) in &scene.problems {
            fact(&format!("problem {what}"), format!("not seen: {problem}"));
        }
        let mut news = Vec::new();
        for (subject, text) in &facts {
            if self.facts.get(subject) != Some(text) {
                news.push(text.clone());
            }
        }
        for subject in self.facts.keys().filter(|s| !facts.contains_key(*s)) {
            match subject.as_str() {
                "pause" => news.push("pause withdrawn".into()),
                "abort" => news.push("abort request gone".into()),
                _ => {}
            }
        }
        self.facts = facts;
        for e in scene.last_events(usize::MAX).iter().filter(|e| e.fresh) {
            let e = &e.event;
            if self.events.insert(e.name.clone(), e.count) != Some(e.count) {
                news.push(format!("event: {} {}: {}", e.regarding, e.reason, e.note));
            }
        }
        news
    }
}

/// A line per change until the run this view saw running ends.
async fn lines(mut followed: UnboundedReceiver<Followed>) -> Result<(), Failure> {
    let mut scene = Scene::default();
    let mut said = Said::default();
    let mut ending: Option<tokio::time::Instant> = None;
    loop {
        let change = match ending {
            None => followed.recv().await,
            Some(deadline) => match tokio::time::timeout_at(deadline, followed.recv()).await {
                Ok(change) => change,
                Err(_) => {
                    println!(
                        "the run let go of its lock; the Event saying how it ended was not seen"
                    );
                    return Ok(());
                }
            },
        };
        apply_all(&mut scene, change.ok_or_else(watch_stopped)?, &mut followed);
        if !scene.known() {
            continue;
        }
        let clock = jiff::Timestamp::now().strftime("%H:%M:%S").to_string();
        for line in said.news(&scene) {
            println!("{clock} {line}");
        }
        if let Some(end) = scene.ended() {
            let how = format!("the run ended: {}: {}", end.reason, end.note);
            return match end.reason.as_str() {
                "Finished" => {
                    println!("{clock} {how}");
                    Ok(())
                }
                "Aborted" => Err(Failure {
                    code: 3,
                    message: how,
                }),
                _ => Err(Failure::failed(how)),
            };
        }
        if scene.let_go() && ending.is_none() {
            ending = Some(tokio::time::Instant::now() + END_EVENT_WAIT);
        }
    }
}
