//! Write rollout-ext policy hooks in Rust.
//!
//! A hook is a WebAssembly component that `kubectl rollout-ext` consults to decide which instances
//! are replaced and in what order ([`Policy::select`]), how large the next batch is
//! ([`Policy::next_batch`]) and whether the rotation goes on ([`Policy::check`]), or a fleet
//! goes on to its next stage ([`Policy::check_stage`]). Every method defers to the built-in
//! behaviour by default, so a hook implements only what it cares about:
//!
//! ```no_run
//! use rollout_ext_hooks::{
//!     export_policy, policy, BatchSize, Choice, Context, Group, Instances, Policy, Progress,
//!     Selection,
//! };
//!
//! #[derive(serde::Deserialize)]
//! #[serde(rename_all = "camelCase", deny_unknown_fields)]
//! struct Config {
//!     #[serde(default)]
//!     pool: Option<String>,
//! }
//!
//! struct PoolFirst;
//! // Declares the points implemented here: select and batch.
//! #[policy]
//! impl Policy for PoolFirst {
//!     const NAME: &'static str = "pool-first";
//!
//!     fn validate_config(config: &str) -> Result<(), String> {
//!         rollout_ext_hooks::check_config::<Config>(config)
//!     }
//!
//!     /// The instances the built-in rules chose, those of the configured pool first.
//!     fn select(ctx: &Context, _: &Group, candidates: &Instances) -> Result<Selection, String> {
//!         let cfg: Config = rollout_ext_hooks::config(ctx)?;
//!         let (mut first, mut then) = (Vec::new(), Vec::new());
//!         for c in candidates.iter().filter(|c| c.reason.is_some()) {
//!             // One host call, for the one label looked at.
//!             let in_pool = cfg.pool.is_some() && c.label("pool") == cfg.pool;
//!             let reason = c.reason.clone().unwrap_or_default();
//!             let list = if in_pool { &mut first } else { &mut then };
//!             list.push(Choice::new(&c.name, reason));
//!         }
//!         first.append(&mut then);
//!         Ok(Selection::Choose(first))
//!     }
//!
//!     fn next_batch(_: &Context, _: &Progress) -> Result<BatchSize, String> {
//!         Ok(BatchSize::size(1, "one at a time"))
//!     }
//! }
//! export_policy!(PoolFirst);
//! ```
//!
//! [`#[policy]`](policy) declares the points the impl implements (`POINTS`, and `ORDERS_DRAINS`
//! for [`Policy::drain_order`]): the host asks only declared points, so a point implemented but
//! not declared would never be asked. `POINTS` written by hand is checked against the methods
//! written; this does not build, since `check` is the gate point:
//!
//! ```compile_fail
//! use rollout_ext_hooks::*;
//! struct Gate;
//! #[policy]
//! impl Policy for Gate {
//!     const NAME: &'static str = "gate";
//!     const POINTS: &'static [HookPoint] = &[HookPoint::Select];
//!     fn check(_: &Context, _: Phase, _: &Batch, _: &ValidationSummary) -> Result<Verdict, String> {
//!         Ok(Verdict::Proceed)
//!     }
//! }
//! ```
//!
//! Build with `cargo build --release --target wasm32-wasip2`; the `.wasm` file is the component.
//! The same code compiles natively, so a policy is unit-tested with plain `cargo test` and the
//! builders in [`testing`].
//!
//! A gate that reads the cluster lists typed objects ([`host::pods`],
//! [`host::pod_disruption_budgets`], [`host::config_maps`], [`host::nodes`], or any kind with
//! [`host::list`]) among those the policy file's `contextResources` allow; in unit tests a
//! [`testing::FakeCluster`] serves them. [`hold`] bounds how long a gate waits before it aborts.
//!
//! Candidates and pending instances stay with the host: [`Instances`] reads them a chunk at a
//! time, and a [`Candidate`]'s labels, annotations and taints only when asked, one host call
//! each. The fields of [`Instance`] (zone, readiness, creation time, …) cost nothing more.

// A hook is a WASI 0.2 component. Any other WebAssembly target builds a core module that the
// plugin only refuses when it loads it; say so at build time instead.
#[cfg(all(
    any(target_arch = "wasm32", target_arch = "wasm64"),
    not(all(target_os = "wasi", target_env = "p2"))
))]
compile_error!(
    "rollout-ext hooks are WASI 0.2 components: build hooks with --target wasm32-wasip2 \
     (wasm32-unknown-unknown and wasm32-wasip1 build modules the plugin cannot load)"
);

#[cfg(feature = "arena")]
pub mod arena;
mod flat;
pub mod helpers;
pub mod host;
mod instances;
pub mod objects;
pub mod order;
mod progress;
pub mod testing;

/// Every allocation of a hook's call comes from the per-call arena (see [`arena`]).
#[cfg(all(feature = "arena", target_arch = "wasm32"))]
#[global_allocator]
static ALLOCATOR: arena::Arena = arena::Arena::new();

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "full-policy",
        // Used only by a bare `__export_policy_world!(T)`; `export_policy!` passes
        // `$crate::bindings` instead, so a renamed dependency works too.
        default_bindings_module: "rollout_ext_hooks::bindings",
        pub_export_macro: true,
        export_macro_name: "__export_policy_world",
        additional_derives: [PartialEq],
    });
}

pub use bindings::exports::rollout_ext::policy::draining::{DrainOrder, DrainPod};
pub use bindings::exports::rollout_ext::policy::stage_gates::{
    ClusterOutcome, ClusterResult, Stage, StageOutcome,
};
pub use bindings::rollout_ext::policy::types::{
    Batch, BatchSize, Budget, Choice, Context, Group, HookPoint, Info, Instance, InstanceKind,
    KeyValue, Pause, Phase, Role, Selection, SizedBatch, Taint, ValidationSummary, Verdict,
};
pub use helpers::*;
pub use host::{Disruption, DurationEstimate, Timing};
pub use instances::{Candidate, Instances, LocalInstance};
pub use objects::{
    ConfigMap, DaemonSet, Deployment, Node, ObjectMeta, Pod, PodDisruptionBudget, ReplicaSet,
    StatefulSet, Workload,
};
pub use order::*;
pub use progress::Progress;
pub use rollout_ext_hooks_macros::policy;

/// Whether `points` holds `point`: `#[policy]`'s check, at compile time, that `POINTS` written
/// by hand declares each point the impl implements.
#[doc(hidden)]
pub const fn __declares(points: &[HookPoint], point: HookPoint) -> bool {
    let mut i = 0;
    while i < points.len() {
        if points[i] as u8 == point as u8 {
            return true;
        }
        i += 1;
    }
    false
}

use bindings::exports::rollout_ext::policy::{
    batching, draining, flat_selection, gates, metadata, selection, stage_gates,
};
use bindings::rollout_ext::policy::types;

/// Version of the WIT package (`rollout-ext:policy`) this SDK implements, read from
/// `wit/policy.wit` at build time. The host refuses a module built against a version it does not
/// speak, before calling it.
pub const WIT_VERSION: &str = env!("ROLLOUT_EXT_WIT_VERSION");

/// Version of this SDK, stamped into every module built with it. Always the contract's version
/// ([`WIT_VERSION`]).
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

impl Choice {
    /// Update `name` (one of the candidates) for `reason`. Choosing an up-to-date candidate this
    /// way is an invalid answer: see [`Choice::forced`].
    pub fn new(name: impl Into<String>, reason: impl Into<String>) -> Self {
        Choice {
            name: name.into(),
            reason: reason.into(),
            force: false,
        }
    }

    /// Update `name` even if it is up to date.
    pub fn forced(name: impl Into<String>, reason: impl Into<String>) -> Self {
        Choice {
            force: true,
            ..Choice::new(name, reason)
        }
    }
}

impl BatchSize {
    /// A batch of `count` of the pending instances (1 ..= `progress.max_batch`), for `reason`.
    pub fn size(count: u32, reason: impl Into<String>) -> Self {
        BatchSize::Size(SizedBatch {
            count,
            reason: reason.into(),
        })
    }

    /// A batch of `count`, or of as many as the budget allows now (`progress.max_batch`) when
    /// that is fewer, the reason then saying so: "weekend (2 allowed now)". A size over it
    /// would be an invalid answer.
    pub fn at_most(count: u32, progress: &Progress, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        match count > progress.max_batch {
            true => BatchSize::size(
                progress.max_batch,
                format!("{reason} ({} allowed now)", progress.max_batch),
            ),
            false => BatchSize::size(count, reason),
        }
    }

    /// The size of a [`BatchSize::Size`] answer; none for a deferral or a pause.
    pub fn count(&self) -> Option<u32> {
        match self {
            BatchSize::Size(sized) => Some(sized.count),
            BatchSize::Defer | BatchSize::Pause(_) => None,
        }
    }
}

/// A site policy. Implement the points you need; the others defer to the built-in behaviour.
pub trait Policy {
    /// The module's name, shown by `hooks inspect`.
    const NAME: &'static str;
    /// The points this module implements; a policy file may only enable these, and the host
    /// asks no other. [`#[policy]`](policy) on the impl writes it from the methods implemented.
    const POINTS: &'static [HookPoint];
    /// Whether it orders drains ([`Policy::drain_order`], the `drain-order` point of contract
    /// 0.3.1; `HookPoint` keeps the points of 0.3.0).
    const ORDERS_DRAINS: bool = false;

    /// Checks the hook's `config` (JSON from the policy file) when the policy is loaded, before
    /// any point is asked: an error stops the run before anything is done. Accepts anything by
    /// default; a policy with a serde config struct answers
    /// [`check_config::<Config>(config)`](check_config).
    fn validate_config(_config: &str) -> Result<(), String> {
        Ok(())
    }

    /// Which candidates of `group` to update, in which order. `candidates` are the group's
    /// instances, the current choice first (in its order, each with its `reason`), then the
    /// others (no reason). The answer may only name candidates, each at most once, and an
    /// up-to-date candidate only with [`Choice::forced`].
    fn select(
        _ctx: &Context,
        _group: &Group,
        _candidates: &Instances,
    ) -> Result<Selection, String> {
        Ok(Selection::Defer)
    }

    /// How many of the pending instances the next batch holds (1 ..= `progress.max_batch`), and
    /// why ([`BatchSize::size`]), or a pause. Read only the pending instances the decision
    /// needs: each read costs a call into the host.
    fn next_batch(_ctx: &Context, _progress: &Progress) -> Result<BatchSize, String> {
        Ok(BatchSize::Defer)
    }

    /// Whether to go on before a group, before a batch or after it.
    fn check(
        _ctx: &Context,
        _phase: Phase,
        _batch: &Batch,
        _summary: &ValidationSummary,
    ) -> Result<Verdict, String> {
        Ok(Verdict::Defer)
    }

    /// Whether a fleet goes on to `stage`: asked before each stage of a fleet, before its first
    /// cluster is touched (the gate phase `before-stage`, contract 0.3.6), of a hook that serves
    /// [`HookPoint::Gate`]. `previous` is the stage before as it ended, none before the first.
    /// `wait` asks again after the pause with `stage.attempt` one higher; `defer` proceeds.
    fn check_stage(
        _ctx: &Context,
        _stage: &Stage,
        _previous: Option<&StageOutcome>,
    ) -> Result<Verdict, String> {
        Ok(Verdict::Defer)
    }

    /// The turns in which the drain of `node` evicts `pods` (those it evicts; not the ones it
    /// skips or waits for): asked once per drained node when [`Policy::ORDERS_DRAINS`] is set.
    /// Each turn's pods go together and are gone before the next turn; name each pod
    /// (`namespace/name`) at most once; the ones left out go after, in the policy's order.
    fn drain_order(_ctx: &Context, _node: &str, _pods: &[DrainPod]) -> Result<DrainOrder, String> {
        Ok(DrainOrder::Defer)
    }
}

impl DrainPod {
    /// `namespace/name`, as a [`DrainOrder::Turns`] answer names it.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The value of label `key`, if the pod has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|kv| kv.key == key)
            .map(|kv| kv.value.as_str())
    }
}

impl StageOutcome {
    /// The clusters that ended with nodes set aside (cordoned with their pods, not replaced), in
    /// the stage's order: what a gate that stops on them names.
    pub fn set_aside(&self) -> Vec<&str> {
        self.clusters
            .iter()
            .filter(|c| c.outcome == ClusterOutcome::NodesSetAside)
            .map(|c| c.cluster.as_str())
            .collect()
    }
}

/// Adapts a [`Policy`] to the generated component exports. Used by [`export_policy!`].
#[doc(hidden)]
pub struct Exported<P>(std::marker::PhantomData<P>);

impl<P: Policy> metadata::Guest for Exported<P> {
    fn describe() -> Info {
        Info {
            name: P::NAME.to_string(),
            sdk_version: SDK_VERSION.to_string(),
            wit_version: WIT_VERSION.to_string(),
            points: P::POINTS.to_vec(),
        }
    }

    fn validate_config(config: String) -> Result<(), String> {
        P::validate_config(&config)
    }
}

impl<P: Policy> selection::Guest for Exported<P> {
    fn select(
        ctx: Context,
        group: Group,
        candidates: &types::Instances,
    ) -> Result<Selection, String> {
        P::select(&ctx, &group, &Instances::host(candidates))
    }
}

/// The same selection, answered flat (contract 0.3.4).
impl<P: Policy> flat_selection::Guest for Exported<P> {
    fn select_flat(
        ctx: Context,
        group: Group,
        candidates: &types::Instances,
    ) -> Result<flat_selection::FlatAnswer, String> {
        flat::answer(P::select(&ctx, &group, &Instances::host(candidates))?)
    }
}

impl<P: Policy> batching::Guest for Exported<P> {
    fn next_batch(
        ctx: Context,
        progress: types::Progress,
        pending: &types::Instances,
    ) -> Result<BatchSize, String> {
        P::next_batch(&ctx, &Progress::from_host(progress, pending))
    }
}

impl<P: Policy> gates::Guest for Exported<P> {
    fn check(
        ctx: Context,
        phase: Phase,
        batch: Batch,
        summary: ValidationSummary,
    ) -> Result<Verdict, String> {
        P::check(&ctx, phase, &batch, &summary)
    }
}

/// The fleet's gate before each stage (contract 0.3.6).
impl<P: Policy> stage_gates::Guest for Exported<P> {
    fn check_stage(
        ctx: Context,
        stage: Stage,
        previous: Option<StageOutcome>,
    ) -> Result<Verdict, String> {
        P::check_stage(&ctx, &stage, previous.as_ref())
    }
}

impl<P: Policy> draining::Guest for Exported<P> {
    fn orders_drains() -> bool {
        P::ORDERS_DRAINS
    }

    fn order(ctx: Context, node: String, pods: Vec<DrainPod>) -> Result<DrainOrder, String> {
        P::drain_order(&ctx, &node, &pods)
    }
}

/// Makes a [`Policy`] the module's exports: `export_policy!(MyPolicy);` once per crate. Paths go
/// through `$crate`, so the SDK may be renamed in `Cargo.toml`.
///
/// Only WebAssembly builds export anything: a native build (the policy's unit tests) has no host
/// to export to, and component export names are not valid native symbols.
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        #[cfg(target_arch = "wasm32")]
        type __RolloutExtExported = $crate::Exported<$policy>;
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::__export_policy_world!(
            __RolloutExtExported with_types_in $crate::bindings
        );
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdk_is_versioned_with_its_contract() {
        assert_eq!(SDK_VERSION, WIT_VERSION);
    }

    #[test]
    fn constructors_fill_every_field() {
        assert_eq!(
            Choice::new("n1", "why"),
            Choice {
                name: "n1".into(),
                reason: "why".into(),
                force: false
            }
        );
        assert!(Choice::forced("n1", "why").force);
        assert_eq!(
            BatchSize::size(3, "because"),
            BatchSize::Size(SizedBatch {
                count: 3,
                reason: "because".into()
            })
        );
        assert_eq!(BatchSize::size(3, "because").count(), Some(3));
        assert_eq!(BatchSize::Defer.count(), None);
    }

    #[test]
    fn at_most_keeps_to_what_the_budget_allows_now_and_says_so() {
        let nodes = ["a", "b", "c"].map(|n| testing::node(n, "z")).to_vec();
        let p = testing::progress(testing::group(&nodes, 0, 2), nodes, 0, 0);
        assert_eq!(p.max_batch, 2);
        assert_eq!(
            BatchSize::at_most(3, &p, "weekend"),
            BatchSize::size(2, "weekend (2 allowed now)")
        );
        assert_eq!(
            BatchSize::at_most(2, &p, "weekend"),
            BatchSize::size(2, "weekend")
        );
    }

    struct Anything;
    impl Policy for Anything {
        const NAME: &'static str = "anything";
        const POINTS: &'static [HookPoint] = &[];
    }

    #[test]
    fn config_is_accepted_by_default() {
        assert_eq!(Anything::validate_config("{\"whatever\": 1}"), Ok(()));
    }

    #[test]
    fn a_stage_gate_defers_by_default() {
        let ctx = testing::context(0, serde_json::json!({}));
        let dev = testing::stage_outcome("dev", &["dev-a"], 60);
        let prod = testing::stage(1, "prod", &["prod-a"]);
        assert_eq!(
            Anything::check_stage(&ctx, &prod, Some(&dev)),
            Ok(Verdict::Defer)
        );
        assert_eq!(
            <Exported<Anything> as stage_gates::Guest>::check_stage(ctx, prod, Some(dev)),
            Ok(Verdict::Defer)
        );
    }

    #[test]
    fn the_export_hands_the_stage_and_the_one_before_to_the_policy() {
        /// Answers what it was told, so the test sees it arrive.
        struct Echo;
        impl Policy for Echo {
            const NAME: &'static str = "echo";
            const POINTS: &'static [HookPoint] = &[HookPoint::Gate];
            fn check_stage(
                ctx: &Context,
                stage: &Stage,
                previous: Option<&StageOutcome>,
            ) -> Result<Verdict, String> {
                let after = previous.map_or("none".to_string(), |p| {
                    format!("{} soaked {}s", p.name, p.soaked_seconds)
                });
                Ok(Verdict::Abort(format!(
                    "{} at {}: {} ({}) of {}, attempt {}, after {after}",
                    ctx.run_id, ctx.now, stage.name, stage.index, stage.fleet, stage.attempt
                )))
            }
        }
        let ask = |previous| {
            let mut prod = testing::stage(1, "prod", &["prod-a"]);
            prod.attempt = 2;
            let ctx = testing::context(100, serde_json::json!({}));
            <Exported<Echo> as stage_gates::Guest>::check_stage(ctx, prod, previous)
        };
        assert_eq!(
            ask(Some(testing::stage_outcome("dev", &["dev-a"], 30))),
            Ok(Verdict::Abort(
                "test-run at 100: prod (1) of test-fleet, attempt 2, after dev soaked 30s".into()
            ))
        );
        assert_eq!(
            ask(None),
            Ok(Verdict::Abort(
                "test-run at 100: prod (1) of test-fleet, attempt 2, after none".into()
            ))
        );
    }

    #[test]
    fn an_outcome_names_the_clusters_that_set_nodes_aside_in_order() {
        let mut dev = testing::stage_outcome("dev", &["dev-a", "dev-b", "dev-c"], 0);
        assert_eq!(dev.set_aside(), Vec::<&str>::new());
        dev.clusters[2].outcome = ClusterOutcome::NodesSetAside;
        dev.clusters[1].outcome = ClusterOutcome::NodesSetAside;
        assert_eq!(dev.set_aside(), ["dev-b", "dev-c"]);
    }
}
