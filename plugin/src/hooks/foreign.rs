//! What `hooks inspect` can tell of a module built against another contract version, which this
//! host will not call as a policy: the version and the points from its export names, and its
//! name and SDK version when its `describe` still answers the record this host knows. Every
//! import it has is a trap, so nothing it asks for is granted, and the one call it gets has the
//! load timeout and the default memory limit.

use wasmtime::Store;
use wasmtime::component::{Component, Linker, Val};

use super::sandbox::MemoryLimiter;
use super::{EPOCH_TICK, HookRuntime, LOAD_TIMEOUT, ModuleInfo, WIT_PACKAGE};
use crate::policy::{DEFAULT_HOOK_MEMORY, HookPoint};

/// The interfaces that carry each point, in every contract version so far.
const POINT_INTERFACES: [(&str, HookPoint); 3] = [
    ("selection", HookPoint::Select),
    ("batching", HookPoint::Batch),
    ("gates", HookPoint::Gate),
];

impl HookRuntime {
    /// The module of contract `version` at hand, as far as it can be read.
    pub(super) fn describe_foreign(&self, component: &Component, version: &str) -> ModuleInfo {
        let exports: Vec<String> = component
            .component_type()
            .exports(&self.engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let points = POINT_INTERFACES
            .iter()
            .filter(|(iface, _)| {
                exports
                    .iter()
                    .any(|e| *e == format!("{WIT_PACKAGE}/{iface}@{version}"))
            })
            .map(|(_, point)| *point)
            .collect();
        let (name, sdk_version) = self.call_describe(component, version).unwrap_or_default();
        ModuleInfo {
            name,
            sdk_version,
            wit_version: version.to_string(),
            points,
        }
    }

    /// Its name and SDK version, when `describe` answers a record with those fields.
    fn call_describe(&self, component: &Component, version: &str) -> Option<(String, String)> {
        let mut linker: Linker<MemoryLimiter> = Linker::new(&self.engine);
        linker.define_unknown_imports_as_traps(component).ok()?;
        let limit = usize::try_from(DEFAULT_HOOK_MEMORY).unwrap_or(usize::MAX);
        let _slot = self.slots.take();
        let mut store = Store::new(
            &self.engine,
            MemoryLimiter {
                limit,
                exceeded: false,
            },
        );
        store.limiter(|l| l);
        let ticks = LOAD_TIMEOUT.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64;
        store.set_epoch_deadline(ticks);
        store.epoch_deadline_trap();
        let instance = linker.instantiate(&mut store, component).ok()?;
        let metadata = format!("{WIT_PACKAGE}/metadata@{version}");
        let iface = instance.get_export_index(&mut store, None, &metadata)?;
        let index = instance.get_export_index(&mut store, Some(&iface), "describe")?;
        let func = instance.get_func(&mut store, index)?;
        let ty = func.ty(&store);
        if ty.params().len() != 0 || ty.results().len() != 1 {
            return None;
        }
        let mut results = [Val::Bool(false)];
        func.call(&mut store, &[], &mut results).ok()?;
        let Val::Record(fields) = &results[0] else {
            return None;
        };
        let text = |key: &str| {
            fields.iter().find_map(|(k, v)| match v {
                Val::String(s) if k == key => Some(s.clone()),
                _ => None,
            })
        };
        Some((text("name")?, text("sdk-version").unwrap_or_default()))
    }
}
