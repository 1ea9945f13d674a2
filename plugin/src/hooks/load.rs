//! Loading a policy's hooks: the module's bytes and contract version, what it says about itself,
//! the points the policy enables, and its verdict on its config. Nothing of a hook is asked
//! before this has passed.

use std::path::Path;
use std::sync::Arc;

use super::version::{check_version, compatible, compatible_series};
use super::{Exports, batching, draining, flat_selection, gates, metadata, selection, stage_gates};
use super::{
    HookRuntime, LOAD_TIMEOUT, ModuleInfo, ObjectSource, SnapshotObjects, WIT_PACKAGE, WIT_VERSION,
    WasmHook, first_line, truncate,
};
use crate::metrics::{Metrics, NoMetrics, Prometheus};
use crate::plan::hook::{Hook, HookFault};
use crate::policy::{
    ContextResource, FailurePolicy, HookMode, HookPoint, HookSpec, ModuleSource, PolicyError,
    positions,
};

/// Why a hook module could not be loaded. Nothing has run when this is returned.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read module {module}: {source}")]
    Read {
        module: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{module} is not a WebAssembly file")]
    NotWasm { module: String },
    #[error(
        "{module} is a core WebAssembly module, not a component: build it with `cargo build --target wasm32-wasip2` (or wrap it with `wasm-tools component new`)"
    )]
    CoreModule { module: String },
    #[error("sha256 mismatch for {module}: the policy pins {expected}, the module is {actual}")]
    Sha256Mismatch {
        module: String,
        expected: String,
        actual: String,
    },
    #[error("cannot compile {module}: {message}")]
    Compile { module: String, message: String },
    #[error(
        "{module} was built against {found}, but this plugin speaks {WIT_PACKAGE}@{WIT_VERSION} (and every {}.x): rebuild it with a matching rollout-ext-hooks SDK",
        compatible_series()
    )]
    WrongVersion { module: String, found: String },
    #[error(
        "{module} is not a rollout-ext policy component: it does not export {WIT_PACKAGE}/metadata@{WIT_VERSION}"
    )]
    NotAPolicy { module: String },
    #[error("cannot instantiate {module}: {message}")]
    Instantiate { module: String, message: String },
    #[error("module {module} was not pulled before loading")]
    NotPulled { module: String },
    #[error("the policy enables point {point} but module {module} implements only: {implemented}")]
    PointNotImplemented {
        point: HookPoint,
        module: String,
        implemented: String,
    },
    #[error("module {module} rejects its config: {message}")]
    ConfigRejected { module: String, message: String },
    #[error("module {module} could not check its config: {fault}")]
    ConfigUnchecked { module: String, fault: HookFault },
}

impl LoadError {
    /// The error as a policy error at the hook's entry in `file`; when the module refused its
    /// config, at the key its message names, else at the config's line.
    pub fn at(self, file: &str, spec: &HookSpec) -> PolicyError {
        let (line, column) = match &self {
            LoadError::ConfigRejected { message, .. } => {
                positions::named_in(message, &spec.config_keys)
                    .map_or((spec.config_line, 0), |k| (k.line, k.column))
            }
            LoadError::ConfigUnchecked { .. } => (spec.config_line, 0),
            _ => (spec.line, 0),
        };
        PolicyError {
            file: file.to_string(),
            line,
            column,
            message: format!("hook {}: {self}", spec.name),
        }
    }
}

impl HookRuntime {
    /// Loads the hook a policy entry describes: checks bytes, contract version and points, and
    /// has the module check its config.
    pub fn load(
        &self,
        spec: &HookSpec,
        objects: Arc<dyn ObjectSource>,
        allowed: Arc<Vec<ContextResource>>,
    ) -> Result<WasmHook, LoadError> {
        let mut hook = self.open(spec, objects, allowed)?;
        let info = hook
            .info
            .take()
            .expect("an opened hook has described itself");
        let enabled = spec.points.clone().unwrap_or_else(|| info.points.clone());
        if let Some(point) = enabled.iter().find(|p| !info.points.contains(p)) {
            return Err(LoadError::PointNotImplemented {
                point: *point,
                module: info.name.clone(),
                implemented: HookPoint::list(&info.points),
            });
        }
        hook.left_out = info
            .points
            .iter()
            .filter(|p| !enabled.contains(p))
            .copied()
            .collect();
        hook.points = enabled;
        match hook.validate_config() {
            Ok(Ok(())) => {}
            Ok(Err(message)) => {
                return Err(LoadError::ConfigRejected {
                    module: info.name,
                    message: truncate(&message, 500),
                });
            }
            Err(fault) => {
                return Err(LoadError::ConfigUnchecked {
                    module: info.name,
                    fault,
                });
            }
        }
        hook.info = Some(info);
        Ok(hook)
    }

    /// What a module says about itself and its sha256, without a policy: its config is not
    /// checked and no point is enabled.
    pub fn describe(&self, module: &Path) -> Result<(ModuleInfo, String), LoadError> {
        let spec = HookSpec {
            name: "inspect".into(),
            module: ModuleSource::File(module.to_path_buf()),
            sha256: None,
            points: None,
            config: "{}".into(),
            config_line: 0,
            config_keys: Vec::new(),
            timeout: LOAD_TIMEOUT,
            memory: crate::policy::DEFAULT_HOOK_MEMORY,
            failure_policy: FailurePolicy::Fail,
            mode: HookMode::Enforce,
            metrics: Vec::new(),
            line: 0,
        };
        let empty: Arc<dyn ObjectSource> =
            Arc::new(SnapshotObjects::new(b"{\"items\":[]}".to_vec()));
        let mut hook = self.open(&spec, empty, Arc::new(Vec::new()))?;
        let info = hook
            .info
            .take()
            .expect("an opened hook has described itself");
        Ok((info, hook.digest))
    }

    /// What `hooks inspect` shows of a module: what it says about itself and its sha256, and
    /// whether this host calls it. A module of another contract version is described as far as
    /// it can be read without running it as a policy.
    pub fn inspect(&self, module: &Path) -> Result<(ModuleInfo, String, bool), LoadError> {
        match self.describe(module) {
            Ok((info, digest)) => Ok((info, digest, true)),
            Err(LoadError::WrongVersion { found, .. }) => {
                let (component, digest) =
                    self.compile(module, &module.display().to_string(), None)?;
                let version = found.rsplit_once('@').map_or("", |(_, v)| v);
                Ok((self.describe_foreign(&component, version), digest, false))
            }
            Err(e) => Err(e),
        }
    }

    /// Compiles and pre-instantiates a module and has it describe itself; refuses another
    /// contract version.
    fn open(
        &self,
        spec: &HookSpec,
        objects: Arc<dyn ObjectSource>,
        allowed: Arc<Vec<ContextResource>>,
    ) -> Result<WasmHook, LoadError> {
        let shown = spec.module.to_string();
        let file = (spec.module.file()).ok_or_else(|| LoadError::NotPulled {
            module: shown.clone(),
        })?;
        let (component, digest) = self.compile(file, &shown, spec.sha256.as_deref())?;
        check_version(&self.engine, &component, &shown)?;
        let instance_pre =
            self.linker
                .instantiate_pre(&component)
                .map_err(|e| LoadError::Instantiate {
                    module: shown.clone(),
                    message: first_line(&format!("{e}")),
                })?;
        let not_a_policy = |_| LoadError::NotAPolicy {
            module: shown.clone(),
        };
        // The optional exports, looked up as every export is: any 0.3.x version of one answers.
        let exports_one = |name: &str| {
            let name = format!("{WIT_PACKAGE}/{name}@{WIT_VERSION}");
            component.get_export_index(None, &name).is_some()
        };
        let exports = Exports {
            metadata: metadata::GuestIndices::new(&instance_pre).map_err(not_a_policy)?,
            selection: selection::GuestIndices::new(&instance_pre).map_err(not_a_policy)?,
            flat_selection: match exports_one("flat-selection") {
                false => None,
                true => {
                    Some(flat_selection::GuestIndices::new(&instance_pre).map_err(not_a_policy)?)
                }
            },
            batching: batching::GuestIndices::new(&instance_pre).map_err(not_a_policy)?,
            gates: gates::GuestIndices::new(&instance_pre).map_err(not_a_policy)?,
            draining: match exports_one("draining") {
                false => None,
                true => Some(draining::GuestIndices::new(&instance_pre).map_err(not_a_policy)?),
            },
            stage_gates: match exports_one("stage-gates") {
                false => None,
                true => Some(stage_gates::GuestIndices::new(&instance_pre).map_err(not_a_policy)?),
            },
        };
        let mut hook = WasmHook {
            name: spec.name.clone(),
            points: Vec::new(),
            left_out: Vec::new(),
            failure_policy: spec.failure_policy,
            mode: spec.mode,
            config: spec.config.clone(),
            timeout: spec.timeout,
            memory: spec.memory,
            engine: self.engine.clone(),
            slots: self.slots.clone(),
            pre: instance_pre,
            exports,
            objects,
            allowed,
            metrics: Arc::new(NoMetrics),
            granted: Arc::new(spec.metrics.clone()),
            info: None,
            digest,
        };
        let info = hook.describe().map_err(|fault| LoadError::Instantiate {
            module: shown.clone(),
            message: fault.to_string(),
        })?;
        if !compatible(&info.wit_version) {
            return Err(LoadError::WrongVersion {
                module: shown.clone(),
                found: format!("{WIT_PACKAGE}@{}", info.wit_version),
            });
        }
        hook.info = Some(info);
        Ok(hook)
    }
}

/// Loads every hook of a policy, in order, their metrics queries going to the policy's
/// `metricsSources`. The error names the hook (or the source) and its line.
pub fn load_all(
    runtime: &HookRuntime,
    policy: &crate::policy::Policy,
    objects: Arc<dyn ObjectSource>,
) -> Result<Vec<Box<dyn Hook>>, PolicyError> {
    let metrics: Arc<dyn Metrics> = Arc::new(Prometheus::new(policy)?);
    let allowed = Arc::new(policy.context_resources.clone());
    policy
        .hooks
        .iter()
        .map(|spec| {
            runtime
                .load(spec, objects.clone(), allowed.clone())
                .map(|h| Box::new(h.with_metrics(metrics.clone())) as Box<dyn Hook>)
                .map_err(|e| e.at(&policy.source, spec))
        })
        .collect()
}
