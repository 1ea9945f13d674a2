//! Builders for unit-testing a policy natively: `cargo test` calls the [`crate::Policy`] methods
//! directly with these values, no WebAssembly runtime involved. A policy that reads cluster
//! objects ([`crate::host::pods`], …) is given them by a [`FakeCluster`]; a fleet's gate is told
//! of a [`stage`] and the [`stage_outcome`] before it.

use crate::{
    Batch, Context, Group, Instance, InstanceKind, Instances, LocalInstance, Progress, Role,
    ValidationSummary,
};

/// A context at `now` (Unix seconds) with the given JSON config.
pub fn context(now: i64, config: serde_json::Value) -> Context {
    Context {
        now,
        run_id: "test-run".into(),
        dry_run: true,
        hook_name: "test".into(),
        config: config.to_string(),
    }
}

/// A Ready node instance in group `nodes`, zone `zone` (the field and the
/// `topology.kubernetes.io/zone` label), outdated and chosen by the built-in rules (reason
/// `"test"`). Add labels, annotations and taints with [`LocalInstance::with_label`], …; mark it
/// up to date with [`LocalInstance::up_to_date`]; edit any field through `DerefMut`.
pub fn node(name: &str, zone: &str) -> LocalInstance {
    LocalInstance::new(Instance {
        kind: InstanceKind::Node,
        name: name.into(),
        group: "nodes".into(),
        role: Role::Node,
        zone: Some(zone.into()),
        ready: true,
        unschedulable: false,
        created: None,
        kubelet_version: None,
        pods: 0,
        pods_not_ready: 0,
        up_to_date: false,
        reason: Some("test".into()),
    })
    .with_label("topology.kubernetes.io/zone", zone)
}

/// The instances as the host lends them to a call: the `candidates` of
/// [`crate::Policy::select`].
pub fn candidates(instances: Vec<LocalInstance>) -> Instances<'static> {
    Instances::local(instances)
}

/// A node group of `instances`: its size, up-to-date and selected (chosen, with a reason)
/// counts are theirs.
pub fn group(instances: &[LocalInstance], max_surge: u32, max_unavailable: u32) -> Group {
    let count = |f: fn(&LocalInstance) -> bool| instances.iter().filter(|i| f(i)).count() as u32;
    Group {
        name: "nodes".into(),
        role: Role::Node,
        size: instances.len() as u32,
        up_to_date: count(|i| i.up_to_date),
        selected: count(|i| i.reason.is_some()),
        max_surge,
        max_unavailable,
    }
}

/// Progress of a group after `batches_done` batches that updated `updated` instances, the next
/// batch taken from `pending` (as the host shows it: at most `max_batch` of them).
pub fn progress(
    group: Group,
    mut pending: Vec<LocalInstance>,
    batches_done: u32,
    updated: u32,
) -> Progress<'static> {
    let max_batch = (group.max_surge + group.max_unavailable).min(pending.len() as u32);
    pending.truncate(max_batch as usize);
    Progress {
        group,
        batches_done,
        updated,
        max_batch,
        pending: Instances::local(pending),
    }
}

/// The first batch of a group, holding `instances`.
pub fn batch(instances: &[&str]) -> Batch {
    Batch {
        index: 0,
        instances: instances.iter().map(|s| s.to_string()).collect(),
        canary: false,
        attempt: 0,
    }
}

/// A healthy cluster of `nodes` nodes and `pods` pods.
pub fn healthy(nodes: u32, pods: u32) -> ValidationSummary {
    ValidationSummary {
        nodes_total: nodes,
        nodes_not_ready: 0,
        nodes_unschedulable: 0,
        pods_total: pods,
        pods_not_ready: 0,
        system_pods_not_ready: 0,
        budgets: vec![],
        failures: vec![],
    }
}

/// A stand-in for the host's `list-objects` in native unit tests: the objects a test says the
/// cluster holds, served to [`crate::host::list_objects`], [`crate::host::list`],
/// [`crate::host::pods`], … on the thread that installed it (each `#[test]` runs on its own
/// thread, so tests do not see each other's clusters).
///
/// Like the plugin it answers only for the kinds it was given (as if the policy's
/// `contextResources` allowed exactly those) and an error, worded as the plugin's, for any other
/// kind. It filters by namespace and by a label selector of equality and existence terms
/// (`app=web,tier!=db,canary,!legacy`); a set-based term (`env in (a,b)`) is an error rather
/// than a guess. Objects come back in the order they were given. Outside a fake a native build
/// still answers that listing is only available inside the plugin; in a WebAssembly build the
/// fake has no effect, the plugin answers.
///
/// ```
/// use rollout_ext_hooks::{host, testing::FakeCluster};
/// use serde_json::json;
///
/// let ready = |name: &str, node: &str| json!({
///     "metadata": {"name": name, "namespace": "shop", "labels": {"app": "web"}},
///     "spec": {"nodeName": node},
///     "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
/// });
/// let cluster = FakeCluster::new().with("v1", "Pod", [ready("web-1", "n1"), ready("web-2", "n2")]);
/// cluster.run(|| {
///     let pods = host::pods(Some("shop"), Some("app=web")).unwrap();
///     assert!(pods.iter().all(|p| p.is_ready()));
///     assert_eq!(host::pods(Some("other"), None).unwrap(), vec![]);
///     assert!(host::nodes(None).is_err()); // Nodes were not given: not allowed.
/// });
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FakeCluster {
    kinds: Vec<FakeKind>,
}

#[derive(Debug, Clone, PartialEq)]
struct FakeKind {
    api_version: String,
    kind: String,
    answer: Result<Vec<serde_json::Value>, String>,
}

thread_local! {
    static FAKE: std::cell::RefCell<Option<FakeCluster>> = const { std::cell::RefCell::new(None) };
}

impl FakeCluster {
    /// A cluster that allows no kind.
    pub fn new() -> Self {
        FakeCluster::default()
    }

    /// Allows `api_version` `kind` and adds `objects` to it (JSON as the API server shows them;
    /// only the fields the policy reads matter). With no objects the kind is allowed and empty.
    pub fn with(
        mut self,
        api_version: &str,
        kind: &str,
        objects: impl IntoIterator<Item = serde_json::Value>,
    ) -> Self {
        let entry = self.entry(api_version, kind);
        match &mut entry.answer {
            Ok(items) => items.extend(objects),
            answer @ Err(_) => *answer = Ok(objects.into_iter().collect()),
        }
        self
    }

    /// Makes every listing of `api_version` `kind` fail with `message`, as the plugin's does when
    /// the API server cannot be reached: for testing a policy's answer to a failed read.
    pub fn failing(mut self, api_version: &str, kind: &str, message: &str) -> Self {
        self.entry(api_version, kind).answer = Err(message.to_string());
        self
    }

    fn entry(&mut self, api_version: &str, kind: &str) -> &mut FakeKind {
        let at = self
            .kinds
            .iter()
            .position(|k| k.api_version == api_version && k.kind == kind)
            .unwrap_or_else(|| {
                self.kinds.push(FakeKind {
                    api_version: api_version.to_string(),
                    kind: kind.to_string(),
                    answer: Ok(Vec::new()),
                });
                self.kinds.len() - 1
            });
        &mut self.kinds[at]
    }

    /// Makes this the thread's cluster until the guard is dropped, when the one before (if any)
    /// comes back.
    #[must_use = "the fake is uninstalled when the guard is dropped"]
    pub fn install(self) -> FakeClusterGuard {
        let previous = FAKE.with(|fake| fake.borrow_mut().replace(self));
        FakeClusterGuard { previous }
    }

    /// Runs `f` with this as the thread's cluster, then restores the one before (also when `f`
    /// panics, as a failing assertion does).
    pub fn run<R>(self, f: impl FnOnce() -> R) -> R {
        let _guard = self.install();
        f()
    }

    /// What the plugin would answer to `list-objects` with these objects.
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> Result<String, String> {
        let Some(entry) = self
            .kinds
            .iter()
            .find(|k| k.api_version == api_version && k.kind == kind)
        else {
            let scope = namespace
                .map(|ns| format!(" in namespace {ns}"))
                .unwrap_or_default();
            return Err(format!(
                "{api_version} {kind}{scope} is not in the policy's contextResources"
            ));
        };
        let items = entry.answer.as_ref().map_err(Clone::clone)?;
        let terms = parse_selector(selector.unwrap_or(""))?;
        let matching: Vec<&serde_json::Value> = items
            .iter()
            .filter(|item| {
                let meta = &item["metadata"];
                let in_namespace =
                    namespace.is_none_or(|ns| meta["namespace"].as_str().unwrap_or("") == ns);
                let label = |key: &str| meta["labels"][key].as_str();
                in_namespace && terms.iter().all(|t| t.matches(label(&t.key)))
            })
            .collect();
        serde_json::to_string(&matching).map_err(|e| e.to_string())
    }
}

/// Uninstalls a [`FakeCluster`] when dropped. From [`FakeCluster::install`].
#[derive(Debug)]
pub struct FakeClusterGuard {
    previous: Option<FakeCluster>,
}

impl Drop for FakeClusterGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        // `try_with`: a guard dropped while the thread's locals are torn down has nothing to do.
        let _ = FAKE.try_with(|fake| *fake.borrow_mut() = previous);
    }
}

/// Runs `f` with a [`FakeCluster`] of `objects` (`(api_version, kind, objects)` each):
///
/// ```
/// use rollout_ext_hooks::{host, testing};
/// use serde_json::json;
///
/// let freeze = json!({"metadata": {"name": "freeze", "namespace": "ops"}, "data": {"frozen": "true"}});
/// testing::with_objects(&[("v1", "ConfigMap", vec![freeze])], || {
///     let maps = host::config_maps(Some("ops"), None).unwrap();
///     assert_eq!(maps[0].get("frozen"), Some("true"));
/// });
/// ```
pub fn with_objects<R>(
    objects: &[(&str, &str, Vec<serde_json::Value>)],
    f: impl FnOnce() -> R,
) -> R {
    objects
        .iter()
        .fold(FakeCluster::new(), |cluster, (api_version, kind, items)| {
            cluster.with(api_version, kind, items.iter().cloned())
        })
        .run(f)
}

mod estimates;
mod metrics;
mod others;
mod stages;
#[cfg(not(target_arch = "wasm32"))]
pub(crate) use estimates::fake_estimates;
pub use estimates::{estimate, with_estimates};
pub use metrics::{FakeMetrics, FakeMetricsGuard};
#[cfg(not(target_arch = "wasm32"))]
pub(crate) use others::fake_others;
pub use others::{disruption, with_others};
pub use stages::{stage, stage_outcome};
// The host's metrics calls answer from the fake only natively.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) use metrics::{fake_query, fake_query_range};

/// The installed fake's answer to `list-objects`; none when no fake is installed.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
pub(crate) fn fake_list(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    selector: Option<&str>,
) -> Option<Result<String, String>> {
    FAKE.with(|fake| {
        fake.borrow()
            .as_ref()
            .map(|cluster| cluster.list(api_version, kind, namespace, selector))
    })
}

/// One term of a label selector the fake understands.
#[derive(Debug, PartialEq)]
struct Term {
    key: String,
    test: Test,
}

#[derive(Debug, PartialEq)]
enum Test {
    Equals(String),
    NotEquals(String),
    Exists,
    DoesNotExist,
}

impl Term {
    fn matches(&self, value: Option<&str>) -> bool {
        match &self.test {
            Test::Equals(v) => value == Some(v.as_str()),
            Test::NotEquals(v) => value != Some(v.as_str()),
            Test::Exists => value.is_some(),
            Test::DoesNotExist => value.is_none(),
        }
    }
}

/// Parses `key=value`, `key==value`, `key!=value`, `key` and `!key` terms, comma-separated.
fn parse_selector(text: &str) -> Result<Vec<Term>, String> {
    let mut terms = Vec::new();
    for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let invalid = || {
            format!(
                "label selector term {term:?} is not one the fake cluster understands \
                 (key=value, key!=value, key, !key)"
            )
        };
        let valid_key = |key: &str| !key.is_empty() && !key.contains([' ', '(', ')', '!', '=']);
        let (key, test) = if let Some((key, value)) = term.split_once("!=") {
            (key, Test::NotEquals(value.trim().to_string()))
        } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
            (key, Test::Equals(value.trim().to_string()))
        } else if let Some(key) = term.strip_prefix('!') {
            (key, Test::DoesNotExist)
        } else {
            (term, Test::Exists)
        };
        let key = key.trim();
        let value_ok = match &test {
            Test::Equals(v) | Test::NotEquals(v) => !v.contains([' ', '(', ')', '=', '!']),
            Test::Exists | Test::DoesNotExist => true,
        };
        if !valid_key(key) || !value_ok {
            return Err(invalid());
        }
        terms.push(Term {
            key: key.to_string(),
            test,
        });
    }
    Ok(terms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host;
    use serde_json::json;

    fn pod(ns: &str, name: &str, labels: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"name": name, "namespace": ns, "labels": labels}})
    }

    fn names(pods: Vec<crate::objects::Pod>) -> Vec<String> {
        pods.into_iter().map(|p| p.key()).collect()
    }

    fn cluster() -> FakeCluster {
        FakeCluster::new().with(
            "v1",
            "Pod",
            [
                pod("shop", "web-1", json!({"app": "web", "tier": "front"})),
                pod("shop", "db-1", json!({"app": "db"})),
                pod("ops", "web-2", json!({"app": "web", "legacy": "yes"})),
            ],
        )
    }

    #[test]
    fn nodes_running_name_the_nodes_of_the_pods_that_match() {
        let on = |name: &str, node: Option<&str>, phase: &str| {
            json!({"metadata": {"name": name, "namespace": "a", "labels": {"critical": "true"}},
                   "spec": {"nodeName": node}, "status": {"phase": phase}})
        };
        let pods = [
            on("p1", Some("n1"), "Running"),
            on("p2", Some("n2"), "Succeeded"),
            on("p3", None, "Pending"),
            pod("a", "calm", json!({"critical": "false"})),
        ];
        FakeCluster::new().with("v1", "Pod", pods).run(|| {
            let nodes = host::nodes_running(None, Some("critical=true")).unwrap();
            assert_eq!(nodes.into_iter().collect::<Vec<_>>(), ["n1"]);
        });
    }

    #[test]
    fn filters_by_namespace_and_selector_in_the_given_order() {
        cluster().run(|| {
            let all = host::pods(None, None).unwrap();
            assert_eq!(names(all), ["shop/web-1", "shop/db-1", "ops/web-2"]);
            assert_eq!(
                names(host::pods(Some("shop"), None).unwrap()),
                ["shop/web-1", "shop/db-1"]
            );
            assert_eq!(
                names(host::pods(None, Some("app=web")).unwrap()),
                ["shop/web-1", "ops/web-2"]
            );
            assert_eq!(
                names(host::pods(None, Some("app==web, tier=front")).unwrap()),
                ["shop/web-1"]
            );
            assert_eq!(
                names(host::pods(None, Some("app!=web")).unwrap()),
                ["shop/db-1"]
            );
            assert_eq!(
                names(host::pods(None, Some("legacy")).unwrap()),
                ["ops/web-2"]
            );
            assert_eq!(
                names(host::pods(None, Some("!legacy")).unwrap()),
                ["shop/web-1", "shop/db-1"]
            );
            assert_eq!(
                names(host::pods(Some("ops"), Some("app=db")).unwrap()),
                Vec::<String>::new()
            );
            assert_eq!(host::pods(None, Some("")).unwrap().len(), 3);
        });
    }

    #[test]
    fn raw_and_custom_typed_listings_read_the_same_objects() {
        #[derive(serde::Deserialize)]
        struct Named {
            metadata: crate::objects::ObjectMeta,
        }
        cluster().run(|| {
            let raw = host::list_objects("v1", "Pod", Some("ops"), None).unwrap();
            assert_eq!(
                raw,
                vec![pod("ops", "web-2", json!({"app": "web", "legacy": "yes"}))]
            );
            let named: Vec<Named> = host::list("v1", "Pod", Some("ops"), None).unwrap();
            assert_eq!(named[0].metadata.name, "web-2");
            // A shape the type does not accept is an error naming the kind.
            let err = host::list::<u32>("v1", "Pod", None, None).unwrap_err();
            assert!(err.starts_with("cannot read v1 Pod list: "), "{err}");
        });
    }

    #[test]
    fn only_the_given_kinds_are_allowed() {
        cluster()
            .with("policy/v1", "PodDisruptionBudget", [])
            .run(|| {
                assert_eq!(host::pod_disruption_budgets(None, None), Ok(vec![]));
                assert_eq!(
                    host::config_maps(Some("ops"), None),
                    Err(
                        "v1 ConfigMap in namespace ops is not in the policy's contextResources"
                            .into()
                    )
                );
                assert_eq!(
                    host::nodes(None),
                    Err("v1 Node is not in the policy's contextResources".into())
                );
                // Same kind name, another group version.
                assert!(host::list_objects("v2", "Pod", None, None).is_err());
            });
    }

    #[test]
    fn a_failing_kind_answers_its_error() {
        let cluster = cluster().failing("v1", "Node", "the API server is down");
        cluster.run(|| {
            assert_eq!(host::nodes(None), Err("the API server is down".into()));
            assert!(host::pods(None, None).is_ok());
        });
        let recovered = FakeCluster::new().failing("v1", "Node", "down").with(
            "v1",
            "Node",
            [json!({"metadata": {"name": "n1"}})],
        );
        recovered.run(|| assert_eq!(host::nodes(None).unwrap().len(), 1));
    }

    #[test]
    fn set_based_and_malformed_selectors_are_errors() {
        cluster().run(|| {
            for selector in ["env in (a,b)", "env notin (a)", "a=b=c", "=x", "a b"] {
                let err = host::pods(None, Some(selector)).unwrap_err();
                assert!(
                    err.contains("not one the fake cluster understands"),
                    "{selector}: {err}"
                );
            }
        });
    }

    #[test]
    fn the_previous_cluster_comes_back() {
        let native = "list-objects v1/Pod is only available inside the plugin";
        assert_eq!(host::pods(None, None), Err(native.into()));
        cluster().run(|| {
            assert_eq!(host::pods(None, None).unwrap().len(), 3);
            with_objects(&[("v1", "Pod", vec![pod("x", "y", json!({}))])], || {
                assert_eq!(names(host::pods(None, None).unwrap()), ["x/y"]);
            });
            assert_eq!(host::pods(None, None).unwrap().len(), 3);
        });
        assert_eq!(host::pods(None, None), Err(native.into()));

        let guard = cluster().install();
        assert!(host::pods(None, None).is_ok());
        drop(guard);
        assert_eq!(host::pods(None, None), Err(native.into()));

        // A failed assertion inside `run` does not leave the fake behind.
        let panicked = std::panic::catch_unwind(|| cluster().run(|| panic!("test failed")));
        assert!(panicked.is_err());
        assert_eq!(host::pods(None, None), Err(native.into()));
    }

    #[test]
    fn each_test_thread_has_its_own_cluster() {
        cluster().run(|| {
            let other = std::thread::spawn(|| host::pods(None, None).is_err());
            assert!(other.join().unwrap());
        });
    }

    #[test]
    fn with_objects_merges_entries_of_one_kind() {
        let a = pod("ns", "a", json!({}));
        let b = pod("ns", "b", json!({}));
        with_objects(&[("v1", "Pod", vec![a]), ("v1", "Pod", vec![b])], || {
            assert_eq!(names(host::pods(None, None).unwrap()), ["ns/a", "ns/b"]);
        });
    }
}
