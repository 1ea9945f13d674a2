//! Which contract versions the host calls: the WIT package's series (0.3.x for 0.3.0), checked
//! by the component's import and export names before anything of it runs.

use wasmtime::Engine;
use wasmtime::component::Component;

use super::{LoadError, WIT_PACKAGE, WIT_VERSION};

/// The contract versions this host accepts: the same minor version (a 0.x series; the same
/// major version from 1.0 on), any patch.
pub fn compatible_series() -> &'static str {
    let mut parts = WIT_VERSION.splitn(3, '.');
    let (major, minor) = (parts.next().unwrap_or("0"), parts.next().unwrap_or("0"));
    let end = if major == "0" {
        major.len() + 1 + minor.len()
    } else {
        major.len()
    };
    &WIT_VERSION[..end]
}

/// Whether a module built against contract `version` can be called by this host.
pub fn compatible(version: &str) -> bool {
    let series = compatible_series();
    version
        .strip_prefix(series)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// Refuses a component built against another version of our WIT package, by its export names,
/// before anything of it runs.
pub(super) fn check_version(
    engine: &Engine,
    component: &Component,
    module: &str,
) -> Result<(), LoadError> {
    let ty = component.component_type();
    let mut has_metadata = false;
    let names = ty
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .chain(ty.imports(engine).map(|(name, _)| name.to_string()));
    for name in names {
        let Some(rest) = name.strip_prefix(&format!("{WIT_PACKAGE}/")) else {
            continue;
        };
        let version = rest
            .split_once('@')
            .map(|(_, v)| v)
            .unwrap_or("(unversioned)");
        if !compatible(version) {
            return Err(LoadError::WrongVersion {
                module: module.to_string(),
                found: format!("{WIT_PACKAGE}@{version}"),
            });
        }
        has_metadata |= rest.starts_with("metadata@");
    }
    if !has_metadata {
        return Err(LoadError::NotAPolicy {
            module: module.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_of_the_same_minor_version_are_compatible() {
        assert_eq!(compatible_series(), "0.3", "this host speaks {WIT_VERSION}");
        for ok in ["0.3.0", "0.3.1", "0.3.17", "0.3"] {
            assert!(compatible(ok), "{ok}");
        }
        for bad in ["0.2.0", "0.4.0", "0.30.0", "1.3.0", "", "(unversioned)"] {
            assert!(!compatible(bad), "{bad}");
        }
    }
}
