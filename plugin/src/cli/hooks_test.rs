//! `hooks test`: plans a snapshot with one module as the only hook and prints every decision it
//! took, or checks them against a fixture (`--expect`), the way `opa test` checks a policy. A
//! hook serving `drain-order` (asked only by live runs) is asked about every node the plan
//! replaces, with the snapshot's pods on it.
//!
//! The hook runs with `failurePolicy: Ignore` here, so that a point that fails does not hide the
//! decisions of the others: the failure is shown with the plan and the command exits 1.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::hooks_cmd::PointArg;
use super::{Failure, OutputFormat, output};
use crate::hooks::{HookRuntime, ObjectSource, SnapshotObjects};
use crate::metrics::{Metrics, NoMetrics, Prometheus};
use crate::plan::hook::{
    BatchAnswer, BatchInfo, CallContext, GateAnswer, GroupInfo, HealthSummary, Hook, HookFault,
    Instances, Phase, Progress, SelectAnswer, Timing,
};
use crate::plan::{Plan, PlanOptions, decide};
use crate::policy::{FailurePolicy, HookPoint, IntOrPercent, RollingUpdate};
use crate::snapshot::Snapshot;

mod cluster;
mod fixture;

use super::hooks_entry::EntryArgs;

use fixture::{Case, compare, read_cases};

/// What `hooks test` is asked; a fixture fills what the flags leave out.
#[derive(Debug, Clone, clap::Args)]
pub struct TestRun {
    #[command(flatten)]
    entry: EntryArgs,
    /// The snapshot to plan (a v1 List: nodes, pods, PodDisruptionBudgets, and any kind the
    /// hook lists).
    #[arg(long, value_name = "FILE")]
    snapshot: Option<PathBuf>,
    /// Only these points (default: the policy's, else every point the module implements).
    #[arg(long = "point", value_enum, value_delimiter = ',')]
    points: Vec<PointArg>,
    /// Only this group (repeatable), as `nodes --instance-group`.
    #[arg(long = "group", value_name = "GROUP")]
    groups: Vec<String>,
    /// Evaluate at this RFC 3339 instant instead of now.
    #[arg(long, value_name = "TIME")]
    now: Option<String>,
    /// Nodes whose kubelet is not this version are outdated.
    #[arg(long, value_name = "VERSION")]
    kubelet_version: Option<String>,
    /// The budget of every group: batches of at most N (maxSurge 0, maxUnavailable N).
    #[arg(long, value_name = "N")]
    max_batch: Option<u32>,
    /// Ask the gates as if they had already answered wait N times for each batch.
    #[arg(long, value_name = "N", default_value_t = 0)]
    attempt: u32,
    /// A gate that stops the run within the attempts asked is what this test expects. Without
    /// it such a plan fails the test (exit 1), unless the fixture expects an `abort`.
    #[arg(long)]
    allow_abort: bool,
    /// The gate phases asked (default: every phase, as a plan asks them). after-batch judges
    /// the cluster as the plan simulates it after each batch.
    #[arg(long = "phase", value_enum, value_delimiter = ',')]
    phases: Vec<PhaseArg>,
    /// A fixture (YAML: snapshot or cluster, now, kubeletVersion, maxBatch, attempt, group,
    /// estimates, recorded metrics, and per group the expected order, batches and gates), a file
    /// of several (one per document), or a directory of them: exit 1 with the differences when
    /// a decision differs.
    #[arg(long, value_name = "FILE|DIR")]
    expect: Option<PathBuf>,
    /// With --expect: print each case's plan too (in the -o format), before what it met: the
    /// reasons, sizes and gates' answers a fixture may then expect.
    #[arg(long, requires = "expect")]
    show_plans: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Wide)]
    output: OutputFormat,
}

/// What a `drain-order` hook answered about one node the plan replaces.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct DrainOrderStep {
    group: String,
    node: String,
    decision: String,
}

/// The plan, with the drain orders beside it.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Tested<'a> {
    #[serde(flatten)]
    plan: &'a Plan,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    drain_orders: Vec<DrainOrderStep>,
}

/// A gate phase, as `--phase` and a fixture's `phases` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PhaseArg {
    BeforeGroup,
    BeforeBatch,
    AfterBatch,
}

impl From<PhaseArg> for Phase {
    fn from(p: PhaseArg) -> Phase {
        match p {
            PhaseArg::BeforeGroup => Phase::BeforeGroup,
            PhaseArg::BeforeBatch => Phase::BeforeBatch,
            PhaseArg::AfterBatch => Phase::AfterBatch,
        }
    }
}

/// `hooks test`: one plan, or one per case of `--expect` (a fixture file, each document of it,
/// every fixture of a directory), each case said as it is met or not; the exit code is the
/// worst case's.
pub fn run(run: TestRun) -> Result<(), Failure> {
    let Some(expect) = &run.expect else {
        return run_case(run, None);
    };
    let cases = read_cases(expect)?;
    if let [_] = cases.as_slice() {
        return run_case(run.clone(), cases.into_iter().next());
    }
    let total = cases.len();
    let mut unmet: Vec<(String, u8)> = Vec::new();
    for case in cases {
        let label = case.label.clone();
        if let Err(failure) = run_case(run.clone(), Some(case)) {
            eprintln!("error: {}", failure.message);
            unmet.push((label, failure.code));
        }
    }
    match unmet.iter().map(|(_, code)| *code).max() {
        None => {
            println!("{}: all {total} fixtures met", expect.display());
            Ok(())
        }
        Some(code) => {
            let labels: Vec<&str> = unmet.iter().map(|(l, _)| l.as_str()).collect();
            Err(Failure {
                code,
                message: format!(
                    "{} of {total} fixtures not met: {}",
                    unmet.len(),
                    labels.join(", ")
                ),
            })
        }
    }
}

/// One plan, checked against `case` when there is one.
fn run_case(mut run: TestRun, case: Option<Case>) -> Result<(), Failure> {
    let (label, mut fixture) = match case {
        Some(c) => {
            run.expect = Some(c.file);
            (Some(c.label), Some(c.fixture))
        }
        None => (None, None),
    };
    let mut stated = None;
    let mut inline = None;
    if let (Some(fixture), Some(file)) = (&mut fixture, &run.expect) {
        if let Some(raw) = fixture.estimates.take() {
            let at = |value: &serde_saphyr::Spanned<String>, message: String| {
                let line = value.referenced.line();
                Failure::usage(format!("{}:{line}: {message}", file.display()))
            };
            stated = Some(raw.stated(at)?);
        }
        if run.groups.is_empty() {
            run.groups = fixture.group.names();
        }
        let base = file.parent().unwrap_or(Path::new("."));
        match (&fixture.snapshot, fixture.cluster.take()) {
            (Some(_), Some(_)) => {
                return Err(Failure::usage(format!(
                    "{}: a fixture names a snapshot or declares its cluster, not both",
                    file.display()
                )));
            }
            (_, Some(cluster)) if run.snapshot.is_none() => inline = Some(cluster),
            (Some(snapshot), _) => {
                run.snapshot.get_or_insert_with(|| base.join(snapshot));
            }
            _ => {}
        }
        if run.now.is_none() {
            run.now.clone_from(&fixture.now);
        }
        if run.kubelet_version.is_none() {
            run.kubelet_version.clone_from(&fixture.kubelet_version);
        }
        run.max_batch = run.max_batch.or(fixture.max_batch);
        run.attempt = run.attempt.max(fixture.attempt);
        if run.phases.is_empty() {
            run.phases.clone_from(&fixture.phases);
        }
    }
    let phases: Vec<Phase> = if run.phases.is_empty() {
        vec![Phase::BeforeGroup, Phase::BeforeBatch, Phase::AfterBatch]
    } else {
        run.phases.iter().map(|p| Phase::from(*p)).collect()
    };
    let (bytes, shown) = match (&run.snapshot, inline) {
        (Some(path), _) => {
            let bytes = std::fs::read(path).map_err(|e| {
                Failure::usage(format!("cannot read snapshot {}: {e}", path.display()))
            })?;
            (bytes, format!("snapshot {}", path.display()))
        }
        (None, Some(cluster)) => {
            let shown = format!("{}: cluster", label.as_deref().unwrap_or_default());
            (cluster.to_list().to_string().into_bytes(), shown)
        }
        (None, None) => {
            return Err(Failure::usage(
                "hooks test needs --snapshot FILE (or --expect FILE naming one, or declaring its cluster)",
            ));
        }
    };
    let now = match &run.now {
        Some(t) => t
            .parse::<jiff::Timestamp>()
            .map_err(|e| Failure::usage(format!("--now {t:?}: {e}")))?
            .as_second(),
        None => jiff::Timestamp::now().as_second(),
    };
    let snapshot =
        Snapshot::from_json(&bytes).map_err(|e| Failure::usage(format!("{shown}: {e}")))?;

    let runtime = HookRuntime::shared()
        .map_err(|e| Failure::failed(format!("cannot start the WebAssembly runtime: {e}")))?;
    let points: Vec<HookPoint> = run.points.iter().map(|p| HookPoint::from(*p)).collect();
    let (mut policy, mut spec) = run.entry.policy_and_spec(runtime, &points)?;
    let recorded = fixture.as_ref().and_then(|f| f.metrics.clone());
    let metrics: Arc<dyn Metrics> = match recorded {
        Some(recorded) => {
            if run.entry.policy.is_none() {
                spec.metrics = recorded.sources();
            }
            Arc::new(recorded.at(now))
        }
        // Without recorded answers a granted source is asked for real; a hook granted none
        // needs no source read (their token and CA files may exist only in the cluster).
        None if spec.metrics.is_empty() => Arc::new(NoMetrics),
        None => Arc::new(Prometheus::new(&policy)?),
    };
    let objects: Arc<dyn ObjectSource> = Arc::new(SnapshotObjects::new(bytes));
    let allowed = Arc::new(policy.context_resources.clone());
    let hook = runtime
        .load(&spec, objects, allowed)
        .map_err(|e| match &run.entry.policy {
            Some(_) => Failure::from(e.at(&policy.source, &spec)),
            None => Failure::usage(e.to_string()),
        })?
        .with_metrics(metrics);
    policy.hooks = vec![spec.clone()];
    let mut rolling_update = policy.rolling_update;
    if let Some(n) = run.max_batch {
        if n == 0 {
            return Err(Failure::usage("--max-batch must be at least 1"));
        }
        rolling_update = RollingUpdate {
            max_surge: Some(IntOrPercent::Int(0)),
            max_unavailable: Some(IntOrPercent::Int(n)),
        };
        policy.groups.clear();
    }
    let options = PlanOptions {
        now,
        run_id: "hooks-test".into(),
        dry_run: true,
        rolling_update,
        staleness: crate::plan::groups::Staleness {
            now,
            kubelet_version: run.kubelet_version.clone(),
            ..Default::default()
        },
        ask_after_batch: phases.contains(&Phase::AfterBatch),
        instance_groups: run.groups.clone(),
        durations: crate::plan::estimate::Durations {
            stated: stated.unwrap_or(policy.estimates),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut hooks: Vec<Box<dyn Hook>> = vec![Box::new(AsTested {
        inner: Box::new(hook),
        attempt: run.attempt,
        phases,
    })];
    let mut plan = crate::plan::plan_nodes(&snapshot, &policy, &options, &mut hooks)?;
    let mut warnings = Vec::new();
    let drain_orders = drain_orders(&mut hooks, &plan, &snapshot, now, &mut warnings);
    plan.warnings.append(&mut warnings);
    let failed: Vec<&String> = plan
        .warnings
        .iter()
        .filter(|w| w.starts_with(&format!("hook {} failed", spec.name)))
        .collect();

    let mismatches = match &fixture {
        Some(fixture) => {
            let mismatches = compare(&plan, &drain_orders, &fixture.groups);
            if run.show_plans {
                if let Some(label) = &label {
                    println!("--- {label}");
                }
                print_tested(&plan, drain_orders, run.output)?;
            }
            mismatches
        }
        None => {
            print_tested(&plan, drain_orders, run.output)?;
            Vec::new()
        }
    };
    let mut problems = Vec::new();
    if !failed.is_empty() {
        let list: Vec<&str> = failed.iter().map(|w| w.as_str()).collect();
        problems.push(format!(
            "{} decision(s) of hook {} failed (the built-in behaviour stood in):\n  {}",
            failed.len(),
            spec.name,
            list.join("\n  ")
        ));
    }
    if let (Some(label), false) = (&label, mismatches.is_empty()) {
        problems.push(format!(
            "{label}: {} expectation(s) not met:\n  {}",
            mismatches.len(),
            mismatches.join("\n  ")
        ));
    }
    if let Some(stopped) = &plan.stopped
        && !run.allow_abort
        && !fixture.as_ref().is_some_and(|f| f.expects_abort())
    {
        problems.push(format!(
            "the run would stop at {stopped} (gates asked as after {} wait(s) per batch); pass --allow-abort when that is what this test expects, or expect `abort` in the fixture's groupGate, gates or afterGates",
            run.attempt
        ));
    }
    if !problems.is_empty() {
        return Err(Failure::failed(problems.join("\n")));
    }
    if let Some(label) = &label {
        println!(
            "{label}: every expectation met ({} group(s))",
            fixture.map_or(0, |f| f.groups.len())
        );
    }
    Ok(())
}

/// Asks a hook serving `drain-order` about each node the plan replaces, in order, with the
/// snapshot's pods a drain would evict from it. A failure is a warning, as in a plan.
fn drain_orders(
    hooks: &mut [Box<dyn Hook>],
    plan: &Plan,
    snapshot: &Snapshot,
    now: i64,
    warnings: &mut Vec<String>,
) -> Vec<DrainOrderStep> {
    if !hooks
        .iter()
        .any(|h| h.points().contains(&HookPoint::DrainOrder))
    {
        return Vec::new();
    }
    let drain = crate::plan::drain::DrainOptions::default();
    let index = crate::plan::health::Index::new(snapshot);
    let mut steps = Vec::new();
    for g in &plan.groups {
        for batch in g.batches.iter().filter(|b| !b.surge) {
            // Told the batch's estimate as the plan made it.
            let ctx = CallContext {
                now,
                run_id: "hooks-test".into(),
                dry_run: true,
                timing: Timing {
                    batch: batch.estimate.clone(),
                    remaining: None,
                },
                others: g.others_disrupting.clone(),
            };
            for node in &batch.instances {
                let pods: Vec<crate::snapshot::Pod> = index
                    .pods_on(node)
                    .iter()
                    .filter(|p| crate::plan::drain::classify(p, &drain).is_evicted())
                    .map(|p| (*p).clone())
                    .collect();
                // The hook runs with failurePolicy Ignore: a fault is a warning, never an error.
                let Ok(ordered) = decide::drain_order(hooks, &ctx, node, &pods, warnings) else {
                    continue;
                };
                steps.push(DrainOrderStep {
                    group: g.group.name.clone(),
                    node: node.clone(),
                    decision: ordered.describe(),
                });
            }
        }
    }
    steps
}

fn print_tested(
    plan: &Plan,
    drain_orders: Vec<DrainOrderStep>,
    format: OutputFormat,
) -> Result<(), Failure> {
    if matches!(format, OutputFormat::Json | OutputFormat::Yaml) {
        let tested = Tested { plan, drain_orders };
        return super::print_structured(&tested, format);
    }
    output::print_plan(plan, format)?;
    if !drain_orders.is_empty() {
        println!();
        for step in &drain_orders {
            println!(
                "drain order of node {} ({}): {}",
                step.node, step.group, step.decision
            );
        }
    }
    Ok(())
}

/// The hook as the test asks it: its gate only at the phases asked, about a batch it has
/// already held `attempt` times.
struct AsTested {
    inner: Box<dyn Hook>,
    attempt: u32,
    phases: Vec<Phase>,
}

impl Hook for AsTested {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn points(&self) -> &[HookPoint] {
        self.inner.points()
    }
    fn left_out(&self) -> &[HookPoint] {
        self.inner.left_out()
    }
    fn failure_policy(&self) -> FailurePolicy {
        self.inner.failure_policy()
    }
    fn select(
        &mut self,
        ctx: &CallContext,
        group: &GroupInfo,
        candidates: &Instances,
    ) -> Result<SelectAnswer, HookFault> {
        self.inner.select(ctx, group, candidates)
    }
    fn next_batch(
        &mut self,
        ctx: &CallContext,
        progress: &Progress,
    ) -> Result<BatchAnswer, HookFault> {
        self.inner.next_batch(ctx, progress)
    }
    fn gate(
        &mut self,
        ctx: &CallContext,
        phase: Phase,
        batch: &BatchInfo,
        summary: &HealthSummary,
    ) -> Result<GateAnswer, HookFault> {
        if !self.phases.contains(&phase) {
            return Ok(GateAnswer::Defer);
        }
        let batch = BatchInfo {
            attempt: batch.attempt + self.attempt,
            ..batch.clone()
        };
        self.inner.gate(ctx, phase, &batch, summary)
    }
    fn drain_order(
        &mut self,
        ctx: &CallContext,
        node: &str,
        pods: &[crate::snapshot::Pod],
    ) -> Result<crate::plan::hook::DrainOrderAnswer, HookFault> {
        self.inner.drain_order(ctx, node, pods)
    }
}
