//! The planner: drives each group's loop ([`GroupLoop`]) with simulated outcomes and records
//! what it would do as a [`Plan`]. Every action succeeds and replacements come Ready at once;
//! hooks are asked for real (with `dryRun` as the options say), with the simulated clock
//! advanced by the pauses they asked for. What a plan cannot know is assumed to go well: a
//! gate's wait clears (the gate is not asked again), and the `after-batch` gate, which judges
//! the cluster after the batch, proceeds without being asked (unless the options ask it, for
//! `hooks test`).

use super::capacity::Capacity;
use super::decide::{self, BatchDecision, GateDecision, Verdict};
use super::estimate::{AskedAbout, WorkTally};
use super::forecast::{self, Forecast};
use super::group_loop::{
    Action, Asked, GroupLoop, GroupStart, Input, Outcome, Question, Sizing, Step,
};
use super::health::{self, Index};
use super::hook::{BatchInfo, CallContext, DecidedBy, HealthSummary, Hook, Phase};
use super::instances::instance_list;
use super::ledger::{Disruption, Ledger};
use super::prepare::{self, Prepared};
use super::shadow::{self, ShadowDecision};
use super::{
    BatchPlan, GateStep, GroupPlan, MAX_SIMULATED_PAUSE, PLAN_API_VERSION, PauseStep, Plan,
    PlanError, PlanOptions, UndrainablePlan,
};
use crate::policy::drain::UndrainableAction;
use crate::policy::{OthersDisruptions, Policy};
use crate::snapshot::Snapshot;

/// Plans a node rotation.
pub fn plan_nodes(
    snapshot: &Snapshot,
    policy: &Policy,
    options: &PlanOptions,
    hooks: &mut [Box<dyn Hook>],
) -> Result<Plan, PlanError> {
    let index = Index::new(snapshot);
    let survey = prepare::survey(snapshot, &index, policy, options)?;
    // Counted as a live run counts them, from what it watches.
    let watched = health::watched(snapshot, &survey.groups);
    let health = health::summarize(
        &watched,
        &Index::new(&watched),
        &[],
        &Default::default(),
        &options.drain,
    );
    let mut warnings = decide::left_out_warnings(hooks);
    warnings.extend(survey.warnings);
    if policy.others_disruptions == OthersDisruptions::Count {
        warnings.extend(snapshot.kured.iter().flat_map(|k| {
            (k.unreadable.iter()).map(|why| {
                format!("kured's lock on DaemonSet {} cannot be read, so the nodes it names are not counted: {why}", k.id())
            })
        }));
    }
    let mut prepared = Vec::new();
    let mut tally = WorkTally::default();
    for group in &survey.groups {
        let group_plan = prepare::prepare_group(&index, policy, options, group)?;
        if let Prepared::Ready(start) = &group_plan {
            tally.add(&group.name, group.role, start);
        }
        let others = match policy.others_disruptions {
            OthersDisruptions::Count => Ledger::at_start(snapshot, group, options.now),
            OthersDisruptions::Ignore => Ledger::default(),
        };
        prepared.push((group, group_plan, others));
    }
    let mut planner = Planner {
        index: &index,
        options,
        hooks,
        warnings,
        health,
        now: options.now,
        tally,
        set_aside: 0,
        others: Vec::new(),
        capacity: Capacity::new(
            snapshot,
            &index,
            prepare::group_label(policy, options),
            &options.staleness,
        ),
    };
    let mut plan = Plan {
        api_version: PLAN_API_VERSION,
        kind: "Plan",
        groups: Vec::new(),
        warnings: Vec::new(),
        stopped: None,
        undrainable: {
            let u = options.drain.rules.undrainable;
            let sets_aside = u.action == UndrainableAction::Quarantine && !options.cloud_only;
            sets_aside.then_some(UndrainablePlan {
                action: u.action.as_str(),
                max_quarantined: u.max_quarantined,
            })
        },
        modules: super::PlannedModule::of(policy),
        estimate: None,
    };
    for (group, prepared, others) in prepared {
        let group_plan = match prepared {
            Prepared::Disabled(disabled) => *disabled,
            Prepared::Ready(start) => planner.plan_group(start, others)?,
        };
        let aborted = group_plan.aborted.clone();
        plan.groups.push(group_plan);
        if let Some(reason) = aborted {
            plan.stopped = Some(format!("group {}: {reason}", group.name));
            break;
        }
    }
    if !options.cloud_only {
        let updated: Vec<&str> = plan
            .groups
            .iter()
            .flat_map(|g| g.instances.iter().filter(|i| i.update))
            .map(|i| i.name.as_str())
            .collect();
        planner
            .warnings
            .extend(health::drain_blockers(&index, &updated, &options.drain));
    }
    plan.warnings = planner.warnings;
    options
        .durations
        .estimator()
        .annotate(&mut plan, options.now);
    Ok(plan)
}

struct Planner<'a> {
    index: &'a Index<'a>,
    options: &'a PlanOptions,
    hooks: &'a mut [Box<dyn Hook>],
    warnings: Vec<String>,
    /// The cluster's health as the snapshot shows it, judged once for the plan.
    health: HealthSummary,
    /// Simulated time: advances with the pauses hooks ask for, soaks, and each batch's
    /// estimate.
    now: i64,
    /// What the run would have left, for the estimates hooks are told.
    tally: WorkTally,
    /// The cluster's room for evicted pods, as the rotation goes.
    capacity: Capacity<'a>,
    /// How many nodes the run would likely have set aside so far.
    set_aside: usize,
    /// What others disrupt in the group being planned, as the snapshot shows: what its hooks
    /// asking `others-disrupting` are told.
    others: Vec<Disruption>,
}

/// What the planner keeps of a group while its loop runs.
struct Recording {
    plan: GroupPlan,
    /// Pauses asked for before the next batch, and how long the group paused in all.
    pause: Option<PauseStep>,
    paused: i64,
    /// The last batch size and who decided it; the gate asked about that batch.
    sized_by: DecidedBy,
    size_reason: String,
    batch: Option<BatchInfo>,
    gate: Option<GateStep>,
    /// What shadow hooks said about the next batch.
    shadow: Vec<ShadowDecision>,
}

impl Recording {
    /// A question about this group's next batch.
    fn asking_batch(&self) -> AskedAbout<'_> {
        AskedAbout::Batch {
            group: &self.plan.group.name,
            role: self.plan.group.role,
        }
    }
}

impl Planner<'_> {
    /// The context of a question about `asking`, at the simulated time.
    fn ctx(&self, asking: AskedAbout) -> CallContext {
        let estimator = self.options.durations.estimator();
        CallContext {
            now: self.now,
            run_id: self.options.run_id.clone(),
            dry_run: self.options.dry_run,
            timing: estimator.timing(&self.tally, asking, self.now),
            others: self.others.clone(),
        }
    }

    /// The plan of one group; its first batch takes only what `others` leave of the budget.
    fn plan_group(&mut self, start: GroupStart, others: Ledger) -> Result<GroupPlan, PlanError> {
        self.others = others.disruptions.clone();
        let concurrency = start
            .budget
            .resolve(start.info.selected)
            .map_or(0, |b| b.concurrency);
        let mut group = GroupLoop::new(start);
        let mut rec = Recording {
            plan: GroupPlan {
                group: group.group().clone(),
                concurrency,
                disabled: false,
                note: None,
                gate: None,
                others_disrupting: others.disruptions.clone(),
                shadow: Vec::new(),
                instances: Vec::new(),
                batches: Vec::new(),
                aborted: None,
                estimate: None,
            },
            pause: None,
            paused: 0,
            sized_by: DecidedBy::BuiltIn,
            size_reason: String::new(),
            batch: None,
            gate: None,
            shadow: Vec::new(),
        };
        let mut input = Input::Start;
        loop {
            let selecting = matches!(input, Input::Selected(_));
            let step = group.step(input);
            if selecting {
                self.record_selection(&mut rec.plan, &group);
            }
            input = match step {
                Step::Ask(Question::Select) => {
                    let ctx = self.ctx(AskedAbout::Other);
                    let (info, candidates) = (group.group(), group.candidates());
                    let selected =
                        decide::select(self.hooks, &ctx, info, candidates, &mut self.warnings)?;
                    rec.plan.shadow = shadow::select(self.hooks, &ctx, info, candidates, &selected);
                    Input::Selected(selected)
                }
                Step::Ask(Question::BatchSize(sizing)) => {
                    let first = sizing.batches_done == 0 && sizing.attempt == 0;
                    let sizing = match first && !others.disruptions.is_empty() {
                        true => self.narrow(&others, sizing),
                        false => sizing,
                    };
                    let ctx = self.ctx(rec.asking_batch());
                    let progress = group.progress(&sizing);
                    let decision =
                        decide::batch_size(self.hooks, &ctx, &progress, &mut self.warnings)?;
                    let said = shadow::batch_size(self.hooks, &ctx, &progress, &decision);
                    rec.shadow.extend(said);
                    if let BatchDecision::Size { by, reason, .. } = &decision {
                        rec.sized_by = by.clone();
                        rec.size_reason = reason.clone();
                    }
                    Input::Sized(decision)
                }
                Step::Ask(Question::Gate { phase, batch }) => {
                    Input::Judged(self.gate(&mut rec, phase, &batch)?)
                }
                Step::Do(action) => {
                    let replace = matches!(action, Action::Replace(_));
                    let batch = replace || matches!(action, Action::Surge { .. });
                    if !self.record(&mut rec, action) {
                        return Ok(rec.plan);
                    }
                    if batch {
                        self.carry_out(&rec.plan);
                    }
                    match rec.plan.batches.last_mut() {
                        Some(batch) if replace => {
                            batch.moves_runner = self.index.runners_on(&batch.instances);
                            batch.likely_set_aside = self.likely_set_aside(batch);
                            Input::Replaced {
                                set_aside: batch.likely_set_aside.clone(),
                            }
                        }
                        _ => Input::Done,
                    }
                }
                Step::Done(Outcome::Finished) => return Ok(rec.plan),
                Step::Done(Outcome::NoRoomLeft {
                    set_aside,
                    concurrency,
                }) => {
                    rec.plan.aborted = Some(format!(
                        "the run would stop before the next batch: the node(s) likely set aside ({}) take the whole budget ({concurrency} at once)",
                        set_aside.join(", ")
                    ));
                    return Ok(rec.plan);
                }
                Step::Done(outcome @ Outcome::Aborted { .. }) => {
                    return Ok(self.aborted(rec, &outcome));
                }
            };
        }
    }

    /// `sizing` of a group's first batch narrowed to what `others` leave of its budget, said;
    /// with nothing left the run would hold, which the plan says and sizes past.
    fn narrow(&mut self, others: &Ledger, sizing: Sizing) -> Sizing {
        let (budget, room) = (sizing.room, others.room(sizing.room));
        let takes = room.min(sizing.max_batch);
        let what = match room {
            0 => "the run would hold before the group's first batch until they leave room in its budget".to_string(),
            _ => format!("the group's first batch takes {takes} of its budget of {budget} (a run reads this again before each batch)"),
        };
        let at_once = if room == 0 {
            format!(" ({budget} at once)")
        } else {
            String::new()
        };
        self.warnings
            .push(format!("{}: {what}{at_once}", others.describe()));
        match room {
            0 => sizing,
            _ => others.narrow(&sizing),
        }
    }

    /// The batch just recorded is done: the clock moves by its estimate, and what the run would
    /// have left by its instances.
    fn carry_out(&mut self, plan: &GroupPlan) {
        let Some(batch) = plan.batches.last() else {
            return;
        };
        let (name, role) = (&plan.group.name, plan.group.role);
        let estimator = self.options.durations.estimator();
        let mut millis = estimator.carried_out(name, role, batch);
        if !self.tally.started() {
            // The run's setup comes before its first batch, as the plan's estimate counts it.
            millis += estimator.setup(name);
        }
        self.now += i64::try_from(millis.div_ceil(1000)).unwrap_or(0);
        if !batch.surge {
            self.tally.batch_done(name, batch.instances.len());
        }
    }

    /// The instance list, in update order, once the selection is known.
    fn record_selection(&mut self, plan: &mut GroupPlan, group: &GroupLoop) {
        let Some(selected) = group.selected() else {
            return;
        };
        let candidates = group.candidates();
        let dropped: Vec<&str> = candidates
            .iter()
            .enumerate()
            .filter(|(i, c)| c.reason.is_some() && !selected.chosen.iter().any(|x| x.index == *i))
            .map(|(_, c)| c.name.as_str())
            .collect();
        if !dropped.is_empty() {
            self.warnings.push(format!(
                "group {}: selection hooks left out {} outdated instance(s): {}",
                plan.group.name,
                dropped.len(),
                dropped.join(", ")
            ));
        }
        plan.instances = instance_list(group);
        plan.group.selected = selected.chosen.len() as u32;
        if let Some(budget) = group.budget() {
            plan.concurrency = budget.concurrency;
        }
        self.tally.chose(&plan.group.name, group);
    }

    /// A gate's first answer about each batch is asked and shown; a wait is assumed to clear,
    /// and the `after-batch` gate to proceed (see the module's doc).
    fn gate(
        &mut self,
        rec: &mut Recording,
        phase: Phase,
        batch: &BatchInfo,
    ) -> Result<GateDecision, PlanError> {
        let assumed = GateDecision {
            verdict: Verdict::Proceed,
            by: DecidedBy::BuiltIn,
        };
        if batch.attempt > 0 || (phase == Phase::AfterBatch && !self.options.ask_after_batch) {
            return Ok(assumed);
        }
        let summary = match phase {
            Phase::BeforeGroup => self.health.clone(),
            Phase::BeforeBatch => {
                let refs: Vec<&str> = batch.instances.iter().map(String::as_str).collect();
                HealthSummary {
                    budgets: health::budgets_covering(self.index, &refs, &self.options.drain),
                    ..self.health.clone()
                }
            }
            // The batch's nodes are replaced by empty ones: no budget covers them any more, as
            // a live run's after-batch summary has none.
            Phase::AfterBatch => {
                let done = rec.plan.batches.last().and_then(|b| b.forecast.as_ref());
                health::after_batch(&self.health, done)
            }
        };
        let ctx = match phase {
            Phase::BeforeBatch => self.ctx(rec.asking_batch()),
            Phase::BeforeGroup | Phase::AfterBatch => self.ctx(AskedAbout::Other),
        };
        let decision = decide::gate(self.hooks, &ctx, phase, batch, &summary, &mut self.warnings)?;
        let said = shadow::gate(self.hooks, &ctx, phase, batch, &summary, &decision);
        let step = GateStep::from_decision(phase, decision.clone());
        match phase {
            Phase::BeforeGroup => {
                rec.plan.gate = step;
                rec.plan.shadow.extend(said);
            }
            // Asked after the batch was recorded: it goes with that batch.
            Phase::AfterBatch => {
                if let Some(done) = rec.plan.batches.last_mut() {
                    done.after_gate = step;
                    done.shadow.extend(said);
                }
            }
            Phase::BeforeBatch => {
                rec.gate = step;
                rec.shadow.extend(said);
                rec.batch = Some(batch.clone());
            }
        }
        Ok(decision)
    }

    /// What will slow or stop the drain of `batch`, batch `number` of `group` (nothing is
    /// drained with `--cloudonly`). Pods that no node of any group could run are warned about
    /// too: no replacement helps them.
    fn forecast(&mut self, group: &str, number: usize, batch: &[String]) -> Option<Forecast> {
        if self.options.cloud_only {
            return None;
        }
        let drain = &self.options.drain;
        let mut forecast = forecast::of_batch(self.index, batch, drain).unwrap_or_default();
        let placed = self.capacity.drain(group, batch, self.index, drain);
        for nowhere in placed.nowhere {
            self.warnings.push(format!(
                "group {group} batch {number} evicts {} pod(s) that fit on no node of any group ({}), so they would stay Pending: {}",
                nowhere.pods.len(),
                nowhere.reason,
                health::listed(&nowhere.pods)
            ));
        }
        forecast.pending = placed.pending;
        (forecast != Forecast::default()).then_some(forecast)
    }

    /// The nodes of `batch` the run would likely set aside: with `drain.undrainable:
    /// Quarantine`, those holding a pod the forecast sees blocked, while the run may set more
    /// aside (beyond that it stops, as the forecast's `blocks` says).
    fn likely_set_aside(&mut self, batch: &BatchPlan) -> Vec<String> {
        let undrainable = self.options.drain.rules.undrainable;
        let Some(forecast) = batch.forecast.as_ref() else {
            return Vec::new();
        };
        let blocked: std::collections::HashSet<&str> = (forecast.blocks.iter())
            .flat_map(|b| b.pods.iter().map(String::as_str))
            .collect();
        let mut likely = Vec::new();
        for node in &batch.instances {
            let held = (self.index.pods_on(node).iter()).any(|p| blocked.contains(p.id().as_str()));
            if held && undrainable.sets_aside(self.set_aside) {
                self.set_aside += 1;
                likely.push(node.clone());
            }
        }
        likely
    }

    /// Records an action; false when the simulation gives up on the group (endless pauses).
    fn record(&mut self, rec: &mut Recording, action: Action) -> bool {
        match action {
            Action::Validate => {}
            Action::Begin { instances } => {
                if !self.options.cloud_only {
                    self.capacity.begin(&instances);
                }
            }
            Action::Surge { instances, canary } => {
                if !self.options.cloud_only {
                    self.capacity.surge(&rec.plan.group.name, &instances);
                }
                rec.plan.batches.push(BatchPlan {
                    instances,
                    canary,
                    surge: true,
                    decided_by: DecidedBy::BuiltIn,
                    size_reason: "surge: new instances come up before any is drained".into(),
                    pause: None,
                    gate: None,
                    forecast: None,
                    soak_seconds: None,
                    after_gate: None,
                    shadow: Vec::new(),
                    likely_set_aside: Vec::new(),
                    moves_runner: Vec::new(),
                    estimate: None,
                })
            }
            Action::Replace(batch) => rec.plan.batches.push(BatchPlan {
                forecast: self.forecast(
                    &rec.plan.group.name,
                    rec.plan.batches.len() + 1,
                    &batch.instances,
                ),
                soak_seconds: None,
                instances: batch.instances,
                canary: batch.canary,
                surge: false,
                decided_by: batch.decided_by,
                size_reason: batch.size_reason,
                pause: rec.pause.take(),
                gate: rec.gate.take(),
                after_gate: None,
                shadow: std::mem::take(&mut rec.shadow),
                likely_set_aside: Vec::new(),
                moves_runner: Vec::new(),
                estimate: None,
            }),
            Action::Wait(wait) if wait.then == Asked::BatchSize => {
                rec.paused += i64::from(wait.seconds);
                self.now += i64::from(wait.seconds);
                let by = wait.decided_by.clone();
                PauseStep::add_to(&mut rec.pause, wait.seconds, wait.reason, wait.decided_by);
                if rec.paused > MAX_SIMULATED_PAUSE {
                    let left = rec.plan.group.selected as usize
                        - rec
                            .plan
                            .batches
                            .iter()
                            .filter(|b| !b.surge)
                            .map(|b| b.instances.len())
                            .sum::<usize>();
                    self.warnings.push(format!(
                        "group {}: {by} kept pausing for more than 7 days; the plan stops here and {left} instance(s) stay pending",
                        rec.plan.group.name
                    ));
                    return false;
                }
            }
            // A gate's wait: shown with the verdict on its batch or group.
            Action::Wait(_) => {}
            Action::Soak { seconds, .. } => {
                self.now += i64::from(seconds);
                if let Some(done) = rec.plan.batches.last_mut() {
                    done.soak_seconds = Some(seconds);
                }
            }
        }
        true
    }

    fn aborted(&mut self, mut rec: Recording, outcome: &Outcome) -> GroupPlan {
        let Outcome::Aborted {
            phase,
            batch,
            decided_by,
            reason,
        } = outcome
        else {
            return rec.plan;
        };
        let at = match phase {
            Phase::BeforeGroup => "before the group".to_string(),
            Phase::BeforeBatch => format!("before batch {}", batch + 1),
            Phase::AfterBatch => format!("after batch {}", batch + 1),
        };
        // The batch it stopped is shown, with the verdict.
        if let (Phase::BeforeBatch, Some(at)) = (phase, rec.batch.take()) {
            rec.plan.batches.push(BatchPlan {
                forecast: self.forecast(
                    &rec.plan.group.name,
                    rec.plan.batches.len() + 1,
                    &at.instances,
                ),
                soak_seconds: None,
                instances: at.instances,
                canary: at.canary,
                surge: false,
                decided_by: rec.sized_by.clone(),
                size_reason: rec.size_reason.clone(),
                pause: rec.pause.take(),
                gate: rec.gate.take(),
                after_gate: None,
                shadow: std::mem::take(&mut rec.shadow),
                likely_set_aside: Vec::new(),
                moves_runner: Vec::new(),
                estimate: None,
            });
        }
        rec.plan.aborted = Some(format!("{decided_by} aborted {at}: {reason}"));
        rec.plan
    }
}
