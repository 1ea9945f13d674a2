//! kwok, the node simulator the Kubernetes community uses, run beside the control plane: it keeps
//! the nodes labelled [`MANAGED_LABEL`] Ready (heartbeats through their Lease), moves pods
//! bound to them to Running and Ready, and removes their terminating pods.
//!
//! Its stages are the ones its own module ships, as `install-control-plane.sh` took them from
//! the module cache, with two changes made here: pod stages leave the harness's runner pods alone
//! ([`super::RunnerPods`] runs those as processes, as a kubelet would run their container), and
//! pods labelled [`TERMINATION_LABEL`]`=after-grace` are left to our own stage
//! (`tests/cluster/kwok/stages/`), which removes them when their grace period ends instead of at
//! once. And its pod-ready stage is run twice: at once, and [`SLOW_START`] later for pods
//! labelled [`READINESS_LABEL`]`=slow`. A node created without a kubelet version (Karpenter's
//! kwok provider creates them so) reports the control plane's release, as a kubelet of that
//! release would, instead of kwok's own version.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::runner_pods::RUNNER_LABEL;

/// The label of the nodes kwok manages; a node without it has no kubelet. A label, not an
/// annotation: a node whose label goes leaves kwok's watch (the server says so), so kwok stops
/// keeping it and its pods, as when a kubelet stops.
pub const MANAGED_LABEL: &str = "kwok.x-k8s.io/node";
/// Its value on managed nodes.
pub const MANAGED_VALUE: &str = "fake";

/// A pod label for how its containers stop; `after-grace`: they ignore SIGTERM, so the pod goes
/// when its grace period ends (tests whose timing needs pods that take a while to go).
pub const TERMINATION_LABEL: &str = "rollout-ext.test/termination";

/// A pod label for how its containers start; `slow`: Ready [`SLOW_START`] after it is bound
/// (kwok's own pod-ready stage, delayed), for tests that need a replacement not Ready at once.
pub const READINESS_LABEL: &str = "rollout-ext.test/readiness";
pub const SLOW_START: std::time::Duration = std::time::Duration::from_secs(1);

/// Our own stages, beside the module's.
const OWN_STAGES: &[&str] = &[include_str!(
    "../../cluster/kwok/stages/pod-delete-after-grace.yaml"
)];

/// The kwok release the test cluster runs (`tests/cluster/kwok/VERSION`).
pub fn version() -> &'static str {
    include_str!("../../cluster/kwok/VERSION").trim()
}

/// Where kwok and its stages are cached (`bin/kwok`, `stages/*.yaml`).
pub fn dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ROLLOUT_EXT_KWOK_DIR") {
        return PathBuf::from(dir);
    }
    super::cache_root().join(format!("kwok-{}", version().trim_start_matches('v')))
}

/// The kwok binary, or why it is missing.
pub fn binary() -> anyhow::Result<PathBuf> {
    super::installed(dir().join("bin/kwok"))
}

/// The kubelet version the module's node-initialize stage reports for a node that has none.
const STAGE_KUBELET_VERSION: &str = "{{ or $nodeInfo.kubeletVersion $kwokVersion }}";

/// kwok's configuration: the cached stages of its module, one JSON document each, with every pod
/// stage narrowed to pods that are not runner pods and its pod deletion to pods that do not wait
/// for their grace period, and nodes without a version reporting `kubelet_version`; then our own
/// stages.
pub fn config(stages: &Path, kubelet_version: &str) -> anyhow::Result<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(stages)
        .with_context(|| format!("kwok's stages in {}", stages.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.sort();
    if files.is_empty() {
        bail!("no kwok stages in {}", stages.display());
    }
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        let mut stage: Value = serde_saphyr::from_str(&text)
            .with_context(|| format!("kwok stage {}", file.display()))?;
        if stage["metadata"]["name"] == "node-initialize" {
            let template = stage["spec"]["next"]["statusTemplate"]
                .as_str()
                .unwrap_or_default();
            if !template.contains(STAGE_KUBELET_VERSION) {
                bail!(
                    "kwok's node-initialize stage ({}) no longer says `{STAGE_KUBELET_VERSION}`",
                    file.display()
                );
            }
            let own = format!("{{{{ or $nodeInfo.kubeletVersion \"{kubelet_version}\" }}}}");
            stage["spec"]["next"]["statusTemplate"] =
                json!(template.replace(STAGE_KUBELET_VERSION, &own));
        }
        if stage["spec"]["resourceRef"]["kind"] == "Pod" {
            exclude(&mut stage, RUNNER_LABEL, "DoesNotExist", None)?;
            if stage["spec"]["next"]["delete"] == true {
                exclude(&mut stage, TERMINATION_LABEL, "NotIn", Some("after-grace"))?;
            } else if stage["metadata"]["name"] == "pod-ready" {
                // The same stage, a while later, for pods that start slowly.
                let mut slow = stage.clone();
                exclude(&mut slow, READINESS_LABEL, "In", Some("slow"))?;
                slow["metadata"]["name"] = json!("pod-ready-slow");
                slow["spec"]["delay"] =
                    json!({"durationMilliseconds": SLOW_START.as_millis() as u64});
                docs.push(slow.to_string());
                exclude(&mut stage, READINESS_LABEL, "NotIn", Some("slow"))?;
            }
        }
        docs.push(stage.to_string());
    }
    for own in OWN_STAGES {
        docs.push(serde_saphyr::from_str::<Value>(own)?.to_string());
    }
    Ok(docs.join("\n---\n"))
}

/// Narrows `stage` to pods whose `label` is as `operator` (and `value`) say.
fn exclude(
    stage: &mut Value,
    label: &str,
    operator: &str,
    value: Option<&str>,
) -> anyhow::Result<()> {
    let selector = &mut stage["spec"]["selector"];
    if selector.is_null() {
        *selector = json!({});
    }
    let expressions = &mut selector["matchExpressions"];
    if expressions.is_null() {
        *expressions = json!([]);
    }
    let Some(expressions) = expressions.as_array_mut() else {
        bail!("a kwok stage whose matchExpressions is not a list: {stage}");
    };
    let mut expression =
        json!({"key": format!(".metadata.labels[\"{label}\"]"), "operator": operator});
    if let Some(value) = value {
        expression["values"] = json!([value]);
    }
    expressions.push(expression);
    Ok(())
}

/// kwok's arguments for a cluster: nodes chosen by label, leases for heartbeats, node
/// addresses on loopback (where the harness's kubelet log endpoint answers).
pub fn args(kubeconfig: &Path, config: &Path) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--config={}", config.display()),
        format!("--manage-nodes-with-label-selector={MANAGED_LABEL}={MANAGED_VALUE}"),
        "--node-ip=127.0.0.1".into(),
        "--node-lease-duration-seconds=40".into(),
        // Pod IPs for a fleet-scale cluster (tens of thousands of pods).
        "--cidr=10.128.0.0/9".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_stages_leave_runner_pods_alone_and_node_stages_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("pod-ready.yaml"),
            "kind: Stage\nmetadata: {name: pod-ready}\nspec:\n  resourceRef: {apiGroup: v1, kind: Pod}\n  selector:\n    matchExpressions:\n    - key: '.status.phase'\n      operator: In\n      values: [Pending]\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("pod-delete.yaml"),
            "kind: Stage\nspec:\n  resourceRef: {apiGroup: v1, kind: Pod}\n  next: {delete: true}\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("node.yaml"),
            "kind: Stage\nspec:\n  resourceRef: {apiGroup: v1, kind: Node}\n",
        )
        .unwrap();
        let text = config(dir.path(), "v1.37.2").unwrap();
        let docs: Vec<Value> = (text.split("\n---\n"))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let runners = json!({"key": ".metadata.labels[\"rollout-ext.io/runner\"]", "operator": "DoesNotExist"});
        assert_eq!(docs[0]["spec"]["resourceRef"]["kind"], "Node");
        assert!(docs[0]["spec"]["selector"].is_null());
        let deletion = &docs[1]["spec"]["selector"]["matchExpressions"];
        assert_eq!(
            deletion,
            &json!([runners, {"key": ".metadata.labels[\"rollout-ext.test/termination\"]",
                              "operator": "NotIn", "values": ["after-grace"]}])
        );
        let pending = json!({"key": ".status.phase", "operator": "In", "values": ["Pending"]});
        let readiness = |op: &str| json!({"key": ".metadata.labels[\"rollout-ext.test/readiness\"]", "operator": op, "values": ["slow"]});
        let slow = &docs[2];
        assert_eq!(slow["metadata"]["name"], "pod-ready-slow");
        assert_eq!(slow["spec"]["delay"], json!({"durationMilliseconds": 1000}));
        let expressions = &slow["spec"]["selector"]["matchExpressions"];
        assert_eq!(expressions, &json!([pending, runners, readiness("In")]));
        let ready = &docs[3]["spec"]["selector"]["matchExpressions"];
        assert_eq!(ready, &json!([pending, runners, readiness("NotIn")]));
        assert!(docs[3]["spec"]["delay"].is_null());
        assert_eq!(docs[4]["metadata"]["name"], "pod-delete-after-grace");
        assert_eq!(docs.len(), 5);
    }

    #[test]
    fn nodes_without_a_kubelet_version_report_the_one_given() {
        let dir = tempfile::tempdir().unwrap();
        let stage = "kind: Stage\nmetadata: {name: node-initialize}\nspec:\n  resourceRef: {apiGroup: v1, kind: Node}\n  next:\n    statusTemplate: |\n      kubeletVersion: {{ or $nodeInfo.kubeletVersion $kwokVersion }}\n";
        std::fs::write(dir.path().join("node-initialize.yaml"), stage).unwrap();
        let text = config(dir.path(), "v1.37.2").unwrap();
        let first: Value = serde_json::from_str(text.split("\n---\n").next().unwrap()).unwrap();
        assert_eq!(
            first["spec"]["next"]["statusTemplate"],
            "kubeletVersion: {{ or $nodeInfo.kubeletVersion \"v1.37.2\" }}\n"
        );
        // A release whose stage says it otherwise is refused, not run with kwok's version.
        std::fs::write(
            dir.path().join("node-initialize.yaml"),
            stage.replace("$kwokVersion", "$other"),
        )
        .unwrap();
        let refused = config(dir.path(), "v1.37.2").unwrap_err().to_string();
        assert!(refused.contains("no longer says"), "{refused}");
    }
}
