//! Stage gate of a fleet (contract 0.3.6): before each stage, asked what the stage before did.
//! A stage listed in `abortStages` is frozen: the fleet stops before it. With `stopOnSetAside`
//! the fleet stops after a stage that set nodes aside in any cluster. Otherwise a stage waits
//! until the one before soaked `minSoakSeconds`, and a stage listed in `waitOnceStages` waits one
//! second the first time it is asked (so its second question has attempt 1).
//!
//! Each question is logged (`-v`) with what the gate was told and its answer:
//! `stage prod (1) attempt 0: after dev, 2 clusters, soaked 12s -> proceed`.
//!
//! Config, every field optional:
//! ```json
//! {"minSoakSeconds": 600, "abortStages": ["prod"], "waitOnceStages": ["staging"],
//!  "stopOnSetAside": true}
//! ```

use rollout_ext_hooks::{
    Context, Pause, Policy, Stage, StageOutcome, Verdict, check_config, config, host, policy,
};
use serde::Deserialize;

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    min_soak_seconds: u64,
    abort_stages: Vec<String>,
    wait_once_stages: Vec<String>,
    stop_on_set_aside: bool,
}

/// The longest wait the host accepts (7 days); a longer soak waits again.
const MAX_WAIT_SECONDS: u64 = 604_800;

pub struct StageGate;

#[policy]
impl Policy for StageGate {
    const NAME: &'static str = "stage-gate";

    fn validate_config(config: &str) -> Result<(), String> {
        check_config::<Config>(config)
    }

    fn check_stage(
        ctx: &Context,
        stage: &Stage,
        previous: Option<&StageOutcome>,
    ) -> Result<Verdict, String> {
        let cfg: Config = config(ctx)?;
        let verdict = decide(&cfg, stage, previous);
        host::log(
            host::Level::Info,
            &format!("{} -> {}", told(stage, previous), answer(&verdict)),
        );
        Ok(verdict)
    }
}

/// The first rule that holds: the aborts, then the waits, else proceed.
fn decide(cfg: &Config, stage: &Stage, previous: Option<&StageOutcome>) -> Verdict {
    let listed = |names: &[String]| names.contains(&stage.name);
    if listed(&cfg.abort_stages) {
        return Verdict::Abort(format!("stage {} is frozen by policy", stage.name));
    }
    if let Some(before) = previous {
        let set_aside = before.set_aside();
        if cfg.stop_on_set_aside && !set_aside.is_empty() {
            let clusters = if set_aside.len() == 1 {
                "cluster"
            } else {
                "clusters"
            };
            return Verdict::Abort(format!(
                "stage {} set nodes aside in {clusters} {}",
                before.name,
                set_aside.join(", ")
            ));
        }
        if before.soaked_seconds < cfg.min_soak_seconds {
            let left = cfg.min_soak_seconds - before.soaked_seconds;
            return Verdict::Wait(Pause {
                seconds: left.clamp(1, MAX_WAIT_SECONDS) as u32,
                reason: format!(
                    "stage {} soaked {}s of {}s",
                    before.name, before.soaked_seconds, cfg.min_soak_seconds
                ),
            });
        }
    }
    if listed(&cfg.wait_once_stages) && stage.attempt == 0 {
        return Verdict::Wait(Pause {
            seconds: 1,
            reason: format!("stage {} waits once", stage.name),
        });
    }
    Verdict::Proceed
}

/// What the gate was told: `stage prod (1) attempt 0: after dev, 2 clusters, soaked 12s`.
fn told(stage: &Stage, previous: Option<&StageOutcome>) -> String {
    let asked = format!(
        "stage {} ({}) attempt {}",
        stage.name, stage.index, stage.attempt
    );
    let Some(before) = previous else {
        return format!("{asked}: first stage");
    };
    let count = before.clusters.len();
    let plural = if count == 1 { "" } else { "s" };
    let mut told = format!(
        "{asked}: after {}, {count} cluster{plural}, soaked {}s",
        before.name, before.soaked_seconds
    );
    let set_aside = before.set_aside();
    if !set_aside.is_empty() {
        told.push_str(&format!(", nodes set aside in {}", set_aside.join(", ")));
    }
    told
}

/// The verdict as the log line says it: `proceed`, `wait 7s: ...`, `abort: ...`.
fn answer(verdict: &Verdict) -> String {
    match verdict {
        Verdict::Defer => "defer".into(),
        Verdict::Proceed => "proceed".into(),
        Verdict::Wait(pause) => format!("wait {}s: {}", pause.seconds, pause.reason),
        Verdict::Abort(reason) => format!("abort: {reason}"),
    }
}

rollout_ext_hooks::export_policy!(StageGate);

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_ext_hooks::ClusterOutcome;
    use rollout_ext_hooks::testing::{context, stage, stage_outcome};
    use serde_json::json;

    fn check(config: serde_json::Value, stage: &Stage, previous: Option<&StageOutcome>) -> Verdict {
        StageGate::check_stage(&context(0, config), stage, previous).unwrap()
    }

    fn wait(seconds: u32, reason: &str) -> Verdict {
        Verdict::Wait(Pause {
            seconds,
            reason: reason.into(),
        })
    }

    #[test]
    fn proceeds_with_no_rule() {
        let dev = stage_outcome("dev", &["dev-a"], 0);
        let prod = stage(1, "prod", &["prod-a"]);
        assert_eq!(check(json!({}), &prod, Some(&dev)), Verdict::Proceed);
        assert_eq!(
            check(json!({}), &stage(0, "dev", &["dev-a"]), None),
            Verdict::Proceed
        );
    }

    #[test]
    fn waits_for_the_soak_left_of_the_stage_before() {
        let cfg = json!({"minSoakSeconds": 10});
        let prod = stage(1, "prod", &["prod-a"]);
        let soaked = |seconds| stage_outcome("dev", &["dev-a", "dev-b"], seconds);
        assert_eq!(
            check(cfg.clone(), &prod, Some(&soaked(3))),
            wait(7, "stage dev soaked 3s of 10s")
        );
        assert_eq!(
            check(cfg.clone(), &prod, Some(&soaked(9))),
            wait(1, "stage dev soaked 9s of 10s")
        );
        assert_eq!(
            check(cfg.clone(), &prod, Some(&soaked(10))),
            Verdict::Proceed
        );
        // The first stage has nothing to soak after.
        assert_eq!(
            check(cfg, &stage(0, "dev", &["dev-a"]), None),
            Verdict::Proceed
        );
    }

    #[test]
    fn a_soak_longer_than_the_longest_wait_waits_again() {
        let cfg = json!({"minSoakSeconds": 30 * 86_400});
        let dev = stage_outcome("dev", &["dev-a"], 0);
        let verdict = check(cfg, &stage(1, "prod", &["prod-a"]), Some(&dev));
        assert!(matches!(verdict, Verdict::Wait(p) if p.seconds == 604_800));
    }

    #[test]
    fn aborts_before_a_frozen_stage() {
        let cfg = json!({"abortStages": ["prod"], "minSoakSeconds": 10});
        let dev = stage_outcome("dev", &["dev-a"], 0);
        let frozen = Verdict::Abort("stage prod is frozen by policy".into());
        assert_eq!(
            check(cfg.clone(), &stage(1, "prod", &["prod-a"]), Some(&dev)),
            frozen
        );
        assert_eq!(
            check(cfg.clone(), &stage(0, "prod", &["prod-a"]), None),
            frozen
        );
        // Another stage only soaks.
        assert!(matches!(
            check(cfg, &stage(1, "staging", &["stg-a"]), Some(&dev)),
            Verdict::Wait(_)
        ));
    }

    #[test]
    fn waits_once_then_proceeds() {
        let cfg = json!({"waitOnceStages": ["staging"]});
        let dev = stage_outcome("dev", &["dev-a"], 0);
        let mut staging = stage(1, "staging", &["stg-a"]);
        assert_eq!(
            check(cfg.clone(), &staging, Some(&dev)),
            wait(1, "stage staging waits once")
        );
        staging.attempt = 1;
        assert_eq!(check(cfg.clone(), &staging, Some(&dev)), Verdict::Proceed);
        assert_eq!(
            check(cfg, &stage(2, "prod", &["prod-a"]), Some(&dev)),
            Verdict::Proceed
        );
    }

    #[test]
    fn stops_after_a_stage_that_set_nodes_aside_when_told_to() {
        let mut dev = stage_outcome("dev", &["dev-a", "dev-b", "dev-c"], 60);
        dev.clusters[1].outcome = ClusterOutcome::NodesSetAside;
        let prod = stage(1, "prod", &["prod-a"]);
        assert_eq!(
            check(json!({"stopOnSetAside": true}), &prod, Some(&dev)),
            Verdict::Abort("stage dev set nodes aside in cluster dev-b".into())
        );
        dev.clusters[2].outcome = ClusterOutcome::NodesSetAside;
        assert_eq!(
            check(json!({"stopOnSetAside": true}), &prod, Some(&dev)),
            Verdict::Abort("stage dev set nodes aside in clusters dev-b, dev-c".into())
        );
        assert_eq!(check(json!({}), &prod, Some(&dev)), Verdict::Proceed);
    }

    #[test]
    fn the_log_line_says_what_the_gate_was_told_and_answered() {
        let mut dev = stage_outcome("dev", &["dev-a", "dev-b"], 12);
        let prod = stage(1, "prod", &["prod-a"]);
        assert_eq!(
            format!(
                "{} -> {}",
                told(&prod, Some(&dev)),
                answer(&Verdict::Proceed)
            ),
            "stage prod (1) attempt 0: after dev, 2 clusters, soaked 12s -> proceed"
        );
        dev.clusters.truncate(1);
        dev.clusters[0].outcome = ClusterOutcome::NodesSetAside;
        assert_eq!(
            told(&prod, Some(&dev)),
            "stage prod (1) attempt 0: after dev, 1 cluster, soaked 12s, nodes set aside in dev-a"
        );
        assert_eq!(
            told(&stage(0, "dev", &["dev-a"]), None),
            "stage dev (0) attempt 0: first stage"
        );
        assert_eq!(
            answer(&wait(7, "stage dev soaked 3s of 10s")),
            "wait 7s: stage dev soaked 3s of 10s"
        );
        assert_eq!(answer(&Verdict::Abort("frozen".into())), "abort: frozen");
    }

    #[test]
    fn validates_its_config() {
        assert_eq!(StageGate::validate_config("{}"), Ok(()));
        assert_eq!(
            StageGate::validate_config(
                r#"{"minSoakSeconds": 60, "abortStages": ["prod"], "waitOnceStages": [],
                    "stopOnSetAside": true}"#
            ),
            Ok(())
        );
        assert_eq!(
            StageGate::validate_config(r#"{"minSoak": 60}"#),
            Err(
                "unknown field `minSoak`, expected one of `minSoakSeconds`, `abortStages`, \
                 `waitOnceStages`, `stopOnSetAside`"
                    .into()
            )
        );
        assert_eq!(
            StageGate::validate_config(r#"{"minSoakSeconds": "10m"}"#),
            Err("invalid type: string \"10m\", expected u64".into())
        );
        // A config the policy's loading would have refused fails the call, naming the hook.
        let ctx = context(0, json!({"abortStages": "prod"}));
        let err = StageGate::check_stage(&ctx, &stage(0, "dev", &[]), None).unwrap_err();
        assert!(err.starts_with("invalid config for hook test: "), "{err}");
    }
}
