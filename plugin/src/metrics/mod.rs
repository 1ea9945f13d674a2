//! Metrics a gate may read: PromQL queries of the sources a policy names (`metricsSources`),
//! made by the host on a hook's behalf. [`Prometheus`] asks real servers; [`Recorded`] answers
//! from a `hooks test` fixture.
//!
//! Nothing here decides who may ask: the WebAssembly host checks a hook's grants first.

mod prometheus;
mod recorded;

use std::time::Duration;

pub use prometheus::Prometheus;
pub use recorded::Recorded;

/// The most of an answer the host reads; a larger one is [`MetricsError::TooLarge`].
pub const RESPONSE_LIMIT: usize = 4 << 20;

/// One value of an instant query.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: Vec<(String, String)>,
    pub value: f64,
    /// Seconds since the Unix epoch.
    pub time: f64,
}

/// One value of a range query's series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub time: f64,
    pub value: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: Vec<(String, String)>,
    pub points: Vec<Point>,
}

/// The instants of a range query, seconds since the Unix epoch, every `step` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    pub start: i64,
    pub end: i64,
    pub step: u32,
}

/// The most points a range query may ask per series: Prometheus' own limit.
pub const MAX_POINTS: i64 = 11_000;

impl TimeRange {
    /// How many instants the range holds (`start`, `start + step`, … up to `end`), or why it
    /// holds none Prometheus would evaluate.
    pub fn instants(&self) -> Result<i64, String> {
        if self.step == 0 {
            return Err("a range needs a step of at least 1s".into());
        }
        let span = self
            .end
            .checked_sub(self.start)
            .filter(|span| *span >= 0)
            .ok_or("a range needs an end at or after its start")?;
        let count = (span / i64::from(self.step)).saturating_add(1);
        if count > MAX_POINTS {
            return Err(format!(
                "a range of {count} points exceeds the maximum of {MAX_POINTS} per series: widen the step"
            ));
        }
        Ok(count)
    }

    /// The `k`th instant from the start.
    pub fn at(&self, k: i64) -> i64 {
        self.start + k * i64::from(self.step)
    }
}

/// Why a query has no answer. Each message names the source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricsError {
    #[error("{0}")]
    NotAllowed(String),
    #[error("{0}")]
    Unreachable(String),
    #[error("{0}")]
    Timeout(String),
    #[error("{0}")]
    BadQuery(String),
    #[error("{0}")]
    TooLarge(String),
    #[error("{0}")]
    Failed(String),
}

/// Where queries go. `wait` is the most a query may take: the hook's time left, which the
/// source's own timeout may shorten.
pub trait Metrics: Send + Sync {
    fn instant(
        &self,
        source: &str,
        promql: &str,
        time: Option<i64>,
        wait: Duration,
    ) -> Result<Vec<Sample>, MetricsError>;

    fn range(
        &self,
        source: &str,
        promql: &str,
        range: TimeRange,
        wait: Duration,
    ) -> Result<Vec<Series>, MetricsError>;
}

/// No sources at all: what a hook loaded without a policy's sources reaches.
pub struct NoMetrics;

impl NoMetrics {
    fn refuse(source: &str) -> MetricsError {
        MetricsError::Failed(format!(
            "metrics source {source:?}: no query is answered here (only at the hook's points)"
        ))
    }
}

impl Metrics for NoMetrics {
    fn instant(
        &self,
        source: &str,
        _: &str,
        _: Option<i64>,
        _: Duration,
    ) -> Result<Vec<Sample>, MetricsError> {
        Err(NoMetrics::refuse(source))
    }

    fn range(
        &self,
        source: &str,
        _: &str,
        _: TimeRange,
        _: Duration,
    ) -> Result<Vec<Series>, MetricsError> {
        Err(NoMetrics::refuse(source))
    }
}

/// `0.5s`, `2s`, `1m30s`: a wait in a message.
fn seconds(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}
