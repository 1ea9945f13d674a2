//! The plugin's layers point one way: cli → executors (rotate, workload, fleet) → cluster, provider,
//! hooks, metrics, progress → events → plan → model. These rules are read from the sources: a
//! module that imports a layer above it fails here, with the file and the line.

use std::path::{Path, PathBuf};

use rollout_ext_e2e::workspace_root;

fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// Lines of the module `module` (a file or a folder under plugin/src) that name `crate::<x>`
/// for a forbidden `x`.
fn violations(module: &str, forbidden: &[&str]) -> Vec<String> {
    let src = workspace_root().join("plugin/src");
    let mut files = Vec::new();
    let file = src.join(format!("{module}.rs"));
    if file.exists() {
        files.push(file);
    }
    if src.join(module).is_dir() {
        files.extend(sources(&src.join(module)));
    }
    assert!(!files.is_empty(), "no module {module}");
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for layer in forbidden {
                let path = format!("crate::{layer}");
                let hit = line.match_indices(&path).any(|(i, _)| {
                    !line[i + path.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
                });
                if hit && !line.trim_start().starts_with("//") {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn layers_point_one_way() {
    let rules: &[(&str, &[&str])] = &[
        (
            "plan",
            &[
                "cli", "rotate", "workload", "fleet", "cluster", "provider", "hooks", "progress",
                "events",
            ],
        ),
        (
            "policy",
            &[
                "cli", "rotate", "workload", "fleet", "cluster", "provider", "hooks", "progress",
            ],
        ),
        (
            "cluster",
            &["cli", "rotate", "workload", "fleet", "progress"],
        ),
        (
            "metrics",
            &[
                "cli", "rotate", "workload", "fleet", "cluster", "provider", "hooks", "progress",
                "events", "plan",
            ],
        ),
        (
            "provider",
            &["cli", "rotate", "workload", "fleet", "progress"],
        ),
        (
            "events",
            &[
                "cli", "rotate", "workload", "fleet", "cluster", "provider", "hooks", "progress",
            ],
        ),
        ("rotate", &["cli", "fleet"]),
        ("workload", &["cli", "rotate", "fleet"]),
        // The fleet drives rotations as processes of their own, never their executors.
        ("fleet", &["cli", "rotate", "workload", "progress"]),
    ];
    let broken: Vec<String> = rules
        .iter()
        .flat_map(|(module, forbidden)| violations(module, forbidden))
        .collect();
    assert!(
        broken.is_empty(),
        "imports against the layers:\n{}",
        broken.join("\n")
    );
}
