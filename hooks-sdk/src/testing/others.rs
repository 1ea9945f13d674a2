//! A stand-in for the plugin's ledger of other disruptors in native unit tests.

use std::cell::RefCell;

use crate::host::Disruption;

thread_local! {
    static FAKE: RefCell<Vec<Disruption>> = const { RefCell::new(Vec::new()) };
}

/// `node`, disrupted by `by`.
pub fn disruption(node: &str, by: &str) -> Disruption {
    Disruption {
        node: node.into(),
        by: by.into(),
    }
}

/// Runs `f` with `others` as what [`crate::host::others_disrupting`] answers on this thread, then
/// restores the answer before (also when `f` panics). Without it no one disrupts anything.
///
/// ```
/// use rollout_ext_hooks::{host, testing};
///
/// testing::with_others(vec![testing::disruption("ip-1", "karpenter")], || {
///     assert_eq!(host::disrupted_by("ip-1").as_deref(), Some("karpenter"));
/// });
/// assert!(host::others_disrupting().is_empty());
/// ```
pub fn with_others<R>(others: Vec<Disruption>, f: impl FnOnce() -> R) -> R {
    struct Restore(Vec<Disruption>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = std::mem::take(&mut self.0);
            let _ = FAKE.try_with(|fake| *fake.borrow_mut() = previous);
        }
    }
    let _restore = Restore(FAKE.with(|fake| fake.replace(others)));
    f()
}

/// The installed disruptions; none when no test installed any.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn fake_others() -> Vec<Disruption> {
    FAKE.with(|fake| fake.borrow().clone())
}
