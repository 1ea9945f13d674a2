//! Real compiled components against the real host: every misbehaviour ends in its own named
//! fault within its limit, `Ignore` falls back to the built-in, and the sandbox grants nothing.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rollout_ext::hooks::{HookRuntime, LoadError, ObjectSource, SnapshotObjects};
use rollout_ext::plan::decide::HookFailed;
use rollout_ext::plan::hook::{DecidedBy, Hook, HookFault};
use rollout_ext::plan::{Plan, PlanError, PlanOptions, plan_nodes};
use rollout_ext::policy::{FailurePolicy, HookMode, HookPoint, HookSpec, Policy};
use rollout_ext::snapshot::Snapshot;
use rollout_ext_e2e::wasm_module;

/// Three outdated nodes in two zones.
const SNAPSHOT: &str = r#"{"kind": "List", "apiVersion": "v1", "items": [
  {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "a"}, "annotations": {"rollout-ext.io/needs-update": ""}}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
  {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n2", "labels": {"topology.kubernetes.io/zone": "a"}, "annotations": {"rollout-ext.io/needs-update": ""}}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
  {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n3", "labels": {"topology.kubernetes.io/zone": "b"}, "annotations": {"rollout-ext.io/needs-update": ""}}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
]}"#;

fn runtime() -> &'static HookRuntime {
    static RUNTIME: OnceLock<HookRuntime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let cache = rollout_ext_e2e::workspace_root().join("target/test-hook-cache");
        HookRuntime::new(Some(cache)).expect("the runtime starts")
    })
}

fn spec(module: PathBuf, points: &[HookPoint], config: serde_json::Value) -> HookSpec {
    HookSpec {
        name: "hostile".into(),
        module: rollout_ext::policy::ModuleSource::File(module),
        sha256: None,
        points: Some(points.to_vec()),
        config: config.to_string(),
        config_line: 9,
        config_keys: Vec::new(),
        timeout: Duration::from_millis(300),
        memory: 32 << 20,
        failure_policy: FailurePolicy::Fail,
        mode: HookMode::Enforce,
        metrics: Vec::new(),
        line: 7,
    }
}

fn objects() -> Arc<dyn ObjectSource> {
    Arc::new(SnapshotObjects::new(SNAPSHOT.as_bytes().to_vec()))
}

fn load(spec: &HookSpec) -> Result<Box<dyn Hook>, LoadError> {
    runtime()
        .load(spec, objects(), Arc::new(vec![]))
        .map(|h| Box::new(h) as Box<dyn Hook>)
}

fn plan_with(spec: HookSpec) -> Result<Plan, PlanError> {
    plan_loaded(vec![load(&spec).expect("the hostile module loads")])
}

/// Plans the three-node snapshot with hooks already loaded (loading is not part of a call's time).
fn plan_loaded(mut hooks: Vec<Box<dyn Hook>>) -> Result<Plan, PlanError> {
    let snapshot = Snapshot::from_json(SNAPSHOT.as_bytes()).unwrap();
    let options = PlanOptions {
        rolling_update: rollout_ext::policy::RollingUpdate {
            max_surge: None,
            max_unavailable: Some(rollout_ext::policy::IntOrPercent::Int(3)),
        },
        ..Default::default()
    };
    plan_nodes(&snapshot, &Policy::default(), &options, &mut hooks)
}

fn hostile(point: HookPoint, key: &str, mode: &str) -> HookSpec {
    spec(
        wasm_module("hostile-hook"),
        &[point],
        serde_json::json!({ key: mode }),
    )
}

/// Runs the hostile module in `mode` and returns the fault it must end in.
fn fault_of(point: HookPoint, key: &str, mode: &str) -> (HookFault, Duration) {
    let hooks = vec![load(&hostile(point, key, mode)).expect("the hostile module loads")];
    let started = Instant::now();
    let result = plan_loaded(hooks);
    let elapsed = started.elapsed();
    match result {
        Err(PlanError::Hook(HookFailed { hook, fault, .. })) => {
            assert_eq!(hook, "hostile");
            (fault, elapsed)
        }
        other => panic!("{key}={mode}: expected a hook failure, got {other:?}"),
    }
}

#[test]
fn an_infinite_loop_times_out_on_time() {
    let (fault, elapsed) = fault_of(HookPoint::Select, "select", "loop");
    assert_eq!(fault, HookFault::Timeout(Duration::from_millis(300)));
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
}

#[test]
fn a_hook_spending_its_time_in_host_calls_times_out_on_time() {
    let (fault, elapsed) = fault_of(HookPoint::Batch, "batch", "hammer");
    assert_eq!(fault, HookFault::Timeout(Duration::from_millis(300)));
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
}

#[test]
fn pending_instances_are_read_within_bounds() {
    // The first batch is the canary: one instance may go. Reads past it and beyond it answer
    // what exists.
    let (fault, _) = fault_of(HookPoint::Batch, "batch", "read-past");
    assert_eq!(
        fault,
        HookFault::Refused("len 1, past the end 0, all 1".into())
    );
}

#[test]
fn labels_annotations_and_taints_are_read_on_demand() {
    // Selection sees every candidate; the first one's labels come through the resource.
    let (fault, _) = fault_of(HookPoint::Select, "select", "read-labels");
    assert_eq!(
        fault,
        HookFault::Refused(
            "len 3; first n1: zone-label Some(\"a\"), labels [topology.kubernetes.io/zone=a], annotations [rollout-ext.io/needs-update=], taints []".into()
        )
    );
}

#[test]
fn deadlines_hold_after_the_runtime_that_loaded_the_hook_is_gone() {
    let hook = {
        let runtime = HookRuntime::new(None).unwrap();
        let spec = hostile(HookPoint::Select, "select", "loop");
        runtime.load(&spec, objects(), Arc::new(vec![])).unwrap()
    };
    let snapshot = Snapshot::from_json(SNAPSHOT.as_bytes()).unwrap();
    let mut hooks: Vec<Box<dyn Hook>> = vec![Box::new(hook)];
    let started = Instant::now();
    let err = plan_nodes(
        &snapshot,
        &Policy::default(),
        &PlanOptions::default(),
        &mut hooks,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            PlanError::Hook(HookFailed {
                fault: HookFault::Timeout(_),
                ..
            })
        ),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn deadlines_hold_while_the_host_is_busy() {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let burners: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            })
        })
        .collect();
    let (fault, elapsed) = fault_of(HookPoint::Gate, "gate", "loop");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    burners.into_iter().for_each(|t| t.join().unwrap());
    assert!(matches!(fault, HookFault::Timeout(_)), "{fault}");
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
}

#[test]
fn a_memory_bomb_hits_the_memory_limit() {
    let (fault, _) = fault_of(HookPoint::Select, "select", "oom");
    assert_eq!(fault, HookFault::OutOfMemory(32 << 20));
}

#[test]
fn a_panic_is_a_trap_that_carries_the_guest_message() {
    let (fault, _) = fault_of(HookPoint::Select, "select", "trap");
    match fault {
        HookFault::Trap(message) => assert!(message.contains("panics on purpose"), "{message}"),
        other => panic!("expected a trap, got {other}"),
    }
}

#[test]
fn deep_recursion_is_a_trap() {
    // Rust keeps its stack in linear memory, so overflowing it faults as an out-of-bounds access.
    let (fault, _) = fault_of(HookPoint::Select, "select", "recursion");
    assert!(
        matches!(&fault, HookFault::Trap(m) if m.contains("out of bounds") || m.contains("stack overflow")),
        "{fault}"
    );
}

#[test]
fn an_oversized_answer_is_refused() {
    let (fault, _) = fault_of(HookPoint::Select, "select", "huge");
    assert!(matches!(fault, HookFault::AnswerTooLarge { .. }), "{fault}");
}

#[test]
fn invalid_answers_are_faults_not_actions() {
    let cases = [
        (HookPoint::Select, "select", "unknown", "not a candidate"),
        (HookPoint::Select, "select", "duplicate", "twice"),
        (HookPoint::Batch, "batch", "zero", "batch size 0"),
        (
            HookPoint::Batch,
            "batch",
            "over-budget",
            "exceeds the budget",
        ),
        (HookPoint::Batch, "batch", "huge", "exceeds the budget"),
        (HookPoint::Batch, "batch", "pause-forever", "outside"),
        (HookPoint::Gate, "gate", "wait-forever", "outside"),
    ];
    for (point, key, mode, fragment) in cases {
        let (fault, _) = fault_of(point, key, mode);
        assert!(
            matches!(&fault, HookFault::InvalidAnswer(m) if m.contains(fragment)),
            "{mode}: {fault}"
        );
    }
}

#[test]
fn a_guest_error_is_refused() {
    let (fault, _) = fault_of(HookPoint::Select, "select", "refuse");
    assert_eq!(fault, HookFault::Refused("refusing on purpose".into()));
}

#[test]
fn ignore_falls_back_to_the_built_in_with_a_warning() {
    let mut s = hostile(HookPoint::Select, "select", "loop");
    s.failure_policy = FailurePolicy::Ignore;
    let plan = plan_with(s).expect("Ignore keeps planning");
    let group = &plan.groups[0];
    let order: Vec<&str> = group.instances.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(order, ["n1", "n2", "n3"]);
    assert!(
        group
            .instances
            .iter()
            .all(|i| i.decided_by == DecidedBy::BuiltIn)
    );
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.contains("hostile") && w.contains("timed out") && w.contains("Ignore")),
        "{:?}",
        plan.warnings
    );
}

#[test]
fn an_abort_stops_the_plan() {
    let plan = plan_with(hostile(HookPoint::Gate, "gate", "abort")).unwrap();
    let stopped = plan.stopped.expect("the run would stop");
    assert!(stopped.contains("hostile gate says stop"), "{stopped}");
    assert!(plan.groups[0].batches.is_empty());
}

#[test]
fn the_sandbox_grants_no_files_environment_clock_or_network() {
    let plan = plan_with(hostile(HookPoint::Select, "select", "probe")).unwrap();
    let reason = &plan.groups[0].instances[0].reason;
    assert_eq!(reason, "file:denied env:empty clock:frozen socket:denied");
}

#[test]
fn each_escape_attempt_is_denied_on_its_own() {
    for (mode, seen) in [
        ("file", "file:denied"),
        ("env", "env:empty"),
        ("clock", "clock:frozen"),
        ("socket", "socket:denied"),
    ] {
        let (fault, _) = fault_of(HookPoint::Select, "select", mode);
        assert_eq!(fault, HookFault::Refused(seen.into()), "{mode}");
    }
}

#[test]
fn list_objects_reads_only_what_the_policy_allows_and_a_refused_read_is_never_silent() {
    let allowed = Arc::new(vec![rollout_ext::policy::ContextResource {
        api_version: "v1".into(),
        kind: "Node".into(),
        namespace: None,
    }]);
    let plan_of = |failure_policy| {
        let mut spec = hostile(HookPoint::Select, "select", "list-objects");
        spec.failure_policy = failure_policy;
        let hook = runtime().load(&spec, objects(), allowed.clone()).unwrap();
        let snapshot = Snapshot::from_json(SNAPSHOT.as_bytes()).unwrap();
        let mut hooks: Vec<Box<dyn Hook>> = vec![Box::new(hook)];
        plan_nodes(
            &snapshot,
            &Policy::default(),
            &PlanOptions::default(),
            &mut hooks,
        )
    };
    // The module reads the granted Nodes, then Secrets, and answers as if all went well: the
    // refused read fails its call all the same, naming the hook, the point and the kind.
    match plan_of(FailurePolicy::Fail) {
        Err(PlanError::Hook(HookFailed { hook, point, fault })) => {
            assert_eq!((hook.as_str(), point), ("hostile", HookPoint::Select));
            match &fault {
                HookFault::ObjectsNotGranted(read) => assert!(
                    read.starts_with("v1 Secret")
                        && read.contains("which the policy's contextResources does not grant"),
                    "{read}"
                ),
                other => panic!("expected a refused read, got {other}"),
            }
        }
        other => panic!("the plan must fail naming the hook: {other:?}"),
    }
    // Under failurePolicy: Ignore it is a warning, and the built-in choice stands.
    let plan = plan_of(FailurePolicy::Ignore).expect("Ignore keeps planning");
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.starts_with("hook hostile failed at the select point: read v1 Secret")),
        "{:?}",
        plan.warnings
    );
    assert_eq!(plan.groups[0].instances[0].decided_by, DecidedBy::BuiltIn);
}

fn load_error(module: &Path, sha: Option<&str>) -> LoadError {
    let mut s = spec(
        module.to_path_buf(),
        &[HookPoint::Select],
        serde_json::json!({}),
    );
    s.sha256 = sha.map(String::from);
    match load(&s) {
        Err(e) => e,
        Ok(_) => panic!("{} must not load", module.display()),
    }
}

#[test]
fn modules_that_must_not_run_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.wasm");
    std::fs::write(&text, "this is not wasm").unwrap();
    assert!(matches!(load_error(&text, None), LoadError::NotWasm { .. }));

    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    assert!(matches!(
        load_error(&core, None),
        LoadError::CoreModule { .. }
    ));

    let good = std::fs::read(wasm_module("hostile-hook")).unwrap();
    let truncated = dir.path().join("truncated.wasm");
    std::fs::write(&truncated, &good[..good.len() / 2]).unwrap();
    assert!(matches!(
        load_error(&truncated, None),
        LoadError::Compile { .. }
    ));

    let missing = dir.path().join("missing.wasm");
    assert!(matches!(load_error(&missing, None), LoadError::Read { .. }));

    let pinned = load_error(&wasm_module("hostile-hook"), Some(&"0".repeat(64)));
    assert!(
        matches!(pinned, LoadError::Sha256Mismatch { .. }),
        "{pinned}"
    );

    let past = load_error(&wasm_module("wrong-version-hook"), None);
    match &past {
        LoadError::WrongVersion { found, .. } => assert_eq!(found, "rollout-ext:policy@0.1.0"),
        other => panic!("expected a version error, got {other}"),
    }
    assert!(
        past.to_string().contains(&format!(
            "{}@{}",
            rollout_ext::hooks::WIT_PACKAGE,
            rollout_ext::hooks::WIT_VERSION
        )),
        "{past}"
    );
}

#[test]
fn a_point_the_module_lacks_is_refused_at_load() {
    let s = spec(
        wasm_module("error-budget"),
        &[HookPoint::Select],
        serde_json::json!({}),
    );
    match load(&s) {
        Err(LoadError::PointNotImplemented {
            point, implemented, ..
        }) => {
            assert_eq!(point, HookPoint::Select);
            assert_eq!(implemented, "gate");
        }
        Err(other) => panic!("expected a point error, got {other}"),
        Ok(_) => panic!("must not load"),
    }
}

#[test]
fn a_correct_pin_loads_and_compiled_modules_are_cached() {
    let module = wasm_module("zone-spread");
    let digest = {
        use std::process::Command;
        let out = Command::new("sha256sum").arg(&module).output().unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    let cache = tempfile::tempdir().unwrap();
    let runtime = HookRuntime::new(Some(cache.path().to_path_buf())).unwrap();
    let mut s = spec(module, &[HookPoint::Select], serde_json::json!({}));
    s.sha256 = Some(digest.clone());
    let hook = runtime
        .load(&s, objects(), Arc::new(vec![]))
        .expect("pinned module loads");
    assert_eq!(hook.digest(), digest);
    let cached: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(cached.len(), 1);
    assert!(
        cached[0].to_string_lossy().starts_with(&digest),
        "{cached:?}"
    );
    // A second load is served from the cache and behaves the same.
    let again = runtime.load(&s, objects(), Arc::new(vec![])).unwrap();
    assert_eq!(again.info(), hook.info());
}
