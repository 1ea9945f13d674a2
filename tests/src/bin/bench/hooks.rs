//! The cost of a hook: one call with 5,000 candidates on a warm module, a load from the on-disk
//! compile cache, and a first compile — against the same policy (zone-spread) as native Rust.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rollout_ext::hooks::{HookRuntime, SnapshotObjects, WasmHook};
use rollout_ext::plan::Role;
use rollout_ext::plan::hook::{
    CallContext, Candidate, GroupInfo, Hook, InstanceKind, Instances, Progress,
};
use rollout_ext::policy::{FailurePolicy, HookMode, HookPoint, HookSpec};
use rollout_ext_e2e::wasm_module;
use rollout_ext_hooks::Policy as _;
use zone_spread::ZoneSpread;

use crate::Row;
use crate::measure::median_of;

const CANDIDATES: usize = 5_000;
const ZONES: usize = 3;
/// The group's budget, the largest batch: all of it, so that a batching hook is offered every
/// candidate (and reads only what it needs).
const MAX_BATCH: u32 = CANDIDATES as u32;
/// Micro-measurements are cheap: take at least this many samples.
const MIN_SAMPLES: usize = 25;

fn zone(i: usize) -> String {
    format!("zone-{}", i % ZONES)
}

/// 5,000 outdated nodes across three zones, as the host passes them to a hook.
fn candidates() -> Vec<Candidate> {
    (0..CANDIDATES)
        .map(|i| Candidate {
            kind: InstanceKind::Node,
            name: format!("node-{i:05}"),
            group: "nodes".into(),
            role: Role::Node,
            zone: Some(zone(i)),
            labels: [
                ("topology.kubernetes.io/zone".to_string(), zone(i)),
                ("kops.k8s.io/instancegroup".to_string(), "nodes".to_string()),
            ]
            .into_iter()
            .collect(),
            annotations: Default::default(),
            taints: vec![],
            ready: true,
            unschedulable: false,
            created: Some(1_780_000_000 + i as i64),
            kubelet_version: Some("v1.19.7".into()),
            pods: 30,
            pods_not_ready: 0,
            up_to_date: false,
            reason: Some("kubelet v1.19.7, want v1.20.2".into()),
        })
        .collect()
}

/// The same candidates as the policy's own Rust types, for the native call.
fn native_instances(candidates: &[Candidate]) -> Vec<rollout_ext_hooks::LocalInstance> {
    candidates
        .iter()
        .map(|c| {
            let mut instance =
                rollout_ext_hooks::testing::node(&c.name, c.zone.as_deref().unwrap_or(""));
            instance.labels = c
                .labels
                .iter()
                .map(|(k, v)| rollout_ext_hooks::KeyValue {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect();
            instance.created = c.created;
            instance.kubelet_version = c.kubelet_version.clone();
            instance.pods = c.pods;
            instance.reason = c.reason.clone();
            instance
        })
        .collect()
}

fn spec() -> HookSpec {
    HookSpec {
        name: "zone-spread".into(),
        module: rollout_ext::policy::ModuleSource::File(wasm_module("zone_spread")),
        sha256: None,
        points: Some(vec![HookPoint::Select, HookPoint::Batch]),
        config: r#"{"maxPerZone": 1}"#.into(),
        config_line: 1,
        config_keys: Vec::new(),
        timeout: Duration::from_secs(10),
        memory: 256 << 20,
        failure_policy: FailurePolicy::Fail,
        mode: HookMode::Enforce,
        metrics: Vec::new(),
        line: 1,
    }
}

fn runtime(cache: &Path) -> anyhow::Result<HookRuntime> {
    HookRuntime::new(Some(cache.to_path_buf())).map_err(|e| anyhow::anyhow!("hook runtime: {e}"))
}

fn load(runtime: &HookRuntime) -> anyhow::Result<WasmHook> {
    let objects = Arc::new(SnapshotObjects::new(
        br#"{"kind":"List","apiVersion":"v1","items":[]}"#.to_vec(),
    ));
    Ok(runtime.load(&spec(), objects, Arc::new(vec![]))?)
}

fn timed<T>(f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<Duration> {
    let started = Instant::now();
    std::hint::black_box(f()?);
    Ok(started.elapsed())
}

/// The native build of the same policy, a shared library beside this binary (`make bench`
/// builds it): what loading a native policy would cost.
fn native_library() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let file = exe
        .parent()
        .context("the bench sits in a directory")?
        .join("libzone_spread.so");
    if !file.exists() {
        bail!("{} is missing: run `make bench`", file.display());
    }
    Ok(file)
}

fn dlopen(file: &Path) -> anyhow::Result<()> {
    let name = CString::new(file.as_os_str().as_encoded_bytes())?;
    // SAFETY: the library is our own policy crate built natively; it has no initialisers with
    // side effects, and it is closed again at once.
    unsafe {
        let handle = libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if handle.is_null() {
            bail!("dlopen {} failed", file.display());
        }
        libc::dlclose(handle);
    }
    Ok(())
}

/// One call's inputs, for the hook and for the native peer.
struct Inputs {
    candidates: Instances,
    instances: Vec<rollout_ext_hooks::LocalInstance>,
    group: GroupInfo,
    native_group: rollout_ext_hooks::Group,
    ctx: CallContext,
    native_ctx: rollout_ext_hooks::Context,
}

impl Inputs {
    fn new() -> Inputs {
        let candidates = candidates();
        let instances = native_instances(&candidates);
        let native_group = rollout_ext_hooks::testing::group(&instances, 0, MAX_BATCH);
        let ctx = CallContext {
            now: 1_795_000_000,
            run_id: "bench".into(),
            dry_run: true,
            timing: Default::default(),
            others: Vec::new(),
        };
        let native_ctx =
            rollout_ext_hooks::testing::context(ctx.now, serde_json::json!({"maxPerZone": 1}));
        Inputs {
            candidates: Instances::from(candidates),
            instances,
            group: GroupInfo {
                name: "nodes".into(),
                role: Role::Node,
                size: CANDIDATES as u32,
                up_to_date: 0,
                selected: CANDIDATES as u32,
                max_surge: 0,
                max_unavailable: MAX_BATCH,
            },
            native_group,
            ctx,
            native_ctx,
        }
    }

    fn native_offered(&self) -> rollout_ext_hooks::Instances<'static> {
        rollout_ext_hooks::testing::candidates(self.instances.clone())
    }
}

/// The calls `--repeat` makes, for a profiler to look at one of them alone.
pub const REPEATABLE: &[&str] = &["select", "native-select"];

/// Makes one call `times` times over after a warm-up, untimed but for a total on stderr: what a
/// profiler (`valgrind --tool=callgrind`, `perf record`) should look at, without the rest of
/// the section around it.
pub fn repeat(call: &str, times: usize, work: &Path) -> anyhow::Result<()> {
    let inputs = Inputs::new();
    let started;
    match call {
        "select" => {
            let runtime = runtime(&work.join("hook-cache"))?;
            let mut hook = load(&runtime)?;
            hook.select(&inputs.ctx, &inputs.group, &inputs.candidates)?;
            started = Instant::now();
            for _ in 0..times {
                std::hint::black_box(hook.select(
                    &inputs.ctx,
                    &inputs.group,
                    &inputs.candidates,
                )?);
            }
        }
        "native-select" => {
            let offered = inputs.native_offered();
            started = Instant::now();
            for _ in 0..times {
                std::hint::black_box(
                    ZoneSpread::select(&inputs.native_ctx, &inputs.native_group, &offered)
                        .map_err(anyhow::Error::msg)?,
                );
            }
        }
        other => bail!(
            "--repeat: unknown call {other:?} (known: {})",
            REPEATABLE.join(", ")
        ),
    }
    let total = started.elapsed();
    eprintln!(
        "bench: {times} × {call}: {} in all, {} each",
        crate::measure::show(total),
        crate::measure::show(total / u32::try_from(times.max(1)).unwrap_or(u32::MAX))
    );
    Ok(())
}

pub fn run(runs: usize, work: &Path) -> anyhow::Result<Vec<Row>> {
    let samples = runs.max(MIN_SAMPLES);
    let Inputs {
        candidates: offered,
        instances,
        group,
        native_group,
        ctx,
        native_ctx,
    } = Inputs::new();

    // First compile: a fresh cache each time.
    let mut fresh = 0;
    let compile = median_of(runs, || {
        fresh += 1;
        let runtime = runtime(&work.join(format!("compile-cache-{fresh}")))?;
        timed(|| load(&runtime))
    })?;
    // From the cache: the runtime of a warm process reading the compiled module from disk.
    let runtime = runtime(&work.join("hook-cache"))?;
    load(&runtime)?;
    let cached = median_of(samples, || timed(|| load(&runtime)))?;
    let library = native_library()?;
    let native_load = median_of(samples, || timed(|| dlopen(&library)))?;

    let mut hook = load(&runtime)?;
    hook.select(&ctx, &group, &offered)?;
    let select = median_of(samples, || {
        timed(|| Ok(hook.select(&ctx, &group, &offered)?))
    })?;
    let native_offered = rollout_ext_hooks::testing::candidates(instances.clone());
    let native_select = median_of(samples, || {
        timed(|| {
            ZoneSpread::select(&native_ctx, &native_group, &native_offered)
                .map_err(anyhow::Error::msg)
        })
    })?;
    // The planner offers a batching hook the instances the batch may take (max-batch).
    let progress = Progress {
        group: &group,
        batches_done: 0,
        updated: 0,
        pending: offered.window(0, MAX_BATCH as usize),
        max_batch: MAX_BATCH,
        max_batch_reason: "the budget".into(),
    };
    let native_progress = rollout_ext_hooks::testing::progress(
        native_group.clone(),
        instances[..MAX_BATCH as usize].to_vec(),
        0,
        0,
    );
    let batch = median_of(samples, || timed(|| Ok(hook.next_batch(&ctx, &progress)?)))?;
    let native_batch = median_of(samples, || {
        timed(|| ZoneSpread::next_batch(&native_ctx, &native_progress).map_err(anyhow::Error::msg))
    })?;

    let ms = Duration::from_millis;
    Ok(vec![
        Row::timed(
            format!("Hook call, select over {CANDIDATES} candidates (zone-spread, warm)"),
            select,
            "the same policy as native Rust",
            native_select,
        )
        .target("< 2 ms", select < ms(2)),
        Row::timed(
            format!(
                "Hook call, next-batch offered {MAX_BATCH} pending instances (zone-spread, warm)"
            ),
            batch,
            "the same policy as native Rust",
            native_batch,
        )
        .target("< 5 ms", batch < ms(5)),
        Row::timed(
            "Hook load from the on-disk compile cache (zone-spread)".into(),
            cached,
            "dlopen of the policy built as a native library",
            native_load,
        )
        .target("< 20 ms", cached < ms(20)),
        Row::timed(
            "Hook first compile, empty cache (zone-spread)".into(),
            compile,
            "dlopen of the policy built as a native library",
            native_load,
        ),
    ])
}
