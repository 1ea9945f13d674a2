//! Write rollout-ext policy hooks in Rust.
//!
//! A hook is a WebAssembly component that `kubectl rollout-ext` consults to decide which instances
//! are replaced and in what order ([`Policy::select`]), how large the next batch is
//! ([`Policy::next_batch`]) and whether the rotation goes on ([`Policy::check`]). Every method
//! defers to the built-in behaviour by default, so a hook implements only what it cares about:
//!
//! ```no_run
//! use rollout_ext_hooks::{export_policy, HookPoint, Policy, BatchSize, Context, Progress};
//!
//! struct OneAtATime;
//! impl Policy for OneAtATime {
//!     const NAME: &'static str = "one-at-a-time";
//!     const POINTS: &'static [HookPoint] = &[HookPoint::Batch];
//!     fn next_batch(_: &Context, _: &Progress) -> Result<BatchSize, String> {
//!         Ok(BatchSize::Size(1))
//!     }
//! }
//! export_policy!(OneAtATime);
//! ```
//!
//! Build with `cargo build --release --target wasm32-wasip2`; the `.wasm` file is the component.
//! The same code compiles natively, so a policy is unit-tested with plain `cargo test` and the
//! builders in [`testing`].

pub mod helpers;
pub mod host;
mod progress;
pub mod testing;

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "policy",
        default_bindings_module: "rollout_ext_hooks::bindings",
        pub_export_macro: true,
        export_macro_name: "__export_policy_world",
        additional_derives: [PartialEq],
    });
}

pub use bindings::rollout_ext::policy::types::{
    Batch, BatchSize, Budget, Choice, Context, Group, HookPoint, Info, Instance, InstanceKind,
    KeyValue, Pause, Phase, Role, Selection, Taint, ValidationSummary, Verdict,
};
pub use helpers::*;
pub use progress::{Pending, Progress};

use bindings::exports::rollout_ext::policy::{batching, gates, metadata, selection};

/// Version of the WIT package (`rollout-ext:policy`) this SDK implements, read from
/// `wit/policy.wit` at build time. The host refuses a module built against a version it does not
/// speak, before calling it.
pub const WIT_VERSION: &str = env!("ROLLOUT_EXT_WIT_VERSION");

/// Version of this SDK, stamped into every module built with it.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A site policy. Implement the points you need; the others defer to the built-in behaviour.
pub trait Policy {
    /// The module's name, shown by `hooks inspect`.
    const NAME: &'static str;
    /// The points this module implements. A policy file may only enable these.
    const POINTS: &'static [HookPoint];

    /// Which candidates of `group` to update, in which order. Candidates carry the built-in
    /// `reason` (none when up to date); the answer may only name candidates, each at most once.
    fn select(
        _ctx: &Context,
        _group: &Group,
        _candidates: &[Instance],
    ) -> Result<Selection, String> {
        Ok(Selection::Defer)
    }

    /// How many of the pending instances the next batch holds (1 ..= `progress.max_batch`), or a
    /// pause. Read only the pending instances the decision needs: each read costs a call into
    /// the host.
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
}

impl<P: Policy> selection::Guest for Exported<P> {
    fn select(ctx: Context, group: Group, candidates: Vec<Instance>) -> Result<Selection, String> {
        P::select(&ctx, &group, &candidates)
    }
}

impl<P: Policy> batching::Guest for Exported<P> {
    fn next_batch(
        ctx: Context,
        progress: bindings::rollout_ext::policy::types::Progress,
        pending: &bindings::rollout_ext::policy::types::Pending,
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

/// Makes a [`Policy`] the module's exports: `export_policy!(MyPolicy);` once per crate.
///
/// Only WebAssembly builds export anything: a native build (the policy's unit tests) has no host
/// to export to, and component export names are not valid native symbols.
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        #[cfg(target_arch = "wasm32")]
        type __RolloutExtExported = $crate::Exported<$policy>;
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::__export_policy_world!(__RolloutExtExported);
    };
}
