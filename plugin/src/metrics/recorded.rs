//! Answers recorded in a `hooks test` fixture, so a gate that reads metrics is tested without a
//! Prometheus:
//!
//! ```yaml
//! metrics:
//!   prom:                                   # a source name
//!     'sum(rate(errors[5m]))': 0.02           # one value, at every instant asked
//!     'error_ratio': [0.5, 0.04, 0.01]        # values, oldest first, the last at the query's time
//!     'up{job="x"}': {error: unreachable}     # a failure: not-allowed, unreachable, timeout,
//!                                             # bad-query, too-large or failed
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
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
enum Answer {
    Value(f64),
    Values(Vec<f64>),
    Error(Failure),
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
    NotAllowed,
    Unreachable,
    Timeout,
    BadQuery,
    TooLarge,
    Failed,
}

impl Recorded {
    /// The sources the fixture records answers of.
    pub fn sources(&self) -> Vec<String> {
        self.sources.keys().cloned().collect()
    }

    fn answer(&self, source: &str, promql: &str) -> Result<&Answer, MetricsError> {
        let queries = self.sources.get(source).ok_or_else(|| {
            MetricsError::NotAllowed(format!("metrics source {source:?} is not in the fixture"))
        })?;
        let answer = queries.get(promql).ok_or_else(|| {
            MetricsError::Failed(format!(
                "metrics source {source} (recorded): the fixture records no answer to {promql:?}"
            ))
        })?;
        if let Answer::Error(f) = answer {
            let message = format!(
                "metrics source {source} (recorded): {}",
                f.message.as_deref().unwrap_or("recorded failure")
            );
            return Err(match f.error {
                Kind::NotAllowed => MetricsError::NotAllowed(message),
                Kind::Unreachable => MetricsError::Unreachable(message),
                Kind::Timeout => MetricsError::Timeout(message),
                Kind::BadQuery => MetricsError::BadQuery(message),
                Kind::TooLarge => MetricsError::TooLarge(message),
                Kind::Failed => MetricsError::Failed(message),
            });
        }
        Ok(answer)
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
            Answer::Value(v) => Some(*v),
            Answer::Values(vs) => vs.last().copied(),
            Answer::Error(_) => None,
        };
        Ok(value
            .map(|value| Sample {
                labels: Vec::new(),
                value,
                time: time.unwrap_or(0) as f64,
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
        let step = i64::from(range.step.max(1));
        let instants = ((range.end - range.start).max(0) / step + 1) as usize;
        let values: Vec<f64> = match self.answer(source, promql)? {
            Answer::Value(v) => vec![*v; instants],
            Answer::Values(vs) => vs[vs.len().saturating_sub(instants)..].to_vec(),
            Answer::Error(_) => Vec::new(),
        };
        let first = range.end - step * (values.len() as i64 - 1);
        let points: Vec<Point> = values
            .into_iter()
            .enumerate()
            .map(|(i, value)| Point {
                time: (first + step * i as i64) as f64,
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
        assert!(matches!(
            r.instant("thanos", "ratio", None, WAIT),
            Err(MetricsError::NotAllowed(_))
        ));
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
    }
}
