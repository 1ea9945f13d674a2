//! `hooks test` and `hooks inspect`: run or describe one module offline.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Subcommand;

use super::{Failure, OutputFormat, output, print_structured};
use crate::hooks::{HookRuntime, ObjectSource, SnapshotObjects};
use crate::plan::PlanOptions;
use crate::policy::{
    DEFAULT_HOOK_MEMORY, DEFAULT_HOOK_TIMEOUT, FailurePolicy, HookPoint, HookSpec, Policy,
};
use crate::snapshot::Snapshot;

#[derive(Debug, Subcommand)]
pub enum HooksCommand {
    /// Plan a snapshot with only this hook active and print what it decided.
    Test {
        /// The hook component (.wasm).
        module: PathBuf,
        /// The snapshot to plan (a v1 List of nodes, pods and PodDisruptionBudgets).
        #[arg(long, value_name = "FILE")]
        snapshot: PathBuf,
        /// Only these points (default: every point the module implements).
        #[arg(long, value_enum, value_delimiter = ',')]
        point: Vec<PointArg>,
        /// The hook's config, as JSON.
        #[arg(long, value_name = "JSON", default_value = "{}")]
        config: String,
        /// Evaluate at this RFC 3339 instant instead of now.
        #[arg(long, value_name = "TIME")]
        now: Option<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Wide)]
        output: OutputFormat,
    },
    /// Print what a module says about itself: name, SDK and contract versions, points.
    Inspect {
        /// The hook component (.wasm).
        module: PathBuf,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Table)]
        output: OutputFormat,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum PointArg {
    Select,
    Batch,
    Gate,
}

impl From<PointArg> for HookPoint {
    fn from(p: PointArg) -> HookPoint {
        match p {
            PointArg::Select => HookPoint::Select,
            PointArg::Batch => HookPoint::Batch,
            PointArg::Gate => HookPoint::Gate,
        }
    }
}

pub fn run(cmd: HooksCommand) -> Result<(), Failure> {
    match cmd {
        HooksCommand::Inspect { module, output } => inspect(&module, output),
        HooksCommand::Test {
            module,
            snapshot,
            point,
            config,
            now,
            output,
        } => test(&module, &snapshot, &point, &config, now.as_deref(), output),
    }
}

fn runtime() -> Result<&'static HookRuntime, Failure> {
    HookRuntime::shared()
        .map_err(|e| Failure::failed(format!("cannot start the WebAssembly runtime: {e}")))
}

fn spec(module: &Path, points: Option<Vec<HookPoint>>, config: String) -> HookSpec {
    let name = module
        .file_stem()
        .map(|s| s.to_string_lossy().to_ascii_lowercase().replace('_', "-"))
        .unwrap_or_else(|| "hook".into());
    HookSpec {
        name,
        module: module.to_path_buf(),
        sha256: None,
        points,
        config,
        config_line: 0,
        timeout: DEFAULT_HOOK_TIMEOUT,
        memory: DEFAULT_HOOK_MEMORY,
        failure_policy: FailurePolicy::Fail,
        line: 0,
    }
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Inspection {
    module: String,
    sha256: String,
    #[serde(flatten)]
    info: crate::hooks::ModuleInfo,
}

fn inspect(module: &Path, format: OutputFormat) -> Result<(), Failure> {
    let (info, sha256) = runtime()?
        .describe(module)
        .map_err(|e| Failure::usage(e.to_string()))?;
    let inspection = Inspection {
        module: module.display().to_string(),
        sha256,
        info,
    };
    match format {
        OutputFormat::Json | OutputFormat::Yaml => print_structured(&inspection, format),
        _ => {
            let points: Vec<String> = inspection
                .info
                .points
                .iter()
                .map(ToString::to_string)
                .collect();
            let rows = vec![
                vec!["NAME".into(), inspection.info.name.clone()],
                vec!["MODULE".into(), inspection.module.clone()],
                vec!["SHA256".into(), inspection.sha256.clone()],
                vec!["SDK".into(), inspection.info.sdk_version.clone()],
                vec![
                    "CONTRACT".into(),
                    format!(
                        "{}@{}",
                        crate::hooks::WIT_PACKAGE,
                        inspection.info.wit_version
                    ),
                ],
                vec!["POINTS".into(), points.join(", ")],
            ];
            print!("{}", output::align(&rows));
            Ok(())
        }
    }
}

fn test(
    module: &Path,
    snapshot_path: &Path,
    points: &[PointArg],
    config: &str,
    now: Option<&str>,
    format: OutputFormat,
) -> Result<(), Failure> {
    let config_value: serde_json::Value = serde_json::from_str(config)
        .map_err(|e| Failure::usage(format!("--config is not valid JSON: {e}")))?;
    let now = match now {
        Some(t) => t
            .parse::<jiff::Timestamp>()
            .map_err(|e| Failure::usage(format!("--now {t:?}: {e}")))?
            .as_second(),
        None => jiff::Timestamp::now().as_second(),
    };
    let bytes = std::fs::read(snapshot_path).map_err(|e| {
        Failure::usage(format!(
            "cannot read snapshot {}: {e}",
            snapshot_path.display()
        ))
    })?;
    let snapshot = Snapshot::from_json(&bytes)
        .map_err(|e| Failure::usage(format!("snapshot {}: {e}", snapshot_path.display())))?;

    let runtime = runtime()?;
    let objects: Arc<dyn ObjectSource> = Arc::new(SnapshotObjects::new(bytes));
    // No --point: every point the module implements.
    let points = (!points.is_empty()).then(|| points.iter().map(|p| HookPoint::from(*p)).collect());
    let hook = runtime
        .load(
            &spec(module, points, config_value.to_string()),
            objects,
            Arc::new(vec![]),
        )
        .map_err(|e| Failure::usage(e.to_string()))?;
    let policy = Policy {
        source: "<hooks test>".into(),
        ..Default::default()
    };
    let options = PlanOptions {
        now,
        run_id: "hooks-test".into(),
        dry_run: true,
        staleness: crate::plan::groups::Staleness {
            now,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut hooks: Vec<Box<dyn crate::plan::hook::Hook>> = vec![Box::new(hook)];
    let plan = crate::plan::plan_nodes(&snapshot, &policy, &options, &mut hooks)?;
    output::print_plan(&plan, format)
}
