//! A stand-in for the plugin's estimates in native unit tests.

use std::cell::RefCell;

use crate::host::{DurationEstimate, Timing};

thread_local! {
    static FAKE: RefCell<Option<Timing>> = const { RefCell::new(None) };
}

/// An estimate of `seconds` (its 90th percentile too), on a stated basis.
pub fn estimate(seconds: u64) -> DurationEstimate {
    DurationEstimate {
        seconds,
        p90_seconds: seconds,
        basis: "test".into(),
    }
}

/// Runs `f` with `timing` as what [`crate::host::estimates`] answers on this thread, then
/// restores the one before (also when `f` panics). Without it the answer has no estimate.
///
/// ```
/// use rollout_ext_hooks::{host, testing};
///
/// let timing = host::Timing { batch: Some(testing::estimate(600)), remaining: None };
/// testing::with_estimates(timing, || {
///     assert_eq!(host::estimates().batch_ends(1_000), Some(1_600));
/// });
/// assert_eq!(host::estimates().batch, None);
/// ```
pub fn with_estimates<R>(timing: Timing, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Timing>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            let _ = FAKE.try_with(|fake| *fake.borrow_mut() = previous);
        }
    }
    let _restore = Restore(FAKE.with(|fake| fake.borrow_mut().replace(timing)));
    f()
}

/// The installed estimates; none when no test installed any.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn fake_estimates() -> Timing {
    FAKE.with(|fake| fake.borrow().clone()).unwrap_or(Timing {
        batch: None,
        remaining: None,
    })
}
