use super::*;
use crate::plan::Role;
use crate::plan::hook::{Choice, DrainOrderAnswer, InstanceKind};

type SelectFn = dyn FnMut(&[Candidate]) -> Result<SelectAnswer, HookFault>;
type BatchFn = dyn FnMut(&Progress) -> Result<BatchAnswer, HookFault>;
type GateFn = dyn FnMut(&BatchInfo) -> Result<GateAnswer, HookFault>;
type StageFn = dyn FnMut(&StageInfo, Option<&StageOutcome>) -> Result<GateAnswer, HookFault>;

/// A hook made of closures, for planner tests.
pub struct FakeHook {
    pub name: String,
    pub points: Vec<HookPoint>,
    pub policy: FailurePolicy,
    pub mode: HookMode,
    pub select: Box<SelectFn>,
    pub batch: Box<BatchFn>,
    pub gate: Box<GateFn>,
    /// Its answer before a fleet's stage.
    pub stage_gate: Box<StageFn>,
    /// The answer at `drain-order`; none: defer.
    pub drain_order: Option<DrainOrderAnswer>,
    /// Each call's point (a gate's phase) and context, in order.
    pub calls: Calls,
}

/// The calls a [`FakeHook`] took: point (or phase) and context.
pub type Calls = std::sync::Arc<std::sync::Mutex<Vec<(&'static str, CallContext)>>>;

impl FakeHook {
    pub fn new(name: &str, points: &[HookPoint]) -> Self {
        FakeHook {
            name: name.into(),
            points: points.to_vec(),
            policy: FailurePolicy::Fail,
            mode: HookMode::Enforce,
            select: Box::new(|_| Ok(SelectAnswer::Defer)),
            batch: Box::new(|_| Ok(BatchAnswer::Defer)),
            gate: Box::new(|_| Ok(GateAnswer::Defer)),
            stage_gate: Box::new(|_, _| Ok(GateAnswer::Defer)),
            drain_order: None,
            calls: Calls::default(),
        }
    }

    fn took(&self, point: &'static str, ctx: &CallContext) {
        self.calls.lock().unwrap().push((point, ctx.clone()));
    }
    pub fn boxed(self) -> Box<dyn Hook> {
        Box::new(self)
    }
}

impl Hook for FakeHook {
    fn name(&self) -> &str {
        &self.name
    }
    fn points(&self) -> &[HookPoint] {
        &self.points
    }
    fn failure_policy(&self) -> FailurePolicy {
        self.policy
    }
    fn mode(&self) -> HookMode {
        self.mode
    }
    fn select(
        &mut self,
        ctx: &CallContext,
        _: &GroupInfo,
        c: &Instances,
    ) -> Result<SelectAnswer, HookFault> {
        self.took("select", ctx);
        (self.select)(c)
    }
    fn next_batch(&mut self, ctx: &CallContext, p: &Progress) -> Result<BatchAnswer, HookFault> {
        self.took("batch", ctx);
        (self.batch)(p)
    }
    fn gate(
        &mut self,
        ctx: &CallContext,
        phase: Phase,
        b: &BatchInfo,
        _: &HealthSummary,
    ) -> Result<GateAnswer, HookFault> {
        self.took(phase.as_str(), ctx);
        (self.gate)(b)
    }
    fn stage_gate(
        &mut self,
        ctx: &CallContext,
        stage: &StageInfo,
        previous: Option<&StageOutcome>,
    ) -> Result<GateAnswer, HookFault> {
        self.took("before-stage", ctx);
        (self.stage_gate)(stage, previous)
    }
    fn drain_order(
        &mut self,
        _: &CallContext,
        _: &str,
        _: &[crate::snapshot::Pod],
    ) -> Result<DrainOrderAnswer, HookFault> {
        Ok(self.drain_order.clone().unwrap_or(DrainOrderAnswer::Defer))
    }
}

pub fn candidate(name: &str, reason: Option<&str>) -> Candidate {
    Candidate {
        kind: InstanceKind::Node,
        name: name.into(),
        group: "g".into(),
        role: Role::Node,
        zone: None,
        labels: Default::default(),
        annotations: Default::default(),
        taints: vec![],
        ready: true,
        unschedulable: false,
        created: None,
        kubelet_version: None,
        pods: 0,
        pods_not_ready: 0,
        up_to_date: reason.is_none(),
        reason: reason.map(String::from),
    }
}

pub fn ctx() -> CallContext {
    CallContext {
        now: 0,
        run_id: "r".into(),
        dry_run: true,
        timing: Default::default(),
        others: Vec::new(),
    }
}

pub fn group() -> GroupInfo {
    GroupInfo {
        name: "g".into(),
        role: Role::Node,
        size: 3,
        up_to_date: 1,
        selected: 2,
        max_surge: 0,
        max_unavailable: 1,
    }
}

pub fn choose(names: &[&str]) -> SelectAnswer {
    choose_with(names, false)
}

fn choose_with(names: &[&str], force: bool) -> SelectAnswer {
    SelectAnswer::Choose(
        names
            .iter()
            .map(|n| Choice {
                name: n.to_string(),
                reason: format!("picked {n}"),
                force,
            })
            .collect(),
    )
}

pub fn cands() -> Vec<Candidate> {
    vec![
        candidate("a", Some("old")),
        candidate("b", Some("old")),
        candidate("c", None),
    ]
}

fn names(chosen: &[Chosen], c: &[Candidate]) -> Vec<String> {
    chosen.iter().map(|x| c[x.index].name.clone()).collect()
}

#[test]
fn selection_chains_and_credits_the_last_hook() {
    let mut first = FakeHook::new("first", &[HookPoint::Select]);
    first.select = Box::new(|view: &[Candidate]| {
        // Sees the built-in choice first.
        assert_eq!(view[0].name, "a");
        assert!(view[2].reason.is_none() && view[2].up_to_date);
        Ok(choose_with(&["c", "b", "a"], true))
    });
    let mut second = FakeHook::new("second", &[HookPoint::Select]);
    second.select = Box::new(|view: &[Candidate]| {
        assert_eq!(view[0].name, "c", "sees the previous hook's order");
        Ok(choose(&["b", "c"]))
    });
    let mut hooks = vec![first.boxed(), second.boxed()];
    let c = cands();
    let selected = select(&mut hooks, &ctx(), &group(), &c, &mut vec![]).unwrap();
    assert_eq!(selected.by, DecidedBy::Hook("second".into()));
    let chosen = selected.chosen;
    assert_eq!(names(&chosen, &c), ["b", "c"]);
    assert_eq!(chosen[0].by, DecidedBy::Hook("second".into()));
    assert_eq!(chosen[0].reason, "picked b");
}

#[test]
fn selection_rejects_unknown_and_duplicate_names() {
    for bad in [&["a", "zz"][..], &["a", "a"][..]] {
        let mut h = FakeHook::new("h", &[HookPoint::Select]);
        let answer = choose(bad);
        h.select = Box::new(move |_| Ok(answer.clone()));
        let err = select(&mut [h.boxed()], &ctx(), &group(), &cands(), &mut vec![]).unwrap_err();
        assert!(matches!(err.fault, HookFault::InvalidAnswer(_)), "{err}");
        assert_eq!(err.hook, "h");
    }
}

/// An answer by index (contract 0.3.4's flat form): `(index, forced)` each.
fn pick(picks: &[(u32, bool)]) -> SelectAnswer {
    SelectAnswer::ChooseAt(
        picks
            .iter()
            .map(|&(index, force)| Pick {
                index,
                reason: format!("picked {index}"),
                force,
            })
            .collect(),
    )
}

#[test]
fn a_selection_by_index_is_checked_as_one_by_name() {
    let c = cands();
    let mut h = FakeHook::new("h", &[HookPoint::Select]);
    h.select = Box::new(|_| Ok(pick(&[(1, false), (2, true)])));
    let selected = select(&mut [h.boxed()], &ctx(), &group(), &c, &mut vec![]).unwrap();
    assert_eq!(names(&selected.chosen, &c), ["b", "c"]);
    assert_eq!(selected.chosen[0].reason, "picked 1");

    for (bad, says) in [
        (
            pick(&[(0, false), (3, false)]),
            "chose candidate 3, but there are 3",
        ),
        (pick(&[(1, false), (1, false)]), "chose \"b\" twice"),
        (
            pick(&[(2, false)]),
            "\"c\", which is up to date, without force",
        ),
    ] {
        let mut h = FakeHook::new("h", &[HookPoint::Select]);
        h.select = Box::new(move |_| Ok(bad.clone()));
        let err = select(&mut [h.boxed()], &ctx(), &group(), &c, &mut vec![]).unwrap_err();
        assert!(
            matches!(&err.fault, HookFault::InvalidAnswer(m) if m.contains(says)),
            "{err}"
        );
    }
}

#[test]
fn choosing_an_up_to_date_instance_needs_force() {
    let mut h = FakeHook::new("all", &[HookPoint::Select]);
    h.select = Box::new(|_| Ok(choose(&["a", "b", "c"])));
    let err = select(&mut [h.boxed()], &ctx(), &group(), &cands(), &mut vec![]).unwrap_err();
    assert!(
        matches!(&err.fault, HookFault::InvalidAnswer(m) if m.contains("\"c\", which is up to date")),
        "{err}"
    );

    let mut h = FakeHook::new("all", &[HookPoint::Select]);
    h.select = Box::new(|_| Ok(choose_with(&["a", "b", "c"], true)));
    let c = cands();
    let chosen = select(&mut [h.boxed()], &ctx(), &group(), &c, &mut vec![])
        .unwrap()
        .chosen;
    assert_eq!(names(&chosen, &c), ["a", "b", "c"]);

    // An outdated instance an earlier hook left out is not up to date: no force needed.
    let mut first = FakeHook::new("first", &[HookPoint::Select]);
    first.select = Box::new(|_| Ok(choose(&["a"])));
    let mut second = FakeHook::new("second", &[HookPoint::Select]);
    second.select = Box::new(|view: &[Candidate]| {
        assert!(
            view[1].reason.is_none() && !view[1].up_to_date,
            "{:?}",
            view[1]
        );
        Ok(choose(&["b", "a"]))
    });
    let chosen = select(
        &mut [first.boxed(), second.boxed()],
        &ctx(),
        &group(),
        &c,
        &mut vec![],
    )
    .unwrap()
    .chosen;
    assert_eq!(names(&chosen, &c), ["b", "a"]);
}

#[test]
fn ignore_policy_falls_back_to_built_in() {
    let mut h = FakeHook::new("flaky", &[HookPoint::Select]);
    h.policy = FailurePolicy::Ignore;
    h.select = Box::new(|_| Err(HookFault::Trap("unreachable".into())));
    let mut warnings = vec![];
    let c = cands();
    let chosen = select(&mut [h.boxed()], &ctx(), &group(), &c, &mut warnings)
        .unwrap()
        .chosen;
    assert_eq!(names(&chosen, &c), ["a", "b"]);
    assert!(chosen.iter().all(|c| c.by == DecidedBy::BuiltIn));
    assert!(
        warnings[0].contains("flaky") && warnings[0].contains("trapped"),
        "{warnings:?}"
    );
}

#[test]
fn the_same_ignored_failure_asked_again_is_said_once() {
    let mut h = FakeHook::new("ungranted", &[HookPoint::Select]);
    h.policy = FailurePolicy::Ignore;
    let mut reads = ["Secret", "Secret", "ConfigMap"].into_iter();
    h.select = Box::new(move |_| {
        let kind = reads.next().unwrap_or("Secret");
        Err(HookFault::ObjectsNotGranted(format!(
            "v1 {kind} in every namespace"
        )))
    });
    let mut hooks = [h.boxed()];
    let mut warnings = vec![];
    let c = cands();
    for _ in 0..3 {
        select(&mut hooks, &ctx(), &group(), &c, &mut warnings).unwrap();
    }
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].contains("v1 Secret") && warnings[1].contains("v1 ConfigMap"));
}

pub fn sized(count: u32) -> BatchAnswer {
    BatchAnswer::Size {
        count,
        reason: format!("hook says {count}"),
    }
}

pub fn progress_of<'a>(g: &'a GroupInfo, pending: &[Candidate], max: u32) -> Progress<'a> {
    Progress {
        group: g,
        batches_done: 0,
        updated: 0,
        pending: pending.to_vec().into(),
        max_batch: max,
        max_batch_reason: "the budget".into(),
    }
}

#[test]
fn batch_sizes_compose_to_the_most_careful() {
    let g = group();
    let c = cands();
    let p = progress_of(&g, &c, 3);
    let mut two = FakeHook::new("two", &[HookPoint::Batch]);
    two.batch = Box::new(|_| Ok(sized(2)));
    let mut one = FakeHook::new("one", &[HookPoint::Batch]);
    one.batch = Box::new(|_| Ok(sized(1)));
    let mut hooks = vec![two.boxed(), one.boxed()];
    let d = batch_size(&mut hooks, &ctx(), &p, &mut vec![]).unwrap();
    assert_eq!(
        d,
        BatchDecision::Size {
            size: 1,
            reason: "hook says 1".into(),
            by: DecidedBy::Hook("one".into())
        }
    );

    let mut pause = FakeHook::new("window", &[HookPoint::Batch]);
    pause.batch = Box::new(|_| {
        Ok(BatchAnswer::Pause {
            seconds: 60,
            reason: "closed".into(),
        })
    });
    hooks.push(pause.boxed());
    let d = batch_size(&mut hooks, &ctx(), &p, &mut vec![]).unwrap();
    assert!(matches!(d, BatchDecision::Pause { seconds: 60, .. }));

    let d = batch_size(&mut [], &ctx(), &p, &mut vec![]).unwrap();
    assert_eq!(
        d,
        BatchDecision::Size {
            size: 3,
            reason: "the budget".into(),
            by: DecidedBy::BuiltIn
        }
    );
}

#[test]
fn batch_answers_out_of_bounds_are_faults() {
    let g = group();
    let c = cands();
    let p = progress_of(&g, &c, 2);
    let answers = [
        sized(0),
        sized(3),
        sized(u32::MAX),
        BatchAnswer::Pause {
            seconds: 0,
            reason: String::new(),
        },
        BatchAnswer::Pause {
            seconds: MAX_WAIT_SECONDS + 1,
            reason: String::new(),
        },
    ];
    for answer in answers {
        let mut h = FakeHook::new("h", &[HookPoint::Batch]);
        let a = answer.clone();
        h.batch = Box::new(move |_| Ok(a.clone()));
        let err = batch_size(&mut [h.boxed()], &ctx(), &p, &mut vec![]).unwrap_err();
        assert!(
            matches!(err.fault, HookFault::InvalidAnswer(_)),
            "{answer:?}: {err}"
        );
    }
}

#[test]
fn gates_take_the_most_careful_verdict() {
    let batch = BatchInfo {
        index: 0,
        instances: vec!["a".into()],
        canary: false,
        attempt: 0,
    };
    let mut ok = FakeHook::new("ok", &[HookPoint::Gate]);
    ok.gate = Box::new(|_| Ok(GateAnswer::Proceed));
    let mut wait = FakeHook::new("wait", &[HookPoint::Gate]);
    wait.gate = Box::new(|_| {
        Ok(GateAnswer::Wait {
            seconds: 30,
            reason: "busy".into(),
        })
    });
    let mut stop = FakeHook::new("stop", &[HookPoint::Gate]);
    stop.gate = Box::new(|_| Ok(GateAnswer::Abort("broken".into())));

    let ask = |hooks: &mut [Box<dyn Hook>]| {
        gate(
            hooks,
            &ctx(),
            Phase::BeforeBatch,
            &batch,
            &HealthSummary::default(),
            &mut vec![],
        )
        .unwrap()
    };
    let mut hooks = vec![ok.boxed()];
    assert_eq!(
        ask(&mut hooks),
        GateDecision {
            verdict: Verdict::Proceed,
            by: DecidedBy::Hook("ok".into())
        }
    );
    hooks.push(wait.boxed());
    assert_eq!(ask(&mut hooks).by, DecidedBy::Hook("wait".into()));
    hooks.push(stop.boxed());
    assert_eq!(ask(&mut hooks).verdict, Verdict::Abort("broken".into()));
    assert_eq!(
        ask(&mut []),
        GateDecision {
            verdict: Verdict::Proceed,
            by: DecidedBy::BuiltIn
        }
    );
}

#[test]
fn a_batch_too_large_is_refused_naming_the_group_the_batch_and_why_the_budget_is_what_it_is() {
    let g = group();
    let c = cands();
    let canary = Progress {
        max_batch: 1,
        max_batch_reason: "canary: one instance first".into(),
        ..progress_of(&g, &c, 1)
    };
    let mut two = FakeHook::new("two", &[HookPoint::Batch]);
    two.batch = Box::new(|_| Ok(sized(2)));
    let fault = ask_batch(&mut two, &ctx(), &canary).unwrap_err();
    assert_eq!(
        fault.to_string(),
        "gave an invalid answer: batch size 2 for batch 1 of group g exceeds the budget of 1 (canary: one instance first)"
    );
}
