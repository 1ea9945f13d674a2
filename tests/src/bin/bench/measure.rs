//! Medians and ratios of timings; a child process's are measured by [`rollout_ext_e2e::child`].

use std::time::Duration;

pub use rollout_ext_e2e::child::{Sample, run};

/// The median of `values` (the mean of the middle two for an even count).
pub fn median(values: &[Duration]) -> Duration {
    assert!(!values.is_empty(), "a median needs at least one value");
    let mut sorted = values.to_vec();
    sorted.sort();
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2
    }
}

/// Times `f` `runs` times and returns the median.
pub fn median_of(
    runs: usize,
    mut f: impl FnMut() -> anyhow::Result<Duration>,
) -> anyhow::Result<Duration> {
    let samples = (0..runs).map(|_| f()).collect::<anyhow::Result<Vec<_>>>()?;
    Ok(median(&samples))
}

/// Human units: µs under a millisecond, ms under ten seconds, seconds above.
pub fn show(d: Duration) -> String {
    let micros = d.as_secs_f64() * 1e6;
    if micros < 1_000.0 {
        format!("{micros:.0} µs")
    } else if micros < 10_000_000.0 {
        format!("{:.1} ms", micros / 1_000.0)
    } else {
        format!("{:.2} s", micros / 1e6)
    }
}

pub fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(f64::MIN_POSITIVE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        let ms = Duration::from_millis;
        assert_eq!(median(&[ms(5), ms(1), ms(3)]), ms(3));
        assert_eq!(
            median(&[ms(4), ms(1), ms(3), ms(2)]),
            Duration::from_micros(2_500)
        );
    }
}
