//! `fleet plan|run|status|pause|resume|abort -f FLEET`: clusters rotated in stages. Each
//! cluster's rotation is this binary's own `nodes` (a plan, or a run with `--yes`) against its
//! kubeconfig context; the fleet adds the stage order, the soak and the `before-stage` gates.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Parser, Subcommand};

mod output;
mod status;
mod watch;

use output::{Printer, print_plan};
use status::{Act, control, status};

use super::rotate_cmd::identity;
use super::{Cli, Failure, KubeFlags, OutputFormat, PlanFormat, tokio_runtime};
use crate::cluster::Cluster;
use crate::fleet::{ClusterCommand, FleetEnd, FleetRun};
use crate::plan::fleet::{ClusterPlan, FleetProgress};
use crate::plan::hook::Hook;
use crate::policy::Policy;
use crate::policy::fleet::{Fleet, FleetCluster};

#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Show the fleet's plan: the stage order, every cluster's plan (its `nodes` plan at the
    /// time it would start), the stage gates' verdicts and soaks, and the fleet's estimate.
    Plan(FleetArgs),
    /// Rotate the fleet: stage after stage, each stage's clusters up to its maxParallel at once,
    /// its soak after it, the fleet policy's gates before each stage. Stops at a cluster that
    /// fails or aborts; running the same command again resumes.
    Run(FleetArgs),
    /// Show where each cluster of the fleet stands.
    Status(FleetArgs),
    /// Pause every cluster's rotation at its next safe point (a rotation not started yet waits
    /// when it starts).
    Pause(FleetControlArgs),
    /// Withdraw the pause of every cluster.
    Resume(FleetControlArgs),
    /// Stop the fleet: running rotations stop after their current step, and the fleet starts
    /// nothing more. Running `fleet run` again resumes.
    Abort(FleetControlArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct FleetArgs {
    /// The fleet file.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    /// Output format: for `fleet plan`, html and svg draw its clusters on a timeline (a page for
    /// change review, or the picture alone).
    #[arg(short = 'o', long, value_enum, default_value_t = PlanFormat::Table)]
    pub output: PlanFormat,
    /// `fleet plan`: write its picture (-o html or -o svg) to this file instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub output_file: Option<PathBuf>,
    /// Plan as of this RFC 3339 instant instead of now.
    #[arg(long, value_name = "TIME", value_parser = super::nodes::parse_instant)]
    pub now: Option<i64>,
    /// `fleet status`: follow every cluster live (by watches): on a terminal, a full-screen
    /// view with keys to pause, resume and abort the fleet; otherwise a line per change, until
    /// the fleet ends.
    #[arg(short = 'w', long)]
    pub watch: bool,
}

impl FleetArgs {
    /// Refuses `--watch` where `command` follows nothing.
    fn refuse_watch(&self, command: &str) -> Result<(), Failure> {
        match self.watch {
            true => Err(Failure::usage(format!(
                "--watch follows a fleet's rotations: it is for fleet status, not {command}"
            ))),
            false => Ok(()),
        }
    }

    /// Refuses a picture, or a file for one, where `command` prints no plan.
    fn refuse_picture(&self, command: &str) -> Result<(), Failure> {
        self.output.refuse_picture(command)?;
        match self.output_file {
            Some(_) => Err(Failure::usage(format!(
                "--output-file writes a picture of the plan: {command} prints none"
            ))),
            None => Ok(()),
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct FleetControlArgs {
    /// The fleet file.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    /// Why, for whoever reads `fleet status` or the runs' output.
    #[arg(long, default_value = "")]
    pub reason: String,
}

/// Flags the fleet sets itself for each cluster's rotation.
const FLEET_OWN_FLAGS: &[&str] = &[
    "--yes",
    "--context",
    "--kubeconfig",
    "--policy",
    "-o",
    "--output",
    "--now",
    "--from-snapshot",
    "--dry-run",
    "--interactive",
];

pub fn run(kube: &KubeFlags, verbose: u8, command: FleetCommand) -> Result<(), Failure> {
    if kube.context.is_some() || kube.cluster.is_some() {
        return Err(Failure::usage(
            "fleet: the clusters are the fleet file's contexts; --context and --cluster do not apply",
        ));
    }
    match command {
        FleetCommand::Plan(args) => {
            args.refuse_watch("fleet plan")?;
            plan(kube, verbose, &args)
        }
        FleetCommand::Run(args) => {
            args.refuse_watch("fleet run")?;
            args.refuse_picture("fleet run")?;
            run_fleet(kube, verbose, &args)
        }
        FleetCommand::Status(args) => {
            args.refuse_picture("fleet status")?;
            match (args.watch, args.output.text()) {
                (false, _) => status(kube, &args),
                (true, OutputFormat::Table) => watch::watch(kube, &args),
                (true, _) => Err(Failure::usage(
                    "fleet status --watch shows a live view (or lines when not on a terminal); -o is for one reading",
                )),
            }
        }
        FleetCommand::Pause(args) => control(kube, &args, Act::Pause),
        FleetCommand::Resume(args) => control(kube, &args, Act::Resume),
        FleetCommand::Abort(args) => control(kube, &args, Act::Abort),
    }
}

/// Reads the fleet file and checks each cluster's flags as `nodes` reads them.
fn load(path: &Path) -> Result<Fleet, Failure> {
    let fleet = Fleet::load(path)?;
    for c in fleet.clusters() {
        let bad = |message: String| {
            Failure::usage(format!(
                "{}:{}: cluster {:?}: {message}",
                fleet.source, c.line, c.context
            ))
        };
        if let Some(own) = (c.args.iter()).find(|a| {
            let flag = a.split('=').next().unwrap_or(a);
            FLEET_OWN_FLAGS.contains(&flag)
        }) {
            return Err(bad(format!(
                "args: {own} is set by the fleet itself (flags that apply to every cluster's \
                 rotation go in args)"
            )));
        }
        // As the run reads them (with --yes, which --in-cluster needs).
        let line = ["kubectl rollout-ext", "nodes", "--yes"]
            .map(String::from)
            .into_iter();
        if let Err(e) = Cli::try_parse_from(line.chain(c.args.iter().cloned())) {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            return Err(bad(format!(
                "args: {}",
                first.trim_start_matches("error: ")
            )));
        }
        if let Some(policy) = &c.policy
            && let Err(e) = Policy::load(policy)
        {
            return Err(bad(e.to_string()));
        }
    }
    Ok(fleet)
}

/// kubectl's flags for one cluster of the fleet.
fn kube_for(kube: &KubeFlags, context: &str) -> KubeFlags {
    KubeFlags {
        context: Some(context.to_string()),
        ..kube.clone()
    }
}

/// The global flags of a command against the cluster of `context`.
fn global_args(kube: &KubeFlags, verbose: u8, context: &str) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(path) = &kube.kubeconfig {
        args.extend(["--kubeconfig".to_string(), path.display().to_string()]);
    }
    for (flag, value) in [
        ("--request-timeout", &kube.request_timeout),
        ("--retry-timeout", &kube.retry_timeout),
        ("--user", &kube.user),
        ("--as", &kube.as_user),
    ] {
        if let Some(value) = value {
            args.extend([flag.to_string(), value.clone()]);
        }
    }
    for group in &kube.as_group {
        args.extend(["--as-group".to_string(), group.clone()]);
    }
    if verbose > 0 {
        args.push(format!("-{}", "v".repeat(verbose as usize)));
    }
    args.extend(["--context".to_string(), context.to_string()]);
    args
}

/// The command line of a cluster's `nodes`: the global flags, its context, its policy and args.
fn nodes_args(kube: &KubeFlags, verbose: u8, cluster: &FleetCluster) -> Vec<String> {
    let mut args = global_args(kube, verbose, &cluster.context);
    args.push("nodes".into());
    if let Some(policy) = &cluster.policy {
        args.extend(["--policy".to_string(), policy.display().to_string()]);
    }
    args.extend(cluster.args.iter().cloned());
    args
}

fn program() -> Result<PathBuf, Failure> {
    std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find this program to run each cluster: {e}")))
}

/// The fleet policy's hooks (none without a policy): they answer the stage gates.
fn stage_hooks(fleet: &Fleet) -> Result<Vec<Box<dyn Hook>>, Failure> {
    let Some(path) = &fleet.policy else {
        return Ok(Vec::new());
    };
    let mut policy = Policy::load(path)?;
    super::pull_modules(&mut policy)?;
    let runtime = crate::hooks::HookRuntime::shared()
        .map_err(|e| Failure::failed(format!("cannot start the hook runtime: {e}")))?;
    let objects = Arc::new(crate::hooks::NoObjects);
    Ok(crate::hooks::load_all(runtime, &policy, objects)?)
}

/// A failure about the cluster of `context`, naming it.
fn in_cluster<E: Into<Failure>>(context: &str) -> impl Fn(E) -> Failure + Copy + '_ {
    move |e| {
        let f = e.into();
        Failure {
            message: format!("cluster {context}: {}", f.message),
            ..f
        }
    }
}

/// A connection to every cluster of the fleet: one that cannot be reached stops the command
/// before anything is done, naming its context.
async fn connect_all(
    kube: &KubeFlags,
    fleet: &Fleet,
) -> Result<BTreeMap<String, Cluster>, Failure> {
    let mut clusters = BTreeMap::new();
    for c in fleet.clusters() {
        let options = kube_for(kube, &c.context).connect_options()?;
        let cluster = Cluster::connect(&options)
            .await
            .map_err(in_cluster(&c.context))?;
        clusters.insert(c.context.clone(), cluster);
    }
    Ok(clusters)
}

fn plan(kube: &KubeFlags, verbose: u8, args: &FleetArgs) -> Result<(), Failure> {
    args.output.check_output_file(args.output_file.as_deref())?;
    let fleet = load(&args.file)?;
    let mut hooks = stage_hooks(&fleet)?;
    let program = program()?;
    let start = args
        .now
        .unwrap_or_else(|| jiff::Timestamp::now().as_second());
    let recorded = recorded(kube, &fleet)?;
    let mut failure = None;
    let plan = crate::plan::fleet::plan(&fleet, recorded, &mut hooks, start, |context, at| {
        let cluster = fleet
            .clusters()
            .find(|c| c.context == context)
            .expect("a fleet cluster");
        match plan_cluster(&program, kube, verbose, cluster, at) {
            Ok(plan) => plan,
            Err(message) => {
                failure.get_or_insert(message.clone());
                ClusterPlan {
                    seconds: None,
                    stopped: Some(message),
                    plan: serde_json::Value::Null,
                }
            }
        }
    })
    .map_err(|e| Failure::failed(e.to_string()))?;
    if let Some(message) = failure {
        return Err(Failure::failed(message));
    }
    match args.output {
        PlanFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&plan).expect("a plan serialises")
        ),
        PlanFormat::Yaml => print!(
            "{}",
            serde_saphyr::to_string(&plan).map_err(|e| Failure::failed(e.to_string()))?
        ),
        PlanFormat::Table | PlanFormat::Wide => print_plan(&fleet, &plan),
        PlanFormat::Html | PlanFormat::Svg => {
            let clusters = fleet.clusters().count();
            let facts = vec![
                super::timeline::Fact::new("Fleet", format!("{} ({})", fleet.name, fleet.source)),
                super::timeline::Fact::new(
                    "Stages",
                    format!("{} stage(s), {clusters} cluster(s)", fleet.stages.len()),
                ),
            ];
            let drawn = super::timeline::of_fleet_plan(&fleet.name, &plan, facts);
            let picture = args.output.picture().expect("a picture format");
            super::timeline::write_out(&drawn.draw(picture), args.output_file.as_deref())?;
        }
    }
    match &plan.stopped {
        Some(why) => Err(Failure {
            code: 3,
            message: why.clone(),
        }),
        None => Ok(()),
    }
}

/// `args` without the flags that hand a run to the cluster.
fn without_hand_over(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--in-cluster" | "--create-rbac" => {}
            "--runner-image" => {
                args.next();
            }
            a if a.starts_with("--runner-image=") => {}
            _ => out.push(arg.clone()),
        }
    }
    out
}

/// What earlier runs of the fleet recorded in its clusters (read only: a plan changes nothing).
fn recorded(kube: &KubeFlags, fleet: &Fleet) -> Result<FleetProgress, Failure> {
    tokio_runtime()?.block_on(async {
        let clusters = connect_all(kube, fleet).await?;
        let mut records = Vec::new();
        for (context, cluster) in &clusters {
            let (record, _) =
                (cluster.fleet_record(&fleet.name).await).map_err(in_cluster(context))?;
            records.extend(record.map(|r| (context.clone(), r.recorded())));
        }
        Ok(FleetProgress::recorded(fleet, records))
    })
}

/// A cluster's `nodes` plan at `at`, read from its JSON.
fn plan_cluster(
    program: &Path,
    kube: &KubeFlags,
    verbose: u8,
    cluster: &FleetCluster,
    at: i64,
) -> Result<ClusterPlan, String> {
    // The plan of a rotation handed to the cluster is the plan of the same rotation.
    let cluster = FleetCluster {
        args: without_hand_over(&cluster.args),
        ..cluster.clone()
    };
    let mut args = nodes_args(kube, verbose, &cluster);
    let at = jiff::Timestamp::from_second(at).map_or_else(|_| at.to_string(), |t| t.to_string());
    args.extend(["-o".to_string(), "json".into(), "--now".into(), at]);
    let out = std::process::Command::new(program)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cluster {}: cannot plan: {e}", cluster.context))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let error = || {
        let said = (stderr.lines())
            .rev()
            .find_map(|l| l.strip_prefix("error: "))
            .unwrap_or(stderr.trim());
        format!("cluster {}: its plan failed: {said}", cluster.context)
    };
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|_| error())?;
    if !out.status.success() && plan.get("stopped").is_none() {
        return Err(error());
    }
    Ok(ClusterPlan {
        seconds: plan["estimate"]["seconds"].as_u64(),
        stopped: plan["stopped"].as_str().map(String::from),
        plan,
    })
}

fn run_fleet(kube: &KubeFlags, verbose: u8, args: &FleetArgs) -> Result<(), Failure> {
    let fleet = load(&args.file)?;
    if args.now.is_some() {
        return Err(Failure::usage("fleet run: --now is for plans"));
    }
    let hooks = stage_hooks(&fleet)?;
    let program = program()?;
    let json = matches!(args.output.text(), OutputFormat::Json | OutputFormat::Yaml);
    let format = if json { "json" } else { "table" };
    let commands: BTreeMap<String, ClusterCommand> = (fleet.clusters())
        .map(|c| {
            let mut args = nodes_args(kube, verbose, c);
            // A rotation handed to the cluster says its Job as JSON, to be followed.
            let in_cluster = c.args.iter().any(|a| a == "--in-cluster");
            let format = if in_cluster { "json" } else { format };
            args.extend(["--yes".to_string(), "-o".into(), format.into()]);
            let follow = in_cluster.then(|| global_args(kube, verbose, &c.context));
            let command = ClusterCommand {
                program: program.clone(),
                args,
                follow,
            };
            (c.context.clone(), command)
        })
        .collect();
    let runtime = tokio_runtime()?;
    let end = runtime.block_on(async {
        let clusters = connect_all(kube, &fleet).await?;
        let (interrupt_tx, interrupted) = tokio::sync::watch::channel(None);
        tokio::spawn(async move {
            super::interrupted().await;
            let _ = interrupt_tx.send(Some("interrupted (Ctrl-C or SIGTERM)".to_string()));
        });
        let run = FleetRun {
            fleet: &fleet,
            clusters,
            commands,
            hooks,
            identity: identity(),
            output: Arc::new(Printer { json }),
            interrupted,
        };
        run.run().await.map_err(|e| Failure::failed(e.to_string()))
    })?;
    match end {
        FleetEnd::Done { set_aside } if set_aside.is_empty() => Ok(()),
        FleetEnd::Done { set_aside } => Err(Failure {
            code: 6,
            message: format!(
                "the fleet is done but for nodes set aside in {} (`kubectl rollout-ext --context \
                 CONTEXT status` lists them)",
                set_aside.join(", ")
            ),
        }),
        FleetEnd::Stopped { code, message } => Err(Failure { code, message }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet_with(args: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "apiVersion: rollout-ext/v1alpha1\nkind: Fleet\nmetadata: {{name: f}}\nspec:\n  stages:\n  - name: one\n    clusters:\n    - {{context: a, args: {args}}}\n"
        );
        std::fs::write(dir.path().join("fleet.yaml"), text).unwrap();
        dir
    }

    #[test]
    fn a_cluster_flag_nodes_does_not_know_names_its_line() {
        let dir = fleet_with("[--max-surj, '1']");
        let e = load(&dir.path().join("fleet.yaml")).unwrap_err();
        assert_eq!(e.code, 2);
        assert!(
            e.message.ends_with(
                "fleet.yaml:8: cluster \"a\": args: unexpected argument '--max-surj' found"
            ),
            "{}",
            e.message
        );
    }

    #[test]
    fn flags_the_fleet_sets_itself_are_refused() {
        for flag in ["--yes", "--context=b", "-o"] {
            let dir = fleet_with(&format!("['{flag}']"));
            let e = load(&dir.path().join("fleet.yaml")).unwrap_err();
            assert!(
                e.message.contains("is set by the fleet itself"),
                "{flag}: {}",
                e.message
            );
        }
    }

    #[test]
    fn a_plan_leaves_the_hand_over_out() {
        let args: Vec<String> = [
            "--in-cluster",
            "--runner-image",
            "img",
            "--create-rbac",
            "--runner-image=x",
            "-n",
            "ops",
            "--max-surge",
            "1",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(without_hand_over(&args), ["-n", "ops", "--max-surge", "1"]);
        let dir = fleet_with("[--in-cluster, --runner-image, img]");
        assert!(
            load(&dir.path().join("fleet.yaml")).is_ok(),
            "a fleet may hand its rotations over"
        );
    }

    #[test]
    fn each_cluster_runs_nodes_in_its_own_context() {
        let cluster = FleetCluster {
            context: "prod".into(),
            policy: Some("p.yaml".into()),
            args: vec!["--instance-group".into(), "nodes".into()],
            line: 1,
        };
        let kube = KubeFlags {
            kubeconfig: Some("k".into()),
            retry_timeout: Some("5s".into()),
            ..Default::default()
        };
        assert_eq!(
            nodes_args(&kube, 1, &cluster),
            [
                "--kubeconfig",
                "k",
                "--retry-timeout",
                "5s",
                "-v",
                "--context",
                "prod",
                "nodes",
                "--policy",
                "p.yaml",
                "--instance-group",
                "nodes"
            ]
        );
    }
}
