//! The Fleet file: clusters (kubeconfig contexts) rotated in stages, with a soak between stages
//! and the fleet policy's gates asked before each one.
//!
//! Errors name the file and the line, as the policy file's do; unknown fields are errors.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::{API_VERSION, PolicyError, check_soak, parse_duration, syntax};

pub const KIND: &str = "Fleet";

/// A fleet: its stages, in order, each cluster in exactly one of them.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    /// Names the progress the fleet records in each cluster it touches.
    pub name: String,
    /// The file, as errors and plans name it.
    pub source: String,
    /// The policy whose gates are asked before each stage, and each cluster's policy unless the
    /// cluster names its own.
    pub policy: Option<PathBuf>,
    pub stages: Vec<Stage>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Stage {
    pub name: String,
    /// How many of its clusters rotate at once.
    pub max_parallel: usize,
    /// How long the fleet waits after the stage's last cluster ended, before the next stage.
    pub soak: Duration,
    pub clusters: Vec<FleetCluster>,
}

/// One cluster of a stage and how its rotation is run.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetCluster {
    /// Its kubeconfig context.
    pub context: String,
    /// Its policy (else the fleet's).
    pub policy: Option<PathBuf>,
    /// Flags of `nodes` for its rotation: the fleet's `args`, then its own.
    pub args: Vec<String>,
    /// The line of its entry, for errors about its flags.
    pub line: u32,
}

impl Fleet {
    /// Reads and validates a fleet file.
    pub fn load(path: &Path) -> Result<Fleet, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|e| PolicyError {
            file: path.display().to_string(),
            line: 0,
            column: 0,
            message: format!("cannot read the fleet file: {e}"),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Fleet::parse(&text, &path.display().to_string(), base)
    }

    /// Parses fleet text; `file` names it in errors and `base` resolves policy paths.
    pub fn parse(text: &str, file: &str, base: &Path) -> Result<Fleet, PolicyError> {
        let error = |line: usize, column: usize, message: String| PolicyError {
            file: file.to_string(),
            line: line as u32,
            column: column as u32,
            message,
        };
        let of = |spanned: &dyn Fn() -> (usize, usize), message: String| {
            let (line, column) = spanned();
            error(line, column, message)
        };
        let doc: Document = serde_saphyr::from_str(text).map_err(|e| {
            let (line, column) = e
                .location()
                .map_or((0, 0), |l| (l.line() as usize, l.column() as usize));
            let message = syntax::message(text, line as u32, &e.to_string());
            error(line, column, message)
        })?;
        let at =
            |s: &Spanned<String>| (s.referenced.line() as usize, s.referenced.column() as usize);
        if doc.api_version.value != API_VERSION {
            let message = format!(
                "apiVersion {:?} is not supported: expected {API_VERSION}",
                doc.api_version.value
            );
            return Err(of(&|| at(&doc.api_version), message));
        }
        if doc.kind.value != KIND {
            let message = format!("kind {:?}: expected {KIND}", doc.kind.value);
            return Err(of(&|| at(&doc.kind), message));
        }
        let name = doc.metadata.name;
        if !valid_name(&name.value) {
            let message = format!(
                "metadata.name {:?}: expected lowercase letters, digits and '-', at most 63 \
                 (it names the fleet's progress in each cluster)",
                name.value
            );
            return Err(of(&|| at(&name), message));
        }
        let resolve = |p: &str| base.join(p);
        let policy = doc.spec.policy.as_deref().map(resolve);
        if doc.spec.stages.is_empty() {
            return Err(error(
                doc.kind.referenced.line() as usize,
                0,
                "spec.stages lists no stage: a fleet needs at least one".into(),
            ));
        }
        let mut stages: Vec<Stage> = Vec::new();
        for raw in doc.spec.stages {
            let line = raw.referenced.line() as usize;
            let raw = raw.value;
            if stages.iter().any(|s| s.name == raw.name) {
                return Err(error(
                    line,
                    0,
                    format!("stage {:?} is listed twice", raw.name),
                ));
            }
            if raw.clusters.is_empty() {
                let message = format!("stage {:?} lists no cluster", raw.name);
                return Err(error(line, 0, message));
            }
            let max_parallel = raw.max_parallel.unwrap_or(1);
            if max_parallel == 0 {
                let message = format!("stage {:?}: maxParallel must be at least 1", raw.name);
                return Err(error(line, 0, message));
            }
            let soak = match &raw.soak {
                None => Duration::ZERO,
                Some(s) => parse_duration(&s.value)
                    .and_then(check_soak)
                    .map_err(|m| of(&|| at(s), format!("soak: {m}")))?,
            };
            let mut clusters = Vec::new();
            for c in raw.clusters {
                let cluster_line = c.referenced.line() as u32;
                let c = c.value;
                let seen = stages.iter().flat_map(|s| &s.clusters);
                if seen
                    .chain(&clusters)
                    .any(|o: &FleetCluster| o.context == c.context)
                {
                    let message = format!(
                        "cluster {:?} is listed twice: each cluster belongs to one stage",
                        c.context
                    );
                    return Err(error(cluster_line as usize, 0, message));
                }
                let mut args = doc.spec.args.clone();
                args.extend(c.args);
                clusters.push(FleetCluster {
                    context: c.context,
                    policy: c.policy.as_deref().map(resolve).or_else(|| policy.clone()),
                    args,
                    line: cluster_line,
                });
            }
            stages.push(Stage {
                name: raw.name,
                max_parallel,
                soak,
                clusters,
            });
        }
        Ok(Fleet {
            name: name.value,
            source: file.to_string(),
            policy,
            stages,
        })
    }

    /// The stage of the cluster of `context`.
    pub fn stage_of(&self, context: &str) -> Option<usize> {
        (self.stages.iter()).position(|s| s.clusters.iter().any(|c| c.context == context))
    }

    /// Every cluster, stage after stage.
    pub fn clusters(&self) -> impl Iterator<Item = &FleetCluster> {
        self.stages.iter().flat_map(|s| &s.clusters)
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Document {
    api_version: Spanned<String>,
    kind: Spanned<String>,
    metadata: Metadata,
    spec: Spec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Metadata {
    name: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Spec {
    policy: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    stages: Vec<Spanned<RawStage>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawStage {
    name: String,
    max_parallel: Option<usize>,
    soak: Option<Spanned<String>>,
    #[serde(default)]
    clusters: Vec<Spanned<RawCluster>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawCluster {
    context: String,
    policy: Option<String>,
    #[serde(default)]
    args: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLEET: &str = "\
apiVersion: rollout-ext/v1alpha1
kind: Fleet
metadata:
  name: november
spec:
  policy: policy.yaml
  args: [--instance-group, nodes]
  stages:
  - name: dev
    soak: 10m
    clusters:
    - context: dev-a
  - name: prod
    maxParallel: 2
    clusters:
    - {context: prod-eu, args: [--max-surge, '1']}
    - {context: prod-us, policy: us.yaml}
";

    fn parse(text: &str) -> Result<Fleet, PolicyError> {
        Fleet::parse(text, "fleet.yaml", Path::new("/site"))
    }

    #[test]
    fn stages_keep_their_order_and_clusters_their_settings() {
        let fleet = parse(FLEET).unwrap();
        assert_eq!(fleet.name, "november");
        assert_eq!(fleet.policy, Some(PathBuf::from("/site/policy.yaml")));
        let names: Vec<&str> = fleet.stages.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["dev", "prod"]);
        assert_eq!(fleet.stages[0].soak, Duration::from_secs(600));
        assert_eq!(fleet.stages[0].max_parallel, 1, "one at a time by default");
        assert_eq!(fleet.stages[1].max_parallel, 2);
        assert_eq!(fleet.stages[1].soak, Duration::ZERO);
        let eu = &fleet.stages[1].clusters[0];
        assert_eq!(eu.args, ["--instance-group", "nodes", "--max-surge", "1"]);
        assert_eq!(eu.policy, Some(PathBuf::from("/site/policy.yaml")));
        let us = &fleet.stages[1].clusters[1];
        assert_eq!(us.policy, Some(PathBuf::from("/site/us.yaml")));
        assert_eq!(us.line, 17);
        let contexts: Vec<&str> = fleet.clusters().map(|c| c.context.as_str()).collect();
        assert_eq!(contexts, ["dev-a", "prod-eu", "prod-us"]);
    }

    #[test]
    fn mistakes_name_their_line() {
        let cases = [
            (
                FLEET.replace("kind: Fleet", "kind: Fleat"),
                "fleet.yaml:2:7: kind \"Fleat\"",
            ),
            (
                FLEET.replace("soak: 10m", "soak: 10 minutes"),
                "fleet.yaml:10:11: soak: invalid duration",
            ),
            (
                FLEET.replace("soak: 10m", "soak: 25h"),
                "fleet.yaml:10:11: soak: expected at most 24h",
            ),
            (
                FLEET.replace("maxParallel: 2", "maxParallel: 0"),
                "fleet.yaml:13: stage \"prod\": maxParallel",
            ),
            (
                FLEET.replace("prod-us", "dev-a"),
                "fleet.yaml:17: cluster \"dev-a\" is listed twice",
            ),
            (
                FLEET.replace("name: prod", "name: dev"),
                "fleet.yaml:13: stage \"dev\" is listed twice",
            ),
            (
                FLEET.replace("name: november", "name: November"),
                "fleet.yaml:4:9: metadata.name",
            ),
            (
                FLEET.replace("maxParallel", "maxParalel"),
                "fleet.yaml:14:5: unknown field `maxParalel`",
            ),
            (
                FLEET.replace(
                    "    clusters:\n    - context: dev-a\n",
                    "    clusters: []\n",
                ),
                "fleet.yaml:9: stage \"dev\" lists no cluster",
            ),
        ];
        for (text, expected) in cases {
            let error = parse(&text).unwrap_err().to_string();
            assert!(error.starts_with(expected), "{error}\nexpected: {expected}");
        }
    }
}
