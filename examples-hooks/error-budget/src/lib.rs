//! Error-budget gate: hold the rotation while more than `maxPodsNotReady` pods are not Ready, or
//! while a PodDisruptionBudget covering the next batch allows no disruption; abort after
//! `maxFailedChecks` consecutive failed checks of the same batch.
//!
//! Config: `{"maxPodsNotReady": 0, "maxFailedChecks": 10, "retrySeconds": 30}`.

use rollout_ext_hooks::{
    Batch, Context, Phase, Policy, ValidationSummary, Verdict, check_config, config, hold, policy,
};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    #[serde(default)]
    max_pods_not_ready: u32,
    #[serde(default = "ten")]
    max_failed_checks: u32,
    #[serde(default = "thirty")]
    retry_seconds: u32,
}

fn ten() -> u32 {
    10
}
fn thirty() -> u32 {
    30
}

pub struct ErrorBudget;

#[policy]
impl Policy for ErrorBudget {
    const NAME: &'static str = "error-budget";

    fn validate_config(config: &str) -> Result<(), String> {
        check_config::<Config>(config)
    }

    fn check(
        ctx: &Context,
        _phase: Phase,
        batch: &Batch,
        summary: &ValidationSummary,
    ) -> Result<Verdict, String> {
        let cfg: Config = config(ctx)?;
        let mut problems = Vec::new();
        if summary.pods_not_ready > cfg.max_pods_not_ready {
            problems.push(format!(
                "{} pods not Ready (at most {} allowed)",
                summary.pods_not_ready, cfg.max_pods_not_ready
            ));
        }
        for b in &summary.budgets {
            if b.pods_in_batch > 0 && b.disruptions_allowed <= 0 {
                problems.push(format!(
                    "PodDisruptionBudget {}/{} allows no disruption and covers {} pod(s) of the batch",
                    b.namespace, b.name, b.pods_in_batch
                ));
            }
        }
        if problems.is_empty() {
            return Ok(Verdict::Proceed);
        }
        let retry = cfg.retry_seconds.max(1);
        Ok(hold(
            batch,
            cfg.max_failed_checks,
            retry,
            problems.join("; "),
        ))
    }
}

rollout_ext_hooks::export_policy!(ErrorBudget);

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_ext_hooks::Budget;
    use rollout_ext_hooks::testing::{batch, context, healthy};
    use serde_json::json;

    fn check(summary: &ValidationSummary, attempt: u32) -> Verdict {
        let mut b = batch(&["n1"]);
        b.attempt = attempt;
        let ctx = context(0, json!({"maxPodsNotReady": 2, "maxFailedChecks": 3}));
        ErrorBudget::check(&ctx, Phase::BeforeBatch, &b, summary).unwrap()
    }

    #[test]
    fn proceeds_on_a_healthy_cluster() {
        assert_eq!(check(&healthy(3, 10), 0), Verdict::Proceed);
    }

    #[test]
    fn tolerates_up_to_the_configured_unready_pods() {
        let mut s = healthy(3, 10);
        s.pods_not_ready = 2;
        assert_eq!(check(&s, 0), Verdict::Proceed);
        s.pods_not_ready = 3;
        assert!(matches!(check(&s, 0), Verdict::Wait(_)));
    }

    #[test]
    fn waits_on_a_blocking_budget_then_aborts() {
        let mut s = healthy(3, 10);
        s.budgets.push(Budget {
            namespace: "shop".into(),
            name: "web".into(),
            disruptions_allowed: 0,
            pods_in_batch: 1,
        });
        match check(&s, 0) {
            Verdict::Wait(p) => {
                assert_eq!(p.seconds, 30);
                assert!(p.reason.contains("shop/web"), "{}", p.reason);
            }
            other => panic!("expected wait, got {other:?}"),
        }
        assert!(matches!(check(&s, 2), Verdict::Abort(r) if r.ends_with("after 3 checks")));
    }

    #[test]
    fn validates_its_config() {
        assert_eq!(ErrorBudget::validate_config("{}"), Ok(()));
        assert_eq!(
            ErrorBudget::validate_config(r#"{"maxPodsNotReady": 2, "retrySeconds": 10}"#),
            Ok(())
        );
        assert_eq!(
            ErrorBudget::validate_config(r#"{"maxPodNotReady": 2}"#),
            Err(
                "unknown field `maxPodNotReady`, expected one of `maxPodsNotReady`, \
                 `maxFailedChecks`, `retrySeconds`"
                    .into()
            )
        );
        assert_eq!(
            ErrorBudget::validate_config(r#"{"retrySeconds": "30s"}"#),
            Err("invalid type: string \"30s\", expected u32".into())
        );
    }

    #[test]
    fn ignores_budgets_that_do_not_cover_the_batch() {
        let mut s = healthy(3, 10);
        s.budgets.push(Budget {
            namespace: "shop".into(),
            name: "web".into(),
            disruptions_allowed: 0,
            pods_in_batch: 0,
        });
        assert_eq!(check(&s, 0), Verdict::Proceed);
    }
}
