//! The one hook `hooks test` and `hooks run` call, and the policy it runs under: a policy
//! file's entry for the module (its config, points, pin and contextResources), or the module
//! alone with a config given on the command line.

use std::path::PathBuf;

use super::Failure;
use crate::hooks::HookRuntime;
use crate::policy::{
    DEFAULT_HOOK_MEMORY, DEFAULT_HOOK_TIMEOUT, FailurePolicy, HookMode, HookPoint, HookSpec,
    ModuleSource, Policy,
};

/// The module and where its entry comes from.
#[derive(Debug, Clone, clap::Args)]
pub struct EntryArgs {
    /// The hook component (.wasm).
    pub module: PathBuf,
    /// The hook's config, as JSON (without --policy).
    #[arg(long, value_name = "JSON")]
    pub config: Option<String>,
    /// Run under this policy's settings, contextResources and the hook's entry (its config
    /// and points); only this hook runs.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// The policy's entry to use, when the module is not the one of exactly one entry.
    #[arg(long, value_name = "NAME", requires = "policy")]
    pub hook: Option<String>,
}

impl EntryArgs {
    /// The policy the plan runs with, and the one hook's entry: from `--policy` (its settings, its
    /// `contextResources`, and the entry `--hook` names or the one whose module is this file), or
    /// the built-in policy with the flags' config and points. The hook is named as the module
    /// names itself unless the policy names it.
    pub fn policy_and_spec(
        &self,
        runtime: &HookRuntime,
        points: &[HookPoint],
    ) -> Result<(Policy, HookSpec), Failure> {
        let points: Option<Vec<HookPoint>> = (!points.is_empty()).then(|| points.to_vec());
        let Some(file) = &self.policy else {
            let (info, _) = runtime
                .describe(&self.module)
                .map_err(|e| Failure::usage(e.to_string()))?;
            let config = self.config.clone().unwrap_or_else(|| "{}".into());
            let config_value: serde_json::Value = serde_json::from_str(&config)
                .map_err(|e| Failure::usage(format!("--config is not valid JSON: {e}")))?;
            let policy = Policy {
                source: "<command line>".into(),
                ..Default::default()
            };
            let spec = HookSpec {
                name: info.name,
                module: ModuleSource::File(self.module.clone()),
                sha256: None,
                points,
                config: config_value.to_string(),
                config_line: 0,
                config_keys: Vec::new(),
                timeout: DEFAULT_HOOK_TIMEOUT,
                memory: DEFAULT_HOOK_MEMORY,
                failure_policy: FailurePolicy::Ignore,
                mode: HookMode::Enforce,
                metrics: Vec::new(),
                line: 0,
            };
            return Ok((policy, spec));
        };
        if self.config.is_some() {
            return Err(Failure::usage(
                "--config and --policy exclude each other: the policy gives the hook's config",
            ));
        }
        let policy = Policy::load(file)?;
        let module = std::fs::canonicalize(&self.module).unwrap_or_else(|_| self.module.clone());
        let same_file = |h: &&HookSpec| {
            (h.module.file()).is_some_and(|f| std::fs::canonicalize(f).is_ok_and(|m| m == module))
        };
        let same_name = |h: &&HookSpec| {
            (h.module.file()).is_some_and(|f| f.file_name() == self.module.file_name())
        };
        let entry = match &self.hook {
            Some(name) => policy.hooks.iter().find(|h| &h.name == name),
            // The entry of this very file, else of a file of the same name (a fresh build tested
            // against the policy that deploys it).
            None => only(policy.hooks.iter().filter(same_file))
                .or_else(|| only(policy.hooks.iter().filter(same_name))),
        };
        let names: Vec<&str> = policy.hooks.iter().map(|h| h.name.as_str()).collect();
        // An entry named with --hook for another module is taken, and said: its pin still holds.
        if let (Some(entry), Some(_)) = (entry, &self.hook)
            && !same_file(&entry)
            && !same_name(&entry)
        {
            eprintln!(
                "note: testing {} under the policy's entry {} (--hook), whose module is {}",
                self.module.display(),
                entry.name,
                entry.module
            );
        }
        let Some(entry) = entry else {
            return Err(Failure::usage(format!(
                "{}: no hook entry for {}: name one with --hook (hooks: {})",
                file.display(),
                self.module.display(),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            )));
        };
        // The entry's pin holds as in a plan: a module that is not the pinned one is refused.
        let spec = HookSpec {
            module: ModuleSource::File(self.module.clone()),
            points: points.or_else(|| entry.points.clone()),
            failure_policy: FailurePolicy::Ignore,
            // Tested as if it decided, whatever the policy's mode: its decisions are what is shown.
            mode: HookMode::Enforce,
            ..entry.clone()
        };
        Ok((policy, spec))
    }
}

/// The one item of `items`; none when there are none or several.
fn only<'a>(mut items: impl Iterator<Item = &'a HookSpec>) -> Option<&'a HookSpec> {
    let first = items.next()?;
    items.next().is_none().then_some(first)
}
