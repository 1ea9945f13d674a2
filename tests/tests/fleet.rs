//! Fleet rotations on three control planes of their own (contexts dev, eu and us of one
//! kubeconfig), in two stages: dev, then eu and us together. The second stage starts only after
//! the first stage's soak and its gate's proceed; a gate's abort before it leaves it untouched;
//! and a fleet killed anywhere and run again resumes, every cluster's invariants holding.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::Api;
use kube::api::ListParams;
use rollout_ext_e2e::chaos::{
    Chaos, chaos_loop, chaos_timeouts, cloud_calls_made, group_nodes, observed_rotation,
    seed_banner, terminated,
};
use rollout_ext_e2e::cluster::{TestCluster, fleet_kubeconfig};
use rollout_ext_e2e::observer::Observer;
use rollout_ext_e2e::{FAST_ROTATION, run_plugin, wasm_module};

/// One fleet at a time: they share the three clusters' locks.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const CONTEXTS: [&str; 3] = ["dev", "eu", "us"];

/// The three clusters, started once (together) for this binary, and a kubeconfig naming each.
struct Trio {
    clusters: Vec<TestCluster>,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

fn trio() -> &'static Trio {
    static TRIO: OnceLock<Trio> = OnceLock::new();
    TRIO.get_or_init(|| {
        let starting: Vec<_> = (0..3)
            .map(|_| std::thread::spawn(TestCluster::start))
            .collect();
        let clusters: Vec<TestCluster> = starting
            .into_iter()
            .map(|s| s.join().unwrap().expect("a test cluster starts"))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let named: Vec<(&str, &TestCluster)> = CONTEXTS.into_iter().zip(&clusters).collect();
        fleet_kubeconfig(&kubeconfig, &named).unwrap();
        Trio {
            clusters,
            kubeconfig,
            _dir: dir,
        }
    })
}

/// A group of two outdated nodes in each cluster, under a budget, observed; each cluster's
/// policy (its own cloud) in `dir/<context>/policy.yaml`.
struct Rotations {
    outdated: Vec<BTreeSet<String>>,
    observers: Vec<Observer>,
    dirs: Vec<tempfile::TempDir>,
}

async fn rotations(group: &str) -> Rotations {
    let mut r = Rotations {
        outdated: Vec::new(),
        observers: Vec::new(),
        dirs: Vec::new(),
    };
    for cluster in &trio().clusters {
        let (outdated, observer, dir, _) = observed_rotation(cluster, group, 2).await;
        r.outdated.push(outdated);
        r.observers.push(observer);
        r.dirs.push(dir);
    }
    r
}

impl Rotations {
    /// Each cluster's invariants (budget, drained before terminated), and its lock let go.
    async fn judge(self, group: &str) {
        for ((cluster, observer), context) in
            (trio().clusters.iter()).zip(self.observers).zip(CONTEXTS)
        {
            let (report, _) = observer
                .finish(
                    cluster,
                    cloud_calls_made(cluster, group),
                    cluster.nodes.nodes_of(group),
                )
                .await;
            assert_eq!(report, None, "cluster {context}");
            let lease = cluster.live().await.controls().await.unwrap();
            assert!(
                lease.is_none_or(|l| l.holder.is_empty()),
                "cluster {context}: the lock is let go"
            );
        }
    }
}

/// A gate policy asking the stage-gate example with `config`.
fn gate_policy(dir: &Path, config: &str) -> PathBuf {
    let module = wasm_module("stage-gate");
    let text = format!(
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  hooks:\n  - name: stage-gate\n    module: {}\n    points: [gate]\n    config: {config}\n",
        module.display()
    );
    let path = dir.join("gates.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A fleet `name`: dev (soak `soak`), then eu and us two at a time, each cluster's rotation of
/// `group` one surge and one unavailable at a time, the stage gates of `gates`.
fn fleet_file(
    dir: &Path,
    name: &str,
    group: &str,
    soak: &str,
    r: &Rotations,
    gates: &Path,
) -> PathBuf {
    fleet_file_with(dir, name, group, soak, r, gates, &[])
}

/// [`fleet_file`] with `dev_args` for dev's rotation alone.
fn fleet_file_with(
    dir: &Path,
    name: &str,
    group: &str,
    soak: &str,
    r: &Rotations,
    gates: &Path,
    dev_args: &[&str],
) -> PathBuf {
    // Fleet runs here are killed and resumed: their drains may have to outwait a budget that a
    // killed run's eviction left charged (see chaos_timeouts).
    let args: Vec<String> = ["--instance-group", group, "--kubelet-version", "v1.20.2"]
        .iter()
        .chain(FAST_ROTATION)
        .chain(&["--max-surge", "1", "--max-unavailable", "1"])
        .map(|a| a.to_string())
        .collect();
    let args: Vec<String> = (chaos_timeouts(args).iter())
        .map(|a| format!("'{a}'"))
        .collect();
    let policy = |i: usize| r.dirs[i].path().join("policy.yaml").display().to_string();
    let text = format!(
        "apiVersion: rollout-ext/v1alpha1\nkind: Fleet\nmetadata: {{name: {name}}}\nspec:\n  policy: {}\n  args: [{}]\n  stages:\n  - name: dev\n    soak: {soak}\n    clusters:\n    - {{context: dev, policy: {}, args: [{}]}}\n  - name: prod\n    maxParallel: 2\n    clusters:\n    - {{context: eu, policy: {}}}\n    - {{context: us, policy: {}}}\n",
        gates.display(),
        args.join(", "),
        policy(0),
        dev_args.join(", "),
        policy(1),
        policy(2)
    );
    let path = dir.join("fleet.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn fleet_args(command: &str, file: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--kubeconfig",
        trio().kubeconfig.to_str().unwrap(),
        "fleet",
        command,
        "-f",
    ]
    .map(String::from)
    .to_vec();
    args.push(file.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// The fleet's own events and its clusters' (with `cluster`), as printed by `fleet run -o json`.
fn events(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn kinds<'a>(events: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    events.iter().filter(|e| e["event"] == kind).collect()
}

/// The fleet's record in the cluster of `context`, if it has one.
async fn record(context: usize, fleet: &str) -> Option<serde_json::Value> {
    let client = trio().clusters[context].client().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "kube-system");
    let map = maps.get_opt("rollout-ext-fleet").await.unwrap()?;
    let text = map.data?.get(fleet)?.clone();
    Some(serde_json::from_str(&text).unwrap())
}

/// Nodes of `group` in the cluster of `context` that are cordoned.
async fn cordoned(context: usize, group: &str) -> Vec<String> {
    let client = trio().clusters[context].client().await;
    let nodes: Api<Node> = Api::all(client);
    let list = nodes
        .list(&ListParams::default().labels(&group_nodes(group)))
        .await
        .unwrap();
    list.items
        .into_iter()
        .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
        .filter_map(|n| n.metadata.name)
        .collect()
}

fn said(out: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_stage_starts_after_the_soak_and_the_gates_proceed() {
    let _serial = SERIAL.lock().await;
    let group = "order";
    let r = rotations(group).await;
    let dir = tempfile::tempdir().unwrap();
    // The stage soaks 2s; the gate wants 4s of soak: it waits once, then proceeds.
    let gates = gate_policy(dir.path(), "{minSoakSeconds: 4}");
    let file = fleet_file(dir.path(), "order", group, "2s", &r, &gates);

    let plan = run_plugin(fleet_args("plan", &file, &["-o", "json"])).await;
    assert!(plan.status.success(), "{}", said(&plan));
    let planned: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let steps: Vec<String> = (planned["steps"].as_array().unwrap().iter())
        .map(|s| {
            format!(
                "{} {}",
                s["step"].as_str().unwrap(),
                s["stage"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            "gate dev",
            "cluster dev",
            "soak dev",
            "gate prod",
            "gate prod",
            "cluster prod",
            "cluster prod"
        ],
        "the plan gates, runs dev, soaks, waits at the gate once, then runs prod"
    );
    for step in planned["steps"].as_array().unwrap() {
        if step["step"] == "cluster" {
            let batches = step["plan"]["plan"]["groups"][0]["batches"]
                .as_array()
                .unwrap();
            assert!(
                !batches.is_empty(),
                "each cluster's own plan is in it: {step}"
            );
        }
    }
    assert!(
        planned["seconds"].as_u64().is_some(),
        "the fleet has an estimate"
    );

    // Drawn, the plan is a row a cluster, its bar from when it starts for its plan's estimate.
    let at = "--now=2026-11-27T12:00:00Z";
    let same = run_plugin(fleet_args("plan", &file, &["-o", "json", at])).await;
    let same: serde_json::Value = serde_json::from_slice(&same.stdout).unwrap();
    let picture = dir.path().join("fleet.svg");
    let picture_arg = picture.to_str().unwrap();
    let drawn = ["-o", "svg", "--output-file", picture_arg, at];
    let out = run_plugin(fleet_args("plan", &file, &drawn)).await;
    assert!(out.status.success(), "{}", said(&out));
    let svg = std::fs::read_to_string(&picture).unwrap();
    let bars: Vec<(String, i64, i64)> = (rollout_ext_e2e::browser::svg_bars(&svg).iter())
        .map(|bar| {
            let time = |name: &str| bar[name].parse::<i64>().unwrap();
            (bar["data-row"].clone(), time("data-from"), time("data-to"))
        })
        .collect();
    let clusters: Vec<(String, i64, i64)> = (same["steps"].as_array().unwrap().iter())
        .filter(|s| s["step"] == "cluster")
        .map(|s| {
            let from = s["at"].as_i64().unwrap();
            let row = format!(
                "{}/{}",
                s["stage"].as_str().unwrap(),
                s["cluster"].as_str().unwrap()
            );
            (row, from, from + s["plan"]["seconds"].as_i64().unwrap())
        })
        .collect();
    assert_eq!(
        bars, clusters,
        "one bar per cluster, where the plan puts it"
    );

    let started = Instant::now();
    let out = run_plugin(fleet_args("run", &file, &["-o", "json"])).await;
    assert!(out.status.success(), "{}", said(&out));
    let events = events(&out.stdout);
    let gates: Vec<(String, u64, String)> = (kinds(&events, "stage-gate").iter())
        .map(|e| {
            (
                e["stage"].as_str().unwrap().to_string(),
                e["attempt"].as_u64().unwrap(),
                e["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(gates[0], ("dev".into(), 0, "proceed".into()));
    assert_eq!((gates[1].0.as_str(), gates[1].1), ("prod", 0));
    assert!(
        gates[1].2.starts_with("wait 2s: stage dev soaked 2s of 4s"),
        "{gates:?}"
    );
    assert_eq!(gates[2], ("prod".into(), 1, "proceed".into()));
    // The children's own events come through, named by cluster.
    let terminated_in: BTreeSet<&str> = (kinds(&events, "terminated").iter())
        .map(|e| e["cluster"].as_str().unwrap())
        .collect();
    assert_eq!(terminated_in, BTreeSet::from(CONTEXTS));

    let dev = record(0, "order").await.unwrap();
    let dev_end = dev["endedAt"].as_i64().unwrap();
    assert_eq!(dev["state"], "succeeded");
    for context in [1, 2] {
        let prod = record(context, "order").await.unwrap();
        assert_eq!(prod["state"], "succeeded", "{prod}");
        assert!(
            prod["startedAt"].as_i64().unwrap() >= dev_end + 4,
            "{} started after dev's end ({dev_end}) and 4s of soak: {prod}",
            CONTEXTS[context]
        );
    }
    for (i, cluster) in trio().clusters.iter().enumerate() {
        let gone = terminated(cluster, group);
        assert_eq!(
            gone.len(),
            2,
            "{}: each outdated node terminated once: {gone:?}",
            CONTEXTS[i]
        );
        let gone: BTreeSet<String> = gone.into_iter().collect();
        assert_eq!(
            gone, r.outdated[i],
            "every outdated node of {} replaced",
            CONTEXTS[i]
        );
    }
    println!("fleet of three in {:?}", started.elapsed());

    let status = run_plugin(fleet_args("status", &file, &[])).await;
    let shown = said(&status);
    assert!(status.status.success(), "{shown}");
    for context in CONTEXTS {
        assert!(
            shown
                .lines()
                .any(|l| l.contains(context) && l.contains("succeeded")),
            "{shown}"
        );
    }
    // Run again: every cluster recorded done, nothing is rotated or asked again.
    let again = run_plugin(fleet_args("run", &file, &["-o", "json"])).await;
    assert!(again.status.success(), "{}", said(&again));
    let events = self::events(&again.stdout);
    assert!(
        kinds(&events, "cluster-started").is_empty(),
        "{}",
        said(&again)
    );
    assert!(kinds(&events, "stage-gate").is_empty(), "{}", said(&again));
    r.judge(group).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_abort_before_the_second_stage_leaves_it_untouched() {
    let _serial = SERIAL.lock().await;
    let group = "frozen";
    let r = rotations(group).await;
    let dir = tempfile::tempdir().unwrap();
    let gates = gate_policy(dir.path(), "{abortStages: [prod]}");
    let file = fleet_file(dir.path(), "frozen", group, "0s", &r, &gates);

    let out = run_plugin(fleet_args("run", &file, &[])).await;
    let shown = said(&out);
    assert_eq!(out.status.code(), Some(3), "{shown}");
    assert!(
        shown.contains("hook/stage-gate aborted the fleet before stage \"prod\": stage prod is frozen by policy"),
        "{shown}"
    );
    assert_eq!(record(0, "frozen").await.unwrap()["state"], "succeeded");
    for context in [1, 2] {
        let cluster = &trio().clusters[context];
        assert_eq!(
            record(context, "frozen").await,
            None,
            "{} untouched",
            CONTEXTS[context]
        );
        assert!(
            cordoned(context, group).await.is_empty(),
            "{}: nothing cordoned",
            CONTEXTS[context]
        );
        assert!(
            terminated(cluster, group).is_empty(),
            "{}: nothing terminated",
            CONTEXTS[context]
        );
    }
    let status = run_plugin(fleet_args("status", &file, &["-o", "json"])).await;
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let states: Vec<&str> = (status["clusters"].as_array().unwrap().iter())
        .map(|c| c["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["succeeded", "not-started", "not-started"]);

    // A plan now: dev is done, prod is still gated.
    let plan = run_plugin(fleet_args("plan", &file, &["-o", "json"])).await;
    let planned: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(
        planned["finished"],
        serde_json::json!(["dev"]),
        "{}",
        said(&plan)
    );
    assert_eq!(planned["steps"][0]["step"], "gate");
    assert_eq!(planned["steps"][0]["stage"], "prod");
    assert_eq!(
        plan.status.code(),
        Some(3),
        "the plan stops where the run did"
    );

    // The gate lifted, the same command resumes: dev is not rotated again.
    gate_policy(dir.path(), "{}");
    let out = run_plugin(fleet_args("run", &file, &["-o", "json"])).await;
    assert!(out.status.success(), "{}", said(&out));
    let events = events(&out.stdout);
    let started: Vec<&str> = (kinds(&events, "cluster-started").iter())
        .map(|e| e["cluster"].as_str().unwrap())
        .collect();
    assert_eq!(started, ["eu", "us"]);
    let resumed: Vec<&str> = (kinds(&events, "fleet-resumed").iter())
        .map(|e| e["cluster"].as_str().unwrap())
        .collect();
    assert_eq!(resumed, ["dev"]);
    r.judge(group).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_fleet_file_names_its_line_and_touches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fleet.yaml");
    std::fs::write(
        &file,
        "apiVersion: rollout-ext/v1alpha1\nkind: Fleet\nmetadata: {name: bad}\nspec:\n  stages:\n  - name: one\n    clusters:\n    - {context: dev, args: [--max-surj, '1']}\n",
    )
    .unwrap();
    let _ = trio();
    let out = run_plugin(fleet_args("run", &file, &[])).await;
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    let shown = said(&out);
    assert!(
        shown.contains("fleet.yaml:8: cluster \"dev\": args: unexpected argument '--max-surj'"),
        "{shown}"
    );
    assert_eq!(record(0, "bad").await, None);
}

/// Fleet events, beside the rotations', that a kill can be tied to.
const FLEET_EVENTS: &[&str] = &[
    "fleet-started",
    "stage-gate",
    "cluster-started",
    "group-started",
    "cordoned",
    "evicted",
    "drained",
    "terminated",
    "replaced",
    "validated",
    "cluster-ended",
    "soaking",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_killed_anywhere_resumes_and_every_cluster_stays_safe() {
    let _serial = SERIAL.lock().await;
    let mut rng = seed_banner("fleet chaos");
    let group = "chaos";
    let r = rotations(group).await;
    let dir = tempfile::tempdir().unwrap();
    let gates = gate_policy(dir.path(), "{minSoakSeconds: 1}");
    let file = fleet_file(dir.path(), "chaos", group, "1s", &r, &gates);
    let total: usize = r.outdated.iter().map(BTreeSet::len).sum();
    let started = Instant::now();
    let outcome = chaos_loop(
        fleet_args("run", &file, &["-o", "json"]),
        &mut rng,
        Chaos {
            events: FLEET_EVENTS,
            // Nodes come and go faster under kwok than they did: kills come sooner, so that ten
            // land before the fleet is done.
            longest: Duration::from_millis(1500),
            kills: (10, 3),
            finale: None,
            finished_with: 0,
        },
        // A step per termination, over the fleet.
        || {
            let done = (trio().clusters.iter())
                .map(|c| terminated(c, group).len())
                .sum();
            (done, total)
        },
    )
    .await;
    let (kills, phases, last) = outcome.unwrap_or_else(|failure| panic!("{failure}"));
    println!(
        "fleet chaos: {kills} kills in {:?}; phases: {phases:?}",
        started.elapsed()
    );
    assert!(kills >= 10, "{kills} kills");
    assert!(
        phases.len() >= 3,
        "kills landed in at least 3 phases: {phases:?}"
    );
    for (i, cluster) in trio().clusters.iter().enumerate() {
        let gone = terminated(cluster, group);
        assert_eq!(
            gone.len(),
            r.outdated[i].len(),
            "{}: each outdated node terminated once: {gone:?}",
            CONTEXTS[i]
        );
        let gone: BTreeSet<String> = gone.into_iter().collect();
        assert_eq!(
            gone, r.outdated[i],
            "{}: every outdated node terminated\n{}",
            CONTEXTS[i], last.stdout
        );
        assert_eq!(record(i, "chaos").await.unwrap()["state"], "succeeded");
    }
    r.judge(group).await;
}

/// `fleet ARGS` run to its end, synchronously (from an event handler).
fn fleet_now(command: &str, file: &Path, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(rollout_ext_e2e::plugin_binary())
        .args(fleet_args(command, file, extra))
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_stops_the_fleet_in_its_soak_pauses_and_resumes_it() {
    let _serial = SERIAL.lock().await;
    let group = "halt";
    let r = rotations(group).await;
    let dir = tempfile::tempdir().unwrap();
    let gates = gate_policy(dir.path(), "{}");
    let file = fleet_file(dir.path(), "halt", group, "8s", &r, &gates);

    // Aborted while dev's soak runs: the fleet stops there, prod untouched.
    let (aborter, said_abort) = (
        file.clone(),
        std::sync::Arc::new(std::sync::Mutex::new(None)),
    );
    let told = said_abort.clone();
    let (code, stderr) =
        rollout_ext_e2e::run_watching(fleet_args("run", &file, &["-o", "json"]), move |event| {
            if event["event"] == "soaking" {
                let out = fleet_now("abort", &aborter, &["--reason", "change freeze"]);
                *told.lock().unwrap() = Some(said(&out));
            }
        })
        .await;
    let abort_said = said_abort
        .lock()
        .unwrap()
        .clone()
        .expect("the fleet soaked");
    assert!(
        abort_said.contains("cluster eu: abort recorded for the fleet"),
        "{abort_said}"
    );
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("the fleet stopped: aborted by") && stderr.contains("change freeze"),
        "{stderr}"
    );
    for context in [1, 2] {
        assert_eq!(
            record(context, "halt").await,
            None,
            "{} untouched",
            CONTEXTS[context]
        );
    }
    let status = fleet_now("status", &file, &[]);
    assert!(
        said(&status).contains("Abort requested by"),
        "{}",
        said(&status)
    );

    // Paused, then run again: the abort is withdrawn, prod's rotations hold at their start
    // until the fleet is resumed, then the fleet finishes.
    let paused = fleet_now("pause", &file, &["--reason", "wait for ops"]);
    assert!(paused.status.success(), "{}", said(&paused));
    let resumer = file.clone();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let kinds_seen = seen.clone();
    let (code, stderr) =
        rollout_ext_e2e::run_watching(fleet_args("run", &file, &["-o", "json"]), move |event| {
            let kind = event["event"].as_str().unwrap_or_default().to_string();
            let mut seen = kinds_seen.lock().unwrap();
            if kind == "paused" && !seen.contains(&kind) {
                let out = fleet_now("resume", &resumer, &[]);
                assert!(out.status.success(), "{}", said(&out));
            }
            seen.push(kind);
        })
        .await;
    assert_eq!(code, Some(0), "{stderr}");
    let seen = seen.lock().unwrap().clone();
    let first = |kind: &str| seen.iter().position(|k| k == kind);
    assert!(first("abort-withdrawn").is_some(), "{seen:?}");
    let paused = first("paused").expect("prod's rotations held");
    assert!(
        seen[..paused].iter().all(|k| k != "cordoned"),
        "prod's rotations held before any change: {seen:?}"
    );
    r.judge(group).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_handed_its_rotation_is_followed_to_its_end() {
    let _serial = SERIAL.lock().await;
    let dev = &trio().clusters[0];
    let runners = dev.run_runner_pods().await;
    let group = "handed";
    let r = rotations(group).await;
    let dir = tempfile::tempdir().unwrap();
    let gates = gate_policy(dir.path(), "{}");
    let hand_over = [
        "--in-cluster",
        "--runner-image",
        "site/rollout-ext:test",
        "--create-rbac",
    ];
    let file = fleet_file_with(dir.path(), "handed", group, "0s", &r, &gates, &hand_over);

    let out = run_plugin(fleet_args("run", &file, &["-o", "json"])).await;
    let output = runners.output();
    assert!(
        out.status.success(),
        "{}\nrunner pods:\n{output}",
        said(&out)
    );
    let events = events(&out.stdout);
    let handed: Vec<&serde_json::Value> = kinds(&events, "handed-over");
    assert_eq!(handed.len(), 1, "{}", said(&out));
    assert_eq!(handed[0]["cluster"], "dev");
    let job = handed[0]["job"].as_str().unwrap().to_string();
    // The runner's own events, followed through its Job's logs, come through as dev's.
    let dev_terminated = (kinds(&events, "terminated").iter())
        .filter(|e| e["cluster"] == "dev")
        .count();
    assert_eq!(dev_terminated, 2, "{}\nrunner pods:\n{output}", said(&out));
    assert_eq!(record(0, "handed").await.unwrap()["state"], "succeeded");
    let jobs: Api<k8s_openapi::api::batch::v1::Job> =
        Api::namespaced(dev.client().await, "kube-system");
    let status = jobs.get(&job).await.unwrap().status.unwrap();
    assert_eq!(
        status.succeeded,
        Some(1),
        "the run in the cluster succeeded"
    );
    r.judge(group).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_status_watch_follows_every_cluster_and_its_keys_pause_and_resume_the_fleet() {
    use rollout_ext_e2e::terminal::Terminal;
    let _serial = SERIAL.lock().await;
    let group = "followed";
    let r = rotations(group).await;
    let dir = tempfile::tempdir().unwrap();
    let gates = gate_policy(dir.path(), "{}");
    let file = fleet_file(dir.path(), "followed", group, "0s", &r, &gates);
    let within = Duration::from_secs(120);
    let watch = || {
        let mut command = std::process::Command::new(rollout_ext_e2e::plugin_binary());
        command.args(fleet_args("status", &file, &["--watch"]));
        command
    };
    let mut terminal = Terminal::spawn(watch(), 30, 140);
    terminal.wait_for("the view", within, |s| s.contains("p pause · r resume"));
    let lines = tokio::process::Command::from(watch())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let lines = tokio::spawn(lines);

    // p before the run: every cluster's rotation will wait at its start.
    terminal.type_keys("pwait for ops\r");
    let screen = terminal.wait_for("the pause", within, |s| {
        s.contains("cluster us: pause recorded") && s.matches("; paused").count() == 3
    });
    assert!(screen.contains("cluster dev: pause recorded"), "{screen}");
    let (tx, mut held) = tokio::sync::mpsc::unbounded_channel();
    let run = tokio::spawn(rollout_ext_e2e::run_watching(
        fleet_args("run", &file, &["-o", "json"]),
        move |event| {
            if event["event"] == "paused" {
                let _ = tx.send(event["cluster"].clone());
            }
        },
    ));
    assert_eq!(held.recv().await.unwrap(), "dev");
    let screen = terminal.wait_for("dev held", within, |s| s.contains("now: paused "));
    let dev = (screen
        .lines()
        .find(|l| l.contains(" dev ") && l.contains("running")))
    .unwrap_or_else(|| panic!("dev is not running:\n{screen}"));
    assert!(
        dev.contains("held by ") && dev.contains("; paused"),
        "{dev}"
    );

    // r: the fleet goes on, stage after stage, to its end.
    terminal.type_keys("r");
    let (code, stderr) = run.await.unwrap();
    assert_eq!(code, Some(0), "{stderr}");
    let screen = terminal.wait_for("the end", within, |s| {
        s.contains("fleet followed: every cluster succeeded")
    });
    assert_eq!(screen.matches("succeeded").count(), 4, "{screen}");
    terminal.type_keys("q");
    assert_eq!(terminal.wait_exit(within), Some(0));

    let out = lines.await.unwrap().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}");
    for line in [
        "cluster dev: running; held by ",
        "cluster eu: succeeded; -",
        "cluster us: succeeded; -",
        "fleet followed: every cluster succeeded",
    ] {
        assert!(said.contains(line), "{line:?} not said:\n{said}");
    }
    r.judge(group).await;
}
