//! The RolloutPolicy file: parsing, validation and defaults.
//!
//! Every error names the file, the line and column, and what was expected. Unknown fields are
//! errors: a typo must never silently turn a safety setting off. Module paths are resolved
//! relative to the policy file; nothing here reads a module.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::quantity::parse_memory;

pub mod drain;
mod estimates;
pub mod fleet;
mod int_or_percent;
pub mod metrics;
pub mod module;
pub mod positions;
pub mod provider;
mod syntax;

use drain::{DrainPolicy, RawDrain};
pub use estimates::{RawEstimates, StatedDurations};
pub use int_or_percent::IntOrPercent;
pub use metrics::MetricsSource;
pub use module::{ModuleSource, OciReference, PulledModule};
use provider::ProviderSpec;

pub const API_VERSION: &str = "rollout-ext/v1alpha1";
pub const KIND: &str = "RolloutPolicy";

/// Default wall-clock limit of one hook call.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(2);
/// Default memory limit of one hook instance.
pub const DEFAULT_HOOK_MEMORY: u64 = 64 << 20;
const MAX_HOOK_TIMEOUT: Duration = Duration::from_secs(300);
const MAX_HOOK_MEMORY: u64 = 4 << 30;
/// The longest soak: a longer hold is a pause (a batching hook or `--interactive`), not a soak.
const MAX_SOAK: Duration = Duration::from_secs(24 * 3600);

/// A policy error with its place in the file (`file:line:column`, or `file:line` when the
/// column is 0: an error about a whole entry).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct PolicyError {
    pub file: String,
    pub line: u32,
    pub column: u32,
    pub message: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.column {
            0 => write!(f, "{}:{}: {}", self.file, self.line, self.message),
            column => write!(f, "{}:{}:{column}: {}", self.file, self.line, self.message),
        }
    }
}

/// maxSurge / maxUnavailable; absent fields inherit from the cluster-wide setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RollingUpdate {
    pub max_surge: Option<IntOrPercent>,
    pub max_unavailable: Option<IntOrPercent>,
}

/// Per-group settings and where they were written.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupOverride {
    pub name: String,
    pub rolling_update: RollingUpdate,
    /// Line of the group's `maxSurge`, or of its entry when it has none.
    pub max_surge_line: u32,
    /// How long to hold after each batch of this group (over the policy's `soakTime`).
    pub soak: Option<Duration>,
    /// How this group's instances are terminated and surged (over the policy's `provider`):
    /// a cluster mixing clouds or node managers.
    pub provider: Option<ProviderSpec>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HookPoint {
    Select,
    Batch,
    Gate,
    /// The order of a node's evictions (contract 0.3.1).
    DrainOrder,
}

impl fmt::Display for HookPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HookPoint::Select => "select",
            HookPoint::Batch => "batch",
            HookPoint::Gate => "gate",
            HookPoint::DrainOrder => "drain-order",
        })
    }
}

impl HookPoint {
    /// `select, batch`, or `nothing` for none: points in a message.
    pub fn list(points: &[HookPoint]) -> String {
        if points.is_empty() {
            return "nothing".into();
        }
        let names: Vec<String> = points.iter().map(ToString::to_string).collect();
        names.join(", ")
    }
}

/// What happens when a hook fails (the admission-webhook convention).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum FailurePolicy {
    /// Stop safely with an error naming the hook and the cause.
    #[default]
    Fail,
    /// Log the failure and use the built-in behaviour.
    Ignore,
}

/// Whether a run counts what other tools are disrupting in a group against the group's budget
/// (see [`crate::plan::ledger`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum OthersDisruptions {
    /// Counted: a batch takes only what others leave of the budget, and the run holds while
    /// they leave nothing.
    #[default]
    Count,
    /// Not counted: the budget is the run's own, as with kops.
    Ignore,
}

/// Whether a hook decides or only reports what it would decide.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum HookMode {
    /// Its answers decide (within what the host allows).
    #[default]
    Enforce,
    /// Asked at every point it serves, with the input the built-in rules see; its answers are
    /// reported beside the decision taken, never acted on, and its faults never stop a run. How
    /// a site tries a policy on real rotations before trusting it.
    Shadow,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HookSpec {
    pub name: String,
    pub module: ModuleSource,
    /// Expected sha256 of the module's bytes, lowercase hex (a registry module's layer digest).
    pub sha256: Option<String>,
    /// The points the policy enables; none means every point the module implements.
    pub points: Option<Vec<HookPoint>>,
    /// The hook's config as JSON.
    pub config: String,
    /// Line where the hook's config value starts (its entry's when it has none), for the
    /// module's verdict on it.
    pub config_line: u32,
    /// Where its keys are, so that a verdict naming one points at it.
    pub config_keys: Vec<positions::KeyAt>,
    pub timeout: Duration,
    pub memory: u64,
    pub failure_policy: FailurePolicy,
    pub mode: HookMode,
    /// The metrics sources it may query (`metrics`), by name; none by default.
    pub metrics: Vec<String>,
    /// Line of the hook's entry, for errors found when loading it.
    pub line: u32,
}

/// A kind that `list-objects` may read.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContextResource {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
}

/// A validated policy. `Policy::default()` is the built-in behaviour with no hooks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policy {
    /// The file it came from, for error messages ("<built-in>" when none).
    pub source: String,
    pub group_label: Option<String>,
    pub rolling_update: RollingUpdate,
    pub groups: Vec<GroupOverride>,
    pub hooks: Vec<HookSpec>,
    pub context_resources: Vec<ContextResource>,
    /// The Prometheus servers gates may query, each only by the hooks granted it.
    pub metrics_sources: Vec<MetricsSource>,
    /// How instances are terminated and surged.
    pub provider: Option<ProviderSpec>,
    /// How long to hold after each batch before the next, validating again at the end.
    pub soak: Option<Duration>,
    /// How drains treat pods that ask not to be disrupted, Jobs, eviction order and budgets
    /// that keep refusing.
    pub drain: DrainPolicy,
    /// What each stage of a run takes, for plans of a cluster with no history (`estimates`).
    pub estimates: StatedDurations,
    /// Whether other tools' disruptions count against each group's budget.
    pub others_disruptions: OthersDisruptions,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Document {
    api_version: Spanned<String>,
    kind: Spanned<String>,
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default)]
    spec: Option<Spec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Metadata {
    #[allow(dead_code)]
    name: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Spec {
    group_label: Option<String>,
    #[serde(default)]
    rolling_update: Option<RollingUpdate>,
    #[serde(default)]
    groups: Vec<Spanned<RawGroup>>,
    #[serde(default)]
    hooks: Vec<Spanned<RawHook>>,
    #[serde(default)]
    context_resources: Vec<ContextResource>,
    #[serde(default)]
    metrics_sources: Vec<Spanned<metrics::RawSource>>,
    #[serde(default)]
    provider: Option<Spanned<ProviderSpec>>,
    soak_time: Option<Spanned<String>>,
    drain: Option<RawDrain>,
    estimates: Option<estimates::RawEstimates>,
    #[serde(default)]
    others_disruptions: OthersDisruptions,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawGroup {
    name: String,
    #[serde(default)]
    rolling_update: Option<RawGroupRollingUpdate>,
    soak_time: Option<Spanned<String>>,
    #[serde(default)]
    provider: Option<Spanned<ProviderSpec>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawGroupRollingUpdate {
    max_surge: Option<Spanned<IntOrPercent>>,
    max_unavailable: Option<IntOrPercent>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawHook {
    name: String,
    module: String,
    sha256: Option<Spanned<String>>,
    points: Option<Spanned<Vec<HookPoint>>>,
    #[serde(default)]
    config: Option<Spanned<serde_json::Value>>,
    timeout: Option<Spanned<String>>,
    memory: Option<Spanned<String>>,
    #[serde(default)]
    failure_policy: FailurePolicy,
    #[serde(default)]
    mode: HookMode,
    metrics: Option<Spanned<Vec<String>>>,
}

/// Makes errors that name the policy file, the line and the column.
struct Located<'a> {
    file: &'a str,
    text: &'a str,
}

impl Located<'_> {
    fn error(&self, line: u32, column: u32, message: String) -> PolicyError {
        PolicyError {
            file: self.file.to_string(),
            line,
            column,
            message,
        }
    }

    /// An error about the value `spanned` (where it is referenced).
    fn of<T>(&self, spanned: &Spanned<T>, message: String) -> PolicyError {
        let l = spanned.referenced;
        self.error(l.line() as u32, l.column() as u32, message)
    }

    /// The per-group overrides; a group listed twice is an error.
    fn groups(&self, raw: Vec<Spanned<RawGroup>>) -> Result<Vec<GroupOverride>, PolicyError> {
        let mut groups: Vec<GroupOverride> = Vec::new();
        for g in raw {
            if groups.iter().any(|o| o.name == g.value.name) {
                return Err(self.of(&g, format!("group {:?} is listed twice", g.value.name)));
            }
            let line = g.referenced.line() as u32;
            let soak = g
                .value
                .soak_time
                .as_ref()
                .map(|s| self.soak(s))
                .transpose()?;
            let provider = match g.value.provider {
                Some(p) => {
                    p.value.validate().map_err(|m| self.of(&p, m))?;
                    Some(p.value)
                }
                None => None,
            };
            let ru = g.value.rolling_update;
            let max_surge = ru.as_ref().and_then(|r| r.max_surge.as_ref());
            groups.push(GroupOverride {
                name: g.value.name,
                max_surge_line: max_surge.map_or(line, |s| s.referenced.line() as u32),
                soak,
                provider,
                rolling_update: RollingUpdate {
                    max_surge: max_surge.map(|s| s.value),
                    max_unavailable: ru.and_then(|r| r.max_unavailable),
                },
            });
        }
        Ok(groups)
    }

    /// One hook entry, checked field by field; its module is resolved against `base`.
    fn hook(
        &self,
        h: Spanned<RawHook>,
        base: &Path,
        sources: &[MetricsSource],
    ) -> Result<HookSpec, PolicyError> {
        let line = h.referenced.line() as u32;
        let raw = h.value;
        if !valid_hook_name(&raw.name) {
            let message = format!(
                "hook name {:?}: expected lowercase letters, digits and '-'",
                raw.name
            );
            return Err(self.error(line, h.referenced.column() as u32, message));
        }
        if let Some(points) = raw.points.as_ref().filter(|p| p.value.is_empty()) {
            let message = format!(
                "hook {:?} enables no points: list one or more of select, batch, gate, drain-order, or leave `points` out to enable every point the module implements",
                raw.name
            );
            return Err(self.of(points, message));
        }
        let metrics = self.grants(&raw.name, raw.metrics, sources)?;
        let module = if raw.module.starts_with(module::OCI_SCHEME) {
            let reference = OciReference::parse(&raw.module)
                .map_err(|e| self.error(line, 0, format!("hook {} module {e}", raw.name)))?;
            ModuleSource::Registry {
                reference,
                pulled: None,
            }
        } else {
            ModuleSource::File(base.join(&raw.module))
        };
        let sha256 = raw.sha256.map(|s| self.sha256(&s)).transpose()?;
        let timeout = match raw.timeout {
            Some(t) => self.timeout(&t)?,
            None => DEFAULT_HOOK_TIMEOUT,
        };
        let memory = match raw.memory {
            Some(m) => self.memory(&m)?,
            None => DEFAULT_HOOK_MEMORY,
        };
        let config_line = raw
            .config
            .as_ref()
            .map_or(line, |c| c.referenced.line() as u32);
        let config_keys = raw.config.as_ref().map_or_else(Vec::new, |c| {
            let (line, column) = (c.referenced.line(), c.referenced.column());
            positions::config_keys(self.text, line as u32, column as u32)
        });
        let config = raw
            .config
            .map_or_else(
                || serde_json::Value::Object(Default::default()),
                |c| c.value,
            )
            .to_string();
        Ok(HookSpec {
            name: raw.name,
            module,
            sha256,
            points: raw.points.map(|p| p.value),
            config,
            config_line,
            config_keys,
            timeout,
            memory,
            failure_policy: raw.failure_policy,
            mode: raw.mode,
            metrics,
            line,
        })
    }

    /// A module pin: 64 hexadecimal digits, `sha256:` allowed in front; kept in lowercase.
    fn sha256(&self, s: &Spanned<String>) -> Result<String, PolicyError> {
        let v = s
            .value
            .trim()
            .trim_start_matches("sha256:")
            .to_ascii_lowercase();
        if v.len() != 64 || !v.chars().all(|c| c.is_ascii_hexdigit()) {
            let message = format!("sha256 {:?}: expected 64 hexadecimal digits", s.value);
            return Err(self.of(s, message));
        }
        Ok(v)
    }

    fn timeout(&self, t: &Spanned<String>) -> Result<Duration, PolicyError> {
        let d = parse_duration(&t.value).map_err(|m| self.of(t, m))?;
        if d.is_zero() || d > MAX_HOOK_TIMEOUT {
            let message = format!("timeout {:?}: expected more than 0 and at most 5m", t.value);
            return Err(self.of(t, message));
        }
        Ok(d)
    }

    /// A soak time: a duration of at most a day (a longer hold is a pause, not a soak).
    fn soak(&self, s: &Spanned<String>) -> Result<Duration, PolicyError> {
        let d = parse_duration(&s.value).map_err(|m| self.of(s, m))?;
        check_soak(d).map_err(|m| self.of(s, format!("soakTime {:?}: {m}", s.value)))
    }

    fn memory(&self, m: &Spanned<String>) -> Result<u64, PolicyError> {
        let bytes = parse_memory(&m.value).map_err(|msg| self.of(m, msg))?;
        if !(1 << 20..=MAX_HOOK_MEMORY).contains(&bytes) {
            let message = format!("memory {:?}: expected between 1Mi and 4Gi", m.value);
            return Err(self.of(m, message));
        }
        Ok(bytes)
    }
}

impl Policy {
    /// Reads and validates a policy file.
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|e| PolicyError {
            file: path.display().to_string(),
            line: 0,
            column: 0,
            message: format!("cannot read the policy file: {e}"),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Policy::parse(&text, &path.display().to_string(), base)
    }

    /// Parses policy text; `file` names it in errors and `base` resolves module paths.
    pub fn parse(text: &str, file: &str, base: &Path) -> Result<Policy, PolicyError> {
        let at = Located { file, text };
        let doc: Document = serde_saphyr::from_str(text).map_err(|e| {
            let (line, column) = e
                .location()
                .map_or((0, 0), |l| (l.line() as u32, l.column() as u32));
            at.error(line, column, syntax::message(text, line, &e.to_string()))
        })?;
        if doc.api_version.value != API_VERSION {
            let message = format!(
                "apiVersion {:?} is not supported: expected {API_VERSION}",
                doc.api_version.value
            );
            return Err(at.of(&doc.api_version, message));
        }
        if doc.kind.value != KIND {
            let message = format!("kind {:?}: expected {KIND}", doc.kind.value);
            return Err(at.of(&doc.kind, message));
        }
        let _ = doc.metadata;
        let spec = doc.spec.unwrap_or_default();
        let groups = at.groups(spec.groups)?;
        let metrics_sources = at.metrics_sources(spec.metrics_sources, base)?;
        let mut hooks: Vec<HookSpec> = Vec::new();
        for h in spec.hooks {
            if hooks.iter().any(|o| o.name == h.value.name) {
                let message = format!("hook {:?} is listed twice", h.value.name);
                return Err(at.of(&h, message));
            }
            hooks.push(at.hook(h, base, &metrics_sources)?);
        }
        let provider = match spec.provider {
            Some(p) => {
                p.value.validate().map_err(|m| at.of(&p, m))?;
                Some(p.value)
            }
            None => None,
        };
        let soak = spec.soak_time.as_ref().map(|s| at.soak(s)).transpose()?;
        let drain = spec.drain.map(|d| at.drain(d)).transpose()?;
        let estimates = spec.estimates.map(|e| at.estimates(e)).transpose()?;
        Ok(Policy {
            estimates: estimates.unwrap_or_default(),
            drain: drain.unwrap_or_default(),
            source: file.to_string(),
            provider,
            soak,
            group_label: spec.group_label,
            rolling_update: spec.rolling_update.unwrap_or_default(),
            groups,
            hooks,
            context_resources: spec.context_resources,
            metrics_sources,
            others_disruptions: spec.others_disruptions,
        })
    }

    /// The per-group override for `group`, if the policy has one.
    pub fn group(&self, group: &str) -> Option<&GroupOverride> {
        self.groups.iter().find(|g| g.name == group)
    }
}

fn valid_hook_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Parses a Go-style duration: `500ms`, `2s`, `1m30s`, `1h`.
/// A soak of at most 24 hours, for the policy's `soakTime` and `--soak` alike.
pub fn check_soak(soak: Duration) -> Result<Duration, String> {
    if soak > MAX_SOAK {
        return Err("expected at most 24h".into());
    }
    Ok(soak)
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("invalid duration {text:?}: expected e.g. 500ms, 2s, 1m30s");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(invalid());
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(invalid)?;
        if digits == 0 {
            return Err(invalid());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            _ => return Err(invalid()),
        };
        total = total.saturating_add(part);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests;
