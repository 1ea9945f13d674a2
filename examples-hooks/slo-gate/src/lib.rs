//! SLO gate: hold the rollout while a service-level ratio read from Prometheus is above a
//! threshold, go on once it has been at or below it for `for` consecutive checks, and abort
//! after `maxChecks` checks of the same batch.
//!
//! Config:
//! `{"source": "prom", "query": "…", "threshold": 0.01, "for": 3, "intervalSeconds": 30, "maxChecks": 20}`.
//!
//! A check is the query's value at one instant; the checks are `intervalSeconds` apart, the
//! last at the decision's time. One range query reads them all, so the gate needs no memory of
//! its own: a ratio that has been low for the last `for` checks passes at once. An instant
//! with no value, or a value that is not a number (a ratio of 0/0), is not a passing check.
//! The policy must grant the hook its source (`metrics: [prom]`); a failed query is the hook's
//! error, for its `failurePolicy` to decide.

use rollout_ext_hooks::host::{self, TimeRange};
use rollout_ext_hooks::{
    Batch, Context, Phase, Policy, ValidationSummary, Verdict, config, hold, policy,
};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    source: String,
    query: String,
    threshold: f64,
    #[serde(default = "one", rename = "for")]
    passes: u32,
    #[serde(default = "thirty")]
    interval_seconds: u32,
    #[serde(default = "twenty")]
    max_checks: u32,
}

fn one() -> u32 {
    1
}
fn thirty() -> u32 {
    30
}
fn twenty() -> u32 {
    20
}

impl Config {
    fn check(&self) -> Result<(), String> {
        if self.query.trim().is_empty() {
            return Err("query is empty".into());
        }
        if !self.threshold.is_finite() {
            return Err("threshold must be a number".into());
        }
        if self.passes == 0 || self.passes > 100 {
            return Err(format!("for {}: expected 1 to 100 checks", self.passes));
        }
        if self.interval_seconds == 0 || self.interval_seconds > 3600 {
            return Err(format!(
                "intervalSeconds {}: expected 1 to 3600",
                self.interval_seconds
            ));
        }
        if self.max_checks == 0 {
            return Err("maxChecks must be at least 1".into());
        }
        Ok(())
    }
}

pub struct SloGate;

#[policy]
impl Policy for SloGate {
    const NAME: &'static str = "slo-gate";

    fn validate_config(config: &str) -> Result<(), String> {
        rollout_ext_hooks::parse_config::<Config>(config)?.check()
    }

    fn check(
        ctx: &Context,
        _phase: Phase,
        batch: &Batch,
        _summary: &ValidationSummary,
    ) -> Result<Verdict, String> {
        let cfg: Config = config(ctx)?;
        let step = i64::from(cfg.interval_seconds);
        let range = TimeRange {
            start: ctx.now - step * i64::from(cfg.passes - 1),
            end: ctx.now,
            step: cfg.interval_seconds,
        };
        let series = host::query_metrics_range(&cfg.source, &cfg.query, range)
            .map_err(|e| e.message().to_string())?;
        // The value at each check, oldest first: the worst of the series (none when a series
        // lacks that instant).
        let checks: Vec<Option<f64>> = (0..cfg.passes)
            .map(|k| {
                let at = (range.start + step * i64::from(k)) as f64;
                worst_at(&series, at)
            })
            .collect();
        let passing = checks
            .iter()
            .rev()
            .take_while(|v| v.is_some_and(|v| v <= cfg.threshold))
            .count() as u32;
        if passing >= cfg.passes {
            return Ok(Verdict::Proceed);
        }
        let reason = match checks.last().copied().flatten() {
            None => format!("{} has no value now", cfg.query),
            Some(v) if v.is_nan() => format!("{} is not a number now", cfg.query),
            Some(v) if v > cfg.threshold => {
                format!(
                    "{} is {} (above {})",
                    cfg.query,
                    shown(v),
                    shown(cfg.threshold)
                )
            }
            Some(_) => format!(
                "{} has been at or below {} for {passing} of {} checks",
                cfg.query,
                shown(cfg.threshold),
                cfg.passes
            ),
        };
        Ok(hold(batch, cfg.max_checks, cfg.interval_seconds, reason))
    }
}

/// The highest value any series has at `at` (NaN wins: it is no number); none when one lacks it.
fn worst_at(series: &[host::Series], at: f64) -> Option<f64> {
    if series.is_empty() {
        return None;
    }
    let mut worst = f64::NEG_INFINITY;
    for s in series {
        let point = s.points.iter().find(|p| (p.time - at).abs() < 0.5)?;
        if point.value.is_nan() {
            return Some(f64::NAN);
        }
        worst = worst.max(point.value);
    }
    Some(worst)
}

fn shown(v: f64) -> String {
    let text = format!("{v:.4}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    text.to_string()
}

rollout_ext_hooks::export_policy!(SloGate);

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_ext_hooks::host::MetricsError;
    use rollout_ext_hooks::testing::{FakeMetrics, batch, context, healthy};
    use serde_json::json;

    const QUERY: &str = "errors:ratio";

    fn check(metrics: FakeMetrics, attempt: u32) -> Result<Verdict, String> {
        let mut b = batch(&["n1"]);
        b.attempt = attempt;
        let ctx = context(
            1000,
            json!({"source": "prom", "query": QUERY, "threshold": 0.1, "for": 3,
                   "intervalSeconds": 10, "maxChecks": 4}),
        );
        metrics.run(|| SloGate::check(&ctx, Phase::AfterBatch, &b, &healthy(3, 10)))
    }

    #[test]
    fn proceeds_when_the_ratio_was_low_for_every_check() {
        let low = FakeMetrics::new().values("prom", QUERY, [0.9, 0.05, 0.02, 0.0]);
        assert_eq!(check(low, 0), Ok(Verdict::Proceed));
    }

    #[test]
    fn holds_while_the_ratio_is_high_then_aborts() {
        let high = || FakeMetrics::new().value("prom", QUERY, 0.5);
        match check(high(), 0).unwrap() {
            Verdict::Wait(p) => {
                assert_eq!(p.seconds, 10);
                assert_eq!(p.reason, "errors:ratio is 0.5 (above 0.1) (check 1 of 4)");
            }
            other => panic!("expected a wait, got {other:?}"),
        }
        assert_eq!(
            check(high(), 3),
            Ok(Verdict::Abort(
                "errors:ratio is 0.5 (above 0.1) after 4 checks".into()
            ))
        );
    }

    #[test]
    fn a_recent_fall_is_not_enough() {
        let falling = FakeMetrics::new().values("prom", QUERY, [0.5, 0.5, 0.01]);
        match check(falling, 0).unwrap() {
            Verdict::Wait(p) => assert!(
                p.reason
                    .starts_with("errors:ratio has been at or below 0.1 for 1 of 3 checks"),
                "{}",
                p.reason
            ),
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    #[test]
    fn no_data_and_nan_are_not_passing_checks() {
        let empty = FakeMetrics::new().values("prom", QUERY, []);
        assert!(
            matches!(check(empty, 0), Ok(Verdict::Wait(p)) if p.reason.starts_with("errors:ratio has no value now"))
        );
        let nan = FakeMetrics::new().value("prom", QUERY, f64::NAN);
        assert!(
            matches!(check(nan, 0), Ok(Verdict::Wait(p)) if p.reason.starts_with("errors:ratio is not a number now"))
        );
    }

    #[test]
    fn a_failed_query_is_the_hooks_error() {
        let down = FakeMetrics::new().failing(
            "prom",
            QUERY,
            MetricsError::Unreachable("metrics source prom (http://p:9090): unreachable".into()),
        );
        assert_eq!(
            check(down, 0),
            Err("metrics source prom (http://p:9090): unreachable".into())
        );
    }

    #[test]
    fn validates_its_config() {
        let ok = r#"{"source": "prom", "query": "x", "threshold": 0.01}"#;
        assert_eq!(SloGate::validate_config(ok), Ok(()));
        assert!(
            SloGate::validate_config(r#"{"query": "x", "threshold": 1}"#)
                .unwrap_err()
                .contains("missing field `source`")
        );
        assert_eq!(
            SloGate::validate_config(r#"{"source": "p", "query": " ", "threshold": 1}"#),
            Err("query is empty".into())
        );
        assert_eq!(
            SloGate::validate_config(r#"{"source": "p", "query": "x", "threshold": 1, "for": 0}"#),
            Err("for 0: expected 1 to 100 checks".into())
        );
    }
}
