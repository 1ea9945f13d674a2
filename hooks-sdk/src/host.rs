//! What the host offers a hook: logging and read-only, allow-listed cluster objects.
//!
//! Compiled natively (in a policy's unit tests) logging goes to stderr and `list_objects` answers
//! an error, so tests never depend on a cluster.

#[cfg(target_arch = "wasm32")]
use crate::bindings::rollout_ext::policy::host as imports;

pub use crate::bindings::rollout_ext::policy::host::Level;

/// Writes a line into the plugin's log, prefixed with the hook's name.
pub fn log(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    imports::log(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level:?}] {message}");
}

/// Lists objects the policy's `contextResources` allow, parsed from the host's JSON array.
pub fn list_objects(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    selector: Option<&str>,
) -> Result<Vec<serde_json::Value>, String> {
    #[cfg(target_arch = "wasm32")]
    {
        let json = imports::list_objects(api_version, kind, namespace, selector)?;
        serde_json::from_str(&json).map_err(|e| format!("host answered invalid JSON: {e}"))
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (namespace, selector);
        Err(format!(
            "list-objects {api_version}/{kind} is only available inside the plugin"
        ))
    }
}
