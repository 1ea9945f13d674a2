//! A stand-in for the host's metrics queries in native unit tests.

use std::collections::BTreeMap;

use crate::host::{MetricsError, Point, Sample, Series, TimeRange};

/// Answers to [`crate::host::query_metrics`] and [`crate::host::query_metrics_range`] on the
/// thread that installed it, by source and query text, as a `hooks test` fixture's `metrics`
/// records them: a value at every instant asked, or values oldest first whose last is at the
/// query's time.
///
/// A source it has no answers of is not granted (as the plugin says when the policy does not
/// grant the hook a source); a query it has no answer to fails.
///
/// ```
/// use rollout_ext_hooks::{host, testing::FakeMetrics};
///
/// FakeMetrics::new()
///     .values("prom", "error_ratio", [0.2, 0.01])
///     .run(|| {
///         let now = host::query_metrics("prom", "error_ratio", Some(100)).unwrap();
///         assert_eq!(now[0].value, 0.01);
///         let range = host::TimeRange { start: 90, end: 100, step: 10 };
///         let series = host::query_metrics_range("prom", "error_ratio", range).unwrap();
///         assert_eq!(series[0].points.len(), 2);
///         assert!(host::query_metrics("thanos", "up", None).is_err());
///     });
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FakeMetrics {
    answers: BTreeMap<(String, String), Result<Values, MetricsError>>,
}

#[derive(Debug, Clone, PartialEq)]
enum Values {
    /// The same at every instant.
    Constant(f64),
    /// Oldest first, the last at the query's time.
    History(Vec<f64>),
}

thread_local! {
    static FAKE: std::cell::RefCell<Option<FakeMetrics>> = const { std::cell::RefCell::new(None) };
}

impl FakeMetrics {
    pub fn new() -> Self {
        FakeMetrics::default()
    }

    /// `promql` of `source` is `value` at every instant.
    pub fn value(self, source: &str, promql: &str, value: f64) -> Self {
        self.answer(source, promql, Ok(Values::Constant(value)))
    }

    /// `promql` of `source` took `values`, oldest first, the last at the query's time.
    pub fn values(self, source: &str, promql: &str, values: impl IntoIterator<Item = f64>) -> Self {
        self.answer(
            source,
            promql,
            Ok(Values::History(values.into_iter().collect())),
        )
    }

    /// `promql` of `source` fails with `error`.
    pub fn failing(self, source: &str, promql: &str, error: MetricsError) -> Self {
        self.answer(source, promql, Err(error))
    }

    fn answer(mut self, source: &str, promql: &str, answer: Result<Values, MetricsError>) -> Self {
        self.answers
            .insert((source.to_string(), promql.to_string()), answer);
        self
    }

    /// Makes this the thread's metrics until the guard is dropped.
    #[must_use = "the fake is uninstalled when the guard is dropped"]
    pub fn install(self) -> FakeMetricsGuard {
        let previous = FAKE.with(|fake| fake.borrow_mut().replace(self));
        FakeMetricsGuard { previous }
    }

    /// Runs `f` with this as the thread's metrics, then restores the one before.
    pub fn run<R>(self, f: impl FnOnce() -> R) -> R {
        let _guard = self.install();
        f()
    }

    /// The values recorded for `promql` of `source`.
    fn values_of(&self, source: &str, promql: &str) -> Result<&Values, MetricsError> {
        if !self.answers.keys().any(|(s, _)| s == source) {
            return Err(MetricsError::NotAllowed(format!(
                "metrics source {source:?} is not granted (the fake has no answers of it)"
            )));
        }
        match self.answers.get(&(source.to_string(), promql.to_string())) {
            None => Err(MetricsError::Failed(format!(
                "metrics source {source} (fake): no answer to {promql:?}"
            ))),
            Some(Err(e)) => Err(e.clone()),
            Some(Ok(values)) => Ok(values),
        }
    }
}

/// Uninstalls a [`FakeMetrics`] when dropped. From [`FakeMetrics::install`].
#[derive(Debug)]
pub struct FakeMetricsGuard {
    previous: Option<FakeMetrics>,
}

impl Drop for FakeMetricsGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        let _ = FAKE.try_with(|fake| *fake.borrow_mut() = previous);
    }
}

fn installed<T>(
    source: &str,
    f: impl FnOnce(&FakeMetrics) -> Result<T, MetricsError>,
) -> Result<T, MetricsError> {
    FAKE.with(|fake| match fake.borrow().as_ref() {
        Some(metrics) => f(metrics),
        None => Err(MetricsError::NotAllowed(format!(
            "metrics source {source:?}: queries are only answered inside the plugin (or by a testing::FakeMetrics)"
        ))),
    })
}

#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
pub(crate) fn fake_query(
    source: &str,
    promql: &str,
    time: Option<i64>,
) -> Result<Vec<Sample>, MetricsError> {
    installed(source, |m| {
        let last = match m.values_of(source, promql)? {
            Values::Constant(v) => Some(*v),
            Values::History(vs) => vs.last().copied(),
        };
        Ok(last
            .map(|value| Sample {
                labels: Vec::new(),
                value,
                time: time.unwrap_or(0) as f64,
            })
            .into_iter()
            .collect())
    })
}

#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
pub(crate) fn fake_query_range(
    source: &str,
    promql: &str,
    range: TimeRange,
) -> Result<Vec<Series>, MetricsError> {
    installed(source, |m| {
        let count = instants(&range)
            .map_err(|m| MetricsError::BadQuery(format!("metrics source {source} (fake): {m}")))?;
        let values = match m.values_of(source, promql)? {
            Values::Constant(v) => vec![*v; count as usize],
            Values::History(vs) => vs[vs.len().saturating_sub(count as usize)..].to_vec(),
        };
        // Instants from the start, every step, up to the end, as Prometheus evaluates them;
        // the last value at the last instant.
        let first = count - values.len() as i64;
        let points: Vec<Point> = values
            .into_iter()
            .enumerate()
            .map(|(i, value)| Point {
                time: (range.start + (first + i as i64) * i64::from(range.step)) as f64,
                value,
            })
            .collect();
        Ok(if points.is_empty() {
            Vec::new()
        } else {
            vec![Series {
                labels: Vec::new(),
                points,
            }]
        })
    })
}

/// How many instants `range` holds, or why Prometheus would refuse it (the same rules: a step of
/// at least 1s, an end at or after the start, at most 11,000 points).
fn instants(range: &TimeRange) -> Result<i64, String> {
    if range.step == 0 {
        return Err("a range needs a step of at least 1s".into());
    }
    let span = range
        .end
        .checked_sub(range.start)
        .filter(|span| *span >= 0)
        .ok_or("a range needs an end at or after its start")?;
    let count = (span / i64::from(range.step)).saturating_add(1);
    if count > 11_000 {
        return Err(format!(
            "a range of {count} points exceeds the maximum of 11000 per series"
        ));
    }
    Ok(count)
}
