//! How events are shown to the operator: plain timestamped lines on stderr, progress bars on a
//! terminal, or one JSON object per line for automation. The events themselves are
//! [`crate::events`].

use std::sync::Mutex;

pub use crate::events::{Collect, Event, Reporter};

/// Timestamped lines on stderr.
pub struct Lines;

impl Reporter for Lines {
    fn report(&self, event: Event) {
        let now = jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        eprintln!("{now} {}", event.describe());
    }
}

/// Progress bars for a person at a terminal: instances replaced overall, the current batch, and
/// one bar per node being drained (pods left); every event is printed above the bars.
/// Colour only when allowed (`NO_COLOR` unset and no `--no-color`).
pub struct Bars {
    bars: indicatif::MultiProgress,
    overall: indicatif::ProgressBar,
    batch: indicatif::ProgressBar,
    drains: Mutex<std::collections::HashMap<String, indicatif::ProgressBar>>,
    color: bool,
}

fn style(template: &str) -> indicatif::ProgressStyle {
    indicatif::ProgressStyle::with_template(template)
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
}

impl Bars {
    pub fn new(color: bool) -> Self {
        let bars = indicatif::MultiProgress::new();
        let overall = bars.add(indicatif::ProgressBar::new(0));
        overall.set_style(style(if color {
            "[{elapsed_precise}] {bar:30.green/white} {pos}/{len} instances replaced  {msg}"
        } else {
            "[{elapsed_precise}] {bar:30} {pos}/{len} instances replaced  {msg}"
        }));
        overall.enable_steady_tick(std::time::Duration::from_millis(200));
        let batch = bars.add(indicatif::ProgressBar::new_spinner());
        batch.set_style(style(if color {
            "{spinner:.cyan} {msg}"
        } else {
            "{spinner} {msg}"
        }));
        Bars {
            bars,
            overall,
            batch,
            drains: Mutex::default(),
            color,
        }
    }

    fn paint(&self, line: String, code: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{line}\x1b[0m")
        } else {
            line
        }
    }

    fn drain_bar(&self, node: &str, pods: usize) {
        let bar = self.bars.add(indicatif::ProgressBar::new(pods as u64));
        bar.set_style(style(if self.color {
            "  drain {prefix}: {bar:20.yellow/white} {pos}/{len} pods moved  {msg}"
        } else {
            "  drain {prefix}: {bar:20} {pos}/{len} pods moved  {msg}"
        }));
        bar.set_prefix(node.to_string());
        self.drains.lock().unwrap().insert(node.to_string(), bar);
    }

    fn on_drain(&self, node: &str, f: impl FnOnce(&indicatif::ProgressBar)) {
        if let Some(bar) = self.drains.lock().unwrap().get(node) {
            f(bar);
        }
    }

    /// A rolling update moves replicas, not instances: the overall bar counts the replicas of
    /// the controller that grows.
    fn count_replicas(&self, next: &str, next_replicas: i32, desired: i32) {
        self.overall.set_style(style(if self.color {
            "[{elapsed_precise}] {bar:30.green/white} {pos}/{len} replicas of {prefix}  {msg}"
        } else {
            "[{elapsed_precise}] {bar:30} {pos}/{len} replicas of {prefix}  {msg}"
        }));
        self.overall.set_prefix(next.to_string());
        self.overall.set_length(desired.max(0) as u64);
        self.overall.set_position(next_replicas.max(0) as u64);
    }
}

/// Whether output may be coloured: not with `NO_COLOR` set (to anything but empty).
pub fn color_allowed(no_color_flag: bool) -> bool {
    !no_color_flag && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

impl Reporter for Bars {
    fn report(&self, event: Event) {
        match &event {
            Event::GroupStarted { instances, .. } => {
                self.overall.inc_length(instances.len() as u64)
            }
            Event::BatchStarted { .. }
            | Event::Surging { .. }
            | Event::StepStarted { .. }
            | Event::PartitionSet { .. }
            | Event::NodesReplacing { .. } => {
                self.batch.set_message(event.describe());
                self.batch.tick();
            }
            Event::UpdateStarted {
                next,
                next_replicas,
                desired,
                ..
            } => self.count_replicas(next, *next_replicas, *desired),
            Event::PartitionUpdateStarted {
                workload,
                replicas,
                partition,
                ..
            } => self.count_replicas(workload, replicas - partition, *replicas),
            Event::PodsUpdated {
                workload: _,
                partition,
                ..
            } => self.overall.set_position(
                self.overall
                    .length()
                    .unwrap_or(0)
                    .saturating_sub((*partition).max(0) as u64),
            ),
            Event::NodeUpdateStarted {
                workload, nodes, ..
            } => self.count_replicas(workload, 0, *nodes as i32),
            Event::NodesReplaced { nodes, .. } => self.overall.inc(nodes.len() as u64),
            Event::StepDone { next_replicas, .. } => {
                self.overall.set_position((*next_replicas).max(0) as u64)
            }
            Event::Terminated { .. } => self.overall.inc(1),
            Event::DrainStarted { node, pods, .. } => self.drain_bar(node, *pods),
            Event::PodGone { node, .. } => self.on_drain(node, |b| b.inc(1)),
            Event::EvictionBlocked { node, .. } => {
                self.on_drain(node, |b| b.set_message(event.describe()))
            }
            Event::Drained { node } => {
                if let Some(bar) = self.drains.lock().unwrap().remove(node) {
                    bar.finish_and_clear();
                    self.bars.remove(&bar);
                }
            }
            Event::Done | Event::UpdateDone { .. } | Event::RolledBack { .. } => {
                self.batch.finish_and_clear();
                self.overall.finish_with_message("done");
            }
            _ => {}
        }
        let line = event.describe();
        match &event {
            // Frequent, short-lived states go to a bar's message rather than the scrollback.
            Event::EvictionBlocked { .. }
            | Event::Waiting { .. }
            | Event::Validated { .. }
            | Event::Scaled { .. }
            | Event::StepDone { .. } => {
                self.overall.set_message(line);
            }
            Event::PodGone { .. } | Event::Evicted { .. } => {}
            Event::Warning { .. }
            | Event::ValidationFailed { .. }
            | Event::HoldExpired { .. }
            | Event::DrainEscalated { .. } => {
                let _ = self.bars.println(self.paint(line, "33"));
            }
            _ => {
                let _ = self.bars.println(line);
            }
        }
    }
}

/// One JSON object per line on stdout (`-o json`).
pub struct JsonLines;

impl Reporter for JsonLines {
    fn report(&self, event: Event) {
        if let Ok(line) = serde_json::to_string(&event) {
            println!("{line}");
        }
    }
}
