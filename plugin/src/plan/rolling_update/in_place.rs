//! What a StatefulSet and a DaemonSet share as workloads this tool updates in place: the
//! object's JSON read through the same accessors, the original update strategy recorded on the
//! object while an update of this tool is under way (and put back at its end), the rollback
//! mark, and how a roll to a new template starts. Kept as JSON so that fields this tool does not
//! know survive a write untouched.

use serde_json::{Value, json};

use super::template::{self, TemplateChange};
use crate::keys;
use crate::policy::IntOrPercent;

/// How an update starts, from the workload and its pods as they are; `R` names the revision a
/// rollback writes back.
#[derive(Debug, Clone, PartialEq)]
pub enum Start<R> {
    /// An update of this tool is under way: go on from where it stands.
    Resume,
    /// Write this template (`None`: keep the one set), held so that nothing moves by itself.
    Write(Option<Value>),
    /// Write back the revision the not-yet-updated pods run: a rollback.
    Revert(R),
}

/// A workload updated in place, read from its object.
pub trait InPlaceWorkload {
    /// The kind as `kubectl` writes it in `kind/name`.
    const KIND: &'static str;

    fn object(&self) -> &Value;

    fn name(&self) -> &str {
        self.object()["metadata"]["name"].as_str().unwrap_or("")
    }

    fn uid(&self) -> &str {
        self.object()["metadata"]["uid"].as_str().unwrap_or("")
    }

    /// `kind/name`, as messages name it.
    fn display(&self) -> String {
        format!("{}/{}", Self::KIND, self.name())
    }

    fn template(&self) -> &Value {
        &self.object()["spec"]["template"]
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.object()["metadata"]["annotations"][key].as_str()
    }

    /// `spec.updateStrategy` as written (the API's default when unset).
    fn strategy(&self) -> Value {
        match &self.object()["spec"]["updateStrategy"] {
            Value::Null => json!({"type": "RollingUpdate"}),
            strategy => strategy.clone(),
        }
    }

    /// The strategy this tool recorded when it started an update; its presence means an update
    /// of this tool is under way.
    fn recorded_strategy(&self) -> Option<Value> {
        self.annotation(keys::ORIGINAL_UPDATE_STRATEGY)
            .and_then(|s| serde_json::from_str(s).ok())
    }

    /// The workload's own `rollingUpdate.maxUnavailable` (of the strategy it had before this
    /// tool's update), 1 when it says none.
    fn own_max_unavailable(&self) -> IntOrPercent {
        let strategy = self.recorded_strategy().unwrap_or_else(|| self.strategy());
        match &strategy["rollingUpdate"]["maxUnavailable"] {
            Value::Number(n) => IntOrPercent::Int(n.as_u64().unwrap_or(1) as u32),
            Value::String(s) => s.parse().unwrap_or(IntOrPercent::Int(1)),
            _ => IntOrPercent::Int(1),
        }
    }

    fn rolling_back(&self) -> bool {
        self.annotation(keys::ROLLING_BACK).is_some()
    }

    fn min_ready_seconds(&self) -> i64 {
        self.object()["spec"]["minReadySeconds"]
            .as_i64()
            .unwrap_or(0)
    }

    /// The controller has seen the latest spec.
    fn observed(&self) -> bool {
        let object = self.object();
        let generation = object["metadata"]["generation"].as_i64().unwrap_or(0);
        object["status"]["observedGeneration"]
            .as_i64()
            .is_some_and(|o| o >= generation)
    }

    /// The label selector as a list query.
    fn selector_string(&self) -> String {
        template::selector_query(&self.object()["spec"]["selector"])
    }

    /// The pod template the request asks for.
    fn next_template(&self, change: &TemplateChange) -> Result<Value, String> {
        template::changed(self.object(), &self.display(), change)
    }

    /// Whether `template` is the current one, ignoring the server's defaults and nulls: only
    /// what the request sets is compared.
    fn has_template(&self, template: &Value) -> bool {
        template::contains(self.template(), template)
    }

    /// The patch that puts the recorded strategy back and forgets the records; `None` when
    /// nothing was recorded.
    fn restoring(&self) -> Option<Value> {
        let original = self.recorded_strategy()?;
        Some(json!({
            "metadata": {"annotations": {keys::ORIGINAL_UPDATE_STRATEGY: null, keys::ROLLING_BACK: null}},
            "spec": {"updateStrategy": template::restoring_strategy(&original)},
        }))
    }

    /// The object as an update starts it, in one write: `template` (when given), `strategy`
    /// (the update's own, that moves nothing by itself; `None` keeps the one set), the original
    /// strategy recorded (kept when an earlier run recorded it), and whether this is a
    /// rollback.
    fn begun_object(
        &self,
        template: Option<Value>,
        strategy: Option<Value>,
        rollback: bool,
    ) -> Value {
        let original = self.recorded_strategy().unwrap_or_else(|| self.strategy());
        let mut next = self.object().clone();
        if let Some(template) = template {
            next["spec"]["template"] = template;
        }
        if let Some(strategy) = strategy {
            next["spec"]["updateStrategy"] = strategy;
        }
        let annotations = &mut next["metadata"]["annotations"];
        annotations[keys::ORIGINAL_UPDATE_STRATEGY] = json!(original.to_string());
        if rollback {
            annotations[keys::ROLLING_BACK] = json!("true");
        } else if let Some(map) = annotations.as_object_mut() {
            map.remove(keys::ROLLING_BACK);
        }
        next
    }

    /// How a roll to `template` starts: refused while a rollback to another template is under
    /// way; the template written when it is not in (or when a rollback to this very template
    /// goes on, as an update now); resumed when an update of this tool is under way; else
    /// refused with `up_to_date` when it says every pod runs the template already, or the
    /// template kept and the pods on older revisions taken on.
    fn roll_start<R>(
        &self,
        template: Value,
        up_to_date: impl FnOnce() -> Option<String>,
    ) -> Result<Start<R>, String> {
        let has = self.has_template(&template);
        if self.rolling_back() && !has {
            return Err(format!(
                "{} is being rolled back: finish that with --rollback, then run the update again",
                self.display()
            ));
        }
        if !has || self.rolling_back() {
            return Ok(Start::Write((!has).then_some(template)));
        }
        if self.recorded_strategy().is_some() {
            return Ok(Start::Resume);
        }
        match up_to_date() {
            Some(nothing) => Err(nothing),
            None => Ok(Start::Write(None)),
        }
    }
}
