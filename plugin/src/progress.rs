//! What the executors tell the operator while they work: typed events, and the reporters that
//! print them (plain timestamped lines on stderr, or one JSON object per line for automation).
//! Tests collect events instead of reading log text.

use std::sync::Mutex;

use serde::Serialize;

/// Something an executor did or is waiting for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// A group's rotation starts.
    GroupStarted {
        group: String,
        instances: Vec<String>,
    },
    /// New instances are being created before old ones go.
    Surging {
        group: String,
        detached: Vec<String>,
        canary: bool,
    },
    BatchStarted {
        group: String,
        index: u32,
        nodes: Vec<String>,
        canary: bool,
        decided_by: String,
    },
    /// Waiting, for a reason that is not a failure (a hook's pause or wait, an interval).
    Waiting {
        seconds: u64,
        reason: String,
    },
    Terminated {
        node: String,
        output: String,
    },
    /// The replacements of a batch are Ready.
    Replaced {
        group: String,
        ready: usize,
    },
    GroupDone {
        group: String,
    },
    /// Every chosen instance is replaced.
    Done,
    Cordoned {
        node: String,
    },
    Tainted {
        node: String,
        key: String,
    },
    /// A drain starts: how many pods it moves and which it leaves.
    DrainStarted {
        node: String,
        pods: usize,
        skipped: Vec<String>,
    },
    Evicted {
        node: String,
        pod: String,
    },
    /// An eviction was refused for now; it is retried after `retry_seconds`.
    EvictionBlocked {
        node: String,
        pod: String,
        reason: String,
        retry_seconds: u64,
        seconds_left: u64,
    },
    PodGone {
        node: String,
        pod: String,
    },
    Drained {
        node: String,
    },
    /// A validation check passed.
    Validated {
        passed: u32,
        needed: u32,
    },
    /// A validation check failed; the next change to the cluster triggers another.
    ValidationFailed {
        failures: Vec<String>,
        seconds_left: u64,
    },
    Warning {
        message: String,
    },
}

impl Event {
    /// One line for a person.
    pub fn describe(&self) -> String {
        match self {
            Event::GroupStarted { group, instances } => {
                format!("rotating group {group}: {}", instances.join(", "))
            }
            Event::Surging {
                group,
                detached,
                canary,
            } => format!(
                "surging group {group}{}: detached {}",
                if *canary { " (canary)" } else { "" },
                detached.join(", ")
            ),
            Event::BatchStarted {
                group,
                index,
                nodes,
                canary,
                decided_by,
            } => format!(
                "group {group} batch {}{}: {} [size: {decided_by}]",
                index + 1,
                if *canary { " (canary)" } else { "" },
                nodes.join(", ")
            ),
            Event::Waiting { seconds, reason } => format!(
                "waiting {}: {reason}",
                crate::plan::groups::human_duration(*seconds as i64)
            ),
            Event::Terminated { node, output } if output.is_empty() => {
                format!("terminated {node}")
            }
            Event::Terminated { node, output } => format!("terminated {node}: {output}"),
            Event::Replaced { group, ready } => {
                format!("group {group}: replacements Ready ({ready} nodes Ready)")
            }
            Event::GroupDone { group } => format!("group {group} is up to date"),
            Event::Done => "rotation complete".into(),
            Event::Cordoned { node } => format!("cordoned node {node}"),
            Event::Tainted { node, key } => {
                format!("tainted node {node} with {key}:PreferNoSchedule")
            }
            Event::DrainStarted {
                node,
                pods,
                skipped,
            } => {
                let mut line = format!("draining node {node}: {pods} pod(s) to evict");
                if !skipped.is_empty() {
                    line.push_str(&format!(", leaving {}", skipped.join(", ")));
                }
                line
            }
            Event::Evicted { node, pod } => format!("evicted pod {pod} from {node}"),
            Event::EvictionBlocked {
                pod,
                reason,
                retry_seconds,
                seconds_left,
                ..
            } => format!(
                "eviction of pod {pod} blocked: {reason}; retrying every {retry_seconds}s, {} left",
                crate::plan::groups::human_duration(*seconds_left as i64)
            ),
            Event::PodGone { node, pod } => format!("pod {pod} is gone from {node}"),
            Event::Drained { node } => format!("drained node {node}"),
            Event::Validated { passed, needed } => {
                format!("cluster validated ({passed} of {needed} checks)")
            }
            Event::ValidationFailed {
                failures,
                seconds_left,
            } => format!(
                "cluster does not validate: {}; waiting for a change, {} left",
                failures.join("; "),
                crate::plan::groups::human_duration(*seconds_left as i64)
            ),
            Event::Warning { message } => format!("warning: {message}"),
        }
    }
}

/// Receives events. Implementations must be cheap: executors call this inline.
pub trait Reporter: Send + Sync {
    fn report(&self, event: Event);
}

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
            Event::BatchStarted { .. } | Event::Surging { .. } => {
                self.batch.set_message(event.describe());
                self.batch.tick();
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
            Event::Done => {
                self.batch.finish_and_clear();
                self.overall.finish_with_message("done");
            }
            _ => {}
        }
        let line = event.describe();
        match &event {
            // Frequent, short-lived states go to a bar's message rather than the scrollback.
            Event::EvictionBlocked { .. } | Event::Waiting { .. } | Event::Validated { .. } => {
                self.overall.set_message(line);
            }
            Event::PodGone { .. } | Event::Evicted { .. } => {}
            Event::Warning { .. } | Event::ValidationFailed { .. } => {
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

/// Keeps every event, for tests and summaries.
#[derive(Default)]
pub struct Collect(pub Mutex<Vec<Event>>);

impl Reporter for Collect {
    fn report(&self, event: Event) {
        self.0.lock().unwrap().push(event);
    }
}

impl Collect {
    pub fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }
}
