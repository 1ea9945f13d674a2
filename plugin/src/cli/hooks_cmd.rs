//! `hooks test`, `hooks run` and `hooks inspect`: run or describe one module offline.

use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::{Failure, OutputFormat, output, print_structured};
use crate::hooks::HookRuntime;
use crate::hooks::registry::Registry;
use crate::policy::{HookPoint, OciReference};

#[derive(Debug, Subcommand)]
pub enum HooksCommand {
    /// Plan a snapshot with only this hook active and print what it decided, or check its
    /// decisions against a fixture (--expect).
    Test(Box<super::hooks_test::TestRun>),
    /// Write a new hook project (Rust, Python or JavaScript) that builds and passes its own
    /// tests as written: the hook, its unit tests, a policy, a fixture per point.
    New(Box<super::hooks_new::NewHook>),
    /// Ask one point of a module once, with the call's input written as JSON, and print its
    /// answer as a plan reads it.
    Run(Box<super::hooks_run::RunPoint>),
    /// Print what a module says about itself: name, SDK and contract versions, points.
    Inspect {
        /// The hook component (.wasm).
        module: PathBuf,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Table)]
        output: OutputFormat,
    },
    /// Push a hook component to an OCI registry as a WebAssembly artifact, under a tag, and
    /// print the reference pinned to the pushed digest (credentials: the docker config file).
    Push {
        /// The hook component (.wasm).
        module: PathBuf,
        /// Where: oci://REGISTRY/REPOSITORY:TAG.
        reference: String,
    },
    /// Pull a hook module from an OCI registry into the module cache, by tag or digest, and
    /// print the reference pinned to its digest.
    Pull {
        /// oci://REGISTRY/REPOSITORY:TAG or oci://REGISTRY/REPOSITORY@sha256:DIGEST.
        reference: String,
        /// Also write the module to this file.
        #[arg(long, value_name = "FILE")]
        to: Option<PathBuf>,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum PointArg {
    Select,
    Batch,
    Gate,
    DrainOrder,
}

impl From<PointArg> for HookPoint {
    fn from(p: PointArg) -> HookPoint {
        match p {
            PointArg::Select => HookPoint::Select,
            PointArg::Batch => HookPoint::Batch,
            PointArg::Gate => HookPoint::Gate,
            PointArg::DrainOrder => HookPoint::DrainOrder,
        }
    }
}

pub fn run(cmd: HooksCommand) -> Result<(), Failure> {
    match cmd {
        HooksCommand::Inspect { module, output } => inspect(&module, output),
        HooksCommand::Test(run) => super::hooks_test::run(*run),
        HooksCommand::Run(run) => super::hooks_run::run(*run),
        HooksCommand::New(new) => super::hooks_new::run(*new),
        HooksCommand::Push { module, reference } => push(&module, &reference),
        HooksCommand::Pull { reference, to } => pull(&reference, to.as_deref()),
    }
}

/// A reference given on the command line; a bad one is a usage error.
fn reference_arg(text: &str) -> Result<OciReference, Failure> {
    OciReference::parse(text).map_err(Failure::usage)
}

fn registry() -> Result<Registry, Failure> {
    Registry::new().map_err(|e| Failure::failed(e.to_string()))
}

fn push(module: &Path, reference: &str) -> Result<(), Failure> {
    let reference = reference_arg(reference)?;
    if reference.tag.is_none() || reference.digest.is_some() {
        return Err(Failure::usage(format!(
            "{reference}: a push names a tag and no digest (the registry gives the digest)"
        )));
    }
    // Only a module this plugin can load is pushed.
    let (info, sha256) =
        (runtime()?.describe(module)).map_err(|e| Failure::usage(e.to_string()))?;
    let bytes = std::fs::read(module)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", module.display())))?;
    let digest =
        (registry()?.push(&bytes, &reference)).map_err(|e| Failure::failed(e.to_string()))?;
    println!("{}", reference.pinned(&digest));
    eprintln!(
        "pushed {} ({} bytes, module sha256 {sha256})",
        if info.name.is_empty() {
            "the module"
        } else {
            &info.name
        },
        bytes.len()
    );
    Ok(())
}

fn pull(reference: &str, to: Option<&Path>) -> Result<(), Failure> {
    let reference = reference_arg(reference)?;
    let pulled = (registry()?.pull(&reference)).map_err(|e| Failure::failed(e.to_string()))?;
    if let Some(to) = to {
        std::fs::copy(&pulled.file, to)
            .map_err(|e| Failure::failed(format!("cannot write {}: {e}", to.display())))?;
    }
    println!("{}", reference.pinned(&pulled.digest));
    eprintln!("cached in {}", pulled.file.display());
    Ok(())
}

fn runtime() -> Result<&'static HookRuntime, Failure> {
    HookRuntime::shared()
        .map_err(|e| Failure::failed(format!("cannot start the WebAssembly runtime: {e}")))
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Inspection {
    module: String,
    sha256: String,
    #[serde(flatten)]
    info: crate::hooks::ModuleInfo,
    /// Whether this plugin calls it: false for a module of another contract version.
    callable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

fn inspect(module: &Path, format: OutputFormat) -> Result<(), Failure> {
    let (info, sha256, callable) = runtime()?
        .inspect(module)
        .map_err(|e| Failure::usage(e.to_string()))?;
    let contract = format!("{}@{}", crate::hooks::WIT_PACKAGE, info.wit_version);
    let note = (!callable).then(|| {
        format!(
            "this plugin does not call it: it was built against {contract}, and this plugin speaks {}@{} (and every {}.x); rebuild it with a matching rollout-ext-hooks SDK",
            crate::hooks::WIT_PACKAGE,
            crate::hooks::WIT_VERSION,
            crate::hooks::compatible_series(),
        )
    });
    let inspection = Inspection {
        module: module.display().to_string(),
        sha256,
        info,
        callable,
        note,
    };
    match format {
        OutputFormat::Json | OutputFormat::Yaml => print_structured(&inspection, format),
        _ => {
            let known = |s: &str| {
                if s.is_empty() {
                    "(unknown)".to_string()
                } else {
                    s.to_string()
                }
            };
            let rows = vec![
                vec!["NAME".into(), known(&inspection.info.name)],
                vec!["MODULE".into(), inspection.module.clone()],
                vec!["SHA256".into(), inspection.sha256.clone()],
                vec!["SDK".into(), known(&inspection.info.sdk_version)],
                vec!["CONTRACT".into(), contract],
                vec!["POINTS".into(), HookPoint::list(&inspection.info.points)],
            ];
            print!("{}", output::align(&rows));
            if let Some(note) = &inspection.note {
                println!("\nNote: {note}");
            }
            Ok(())
        }
    }
}
