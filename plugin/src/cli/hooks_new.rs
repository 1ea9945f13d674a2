//! `hooks new NAME --lang rust|python|js`: a hook project that builds and passes its own tests
//! as written: the hook (three rules, one per point), its unit tests on the SDK's builders or
//! stand-in host, a policy that deploys it, a fixture per point with their snapshot, and
//! `build.sh` and `test.sh`. Python and JavaScript projects carry the SDK files their build and
//! tests need (`sdk/`); a Rust one depends on the SDK crate.

use std::path::{Path, PathBuf};

use super::Failure;

/// What `hooks new` is asked.
#[derive(Debug, clap::Args)]
pub struct NewHook {
    /// The hook's name: its directory, module file and policy entry (lowercase letters, digits
    /// and dashes).
    name: String,
    /// The language it is written in.
    #[arg(long, value_enum)]
    lang: Language,
    /// Where to write it (default: ./NAME); it must not exist, or be empty.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Rust: the SDK crate as a checkout's hooks-sdk directory (default: a git dependency on
    /// this release of the repository).
    #[arg(long, value_name = "PATH")]
    sdk: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    Rust,
    Python,
    Js,
}

/// A file of the project: its path and its template.
type Template = (&'static str, &'static str);

const COMMON: &[Template] = &[
    ("policy.yaml", include_str!("scaffold/common/policy.yaml")),
    (
        "fixtures/snapshot.json",
        include_str!("scaffold/common/fixtures/snapshot.json"),
    ),
    (
        "fixtures/order.yaml",
        include_str!("scaffold/common/fixtures/order.yaml"),
    ),
    (
        "fixtures/batches.yaml",
        include_str!("scaffold/common/fixtures/batches.yaml"),
    ),
    (
        "fixtures/gate.yaml",
        include_str!("scaffold/common/fixtures/gate.yaml"),
    ),
    ("test.sh", include_str!("scaffold/common/test.sh")),
    ("README.md", include_str!("scaffold/common/README.md")),
];

const RUST: &[Template] = &[
    ("Cargo.toml", include_str!("scaffold/rust/Cargo.toml")),
    ("src/lib.rs", include_str!("scaffold/rust/src/lib.rs")),
    ("src/tests.rs", include_str!("scaffold/rust/src/tests.rs")),
    ("build.sh", include_str!("scaffold/rust/build.sh")),
];

const WIT: Template = (
    "sdk/wit/policy.wit",
    include_str!("../../../hooks-sdk/wit/policy.wit"),
);

const PYTHON: &[Template] = &[
    ("app.py", include_str!("scaffold/python/app.py")),
    ("test_app.py", include_str!("scaffold/python/test_app.py")),
    ("build.sh", include_str!("scaffold/python/build.sh")),
    WIT,
    (
        "sdk/python/build.sh",
        include_str!("../../../hooks-sdk/python/build.sh"),
    ),
    (
        "sdk/python/rollout_ext_hooks.py",
        include_str!("../../../hooks-sdk/python/rollout_ext_hooks.py"),
    ),
    (
        "sdk/python/rollout_ext_testing.py",
        include_str!("../../../hooks-sdk/python/rollout_ext_testing.py"),
    ),
];

const JS: &[Template] = &[
    ("app.js", include_str!("scaffold/js/app.js")),
    ("app.test.mjs", include_str!("scaffold/js/app.test.mjs")),
    ("build.sh", include_str!("scaffold/js/build.sh")),
    WIT,
    (
        "sdk/js/build.sh",
        include_str!("../../../hooks-sdk/js/build.sh"),
    ),
    (
        "sdk/js/rollout_ext_hooks.js",
        include_str!("../../../hooks-sdk/js/rollout_ext_hooks.js"),
    ),
    (
        "sdk/js/rollout_ext_testing.js",
        include_str!("../../../hooks-sdk/js/rollout_ext_testing.js"),
    ),
];

/// The repository a Rust project's SDK comes from by default, at this release.
const REPOSITORY: &str = env!("CARGO_PKG_REPOSITORY");

pub fn run(new: NewHook) -> Result<(), Failure> {
    check_name(&new.name)?;
    if new.sdk.is_some() && new.lang != Language::Rust {
        return Err(Failure::usage(
            "--sdk is for Rust projects: a Python or JavaScript project carries its SDK files",
        ));
    }
    let dir = new.dir.clone().unwrap_or_else(|| PathBuf::from(&new.name));
    let occupied = std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some());
    if occupied || dir.is_file() {
        return Err(Failure::usage(format!(
            "{} already exists and is not empty: nothing was written (name another with --dir)",
            dir.display()
        )));
    }
    let (files, language, unit_tests) = match new.lang {
        Language::Rust => (RUST, "Rust", "cargo test"),
        Language::Python => (PYTHON, "Python", "python3 -m unittest"),
        Language::Js => (JS, "JavaScript", "node --test"),
    };
    let sdk = match &new.sdk {
        Some(path) => {
            let path = std::fs::canonicalize(path)
                .map_err(|e| Failure::usage(format!("--sdk {}: {e}", path.display())))?;
            if !path.join("Cargo.toml").is_file() {
                return Err(Failure::usage(format!(
                    "--sdk {}: not the SDK crate (no Cargo.toml): name a checkout's hooks-sdk directory",
                    path.display()
                )));
            }
            format!("{{ path = {:?} }}", path.display().to_string())
        }
        None => format!(
            "{{ git = {REPOSITORY:?}, tag = \"v{}\" }}",
            env!("CARGO_PKG_VERSION")
        ),
    };
    let fill = |text: &str| {
        text.replace("{{name}}", &new.name)
            .replace("{{crate}}", &new.name.replace('-', "_"))
            .replace("{{sdk}}", &sdk)
            .replace("{{language}}", language)
            .replace("{{unit_tests}}", unit_tests)
    };
    for (path, text) in COMMON.iter().chain(files) {
        write(&dir.join(path), &fill(text))?;
    }
    println!(
        "wrote a {language} hook in {}:\n  cd {}\n  ./build.sh      # {}.wasm\n  ./test.sh       # {unit_tests}, then hooks test against each fixture",
        dir.display(),
        dir.display(),
        new.name
    );
    Ok(())
}

/// A name that is a module file, a crate and a policy entry alike.
fn check_name(name: &str) -> Result<(), Failure> {
    let starts = name.chars().next().is_some_and(|c| c.is_ascii_lowercase());
    let chars = (name.chars()).all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    match starts && chars && !name.ends_with('-') && name.len() <= 63 {
        true => Ok(()),
        false => Err(Failure::usage(format!(
            "hook name {name:?}: expected lowercase letters, digits and dashes, starting with a letter (at most 63)"
        ))),
    }
}

fn write(path: &Path, text: &str) -> Result<(), Failure> {
    let failed =
        |e: std::io::Error| Failure::failed(format!("cannot write {}: {e}", path.display()));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(failed)?;
    }
    std::fs::write(path, text).map_err(failed)?;
    // The scripts are run as they are.
    #[cfg(unix)]
    if path.extension().is_some_and(|e| e == "sh") {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(failed)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_module_crate_and_entry_names() {
        for good in ["site", "site-policy-2"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "Site", "2site", "site-", "site_policy", "site policy"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_placeholder_is_filled() {
        for (path, text) in COMMON.iter().chain(RUST).chain(PYTHON).chain(JS) {
            let known = [
                "{{name}}",
                "{{crate}}",
                "{{sdk}}",
                "{{language}}",
                "{{unit_tests}}",
            ];
            let mut rest = text.to_string();
            for k in known {
                rest = rest.replace(k, "");
            }
            assert!(
                !rest.contains("{{"),
                "{path} has a placeholder no one fills"
            );
        }
    }
}
