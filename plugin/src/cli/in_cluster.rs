//! `nodes --yes --in-cluster`: the same command handed to the cluster, as a Job (see
//! [`crate::cluster::runner`]), so that a rotation outlives the terminal that started it. Every
//! permission is checked, the operator's to hand the run over and the runner's to carry it out,
//! and the lock is free, before anything is created.

use std::path::{Component, Path};

use k8s_openapi::api::core::v1::Pod;

use super::nodes::NodesArgs;
use super::{Failure, KubeFlags, OutputFormat};
use crate::cluster::Cluster;
use crate::cluster::access::Permission;
use crate::cluster::lock::LOCK_NAMESPACE;
use crate::cluster::runner::{RUN_DIR, RUN_FILES_LIMIT, RUNNER_ACCOUNT, RunFile, Runner};
use crate::policy::{ModuleSource, Policy};

/// Flags that only the terminal's command has: how it reaches the cluster, and how it hands
/// the run over. Each is `(long, takes a value)`.
const TERMINAL_ONLY: [(&str, bool); 11] = [
    ("--in-cluster", false),
    ("--create-rbac", false),
    ("--runner-image", true),
    ("--policy", true),
    ("--kubeconfig", true),
    ("--context", true),
    ("--cluster", true),
    ("--user", true),
    ("--as", true),
    ("--as-group", true),
    ("--namespace", true),
];

/// The runner's arguments: `argv` (without the program) less the terminal's own flags, with
/// the policy read from the run's files (`policy`: its file name there) and the command's
/// namespace, if it has one, given.
pub fn runner_args(argv: &[String], policy: Option<&str>, namespace: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = argv.iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            out.push(arg.clone());
            out.extend(args.by_ref().cloned());
            break;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((name, _)) if name.starts_with("--") => (name, true),
            _ => (arg.as_str(), false),
        };
        let short_namespace = name == "-n" || (name.starts_with("-n") && !name.starts_with("--"));
        if short_namespace {
            if name == "-n" {
                args.next();
            }
            continue;
        }
        match TERMINAL_ONLY.iter().find(|(flag, _)| *flag == name) {
            Some((_, true)) if !inline => {
                args.next();
            }
            Some(_) => {}
            None => out.push(arg.clone()),
        }
    }
    if let Some(file) = policy {
        out.extend(["--policy".to_string(), format!("{RUN_DIR}/{file}")]);
    }
    if let Some(namespace) = namespace {
        out.extend(["--namespace".to_string(), namespace.to_string()]);
    }
    out
}

/// The policy file and its module files, as the runner finds them under [`RUN_DIR`]: at the
/// same paths relative to the policy (registry modules are pulled by the runner itself).
pub fn run_files(policy_path: Option<&Path>, policy: &Policy) -> Result<Vec<RunFile>, Failure> {
    let Some(path) = policy_path else {
        return Ok(Vec::new());
    };
    let read = |p: &Path| {
        std::fs::read(p).map_err(|e| Failure::usage(format!("cannot read {}: {e}", p.display())))
    };
    let name = file_name(path)?;
    let mut files = vec![RunFile {
        key: "policy.yaml".into(),
        path: name,
        bytes: read(path)?,
    }];
    let base = path.parent().unwrap_or(Path::new(""));
    for (i, hook) in policy.hooks.iter().enumerate() {
        let ModuleSource::File(module) = &hook.module else {
            continue;
        };
        let relative = module.strip_prefix(base).ok().filter(|r| {
            r.components().all(|c| matches!(c, Component::Normal(_))) && r.to_str().is_some()
        });
        let Some(relative) = relative else {
            return Err(Failure::usage(format!(
                "hook {}: an in-cluster run takes module files from the policy's directory or below ({} is not): move it there, or keep it in a registry (module: oci://…)",
                hook.name,
                module.display()
            )));
        };
        files.push(RunFile {
            key: format!("module-{i}.wasm"),
            path: relative.to_string_lossy().into_owned(),
            bytes: read(module)?,
        });
    }
    let total: usize = files.iter().map(|f| f.bytes.len()).sum();
    if total > RUN_FILES_LIMIT {
        return Err(Failure::usage(format!(
            "the policy and its modules take {} KiB, more than the run's ConfigMap can hold ({} KiB): keep the modules in a registry (module: oci://…)",
            total / 1024,
            RUN_FILES_LIMIT / 1024
        )));
    }
    Ok(files)
}

fn file_name(path: &Path) -> Result<String, Failure> {
    (path.file_name().and_then(|n| n.to_str()))
        .map(String::from)
        .ok_or_else(|| Failure::usage(format!("{} names no file", path.display())))
}

/// What the operator needs to hand a run over in `namespace` (and, with `create_rbac`, to make
/// the runner's account, role and binding).
fn to_hand_over(namespace: &str, create_rbac: bool) -> Vec<Permission> {
    let mut needed = vec![
        Permission::new("create", "configmaps", Some(namespace)),
        Permission::new("patch", "configmaps", Some(namespace)),
        Permission::new("create", "jobs.batch", Some(namespace)),
        Permission::new("create", "subjectaccessreviews.authorization.k8s.io", None),
        Permission::new("get", "leases.coordination.k8s.io", Some(LOCK_NAMESPACE)),
    ];
    if create_rbac {
        needed.push(Permission::new("patch", "serviceaccounts", Some(namespace)));
        for resource in [
            "clusterroles.rbac.authorization.k8s.io",
            "clusterrolebindings.rbac.authorization.k8s.io",
        ] {
            needed.push(Permission::new("patch", resource, None));
        }
    }
    needed
}

/// A command to hand to the cluster.
pub struct HandOver<'a> {
    /// Where the Job runs.
    pub namespace: String,
    pub image: String,
    pub create_rbac: bool,
    pub force_unlock: bool,
    /// The policy file, if any, and the policy read from it.
    pub policy_path: Option<&'a Path>,
    pub policy: &'a Policy,
    /// The command's own namespace (a rolling update's workload's, which the runner must be
    /// told: its own default is the Job's); none for a command that has none.
    pub command_namespace: Option<String>,
    /// The run takes the rotation's lock: it must be free (or `force_unlock`).
    pub takes_rotation_lock: bool,
    /// Say the Job as a JSON event (`-o json`), for programs that follow it (a fleet does).
    pub json: bool,
}

/// Hands `nodes … --yes` to the cluster and says how to follow it.
pub fn run(kube: &KubeFlags, args: &NodesArgs, policy: &Policy) -> Result<(), Failure> {
    // What the runner will need, known before anything is created.
    let providers = super::rotate_cmd::providers_of(args, policy)?;
    // The runner reads others' objects wherever the server serves them.
    let counted = policy.others_disruptions == crate::policy::OthersDisruptions::Count;
    let others = crate::cluster::Others {
        daemon_sets: counted,
        node_maintenances: counted,
    };
    let needed = super::rotate_cmd::permissions_of(args, &providers, others);
    let hand_over = HandOver {
        namespace: kube
            .namespace
            .clone()
            .unwrap_or_else(|| LOCK_NAMESPACE.into()),
        image: runner_image(args.runner_image.as_deref())?,
        create_rbac: args.create_rbac,
        force_unlock: args.force_unlock,
        policy_path: args.policy.as_deref(),
        policy,
        command_namespace: None,
        takes_rotation_lock: true,
        json: matches!(args.output.text(), OutputFormat::Json | OutputFormat::Yaml),
    };
    hand(kube, hand_over, |_| needed)
}

/// The runner's image, which `--in-cluster` needs.
pub fn runner_image(image: Option<&str>) -> Result<String, Failure> {
    image.map(String::from).ok_or_else(|| {
        Failure::usage(
            "--in-cluster needs --runner-image: the image of this binary that your site publishes (see deploy/Containerfile)",
        )
    })
}

/// Hands `hand_over`'s command to the cluster (the runner needing what `needed` says for the
/// command's namespace) and says how to follow it.
pub fn hand(
    kube: &KubeFlags,
    hand_over: HandOver,
    needed: impl FnOnce(&str) -> Vec<Permission>,
) -> Result<(), Failure> {
    let HandOver {
        namespace,
        image,
        create_rbac,
        force_unlock,
        policy_path,
        policy,
        command_namespace,
        takes_rotation_lock,
        json,
    } = hand_over;
    let files = run_files(policy_path, policy)?;
    let policy_name = policy_path.map(file_name).transpose()?;
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let runtime = super::tokio_runtime()?;
    runtime.block_on(async {
        let cluster = Cluster::connect(&kube.connect_options()?).await?;
        // The terminal's default namespace, which the runner's (the Job's) is not.
        let command_namespace = command_namespace.map(|ns| match ns.is_empty() {
            true => cluster.default_namespace.clone(),
            false => ns,
        });
        let needed = needed(command_namespace.as_deref().unwrap_or_default());
        let command = runner_args(&argv, policy_name.as_deref(), command_namespace.as_deref());
        cluster
            .check_access(&to_hand_over(&namespace, create_rbac))
            .await?;
        // The runner would find the lock held and stop: said now, with nothing created. With
        // --force-unlock the runner takes it over, as a terminal's run would.
        if takes_rotation_lock && !force_unlock {
            let held = cluster.lock_status().await?.filter(|l| !l.holder.is_empty());
            if let Some(held) = held {
                return Err(Failure {
                    code: 4,
                    message: format!(
                        "another run holds the rotation's lock ({}): nothing was created (wait for it, stop it, or take a stale lock over with --force-unlock)",
                        held.holder
                    ),
                });
            }
        }
        if create_rbac {
            cluster.create_runner_rbac(&namespace).await?;
            let within = std::time::Duration::from_secs(10);
            (cluster.await_runner_access(&namespace, RUNNER_ACCOUNT, &needed, within)).await?;
        } else {
            (cluster.check_runner_access(&namespace, RUNNER_ACCOUNT, &needed)).await?;
        }
        let name = format!("rollout-ext-run-{}", jiff::Timestamp::now().as_second());
        let runner = Runner {
            namespace: namespace.clone(),
            name: name.clone(),
            image,
            args: command.clone(),
            files,
        };
        cluster.start_runner(&runner).await?;
        if json {
            let event = serde_json::json!({
                "event": "handed-over",
                "namespace": namespace,
                "job": name,
                "command": command,
            });
            println!("{event}");
            return Ok(());
        }
        println!(
            "handed to the cluster: Job {namespace}/{name} runs `kubectl rollout-ext {}` as ServiceAccount {namespace}/{RUNNER_ACCOUNT}",
            command.join(" ")
        );
        println!("follow it:  kubectl rollout-ext status");
        println!("its output: kubectl rollout-ext logs -f -n {namespace} {name}");
        println!("stop it:    kubectl rollout-ext abort --reason …");
        Ok(())
    })
}

/// Whether `pod` has run (its output can be read), and whether it still runs.
fn started_running(pod: &Pod) -> (bool, bool) {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let running = phase == "Running" && pod.metadata.deletion_timestamp.is_none();
    (phase != "Pending", running)
}

/// `logs [JOB] [-f]`: the output of a run handed to the cluster (the newest, without JOB), each
/// pod of its Job in turn (the pod that resumed it after an eviction after the one evicted);
/// with `follow`, until the run ends.
pub fn logs(kube: &KubeFlags, job: Option<&str>, follow: bool) -> Result<(), Failure> {
    use futures::StreamExt;
    let namespace = kube
        .namespace
        .clone()
        .unwrap_or_else(|| LOCK_NAMESPACE.into());
    let runtime = super::tokio_runtime()?;
    runtime.block_on(async {
        let cluster = Cluster::connect(&kube.connect_options()?).await?;
        let Some(found) = cluster.runner_job(&namespace, job).await? else {
            return Err(Failure::usage(match job {
                Some(job) => format!("no run handed to the cluster is named {job} in namespace {namespace}"),
                None => format!("no run handed to the cluster in namespace {namespace} (`nodes --yes --in-cluster` hands one over)"),
            }));
        };
        let name = found.metadata.name.clone().unwrap_or_default();
        let mut shown = std::collections::HashSet::new();
        loop {
            for pod in cluster.runner_pods(&namespace, &name).await? {
                let pod_name = pod.metadata.name.clone().unwrap_or_default();
                let (started, running) = started_running(&pod);
                if !started || shown.contains(&pod_name) {
                    continue;
                }
                eprintln!("--- job/{name}: pod {pod_name} ---");
                let mut lines = cluster
                    .runner_output(&namespace, &pod_name, follow && running)
                    .await?;
                while let Some(line) = lines.next().await {
                    let line = line.map_err(|e| {
                        Failure::failed(format!("reading the output of pod {namespace}/{pod_name}: {e}"))
                    })?;
                    println!("{line}");
                }
                shown.insert(pod_name);
            }
            let job = cluster.runner_job(&namespace, Some(&name)).await?;
            let status = job.and_then(|j| j.status);
            let failed = status.as_ref().is_some_and(|s| s.failed.unwrap_or(0) > 0);
            if failed {
                // The run's own exit code (3 aborted, 4 locked, 6 nodes set aside, …), from its
                // last pod, so that whoever follows it learns how it ended.
                let pods = cluster.runner_pods(&namespace, &name).await?;
                let code = last_exit_code(&pods).unwrap_or(1);
                return Err(Failure {
                    code: u8::try_from(code).unwrap_or(1).max(1),
                    message: format!("the run of job/{name} ended with exit code {code}"),
                });
            }
            let ended = status.is_none_or(|s| s.succeeded.unwrap_or(0) > 0);
            if !follow || ended {
                return Ok(());
            }
            cluster
                .runner_pods_changed(&namespace, &name, std::time::Duration::from_secs(5))
                .await;
        }
    })
}

/// The exit code of the newest of `pods` that ended.
fn last_exit_code(pods: &[Pod]) -> Option<i32> {
    (pods.iter())
        .filter_map(|p| {
            let status = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
            let ended = status.state.as_ref()?.terminated.as_ref()?;
            Some((p.metadata.creation_timestamp.clone(), ended.exit_code))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, code)| code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_runner_runs_the_same_command_without_the_terminals_flags() {
        let argv = strings(&[
            "nodes",
            "--yes",
            "--in-cluster",
            "--runner-image",
            "site/rollout-ext:1",
            "--kubeconfig=/home/me/.kube/config",
            "--context",
            "prod",
            "-n",
            "ops",
            "--policy",
            "/home/me/policy.yaml",
            "--instance-group",
            "nodes",
            "--max-unavailable=2",
            "-nops",
            "--create-rbac",
            "-o",
            "json",
        ]);
        assert_eq!(
            runner_args(&argv, Some("policy.yaml"), None),
            strings(&[
                "nodes",
                "--yes",
                "--instance-group",
                "nodes",
                "--max-unavailable=2",
                "-o",
                "json",
                "--policy",
                "/etc/rollout-ext/run/policy.yaml",
            ])
        );
        assert_eq!(
            runner_args(&strings(&["nodes", "--yes", "--in-cluster"]), None, None),
            strings(&["nodes", "--yes"])
        );
        // A rolling update keeps its image, and is told its namespace.
        let update = strings(&["rolling-update", "rs/web", "--image=app:2", "-n", "shop"]);
        assert_eq!(
            runner_args(&update, None, Some("shop")),
            strings(&[
                "rolling-update",
                "rs/web",
                "--image=app:2",
                "--namespace",
                "shop"
            ])
        );
    }

    #[test]
    fn modules_beside_the_policy_go_with_it_and_others_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("hooks")).unwrap();
        std::fs::write(dir.path().join("hooks/a.wasm"), b"\0asm").unwrap();
        let policy_path = dir.path().join("policy.yaml");
        let text = "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  hooks:\n  - {name: a, module: hooks/a.wasm}\n";
        std::fs::write(&policy_path, text).unwrap();
        let policy = Policy::load(&policy_path).unwrap();
        let files = run_files(Some(&policy_path), &policy).unwrap();
        let paths: Vec<(&str, &str)> = (files.iter())
            .map(|f| (f.key.as_str(), f.path.as_str()))
            .collect();
        assert_eq!(
            paths,
            [
                ("policy.yaml", "policy.yaml"),
                ("module-0.wasm", "hooks/a.wasm")
            ]
        );

        let outside = dir.path().join("sub/policy.yaml");
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let text = text.replace("hooks/a.wasm", "../hooks/a.wasm");
        std::fs::write(&outside, text).unwrap();
        let policy = Policy::load(&outside).unwrap();
        let refused = run_files(Some(&outside), &policy).unwrap_err();
        assert!(
            refused.message.contains(
                "hook a: an in-cluster run takes module files from the policy's directory"
            ),
            "{}",
            refused.message
        );
    }
}
