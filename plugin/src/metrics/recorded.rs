//! Answers recorded in a `hooks test` fixture, so a gate that reads metrics is tested without a
//! Prometheus:
//!
//! ```yaml
//! metrics:
//!   prom:                                   # a source name
//!     'sum(rate(errors[5m]))': 0.02           # one value, at every instant asked
//!     'error_ratio': [0.5, 0.04, 0.01]        # values, oldest first, the last at the query's time
//!     'up{job="x"}': {error: unreachable}     # a failure: unreachable, timeout, bad-query,
//!                                             # too-large or failed
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::{Metrics, MetricsError, Point, Sample, Series, TimeRange};

/// Recorded answers, by source and query text.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct Recorded {
    sources: BTreeMap<String, BTreeMap<String, Answer>>,
    /// The instant an instant query without a time is answered at: the test's `now`.
    #[serde(skip)]
    now: i64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
enum Answer {
    Values(Values),
    Error(Failure),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
enum Values {
    /// The same at every instant.
    One(f64),
    /// Oldest first, the last at the query's time.
    History(Vec<f64>),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Failure {
    error: Kind,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Kind {
    Unreachable,
    Timeout,
    BadQuery,
    TooLarge,
    Failed,
}

impl Recorded {
    /// Answers instant queries without a time at `now`, as a server would at its own now.
    pub fn at(mut self, now: i64) -> Recorded {
        self.now = now;
        self
    }

    /// The sources the fixture records answers of.
    pub fn sources(&self) -> Vec<String> {
        self.sources.keys().cloned().collect()
    }

    fn answer(&self, source: &str, promql: &str) -> Result<&Values, MetricsError> {
        let queries = self.sources.get(source).ok_or_else(|| {
            MetricsError::Failed(format!(
                "metrics source {source} (recorded): the fixture records no answer of it"
            ))
        })?;
        let answer = queries.get(promql).ok_or_else(|| {
            MetricsError::Failed(format!(
                "metrics source {source} (recorded): the fixture records no answer to {promql:?}"
            ))
        })?;
        let f = match answer {
            Answer::Values(values) => return Ok(values),
            Answer::Error(f) => f,
        };
        let message = format!(
            "metrics source {source} (recorded): {}",
            f.message.as_deref().unwrap_or("recorded failure")
        );
        Err(match f.error {
            Kind::Unreachable => MetricsError::Unreachable(message),
            Kind::Timeout => MetricsError::Timeout(message),
            Kind::BadQuery => MetricsError::BadQuery(message),
            Kind::TooLarge => MetricsError::TooLarge(message),
            Kind::Failed => MetricsError::Failed(message),
        })
    }
}

impl Metrics for Recorded {
    fn instant(
        &self,
        source: &str,
        promql: &str,
        time: Option<i64>,
        _: Duration,
    ) -> Result<Vec<Sample>, MetricsError> {
        let value = match self.answer(source, promql)? {
            Values::One(v) => Some(*v),
            Values::History(vs) => vs.last().copied(),
        };
        Ok(value
            .map(|value| Sample {
                labels: Vec::new(),
                value,
                time: time.unwrap_or(self.now) as f64,
            })
            .into_iter()
            .collect())
    }

    fn range(
        &self,
        source: &str,
        promql: &str,
        range: TimeRange,
        _: Duration,
    ) -> Result<Vec<Series>, MetricsError> {
        let count = range.instants().map_err(|m| {
            MetricsError::BadQuery(format!("metrics source {source} (recorded): {m}"))
        })?;
        let values: Vec<f64> = match self.answer(source, promql)? {
            Values::One(v) => vec![*v; count as usize],
            // The last value at the last instant, as far back as the range reaches.
            Values::History(vs) => vs[vs.len().saturating_sub(count as usize)..].to_vec(),
        };
        let first = count - values.len() as i64;
        let points: Vec<Point> = values
            .into_iter()
            .enumerate()
            .map(|(i, value)| Point {
                time: range.at(first + i as i64) as f64,
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded() -> Recorded {
        serde_json::from_value(serde_json::json!({
            "prom": {
                "ratio": 0.02,
                "history": [0.5, 0.04, 0.01],
                "down": {"error": "unreachable", "message": "connection refused"}
            }
        }))
        .unwrap()
    }

    const WAIT: Duration = Duration::from_secs(1);

    #[test]
    fn instant_answers_are_the_recorded_value_or_the_last_of_them() {
        let r = recorded();
        assert_eq!(
            r.instant("prom", "ratio", Some(7), WAIT).unwrap()[0].value,
            0.02
        );
        assert_eq!(
            r.instant("prom", "history", None, WAIT).unwrap()[0].value,
            0.01
        );
        assert_eq!(
            r.instant("prom", "down", None, WAIT),
            Err(MetricsError::Unreachable(
                "metrics source prom (recorded): connection refused".into()
            ))
        );
        assert!(
            matches!(r.instant("prom", "other", None, WAIT), Err(MetricsError::Failed(m)) if m.contains("no answer to \"other\""))
        );
        assert!(
            matches!(r.instant("thanos", "ratio", None, WAIT), Err(MetricsError::Failed(m)) if m.contains("records no answer of it"))
        );
        let at = r.clone().at(42);
        assert_eq!(
            at.instant("prom", "ratio", None, WAIT).unwrap()[0].time,
            42.0
        );
    }

    #[test]
    fn range_answers_end_at_the_range_end() {
        let r = recorded();
        let range = TimeRange {
            start: 100,
            end: 130,
            step: 15,
        };
        let series = r.range("prom", "history", range, WAIT).unwrap();
        let points: Vec<(f64, f64)> = series[0].points.iter().map(|p| (p.time, p.value)).collect();
        assert_eq!(points, [(100.0, 0.5), (115.0, 0.04), (130.0, 0.01)]);
        let short = TimeRange {
            start: 115,
            end: 130,
            step: 15,
        };
        assert_eq!(
            r.range("prom", "history", short, WAIT).unwrap()[0]
                .points
                .len(),
            2
        );
        assert_eq!(
            r.range("prom", "ratio", range, WAIT).unwrap()[0]
                .points
                .len(),
            3
        );
        // As Prometheus does: instants from the start, every step, up to the end.
        let unaligned = TimeRange {
            start: 100,
            end: 140,
            step: 15,
        };
        let series = r.range("prom", "history", unaligned, WAIT).unwrap();
        let times: Vec<f64> = series[0].points.iter().map(|p| p.time).collect();
        assert_eq!(times, [100.0, 115.0, 130.0]);
    }

    #[test]
    fn ranges_prometheus_would_refuse_are_refused() {
        let r = recorded();
        let cases = [
            (10, 0, 1),
            (0, 10, 0),
            (0, i64::MAX, 1),
            (i64::MIN, 1, 1),
            (0, 1_800_000_000, 1),
        ];
        for (start, end, step) in cases {
            let range = TimeRange { start, end, step };
            let answer = r.range("prom", "ratio", range, WAIT);
            assert!(
                matches!(answer, Err(MetricsError::BadQuery(_))),
                "{range:?}"
            );
        }
    }
}
