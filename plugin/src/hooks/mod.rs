//! The WebAssembly host: runs policy hooks as sandboxed components.
//!
//! One [`HookRuntime`] per process ([`HookRuntime::shared`]) holds the engine, the linker and the
//! epoch ticker. Each module is compiled once (and cached on disk, keyed by its sha256 and the
//! engine's compatibility hash) and pre-instantiated; every call gets a fresh store with a memory
//! limit and an epoch deadline, and a WASI context that grants nothing: no files, no environment,
//! no sockets, a clock frozen at the context's `now`. Guest stdout/stderr is captured into our log
//! under the hook's name.
//!
//! This module turns calls into answers or [`HookFault`]s; it never judges an answer's meaning
//! (that is `plan::decide`).

mod calls;
mod convert;
mod distribution;
mod engine;
mod foreign;
mod load;
mod objects;
pub mod registry;
mod sandbox;
mod version;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Instance, InstancePre, Linker, ResourceTable};
use wasmtime::{Engine, Store, Trap};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

use crate::metrics::Metrics;
use crate::plan::hook::{CallContext, HookFault};
use crate::policy::{ContextResource, FailurePolicy, HookMode, HookPoint};

pub use load::{LoadError, load_all};
pub use objects::{NoObjects, ObjectSource, SnapshotObjects};
pub use version::{compatible, compatible_series};

use engine::Slots;
use sandbox::{CallState, FrozenClock, MemoryLimiter, MetricsAccess, capture};

mod bindings {
    wasmtime::component::bindgen!({
        path: "../hooks-sdk/wit",
        // Every point; a module of world `policy` (0.3.0's points) simply lacks `draining`.
        world: "full-policy",
        // The host keeps the candidates as the planner made them; a hook reads what it needs
        // of them through the resource.
        with: {
            "rollout-ext:policy/types.instances": crate::plan::hook::Instances,
        },
        imports: {
            "rollout-ext:policy/types.[method]instances.get": trappable,
            "rollout-ext:policy/types.[method]instances.get-packed": trappable,
            "rollout-ext:policy/types.[method]instances.get-flat": trappable,
            "rollout-ext:policy/types.[method]instances.label": trappable,
            "rollout-ext:policy/types.[method]instances.annotation": trappable,
            "rollout-ext:policy/types.[method]instances.labels": trappable,
            "rollout-ext:policy/types.[method]instances.annotations": trappable,
            "rollout-ext:policy/types.[method]instances.taints": trappable,
        },
        // Arguments are lowered straight from borrowed data: the candidates' strings are not
        // copied before they are copied into the guest.
        ownership: Borrowing { duplicate_if_necessary: true },
    });
}

use bindings::exports::rollout_ext::policy::{
    batching, draining, flat_selection, gates, metadata, selection, stage_gates,
};
use bindings::rollout_ext::policy::host as wit_host;
use bindings::rollout_ext::policy::types as wit;

/// Where a module's exported interfaces are, found once at load. `draining` (contract 0.3.1) is
/// optional: a module without it orders no drains. So is `flat-selection` (0.3.4): a module
/// with it is asked `select-flat` instead of `select`. And `stage-gates` (0.3.6): a module
/// without it is not asked before a fleet's stages.
struct Exports {
    metadata: metadata::GuestIndices,
    selection: selection::GuestIndices,
    flat_selection: Option<flat_selection::GuestIndices>,
    batching: batching::GuestIndices,
    gates: gates::GuestIndices,
    draining: Option<draining::GuestIndices>,
    stage_gates: Option<stage_gates::GuestIndices>,
}

/// The WIT package this host speaks, read from the same file `bindgen!` reads (see build.rs).
pub const WIT_PACKAGE: &str = env!("ROLLOUT_EXT_WIT_PACKAGE");
/// The version of [`WIT_PACKAGE`] this host speaks.
pub const WIT_VERSION: &str = env!("ROLLOUT_EXT_WIT_VERSION");

/// How often the epoch advances; deadlines are counted in these ticks.
const EPOCH_TICK: Duration = Duration::from_millis(5);
/// Captured guest stdout/stderr per call.
const GUEST_OUTPUT_LIMIT: usize = 64 << 10;
/// Log lines a guest may write per call.
const GUEST_LOG_LINES: usize = 200;
/// The largest answer a hook may give, in bytes of strings.
pub const ANSWER_LIMIT: usize = 1 << 20;
/// How long instantiating a module and describing itself may take.
const LOAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Engine, linker and epoch ticker, shared by every hook of the process.
pub struct HookRuntime {
    engine: Engine,
    slots: Arc<Slots>,
    linker: Arc<Linker<CallState>>,
    cache_dir: Option<PathBuf>,
}

impl HookRuntime {
    /// The process's runtime, built on first use with the default cache. Every command shares it,
    /// so the engine is configured and its epoch thread started once. A failure to build it is
    /// kept too: trying again would fail the same way.
    pub fn shared() -> wasmtime::Result<&'static HookRuntime> {
        static SHARED: OnceLock<Result<HookRuntime, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                HookRuntime::new(HookRuntime::default_cache_dir()).map_err(|e| format!("{e:#}"))
            })
            .as_ref()
            .map_err(|e| wasmtime::Error::msg(e.clone()))
    }

    /// Builds a runtime of its own, with its own epoch thread. `cache_dir` holds compiled
    /// modules; `None` disables the disk cache. Commands use [`HookRuntime::shared`]; this is for
    /// tests and benchmarks that need a cache of their own.
    pub fn new(cache_dir: Option<PathBuf>) -> wasmtime::Result<HookRuntime> {
        let engine = engine::engine()?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        bindings::FullPolicy::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)?;

        // The epoch ticks on its own thread so deadlines hold however busy the host is. It
        // ticks as long as the engine lives: the runtime and every loaded hook hold it, so a hook
        // outliving the runtime that loaded it keeps its deadline.
        let ticker_engine = engine.weak();
        std::thread::Builder::new()
            .name("hook-epoch".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(EPOCH_TICK);
                    match ticker_engine.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(wasmtime::Error::from)?;

        Ok(HookRuntime {
            engine,
            slots: Arc::new(Slots::new()),
            linker: Arc::new(linker),
            cache_dir,
        })
    }

    /// The default compile cache: `$XDG_CACHE_HOME/rollout-ext/hooks` or `~/.cache/...`.
    fn default_cache_dir() -> Option<PathBuf> {
        Some(cache_base()?.join("hooks"))
    }

    /// Compiles (or loads from the cache) the component in `path`, after checking its bytes;
    /// errors name it `module` (a registry module's reference rather than its cached file).
    pub fn compile(
        &self,
        path: &Path,
        module: &str,
        pinned: Option<&str>,
    ) -> Result<(Component, String), LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            module: module.to_string(),
            source,
        })?;
        let digest = hex::encode(Sha256::digest(&bytes));
        if let Some(expected) = pinned
            && expected != digest
        {
            return Err(LoadError::Sha256Mismatch {
                module: module.to_string(),
                expected: expected.to_string(),
                actual: digest,
            });
        }
        if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
            return Err(LoadError::NotWasm {
                module: module.to_string(),
            });
        }
        // Byte 6 is the layer: 0 for a core module, 1 for a component.
        if bytes[6] == 0 {
            return Err(LoadError::CoreModule {
                module: module.to_string(),
            });
        }
        let cached = self
            .cache_path(&digest)
            .filter(|f| f.parent().is_none_or(|d| !d.exists() || private_dir(d)));
        if let Some(file) = &cached
            && file.exists()
        {
            // SAFETY: the file was written by `Component::serialize` of this engine
            // configuration (its name carries the engine's compatibility hash); wasmtime still
            // checks its header and refuses a mismatch, in which case we recompile.
            if let Ok(component) = unsafe { Component::deserialize_file(&self.engine, file) } {
                return Ok((component, digest));
            }
        }
        let component = Component::new(&self.engine, &bytes).map_err(|e| LoadError::Compile {
            module: module.to_string(),
            message: first_line(&format!("{e}")),
        })?;
        if let Some(file) = cached
            && let Ok(serialized) = component.serialize()
        {
            let _ = store_atomically(&file, &serialized);
        }
        Ok((component, digest))
    }

    fn cache_path(&self, digest: &str) -> Option<PathBuf> {
        use std::hash::{Hash, Hasher};
        let dir = self.cache_dir.as_ref()?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        Some(dir.join(format!("{digest}-{:016x}.cwasm", h.finish())))
    }
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}

/// This tool's cache directory: `$XDG_CACHE_HOME/rollout-ext` or `~/.cache/rollout-ext` (on
/// Windows, without those, the user's `%LOCALAPPDATA%\rollout-ext`).
fn cache_base() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .or_else(|| {
            cfg!(windows)
                .then(|| std::env::var_os("LOCALAPPDATA").map(PathBuf::from))
                .flatten()
        })?;
    Some(base.join("rollout-ext"))
}

/// Writes through a temporary file and a rename, so a reader never sees half a file, into a
/// directory private to this user; whether it was stored.
fn store_atomically(file: &Path, bytes: &[u8]) -> bool {
    let Some(dir) = file.parent() else {
        return false;
    };
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    if builder.create(dir).is_err() || !private_dir(dir) {
        return false;
    }
    let tmp = dir.join(format!(
        ".{}.{}",
        std::process::id(),
        file.file_name().unwrap_or_default().to_string_lossy()
    ));
    let stored = std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, file).is_ok();
    if !stored {
        let _ = std::fs::remove_file(&tmp);
    }
    stored
}

/// The cache holds native code that is loaded as is: use it only when the directory belongs to
/// this user and nobody else may write to it.
#[cfg(unix)]
fn private_dir(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).is_ok_and(|m| {
        // SAFETY: geteuid has no preconditions and cannot fail.
        m.is_dir() && m.uid() == unsafe { libc::geteuid() } && m.mode() & 0o022 == 0
    })
}

/// On Windows, a directory under the user's profile (`%LOCALAPPDATA%`, or the home named by
/// `XDG_CACHE_HOME`/`HOME`) is that user's alone by the profile's own access rules.
#[cfg(not(unix))]
fn private_dir(dir: &Path) -> bool {
    dir.is_dir()
}

/// What a module says about itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModuleInfo {
    pub name: String,
    pub sdk_version: String,
    pub wit_version: String,
    pub points: Vec<HookPoint>,
}

/// A loaded hook: a pre-instantiated component plus its policy settings.
pub struct WasmHook {
    name: String,
    /// The points it is asked at: the policy's, else all the module implements.
    points: Vec<HookPoint>,
    /// Points the module implements that the policy does not enable.
    left_out: Vec<HookPoint>,
    failure_policy: FailurePolicy,
    mode: HookMode,
    config: String,
    timeout: Duration,
    memory: u64,
    engine: Engine,
    slots: Arc<Slots>,
    pre: InstancePre<CallState>,
    exports: Exports,
    objects: Arc<dyn ObjectSource>,
    allowed: Arc<Vec<ContextResource>>,
    /// Where its metrics queries go, and the sources the policy grants it.
    metrics: Arc<dyn Metrics>,
    granted: Arc<Vec<String>>,
    info: Option<ModuleInfo>,
    digest: String,
}

impl WasmHook {
    pub fn info(&self) -> Option<&ModuleInfo> {
        self.info.as_ref()
    }

    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The hook, with its metrics queries answered by `metrics` (of the sources its policy
    /// entry grants it).
    pub fn with_metrics(mut self, metrics: Arc<dyn Metrics>) -> WasmHook {
        self.metrics = metrics;
        self
    }

    /// Runs `f` against a fresh instance with the hook's limits, mapping every failure to a fault.
    /// Calls the module with `ctx`'s clock and estimates (none: at load, at 0 and with none).
    fn call<T>(
        &self,
        ctx: Option<&CallContext>,
        timeout: Duration,
        f: impl FnOnce(&Exports, &Instance, &mut Store<CallState>) -> wasmtime::Result<T>,
    ) -> Result<T, HookFault> {
        let stdout = MemoryOutputPipe::new(GUEST_OUTPUT_LIMIT);
        let stderr = MemoryOutputPipe::new(GUEST_OUTPUT_LIMIT);
        let now = ctx.map_or(0, |c| c.now);
        let wall = Duration::from_secs(u64::try_from(now).unwrap_or(0));
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .wall_clock(FrozenClock(wall))
            .monotonic_clock(FrozenClock(wall))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let state = CallState {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                limit: usize::try_from(self.memory).unwrap_or(usize::MAX),
                exceeded: false,
            },
            hook: self.name.clone(),
            timing: ctx.map(|c| c.timing.clone()).unwrap_or_default(),
            others: ctx.map(|c| c.others.clone()).unwrap_or_default(),
            log_lines: 0,
            objects: self.objects.clone(),
            allowed: self.allowed.clone(),
            objects_denied: None,
            metrics: MetricsAccess {
                sources: self.metrics.clone(),
                granted: self.granted.clone(),
                deadline: Instant::now() + timeout,
                denied: None,
                cut_off: None,
            },
        };
        // Dropped after the store, which gives the instance back to the pool.
        let _slot = self.slots.take();
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        let ticks = timeout.as_nanos().div_ceil(EPOCH_TICK.as_nanos()).max(1) as u64;
        store.set_epoch_deadline(ticks);
        store.epoch_deadline_trap();

        let result = self
            .pre
            .instantiate(&mut store)
            .and_then(|instance| f(&self.exports, &instance, &mut store));
        let output = capture(&self.name, &stdout, &stderr);
        let state = store.data();
        if let Some(source) = &state.metrics.denied {
            return Err(HookFault::MetricsNotGranted(source.clone()));
        }
        if let Some(read) = &state.objects_denied {
            return Err(HookFault::ObjectsNotGranted(read.clone()));
        }
        if let Some(source) = &state.metrics.cut_off {
            return Err(HookFault::MetricsTimeout {
                after: timeout,
                name: source.clone(),
            });
        }
        result.map_err(|err| {
            if state.limiter.exceeded {
                return HookFault::OutOfMemory(self.memory);
            }
            match err.downcast_ref::<Trap>() {
                Some(Trap::Interrupt) => HookFault::Timeout(timeout),
                Some(trap) => {
                    let detail = output
                        .map(|line| format!(" (guest said: {line})"))
                        .unwrap_or_default();
                    HookFault::Trap(format!("{trap}{detail}"))
                }
                None => HookFault::Trap(first_line(&format!("{err}"))),
            }
        })
    }

    /// The module's verdict on the hook's config, asked once at load.
    fn validate_config(&self) -> Result<Result<(), String>, HookFault> {
        self.call(None, LOAD_TIMEOUT, |e, instance, store| {
            e.metadata
                .load(&mut *store, instance)?
                .call_validate_config(store, &self.config)
        })
    }

    fn describe(&mut self) -> Result<ModuleInfo, HookFault> {
        let (info, orders_drains) = self.call(None, LOAD_TIMEOUT, |e, instance, store| {
            let info = e
                .metadata
                .load(&mut *store, instance)?
                .call_describe(&mut *store)?;
            let orders_drains = match &e.draining {
                Some(d) => d.load(&mut *store, instance)?.call_orders_drains(store)?,
                None => false,
            };
            Ok((info, orders_drains))
        })?;
        let mut points: Vec<HookPoint> = info
            .points
            .into_iter()
            .map(convert::point_from_wit)
            .collect();
        // `hook-point` keeps 0.3.0's cases; a 0.3.1 module says it orders drains itself.
        if orders_drains {
            points.push(HookPoint::DrainOrder);
        }
        Ok(ModuleInfo {
            name: info.name,
            sdk_version: info.sdk_version,
            wit_version: info.wit_version,
            points,
        })
    }

    fn context<'a>(&'a self, ctx: &'a CallContext) -> wit::Context<'a> {
        wit::Context {
            now: ctx.now,
            run_id: &ctx.run_id,
            dry_run: ctx.dry_run,
            hook_name: &self.name,
            config: &self.config,
        }
    }
}

/// The guest's own error string becomes a `Refused` fault.
fn refused<T>(answer: Result<T, String>) -> Result<T, HookFault> {
    answer.map_err(|e| HookFault::Refused(truncate(&e, 500)))
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn check_size(size: usize) -> Result<(), HookFault> {
    if size > ANSWER_LIMIT {
        return Err(HookFault::AnswerTooLarge {
            size,
            limit: ANSWER_LIMIT,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_caller_gets_the_one_shared_runtime() {
        let callers: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(HookRuntime::shared))
            .collect();
        let first = HookRuntime::shared().expect("the runtime starts");
        assert_eq!(first.cache_dir, HookRuntime::default_cache_dir());
        for caller in callers {
            let other = caller.join().unwrap().expect("the runtime starts");
            assert!(std::ptr::eq(other, first));
        }
    }
}
