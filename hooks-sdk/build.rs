// Reads the hook contract's name and version from the package declaration of `wit/policy.wit`,
// the one place they are written, into `ROLLOUT_EXT_WIT_PACKAGE` and `ROLLOUT_EXT_WIT_VERSION`
// for `env!`. The plugin's build script includes this file (so no inner doc comments here), and
// host and SDK derive them alike.

/// Compiled into the script, so a change to the WIT rebuilds and reruns it.
const WIT: &str = include_str!("wit/policy.wit");

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let declaration = WIT
        .lines()
        .find_map(|line| line.trim().strip_prefix("package "))
        .and_then(|rest| rest.strip_suffix(';'))
        .expect("policy.wit declares `package NAMESPACE:NAME@VERSION;` on a line of its own");
    let (package, version) = declaration
        .split_once('@')
        .expect("the WIT package declaration carries a version");
    println!("cargo::rustc-env=ROLLOUT_EXT_WIT_PACKAGE={package}");
    println!("cargo::rustc-env=ROLLOUT_EXT_WIT_VERSION={version}");
}
