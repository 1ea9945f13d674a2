//! What the scheduler weighs when it places a pod, as the snapshot carries it: CPU and memory
//! (a pod's requests, a node's allocatable), and a pod's node constraints (`nodeSelector`,
//! required node affinity, tolerations). The matching follows the scheduler's own filters, so
//! that a plan's capacity forecast and the cluster agree on where a pod may run.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};

use crate::labels::Labels;
use crate::quantity::{format_cpu, format_memory, parse_cpu, parse_memory};
use crate::snapshot::Taint;

/// CPU in millicores and memory in bytes: a pod's requests or a node's allocatable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Resources {
    pub cpu: u64,
    pub memory: u64,
}

impl Resources {
    /// What a node whose allocatable is unknown offers: no limit.
    pub const UNLIMITED: Resources = Resources {
        cpu: u64::MAX,
        memory: u64::MAX,
    };

    pub fn is_zero(self) -> bool {
        self == Resources::default()
    }

    pub fn plus(self, other: Resources) -> Resources {
        Resources {
            cpu: self.cpu.saturating_add(other.cpu),
            memory: self.memory.saturating_add(other.memory),
        }
    }

    pub fn minus(self, other: Resources) -> Resources {
        Resources {
            cpu: self.cpu.saturating_sub(other.cpu),
            memory: self.memory.saturating_sub(other.memory),
        }
    }

    /// The larger of each: what a pod needs at its peak.
    pub fn max(self, other: Resources) -> Resources {
        Resources {
            cpu: self.cpu.max(other.cpu),
            memory: self.memory.max(other.memory),
        }
    }

    /// Whether `self` fits in `room`, resource by resource.
    pub fn fits_in(self, room: Resources) -> bool {
        self.cpu <= room.cpu && self.memory <= room.memory
    }
}

/// `cpu 500m, memory 1Gi`; unlimited resources read `unlimited`.
impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cpu = match self.cpu {
            u64::MAX => "unlimited".into(),
            m => format_cpu(m),
        };
        let memory = match self.memory {
            u64::MAX => "unlimited".into(),
            b => format_memory(b),
        };
        write!(f, "cpu {cpu}, memory {memory}")
    }
}

/// Where a pod may run: its `nodeSelector`, its required node affinity and its tolerations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Placement {
    pub node_selector: Labels,
    /// `requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`, none when the pod has
    /// no required node affinity. The terms are ORed, and a pod with an empty list fits nowhere.
    pub required_terms: Option<Vec<NodeSelectorTerm>>,
    pub tolerations: Vec<Toleration>,
}

/// One term of a node selector: its requirements are ANDed; a term without any selects no node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorTerm {
    /// On the node's labels.
    #[serde(default)]
    pub match_expressions: Vec<NodeRequirement>,
    /// On the node's fields: only `metadata.name` exists.
    #[serde(default)]
    pub match_fields: Vec<NodeRequirement>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
pub struct NodeRequirement {
    pub key: String,
    pub operator: NodeOperator,
    #[serde(default)]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum NodeOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    /// The label's value, read as an integer, is greater than the single value.
    Gt,
    Lt,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// Empty (with `Exists`) tolerates every key.
    #[serde(default)]
    pub key: String,
    /// `Equal` (the default) or `Exists`.
    #[serde(default)]
    pub operator: String,
    #[serde(default)]
    pub value: String,
    /// Empty tolerates every effect.
    #[serde(default)]
    pub effect: String,
}

impl Toleration {
    /// The scheduler's `ToleratesTaint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if !self.effect.is_empty() && self.effect != taint.effect {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator.as_str() {
            "Exists" => true,
            "" | "Equal" => self.value == taint.value,
            _ => false,
        }
    }
}

/// Whether a taint keeps pods that do not tolerate it off a node. `PreferNoSchedule` is a
/// preference the scheduler may ignore when nothing else fits, so it keeps nothing off.
pub fn repels(taint: &Taint) -> bool {
    matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute")
}

impl NodeRequirement {
    fn matches(&self, value: Option<&str>) -> bool {
        let as_int = |v: &str| v.parse::<i64>().ok();
        let bound = || self.values.first().and_then(|v| as_int(v));
        match self.operator {
            NodeOperator::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            NodeOperator::NotIn => value.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            NodeOperator::Exists => value.is_some(),
            NodeOperator::DoesNotExist => value.is_none(),
            NodeOperator::Gt => {
                matches!((value.and_then(as_int), bound()), (Some(v), Some(b)) if v > b)
            }
            NodeOperator::Lt => {
                matches!((value.and_then(as_int), bound()), (Some(v), Some(b)) if v < b)
            }
        }
    }
}

impl NodeSelectorTerm {
    /// `name` is the node's (none for a node not created yet, which no field requirement names).
    pub fn matches(&self, name: Option<&str>, labels: &Labels) -> bool {
        if self.match_expressions.is_empty() && self.match_fields.is_empty() {
            return false;
        }
        self.match_expressions
            .iter()
            .all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
            && self
                .match_fields
                .iter()
                .all(|r| r.key == "metadata.name" && r.matches(name))
    }
}

impl Placement {
    /// The label keys it selects nodes by.
    pub fn label_keys(&self) -> impl Iterator<Item = &str> {
        let terms = self.required_terms.iter().flatten();
        self.node_selector
            .keys()
            .map(String::as_str)
            .chain(terms.flat_map(|t| t.match_expressions.iter().map(|r| r.key.as_str())))
    }

    /// Whether it selects by field (the node's name).
    pub fn selects_fields(&self) -> bool {
        let mut terms = self.required_terms.iter().flatten();
        terms.any(|t| !t.match_fields.is_empty())
    }

    pub fn selector_matches(&self, labels: &Labels) -> bool {
        self.node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    }

    pub fn affinity_matches(&self, name: Option<&str>, labels: &Labels) -> bool {
        self.required_terms
            .as_ref()
            .is_none_or(|terms| terms.iter().any(|t| t.matches(name, labels)))
    }

    /// A taint among `taints` that keeps the pod off, if any.
    pub fn repelled_by<'t>(
        &self,
        taints: impl IntoIterator<Item = &'t Taint>,
    ) -> Option<&'t Taint> {
        taints
            .into_iter()
            .find(|t| repels(t) && !self.tolerations.iter().any(|tol| tol.tolerates(t)))
    }

    /// Whether the pod may run on a node with this name, labels and taints (its resources
    /// aside).
    pub fn admits<'t>(
        &self,
        name: Option<&str>,
        labels: &Labels,
        taints: impl IntoIterator<Item = &'t Taint>,
    ) -> bool {
        self.selector_matches(labels)
            && self.affinity_matches(name, labels)
            && self.repelled_by(taints).is_none()
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawContainer {
    #[serde(default)]
    resources: RawRequirements,
    /// `Always` on an init container makes it a sidecar, running beside the containers.
    #[serde(default)]
    restart_policy: String,
}

#[derive(Deserialize, Default)]
struct RawRequirements {
    #[serde(default)]
    requests: RawResources,
}

/// A resource list's CPU and memory; other resources are not planned with.
#[derive(Deserialize, Default)]
pub(crate) struct RawResources {
    #[serde(default, deserialize_with = "cpu")]
    cpu: Option<u64>,
    #[serde(default, deserialize_with = "memory")]
    memory: Option<u64>,
}

impl RawResources {
    /// What is given; a missing resource is 0 (a request) or `missing` (an allocatable).
    pub fn or(&self, missing: u64) -> Resources {
        Resources {
            cpu: self.cpu.unwrap_or(missing),
            memory: self.memory.unwrap_or(missing),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.cpu.is_none() && self.memory.is_none()
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawAffinity {
    node_affinity: Option<RawNodeAffinity>,
}

#[derive(Deserialize, Default)]
struct RawNodeAffinity {
    #[serde(rename = "requiredDuringSchedulingIgnoredDuringExecution")]
    required: Option<RawNodeSelector>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawNodeSelector {
    #[serde(default)]
    node_selector_terms: Vec<NodeSelectorTerm>,
}

/// Reads a quantity in place (a snapshot holds hundreds of thousands): a string in the API, a
/// number accepted too, for hand-written snapshots.
struct Quantity(fn(&str) -> Result<u64, String>);

impl<'de> Visitor<'de> for Quantity {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a quantity such as 500m or 1Gi")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        (self.0)(text).map(Some).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
        self.visit_str(&n.to_string())
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
        self.visit_str(&n.to_string())
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Self::Value, E> {
        self.visit_str(&n.to_string())
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

fn quantity<'de, D: Deserializer<'de>>(
    d: D,
    parse: fn(&str) -> Result<u64, String>,
) -> Result<Option<u64>, D::Error> {
    d.deserialize_option(Quantity(parse))
}

fn cpu<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    quantity(d, parse_cpu)
}

fn memory<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    quantity(d, parse_memory)
}

/// What the scheduler reserves for a pod: the containers' requests summed (with the
/// sidecars'), or an init container's if larger (init containers run one at a time, each beside
/// the sidecars started before it), plus the overhead. Resource by resource; a container without
/// requests requests nothing.
pub(crate) fn pod_requests(
    containers: &[RawContainer],
    init_containers: &[RawContainer],
    overhead: &RawResources,
) -> Resources {
    let of = |c: &RawContainer| c.resources.requests.or(0);
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for init in init_containers {
        if init.restart_policy == "Always" {
            sidecars = sidecars.plus(of(init));
            init_peak = init_peak.max(sidecars);
        } else {
            init_peak = init_peak.max(sidecars.plus(of(init)));
        }
    }
    let running = containers.iter().fold(sidecars, |sum, c| sum.plus(of(c)));
    running.max(init_peak).plus(overhead.or(0))
}

pub(crate) fn placement(
    node_selector: Labels,
    affinity: Option<RawAffinity>,
    tolerations: Vec<Toleration>,
) -> Placement {
    let required = affinity.and_then(|a| a.node_affinity?.required);
    Placement {
        node_selector,
        required_terms: required.map(|r| r.node_selector_terms),
        tolerations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::labels;
    use crate::snapshot::{Pod, Snapshot};

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
        }
    }

    /// A pod with this spec, read as a snapshot reads it.
    fn pod(spec: &str) -> Pod {
        let json = format!(
            r#"{{"kind": "List", "items": [{{"kind": "Pod", "metadata": {{"name": "p"}}, "spec": {spec}}}]}}"#
        );
        Snapshot::from_json(json.as_bytes()).unwrap().pods[0]
            .as_ref()
            .clone()
    }

    #[test]
    fn requests_sum_the_containers_and_take_the_larger_init_container() {
        let web = pod(r#"{"containers": [
                {"resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                {"resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "1"}}},
                {"name": "no-requests"}],
              "initContainers": [{"resources": {"requests": {"memory": "1Gi"}}}]}"#);
        assert_eq!(
            web.requests,
            Resources {
                cpu: 500,
                memory: 1 << 30
            }
        );
        assert!(pod(r#"{"containers": [{}]}"#).requests.is_zero());
    }

    #[test]
    fn sidecars_run_beside_the_containers_and_overhead_is_added() {
        let sidecar = pod(
            r#"{"containers": [{"resources": {"requests": {"cpu": "1"}}}],
              "initContainers": [
                {"restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                {"resources": {"requests": {"cpu": "2"}}}],
              "overhead": {"cpu": "10m", "memory": 1000}}"#,
        );
        // max(1 + 0.1, 0.1 + 2) + overhead
        assert_eq!(
            sidecar.requests,
            Resources {
                cpu: 2110,
                memory: 1000
            }
        );
    }

    #[test]
    fn a_malformed_quantity_is_an_error() {
        let json = r#"{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]}}]}"#;
        let err = Snapshot::from_json(json.as_bytes()).unwrap_err();
        assert!(
            err.to_string().contains("invalid quantity \"lots\""),
            "{err}"
        );
    }

    #[test]
    fn required_affinity_terms_are_ored_and_expressions_anded() {
        let placement = pod(
            r#"{"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]},
                                      {"key": "legacy", "operator": "DoesNotExist"}]},
                {"matchExpressions": [{"key": "gpu", "operator": "Exists"},
                                      {"key": "tier", "operator": "NotIn", "values": ["spot"]}]}]}}}}"#,
        )
        .placement;
        let ok = |pairs: &[(&str, &str)]| placement.affinity_matches(None, &labels(pairs));
        assert!(ok(&[("zone", "a")]));
        assert!(!ok(&[("zone", "c")]));
        assert!(!ok(&[("zone", "a"), ("legacy", "")]));
        assert!(ok(&[("gpu", "1")]), "NotIn holds for a missing label");
        assert!(!ok(&[("gpu", "1"), ("tier", "spot")]));
        assert!(ok(&[("gpu", "1"), ("tier", "standard")]));
        assert!(!ok(&[]));
    }

    #[test]
    fn gt_and_lt_compare_integers_and_fields_name_the_node() {
        let term: NodeSelectorTerm = serde_json::from_str(
            r#"{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]},
                                     {"key": "cores", "operator": "Lt", "values": ["64"]}],
                "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}"#,
        )
        .unwrap();
        assert!(term.matches(Some("n2"), &labels(&[("cores", "8")])));
        assert!(!term.matches(Some("n1"), &labels(&[("cores", "8")])));
        assert!(term.matches(None, &labels(&[("cores", "8")])));
        assert!(!term.matches(Some("n2"), &labels(&[("cores", "4")])));
        assert!(!term.matches(Some("n2"), &labels(&[("cores", "64")])));
        assert!(!term.matches(Some("n2"), &labels(&[("cores", "many")])));
        assert!(!term.matches(Some("n2"), &labels(&[])));
        assert!(!NodeSelectorTerm::default().matches(Some("n2"), &labels(&[])));
        let none = pod(r#"{"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}}"#).placement;
        assert!(!none.affinity_matches(None, &labels(&[])));
        assert!(Placement::default().affinity_matches(None, &labels(&[])));
    }

    #[test]
    fn taints_keep_off_the_pods_that_do_not_tolerate_them() {
        let dedicated = taint("dedicated", "gpu", "NoSchedule");
        let evicting = taint("maintenance", "", "NoExecute");
        let preferred = taint(
            "rollout-ext.io/scheduled-for-update",
            "",
            "PreferNoSchedule",
        );
        let taints = [dedicated.clone(), evicting.clone(), preferred];
        let mut pod = Placement::default();
        assert_eq!(pod.repelled_by(&taints), Some(&dedicated));
        pod.tolerations.push(Toleration {
            key: "dedicated".into(),
            value: "gpu".into(),
            ..Default::default()
        });
        assert_eq!(pod.repelled_by(&taints), Some(&evicting));
        pod.tolerations.push(Toleration {
            operator: "Exists".into(),
            effect: "NoExecute".into(),
            ..Default::default()
        });
        assert_eq!(
            pod.repelled_by(&taints),
            None,
            "PreferNoSchedule keeps nothing off"
        );

        let wrong_value = Toleration {
            key: "dedicated".into(),
            value: "cpu".into(),
            ..Default::default()
        };
        assert!(!wrong_value.tolerates(&dedicated));
        let wrong_effect = Toleration {
            key: "dedicated".into(),
            operator: "Exists".into(),
            effect: "NoExecute".into(),
            ..Default::default()
        };
        assert!(!wrong_effect.tolerates(&dedicated));
    }

    #[test]
    fn node_selector_must_match_every_label() {
        let pod = Placement {
            node_selector: labels(&[("disk", "ssd"), ("zone", "a")]),
            ..Default::default()
        };
        assert!(pod.admits(
            None,
            &labels(&[("disk", "ssd"), ("zone", "a"), ("x", "y")]),
            &[]
        ));
        assert!(!pod.admits(None, &labels(&[("disk", "ssd")]), &[]));
    }
}
