//! The `drain` section of a policy: how long pods that ask not to be disrupted and pods that run
//! to completion are waited for, the order pods are evicted in, and the escalation ladder of a
//! drain blocked by a PodDisruptionBudget. Plain data checked at load; `plan::drain` applies it.

use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::{Located, PolicyError, parse_duration};
use crate::labels::LabelSelector;

/// How long a drain waits for a do-not-disrupt pod to go away by default.
pub const DEFAULT_DO_NOT_DISRUPT_TIMEOUT: Duration = Duration::from_secs(3600);
/// How long a drain waits for a running Job pod to complete by default.
pub const DEFAULT_JOB_TIMEOUT: Duration = Duration::from_secs(2 * 3600);

/// The `drain` section, with its defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct DrainPolicy {
    /// Label each node at its cordon [`crate::keys::EXCLUDE_FROM_LOAD_BALANCERS`], so that
    /// cloud load balancers stop sending it new connections before its pods are evicted (a
    /// cordon alone does not, since Kubernetes 1.19).
    pub exclude_from_load_balancers: bool,
    pub do_not_disrupt_timeout: Duration,
    pub after_timeout: AfterTimeout,
    pub job_timeout: Duration,
    /// Eviction order rules, as written; the first a pod matches places it.
    pub order: Vec<OrderRule>,
    /// Rungs taken in turn while an eviction stays refused; empty: retry until the drain
    /// timeout (kubectl's behaviour). After the last rung the drain stops.
    pub escalation: Vec<Rung>,
    /// How long a batch waits between labelling its nodes out of load balancers and the first
    /// eviction, for load balancers' deregistration delay; zero: no wait.
    pub load_balancer_drain_delay: Duration,
    /// What a rotation does with a node whose drain cannot finish.
    pub undrainable: Undrainable,
}

/// What a rotation does with a node whose drain cannot finish (a budget that never allows, a
/// drain timeout, a held pod's wait or an escalation ladder that ends, a pod the drain refuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Undrainable {
    pub action: UndrainableAction,
    /// With `Quarantine`: how many nodes a run may set aside; one more stops it.
    pub max_quarantined: u32,
}

/// How many nodes a run sets aside at most unless the policy says.
pub const DEFAULT_MAX_QUARANTINED: u32 = 1;

impl Default for Undrainable {
    fn default() -> Self {
        Undrainable {
            action: UndrainableAction::Stop,
            max_quarantined: DEFAULT_MAX_QUARANTINED,
        }
    }
}

impl Undrainable {
    /// Whether a node whose drain failed is set aside, `already` being set aside in this run.
    pub fn sets_aside(&self, already: usize) -> bool {
        self.action == UndrainableAction::Quarantine && already < self.max_quarantined as usize
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum UndrainableAction {
    /// Stop the run, resumably, naming what holds the drain.
    #[default]
    Stop,
    /// Set the node aside (cordoned, its pods left running, labelled quarantined, not
    /// terminated) and go on with the group's other nodes; the run then ends with exit code 6.
    Quarantine,
}

impl UndrainableAction {
    pub fn as_str(self) -> &'static str {
        match self {
            UndrainableAction::Stop => "Stop",
            UndrainableAction::Quarantine => "Quarantine",
        }
    }
}

impl Default for DrainPolicy {
    fn default() -> Self {
        DrainPolicy {
            exclude_from_load_balancers: true,
            do_not_disrupt_timeout: DEFAULT_DO_NOT_DISRUPT_TIMEOUT,
            after_timeout: AfterTimeout::Stop,
            job_timeout: DEFAULT_JOB_TIMEOUT,
            order: Vec::new(),
            escalation: Vec::new(),
            load_balancer_drain_delay: Duration::ZERO,
            undrainable: Undrainable::default(),
        }
    }
}

/// What a drain does with a do-not-disrupt pod still there at `doNotDisruptTimeout`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum AfterTimeout {
    /// Stop the run, resumably, naming the pod.
    #[default]
    Stop,
    /// Evict it like any other pod.
    Evict,
}

/// Pods evicted in the same turn; lower orders go (and are gone) first.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderRule {
    pub order: i32,
    pub pod_selector: Option<LabelSelector>,
    pub namespaces: Vec<String>,
    pub priority_class_names: Vec<String>,
}

/// One step of the escalation ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rung {
    pub action: RungAction,
    /// How long this rung lasts before the next is taken.
    pub wait: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum RungAction {
    /// Keep retrying the eviction (every 5 seconds).
    Retry,
    /// Delete the blocked pod if it is not Ready (it only holds its own budget at 0), then
    /// keep retrying the others.
    DeleteUnready,
    /// Delete the blocked pods instead of evicting them: their budgets are bypassed.
    Delete,
    /// Stop the drain; written last, or implied after the last rung.
    Stop,
}

impl RungAction {
    pub fn as_str(self) -> &'static str {
        match self {
            RungAction::Retry => "Retry",
            RungAction::DeleteUnready => "DeleteUnready",
            RungAction::Delete => "Delete",
            RungAction::Stop => "Stop",
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawDrain {
    exclude_from_load_balancers: Option<bool>,
    do_not_disrupt_timeout: Option<Spanned<String>>,
    #[serde(default)]
    after_timeout: AfterTimeout,
    job_timeout: Option<Spanned<String>>,
    #[serde(default)]
    order: Vec<Spanned<RawOrderRule>>,
    #[serde(default)]
    escalation: Vec<Spanned<RawRung>>,
    load_balancer_drain_delay: Option<Spanned<String>>,
    undrainable: Option<RawUndrainable>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawUndrainable {
    #[serde(default)]
    action: UndrainableAction,
    max_quarantined: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawOrderRule {
    order: i32,
    pod_selector: Option<Spanned<String>>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    priority_class_names: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawRung {
    rung: RungAction,
    wait: Option<Spanned<String>>,
}

impl Located<'_> {
    /// The `drain` section, checked entry by entry.
    pub(super) fn drain(&self, raw: RawDrain) -> Result<DrainPolicy, PolicyError> {
        let positive = |value: &Spanned<String>, field: &str| {
            let d = parse_duration(&value.value).map_err(|m| self.of(value, m))?;
            if d.is_zero() {
                let message = format!("drain.{field} {:?}: expected more than 0", value.value);
                return Err(self.of(value, message));
            }
            Ok(d)
        };
        let mut policy = DrainPolicy {
            after_timeout: raw.after_timeout,
            ..DrainPolicy::default()
        };
        if let Some(exclude) = raw.exclude_from_load_balancers {
            policy.exclude_from_load_balancers = exclude;
        }
        if let Some(t) = &raw.do_not_disrupt_timeout {
            policy.do_not_disrupt_timeout = positive(t, "doNotDisruptTimeout")?;
        }
        if let Some(t) = &raw.job_timeout {
            policy.job_timeout = positive(t, "jobTimeout")?;
        }
        if let Some(d) = &raw.load_balancer_drain_delay {
            policy.load_balancer_drain_delay =
                parse_duration(&d.value).map_err(|m| self.of(d, m))?;
        }
        if let Some(u) = raw.undrainable {
            policy.undrainable = Undrainable {
                action: u.action,
                max_quarantined: u.max_quarantined.unwrap_or(DEFAULT_MAX_QUARANTINED),
            };
        }
        for rule in raw.order {
            let (line, column) = (rule.referenced.line(), rule.referenced.column());
            let rule = rule.value;
            let pod_selector = rule
                .pod_selector
                .as_ref()
                .map(|s| {
                    LabelSelector::parse(&s.value)
                        .map_err(|m| self.of(s, format!("drain.order podSelector: {m}")))
                })
                .transpose()?;
            if pod_selector.is_none()
                && rule.namespaces.is_empty()
                && rule.priority_class_names.is_empty()
            {
                let message = "drain.order entry matches every pod: give it a podSelector, namespaces or priorityClassNames".to_string();
                return Err(self.error(line as u32, column as u32, message));
            }
            policy.order.push(OrderRule {
                order: rule.order,
                pod_selector,
                namespaces: rule.namespaces,
                priority_class_names: rule.priority_class_names,
            });
        }
        if let [only] = raw.escalation.as_slice()
            && only.value.rung == RungAction::Stop
        {
            let message = "drain.escalation: a ladder of Stop alone is kubectl's behaviour (retry until the drain timeout, then stop): leave escalation out, or list rungs before Stop".into();
            return Err(self.of(only, message));
        }
        let rungs = raw.escalation.len();
        for (i, rung) in raw.escalation.into_iter().enumerate() {
            let action = rung.value.rung;
            let wait = match (action, &rung.value.wait) {
                (RungAction::Stop, None) if i + 1 == rungs => Duration::ZERO,
                (RungAction::Stop, None) => {
                    let message = "drain.escalation: Stop ends the ladder, so it comes last".into();
                    return Err(self.of(&rung, message));
                }
                (RungAction::Stop, Some(w)) => {
                    let message = "drain.escalation: Stop takes no wait".into();
                    return Err(self.of(w, message));
                }
                (_, Some(w)) => positive(w, "escalation wait")?,
                (_, None) => {
                    let message = format!(
                        "drain.escalation rung {}: expected a wait (how long it lasts before the next rung)",
                        action.as_str()
                    );
                    return Err(self.of(&rung, message));
                }
            };
            if action != RungAction::Stop {
                policy.escalation.push(Rung { action, wait });
            }
        }
        Ok(policy)
    }
}
