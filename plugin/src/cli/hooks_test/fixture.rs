//! `hooks test --expect`: the fixture a policy repository keeps beside its policy, and the
//! differences between what it expects and what the plan decided.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::cluster::InlineCluster;
use super::{DrainOrderStep, PhaseArg};
use crate::cli::Failure;
use crate::metrics::Recorded;
use crate::plan::Plan;
use crate::policy::RawEstimates;

/// A fixture: the input of one test and the decisions expected of the hook.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Fixture {
    /// What the case is about, said with its result when a file holds several.
    pub(super) name: Option<String>,
    /// The snapshot, relative to the fixture.
    pub(super) snapshot: Option<PathBuf>,
    /// Or the cluster declared here: nodes, pods, Deployments, PodDisruptionBudgets.
    pub(super) cluster: Option<InlineCluster>,
    pub(super) now: Option<String>,
    /// Nodes whose kubelet is not this version are outdated.
    pub(super) kubelet_version: Option<String>,
    pub(super) max_batch: Option<u32>,
    #[serde(default)]
    pub(super) attempt: u32,
    /// The gate phases asked, as `--phase` takes them.
    #[serde(default)]
    pub(super) phases: Vec<PhaseArg>,
    /// Only these groups, as `--group`: one name or a list.
    #[serde(default)]
    pub(super) group: Groups,
    /// What stages take, as a policy's `spec.estimates` states them (in place of the
    /// policy's): what hooks are told by `host.estimates()` rests on them.
    pub(super) estimates: Option<RawEstimates>,
    /// Answers to the hook's metrics queries, by source and query: no Prometheus is asked.
    /// Without a policy the hook is granted every source recorded here.
    pub(super) metrics: Option<Recorded>,
    /// Expectations per group; only the fields given are compared.
    pub(super) groups: BTreeMap<String, Expected>,
}

/// A fixture's `group`: one name or a list.
#[derive(Debug, Default, Deserialize)]
#[serde(untagged)]
pub(super) enum Groups {
    #[default]
    All,
    One(String),
    Some(Vec<String>),
}

impl Groups {
    pub(super) fn names(&self) -> Vec<String> {
        match self {
            Groups::All => Vec::new(),
            Groups::One(name) => vec![name.clone()],
            Groups::Some(names) => names.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Expected {
    /// The instances updated, in update order.
    pub(super) order: Option<Vec<String>>,
    /// For the instances named, the reason their choice gives (the selection's, or the
    /// built-in rules').
    pub(super) reasons: Option<BTreeMap<String, String>>,
    /// The replacement batches (surges left out), each its instances.
    pub(super) batches: Option<Vec<Vec<String>>>,
    /// Per replacement batch, why it has its size: the batching hook's reason, or the
    /// budget's.
    pub(super) size_reasons: Option<Vec<String>>,
    /// The gate's verdict before the group (`proceed`, `wait`, `abort`), or `-` for none.
    pub(super) group_gate: Option<String>,
    /// Per replacement batch, the gate's verdict (`proceed`, `wait`, `abort`) or `-` for none.
    pub(super) gates: Option<Vec<String>>,
    /// The same for the after-batch gate (asked with `phases: [after-batch]`).
    pub(super) after_gates: Option<Vec<String>>,
    /// Per replacement batch, the pause before it (`7h30m`, as the plan shows it) or `-`.
    pub(super) pauses: Option<Vec<String>>,
    /// For the nodes named, the drain order in words: `turns ns/a, ns/b | ns/c`, or
    /// `policy order`.
    pub(super) drain_order: Option<BTreeMap<String, String>>,
}

impl Expected {
    /// Whether it compares nothing: a case that would be met whatever the hook answered.
    fn is_empty(&self) -> bool {
        let Expected {
            order,
            reasons,
            batches,
            size_reasons,
            group_gate,
            gates,
            after_gates,
            pauses,
            drain_order,
        } = self;
        order.is_none()
            && reasons.is_none()
            && batches.is_none()
            && size_reasons.is_none()
            && group_gate.is_none()
            && gates.is_none()
            && after_gates.is_none()
            && pauses.is_none()
            && drain_order.is_none()
    }
}

impl Fixture {
    /// What makes it check nothing, if anything: no group, or a group with no expectation.
    fn expects_nothing(&self) -> Option<String> {
        if self.groups.is_empty() {
            return Some("its groups expect nothing".into());
        }
        (self.groups.iter().find(|(_, expected)| expected.is_empty())).map(|(name, _)| {
            format!(
                "group {name} expects nothing: give it order, reasons, batches, sizeReasons, groupGate, gates, afterGates, pauses or drainOrder"
            )
        })
    }

    /// Whether a gate is expected to abort somewhere: then a plan that stops is what it tests.
    pub(super) fn expects_abort(&self) -> bool {
        (self.groups.values())
            .flat_map(|g| {
                let before_group = g.group_gate.iter();
                before_group.chain(g.gates.iter().chain(&g.after_gates).flatten())
            })
            .any(|verdict| verdict == "abort")
    }
}

/// One fixture to check: its file, how it is named in what is said, and what it expects.
pub(super) struct Case {
    pub(super) file: PathBuf,
    /// The file, and the case's place in it when the file holds several (`f.yaml#2 (name)`).
    pub(super) label: String,
    pub(super) fixture: Fixture,
}

/// The cases of `--expect`: each YAML document of a file, or of every fixture file of a
/// directory (its `.yaml` files in name order, but those of a Kubernetes-style object with a
/// top-level `kind`, as a policy file kept beside them).
pub(super) fn read_cases(path: &Path) -> Result<Vec<Case>, Failure> {
    if !path.is_dir() {
        return read_file(path);
    }
    let entries = std::fs::read_dir(path)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    let mut files: Vec<PathBuf> = (entries.flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| Failure::usage(format!("cannot read {}: {e}", file.display())))?;
        if !text.lines().any(|l| l.starts_with("kind:")) {
            cases.extend(read_file(&file)?);
        }
    }
    if cases.is_empty() {
        return Err(Failure::usage(format!(
            "{}: no fixture in it (its .yaml files without a top-level kind)",
            path.display()
        )));
    }
    Ok(cases)
}

fn read_file(file: &Path) -> Result<Vec<Case>, Failure> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", file.display())))?;
    let fixtures: Vec<Fixture> =
        serde_saphyr::from_multiple(&text).map_err(|e| crate::cli::bad_yaml(file, e))?;
    let several = fixtures.len() > 1;
    let cases = fixtures.into_iter().enumerate().map(|(i, fixture)| {
        let label = match (several, &fixture.name) {
            (false, _) => file.display().to_string(),
            (true, Some(name)) => format!("{}#{} ({name})", file.display(), i + 1),
            (true, None) => format!("{}#{}", file.display(), i + 1),
        };
        // A case that checks nothing passes whatever the hook does: refused, not met.
        if let Some(why) = fixture.expects_nothing() {
            return Err(Failure::usage(format!("{label}: {why}")));
        }
        Ok(Case {
            file: file.to_path_buf(),
            label,
            fixture,
        })
    });
    cases.collect()
}

/// Each expectation the plan does not meet, as `group G: FIELD: expected X, got Y`.
pub(super) fn compare(
    plan: &Plan,
    drain_orders: &[DrainOrderStep],
    groups: &BTreeMap<String, Expected>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, expected) in groups {
        let Some(g) = plan.groups.iter().find(|g| &g.group.name == name) else {
            let why = match &plan.stopped {
                Some(stopped) => format!("the plan stopped at {stopped}"),
                None => "the snapshot has no such group (or --group left it out)".into(),
            };
            out.push(format!("group {name}: not in the plan: {why}"));
            continue;
        };
        let replaced: Vec<&crate::plan::BatchPlan> =
            g.batches.iter().filter(|b| !b.surge).collect();
        let order: Vec<String> = g
            .instances
            .iter()
            .filter(|i| i.update)
            .map(|i| i.name.clone())
            .collect();
        let batches: Vec<Vec<String>> = replaced.iter().map(|b| b.instances.clone()).collect();
        let verdicts = |gate: fn(&crate::plan::BatchPlan) -> Option<&crate::plan::GateStep>| {
            replaced
                .iter()
                .map(|b| gate(b).map_or("-".into(), |s| s.verdict.to_string()))
                .collect::<Vec<String>>()
        };
        let pauses: Vec<String> = (replaced.iter())
            .map(|b| match &b.pause {
                Some(p) => crate::duration::human_duration(p.seconds as i64),
                None => "-".into(),
            })
            .collect();
        let gates = verdicts(|b| b.gate.as_ref());
        let after_gates = verdicts(|b| b.after_gate.as_ref());
        // Only the instances the fixture names are compared.
        let reasons: BTreeMap<String, String> = (expected.reasons.iter())
            .flat_map(|named| named.keys())
            .map(|instance| {
                let planned = g.instances.iter().find(|i| &i.name == instance);
                let reason = planned.map_or("not in the group", |i| {
                    if i.update {
                        i.reason.as_str()
                    } else {
                        "not chosen"
                    }
                });
                (instance.clone(), reason.to_string())
            })
            .collect();
        let group_gate = (g.gate.as_ref()).map_or("-".into(), |s| s.verdict.to_string());
        out.extend(mismatch(name, "order", &expected.order, &order));
        out.extend(mismatch(name, "reasons", &expected.reasons, &reasons));
        out.extend(mismatch(name, "batches", &expected.batches, &batches));
        let size_reasons: Vec<String> = replaced.iter().map(|b| b.size_reason.clone()).collect();
        out.extend(mismatch(
            name,
            "sizeReasons",
            &expected.size_reasons,
            &size_reasons,
        ));
        out.extend(mismatch(
            name,
            "groupGate",
            &expected.group_gate,
            &group_gate,
        ));
        out.extend(mismatch(name, "gates", &expected.gates, &gates));
        out.extend(mismatch(name, "pauses", &expected.pauses, &pauses));
        out.extend(mismatch(
            name,
            "afterGates",
            &expected.after_gates,
            &after_gates,
        ));
        // Only the nodes the fixture names are compared.
        let orders: BTreeMap<String, String> = expected
            .drain_order
            .iter()
            .flat_map(|nodes| nodes.keys())
            .map(|node| {
                let asked = drain_orders
                    .iter()
                    .find(|s| &s.group == name && &s.node == node);
                let decision = asked.map_or("not asked", |s| s.decision.as_str());
                (node.clone(), decision.to_string())
            })
            .collect();
        out.extend(mismatch(name, "drainOrder", &expected.drain_order, &orders));
    }
    out
}

/// `group G: FIELD: expected X, got Y` when an expectation is given and not met.
fn mismatch<T: PartialEq + serde::Serialize>(
    group: &str,
    field: &str,
    want: &Option<T>,
    got: &T,
) -> Option<String> {
    let want = want.as_ref().filter(|w| *w != got)?;
    Some(format!(
        "group {group}: {field}: expected {}, got {}",
        serde_json::to_string(want).unwrap_or_default(),
        serde_json::to_string(got).unwrap_or_default()
    ))
}
