//! A plan drawn on a time axis, for the reviewer who approves a change and the change board that
//! wants an attachment: `-o svg` is the timeline alone, `-o html` a page with the timeline, a
//! table of every batch and what the plan rests on. A [`Timeline`] is made from a plan and
//! drawn without I/O.

mod fleet;
mod html;
mod nodes;
mod svg;
#[cfg(test)]
mod tests;

use std::io::Write as _;
use std::path::Path;

pub use fleet::of_fleet_plan;
pub use nodes::of_node_plan;

use super::Failure;
use crate::plan::estimate::Estimate;

/// What a timeline shows: rows of bars on one time axis from the plan's instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// What is planned: "Node rotation", "Rolling update of deployment/web".
    pub title: String,
    /// The instant the plan is made for (`--now`, or when it was made), Unix seconds.
    pub now: i64,
    /// When the run likely ends, and cautiously (its 90th percentile).
    pub end: i64,
    pub end_p90: i64,
    /// What the estimate rests on: history of N runs, the policy, defaults.
    pub basis: String,
    pub rows: Vec<Row>,
    /// What the page's header says about the plan: cluster, time, policy, hook modules.
    pub facts: Vec<Fact>,
    pub warnings: Vec<String>,
    /// Where and why a gate stops the run, when one does.
    pub stopped: Option<String>,
}

/// A named value: a header line, or a line of a batch's details.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    pub name: String,
    pub value: String,
}

impl Fact {
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Fact {
        Fact {
            name: name.into(),
            value: value.into(),
        }
    }
}

/// One row: a group of a rotation, a step of a rolling update, a cluster of a fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub label: String,
    /// A wait before its first bar (a gate before the group), with why.
    pub lead: Option<Stretch>,
    pub bars: Vec<Bar>,
    /// Why the run stops after this row's last bar, when it does.
    pub stops: Option<String>,
}

/// A stretch of the axis and why the run spends it waiting: a pause, a window, a gate, a soak.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stretch {
    pub from: i64,
    pub to: i64,
    pub reason: String,
}

/// One batch (or step) from its likely start, waits before it included, to its likely end.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// "batch 3", "canary", "surge".
    pub label: String,
    pub from: i64,
    /// Its likely end (each stage at its median), and a cautious one (at its 90th percentile).
    pub to: i64,
    pub to_p90: i64,
    /// What it waits for before its work, in order (a pause, gates' waits).
    pub waits: Vec<Stretch>,
    /// The soak that ends it.
    pub soak: Option<Stretch>,
    /// What its drain looks like to the forecast: `ok`, `waits`, `holds`, `pending`, `blocks`.
    pub drain: &'static str,
    pub canary: bool,
    /// Its nodes, who sized and ordered it, the gates' answers, the forecast's budgets and pods.
    pub details: Vec<Fact>,
}

impl Bar {
    /// A bar for `estimate` (which ends at its `ends_at`): its waits laid out from its start in
    /// the order given, its soak at its end. None when the estimate has no end.
    pub fn timed(estimate: &Estimate, waits: Vec<(u64, String)>, soak: Option<u32>) -> Option<Bar> {
        let to = parse_instant(estimate.ends_at.as_deref()?)?;
        let from = to - secs(estimate.seconds);
        let mut at = from;
        let waits = (waits.into_iter())
            .filter(|(seconds, _)| *seconds > 0)
            .map(|(seconds, reason)| {
                let stretch = Stretch {
                    from: at,
                    to: (at + secs(seconds)).min(to),
                    reason,
                };
                at = stretch.to;
                stretch
            })
            .collect();
        let soak = soak.filter(|s| *s > 0).map(|s| Stretch {
            from: (to - i64::from(s)).max(at),
            to,
            reason: format!("soak {}", crate::duration::human_duration(i64::from(s))),
        });
        Some(Bar {
            label: String::new(),
            from,
            to,
            to_p90: from + secs(estimate.p90_seconds.max(estimate.seconds)),
            waits,
            soak,
            drain: "ok",
            canary: false,
            details: Vec::new(),
        })
    }
}

fn secs(seconds: u64) -> i64 {
    i64::try_from(seconds).unwrap_or(i64::MAX / 4)
}

/// An RFC 3339 instant as Unix seconds.
pub fn parse_instant(text: &str) -> Option<i64> {
    text.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

/// An instant as the page shows it: `Fri 27 Nov 12:00 UTC`.
pub fn show_instant(at: i64) -> String {
    jiff::Timestamp::from_second(at)
        .map(|t| t.strftime("%a %d %b %H:%M UTC").to_string())
        .unwrap_or_else(|_| at.to_string())
}

/// The two pictures of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Picture {
    /// The timeline alone, to paste into a ticket or a pull request.
    Svg,
    /// A self-contained page: header, timeline, a table of every batch.
    Html,
}

impl Timeline {
    pub fn draw(&self, picture: Picture) -> String {
        match picture {
            Picture::Svg => svg::draw(self),
            Picture::Html => html::page(self),
        }
    }
}

/// Writes `text` to `file`, or to stdout without one.
pub fn write_out(text: &str, file: Option<&Path>) -> Result<(), Failure> {
    match file {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| Failure::failed(format!("cannot write {}: {e}", path.display()))),
        None => {
            let mut out = std::io::stdout().lock();
            (out.write_all(text.as_bytes()))
                .and_then(|()| out.flush())
                .map_err(|e| Failure::failed(format!("cannot write the plan: {e}")))
        }
    }
}

/// `text` safe in XML and HTML text and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// What the page's header says a plan rests on: the cluster (or the snapshot), the policy, and
/// each hook module with the digest of what runs.
pub fn plan_facts(
    kube: &super::KubeFlags,
    snapshot: Option<&Path>,
    policy: &crate::policy::Policy,
) -> Vec<Fact> {
    let cluster = match snapshot {
        Some(path) => format!("snapshot {}", path.display()),
        None => kube.describe_cluster(),
    };
    let mut facts = vec![
        Fact::new("Cluster", cluster),
        Fact::new("Policy", policy.source.clone()),
    ];
    for hook in &policy.hooks {
        let module = match &hook.module {
            crate::policy::ModuleSource::File(path) => {
                let digest = std::fs::read(path).map(|bytes| {
                    use sha2::Digest as _;
                    hex::encode(sha2::Sha256::digest(bytes))
                });
                match digest {
                    Ok(d) => format!("{} (sha256:{d})", path.display()),
                    Err(e) => format!("{} (unreadable: {e})", path.display()),
                }
            }
            crate::policy::ModuleSource::Registry { reference, pulled } => match pulled {
                Some(p) => format!("{reference} ({})", p.digest),
                None => reference.to_string(),
            },
        };
        facts.push(Fact::new(format!("Hook {}", hook.name), module));
    }
    facts
}
