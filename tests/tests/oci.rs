//! Hook modules as OCI artifacts, against a real registry on loopback (Debian's
//! `docker-registry`): pushed, then planned and rotated by tag and by digest with the digest
//! shown; a moved tag refused under the policy's pin while a digest keeps the first module; an
//! unreachable registry a policy error that changes nothing; pulls cached for offline use; and
//! credentials read from the docker config file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use rollout_ext_e2e::cluster::TestCluster;
use rollout_ext_e2e::registry::OciRegistry;
use rollout_ext_e2e::{DEMO_PLAN_AT, demo_file, plugin_binary, wasm_module};
use sha2::{Digest, Sha256};

/// A user of the plugin: a module cache and a docker config directory of their own.
struct User {
    home: tempfile::TempDir,
}

impl User {
    fn new() -> User {
        User {
            home: tempfile::tempdir().unwrap(),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(plugin_binary())
            .args(args)
            .env("XDG_CACHE_HOME", self.home.path().join("cache"))
            .env("DOCKER_CONFIG", self.home.path().join("docker"))
            .output()
            .unwrap()
    }

    /// Pushes `crate_name`'s module to `reference`; returns the digest the push printed.
    fn push(&self, crate_name: &str, reference: &str) -> String {
        let module = wasm_module(crate_name);
        let out = self.run(&["hooks", "push", module.to_str().unwrap(), reference]);
        assert!(out.status.success(), "{}", stderr(&out));
        let printed = String::from_utf8(out.stdout).unwrap();
        let pinned = printed.trim();
        let (named, digest) = pinned.split_once('@').expect("reference@digest");
        assert_eq!(named, reference, "the push names what it pushed");
        assert!(
            digest.starts_with("sha256:") && digest.len() == 71,
            "{digest}"
        );
        digest.to_string()
    }

    /// Writes the docker config file with `user:password` for `registry`.
    fn log_in(&self, registry: &str, user_and_password: &str) {
        let dir = self.home.path().join("docker");
        std::fs::create_dir_all(&dir).unwrap();
        let auth = k8s_openapi::ByteString(user_and_password.as_bytes().to_vec());
        let config = serde_json::json!({"auths": {registry: {"auth": auth}}});
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn sha256_of(file: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(file).unwrap()))
}

/// The demo policy with its zone-spread hook's module replaced by `module` (and `pin` as its
/// sha256 when given), the other hooks read from the build; written into `dir`.
fn demo_policy(dir: &Path, module: &str, pin: Option<&str>) -> PathBuf {
    let text = std::fs::read_to_string(demo_file("policy.yaml")).unwrap();
    let mut text = text.replace(
        "module: hooks/zone_spread.wasm",
        &match pin {
            Some(pin) => format!("module: {module}\n      sha256: {pin}"),
            None => format!("module: {module}"),
        },
    );
    for hook in ["maintenance-window", "error-budget"] {
        let file = format!("module: hooks/{}.wasm", hook.replace('-', "_"));
        let built = format!("module: {}", wasm_module(hook).display());
        text = text.replace(&file, &built);
    }
    let path = dir.join(format!(
        "policy-{:x}.yaml",
        Sha256::digest(module.as_bytes())[0]
    ));
    std::fs::write(&path, text).unwrap();
    path
}

/// The demo plan with `policy`, as JSON; panics with stderr unless it succeeds.
fn plan(user: &User, policy: &Path) -> serde_json::Value {
    let out = plan_output(user, policy);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn plan_output(user: &User, policy: &Path) -> Output {
    let snapshot = demo_file("snapshot.json");
    let source = [
        "nodes",
        "--from-snapshot",
        snapshot.to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
    ];
    user.run(&[&source[..], DEMO_PLAN_AT].concat())
}

#[test]
fn a_pushed_module_plans_by_tag_and_by_digest_as_the_file_does_and_the_plan_shows_the_digest() {
    let registry = OciRegistry::start().unwrap();
    let user = User::new();
    let tag = registry.reference("hooks/zone-spread:v1");
    let digest = user.push("zone-spread", &tag);
    let dir = tempfile::tempdir().unwrap();

    // What the registry holds is the module itself.
    let pulled = dir.path().join("pulled.wasm");
    let out = user.run(&["hooks", "pull", &tag, "--to", pulled.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{tag}@{digest}")
    );
    assert_eq!(sha256_of(&pulled), sha256_of(&wasm_module("zone-spread")));

    let file = wasm_module("zone-spread");
    let from_file = plan(
        &user,
        &demo_policy(dir.path(), file.to_str().unwrap(), None),
    );
    assert!(from_file.get("modules").is_none(), "no registry module");
    let by_digest_ref = registry.reference(&format!("hooks/zone-spread@{digest}"));
    for reference in [tag.clone(), by_digest_ref] {
        let mut planned = plan(&user, &demo_policy(dir.path(), &reference, None));
        assert_eq!(
            planned["modules"],
            serde_json::json!([{"hook": "zone-spread", "reference": reference, "digest": digest}]),
        );
        planned.as_object_mut().unwrap().remove("modules");
        assert_eq!(
            planned, from_file,
            "the same module decides the same: {reference}"
        );
    }
}

#[test]
fn a_moved_tag_is_refused_under_the_pin_and_a_digest_keeps_the_first_module() {
    let registry = OciRegistry::start().unwrap();
    let user = User::new();
    let tag = registry.reference("hooks/site:v1");
    let first = user.push("zone-spread", &tag);
    let pin = sha256_of(&wasm_module("zone-spread"));
    let dir = tempfile::tempdir().unwrap();
    plan(&user, &demo_policy(dir.path(), &tag, Some(&pin)));

    // Someone pushes another module under the same tag.
    let moved = user.push("error-budget", &tag);
    assert_ne!(moved, first);
    let out = plan_output(&user, &demo_policy(dir.path(), &tag, Some(&pin)));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let message = stderr(&out);
    assert!(
        message.contains("sha256 mismatch") && message.contains(&format!("{tag}@{moved}")),
        "{message}"
    );
    assert!(out.stdout.is_empty(), "no plan is printed");

    // A reference pinned to the first digest still gets the first module.
    let pinned = registry.reference(&format!("hooks/site@{first}"));
    let planned = plan(&user, &demo_policy(dir.path(), &pinned, Some(&pin)));
    assert_eq!(planned["modules"][0]["digest"], first.as_str());
}

#[test]
fn a_pulled_module_pinned_by_digest_plans_offline_and_a_tag_needs_its_registry() {
    let registry = OciRegistry::start().unwrap();
    let user = User::new();
    let tag = registry.reference("hooks/zone-spread:v1");
    let digest = user.push("zone-spread", &tag);
    let pinned = registry.reference(&format!("hooks/zone-spread@{digest}"));
    let dir = tempfile::tempdir().unwrap();
    let online = plan(&user, &demo_policy(dir.path(), &pinned, None));

    registry.stop();
    let offline = plan(&user, &demo_policy(dir.path(), &pinned, None));
    assert_eq!(
        offline, online,
        "the cached module plans as the pulled one did"
    );
    let out = plan_output(&user, &demo_policy(dir.path(), &tag, None));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "hook zone-spread: cannot pull its module: cannot reach the registry of {tag}"
        )),
        "{}",
        stderr(&out)
    );
}

#[test]
fn credentials_come_from_the_docker_config_file() {
    // bcrypt of "hook-pusher-secret" (cost 5), as `htpasswd -B` writes it.
    let registry = OciRegistry::start_with_login(
        "pusher:$2b$05$Fxe3q3BEOKHiTFUVZxWfmOg6j3/jzHB2r5f4QjdTEFhuYFJh0q9Gq",
    )
    .unwrap();
    let user = User::new();
    let tag = registry.reference("hooks/zone-spread:v1");
    let module = wasm_module("zone-spread");
    let out = user.run(&["hooks", "push", module.to_str().unwrap(), &tag]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("refused access")
            && stderr(&out).contains(&format!("docker login {}", registry.host())),
        "{}",
        stderr(&out)
    );

    user.log_in(&registry.host(), "pusher:wrong");
    let out = user.run(&["hooks", "push", module.to_str().unwrap(), &tag]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("refused access"), "{}", stderr(&out));

    user.log_in(&registry.host(), "pusher:hook-pusher-secret");
    let digest = user.push("zone-spread", &tag);
    let dir = tempfile::tempdir().unwrap();
    let planned = plan(&user, &demo_policy(dir.path(), &tag, None));
    assert_eq!(planned["modules"][0]["digest"], digest.as_str());
}

/// Whether `node` is cordoned.
fn cordoned(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

#[tokio::test]
async fn a_rotation_runs_a_registry_module_and_an_unreachable_registry_changes_nothing() {
    let cluster = TestCluster::shared();
    let registry = OciRegistry::start().unwrap();
    let user = User::new();
    let digest = user.push("zone-spread", &registry.reference("hooks/zone-spread:v1"));
    let dir = tempfile::tempdir().unwrap();
    let hook = |module: &str| {
        format!(
            "  hooks:\n  - {{name: zone-spread, module: \"{module}\", points: [select, batch], config: {{maxPerZone: 1}}}}\n"
        )
    };
    let client = cluster.client().await;
    let nodes: Api<Node> = Api::all(client);

    // Nothing listens on port 1: the run stops before it touches the cluster.
    let down = cluster.outdated_group("oci-down", 2).await.unwrap();
    let unreachable = "oci://127.0.0.1:1/hooks/zone-spread:v1";
    let policy = cluster.exec_policy(dir.path(), &hook(unreachable));
    let args = cluster.rotate_args(&policy, "oci-down");
    let (user, out) = tokio::task::spawn_blocking(move || {
        let out = user.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        (user, out)
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("cannot reach the registry of {unreachable}")),
        "{}",
        stderr(&out)
    );
    assert!(cluster.cloud.terminated("oci-down").is_empty());
    for name in &down {
        assert!(
            !cordoned(&nodes.get(name).await.unwrap()),
            "{name} untouched"
        );
    }

    // By tag and by digest, a rotation runs the registry's module to the end.
    let tag = registry.reference("hooks/zone-spread:v1");
    let pinned = registry.reference(&format!("hooks/zone-spread@{digest}"));
    let mut user = user;
    for (group, reference) in [("oci-tag", tag), ("oci-digest", pinned)] {
        let mut old = cluster.outdated_group(group, 2).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let policy = cluster.exec_policy(dir.path(), &hook(&reference));
        let args = cluster.rotate_args(&policy, group);
        let out;
        (user, out) = tokio::task::spawn_blocking(move || {
            let out = user.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
            (user, out)
        })
        .await
        .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("hook zone-spread: module {reference}")),
            "{}",
            stderr(&out)
        );
        assert!(stderr(&out).contains(&digest), "{}", stderr(&out));
        let mut terminated = cluster.cloud.terminated(group);
        terminated.sort();
        old.sort();
        assert_eq!(terminated, old, "each old node of {group} replaced once");
        let decided_by_hook = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|e| e.to_string().contains("hook/zone-spread"));
        assert!(decided_by_hook, "the registry's module decided in {group}");
    }
}
