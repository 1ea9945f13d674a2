//! The node rotation executor: kops' rolling update, driven by the same step machine the
//! planner drives ([`crate::plan::group_loop`]), with real effects.
//!
//! The machine says what to ask or do next; this module answers each question once, when it is
//! due (from the run's live view of the cluster, caught up with the run's own last change, so
//! hooks see it as it is), and carries out each action through `cluster` and `provider`. It owns
//! the run's effects and their crash safety, not the order of steps: that is the machine's.
//!
//! Every state question is read from the view ([`crate::cluster::view`]): the snapshot a hook
//! question or a group's start reads, validation, replacements Ready, evicted pods Ready again.
//! The server is asked only what needs its word: the Lease, evictions and their waits, writes.
//!
//! Progress lives in the cluster itself: replaced instances are up to date, instances it
//! cordoned carry the phase annotation, detached ones the detached annotation, and the lock
//! keeps each group's expected size and the provider calls in progress ([`records`]). Running
//! the same command again therefore continues where a crashed or interrupted run stopped,
//! without draining, surging or terminating anything twice.

mod blocked;
mod controls;
mod decisions;
mod error;
mod give_back;
mod gone;
mod kured;
mod marks;
mod node_pools;
mod others;
mod pods_back;
pub mod progress;
mod ready;
mod records;
mod remaining;
mod replace;
mod surge;
mod timing;

pub use error::{RotateError, SetAside};
pub use remaining::RunEstimates;
pub use timing::RunClock;

use gone::Presence;

use std::sync::Arc;
use std::time::Duration;

use crate::cluster::Cluster;
use crate::cluster::drain::{Cordon, DrainSettings};
use crate::cluster::lock::LockGuard;
use crate::cluster::validate::ValidationSettings;
use crate::cluster::view::LiveView;
use crate::events::Event;
use crate::kernel::Kernel;
use crate::keys;
use crate::plan::decide;
use crate::plan::group_loop::{Action, GroupLoop, Input, Outcome, Question, Step};
use crate::plan::health::{self, Index};
use crate::plan::hook::Phase;
use crate::plan::prepare::{self, Prepared};
use crate::plan::{PlanError, PlanOptions, Role};
use crate::policy::Policy;
use crate::provider::Providers;
use crate::snapshot::Snapshot;

/// Everything that shapes a rotation besides the policy.
#[derive(Debug, Clone)]
pub struct RotateSettings {
    pub plan: PlanOptions,
    pub drain: DrainSettings,
    pub validation: ValidationSettings,
    pub post_drain_delay: Duration,
    /// How long a batch's replacements may take to be Ready.
    pub replacement_timeout: Duration,
    pub bastion_interval: Duration,
    pub master_interval: Duration,
    pub node_interval: Duration,
    pub taint_key: String,
    pub fail_on_drain_error: bool,
    pub fail_on_validate_error: bool,
}

/// A rotation in progress.
pub struct Rotation<'a> {
    pub cluster: &'a Cluster,
    /// The run's watched view of the cluster, which every state question reads.
    pub view: &'a LiveView,
    pub policy: &'a Policy,
    pub settings: &'a RotateSettings,
    /// Hooks, holds, pause and abort, the lock and the reporter (controls on the Lease).
    pub kernel: Kernel<'a>,
    pub providers: &'a Providers,
    /// The run's lock, which also keeps its records (see [`records`]).
    pub lock: &'a LockGuard,
    pub steps: &'a Steps,
    /// The nodes this run set aside so far.
    pub set_aside: Vec<SetAside>,
    /// The run's own times, for the cluster's history.
    pub clock: RunClock,
    /// What the run estimates what is left from, and what is left.
    pub estimates: RunEstimates,
    /// The server refused a drain condition once: said then, not again.
    pub marks_refused: std::sync::atomic::AtomicBool,
    /// kured's lock could not be taken or let go once: said then, not again.
    pub kured_refused: std::sync::atomic::AtomicBool,
    /// The Karpenter NodePools whose disruptions the run paused, and whether a pause or its
    /// end was refused once (said then, not again).
    pub paused_pools: node_pools::PausedPools,
}

/// The steps Ctrl-C must not cut in half: a termination or a surge, from its record to the
/// record's removal, so that an interrupted run never leaves a provider call for the next one
/// to repeat. A step holds a read guard; the command stops once it gets the write guard.
#[derive(Debug, Default)]
pub struct Steps {
    running: tokio::sync::RwLock<()>,
}

impl Steps {
    async fn begin(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.running.read().await
    }

    /// Resolves when no step is running, and keeps new ones from starting.
    pub async fn settled(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.running.write().await
    }

    /// Whether a step is running now.
    pub fn busy(&self) -> bool {
        self.running.try_write().is_err()
    }
}

/// One group's rotation as the executor sees it between steps.
struct GroupRun {
    name: String,
    role: Role,
    /// The cluster as last read: when the group started, before hooks are asked about a batch,
    /// and when a batch is replaced.
    latest: Arc<Snapshot>,
    /// The expected size a stopped run recorded for the group, read when it started.
    recorded: Option<usize>,
    /// How many Ready nodes the group must have between batches (see [`records`]).
    expected: usize,
    begun: bool,
    /// The nodes the run found cordoned when the group started: not others' disruptions.
    found_cordoned: std::collections::HashSet<String>,
    /// The most the next batch may take before others' disruptions are counted (its sizing's).
    budget: u32,
}

impl GroupRun {
    /// How `node` is cordoned under `rules`, as last read.
    fn cordon(&self, node: &str, rules: &crate::policy::drain::DrainPolicy) -> Cordon {
        Cordon::of(self.latest.nodes.iter().find(|n| n.name == node), rules)
    }

    /// Whether `node` of the group is a Node object (not a Machine that never registered one),
    /// as last read.
    fn registered(&self, node: &str) -> bool {
        self.latest
            .nodes
            .iter()
            .find(|n| n.name == node)
            .is_none_or(|n| n.registered)
    }
}

impl Rotation<'_> {
    /// Plan options for a read of the cluster now.
    fn options(&self) -> PlanOptions {
        let mut options = self.settings.plan.clone();
        options.now = jiff::Timestamp::now().as_second();
        options.staleness.now = options.now;
        options
    }

    /// Whether `group`'s replacements are judged by its evicted pods (see [`pods_back`]).
    fn judges_by_pods(&self, group: &str) -> bool {
        self.providers
            .for_group(group)
            .is_ok_and(|p| p.judges_by_pods())
    }

    fn warn(&self, message: String) {
        self.kernel.warn(message);
    }

    /// Rotates every group the options choose, in order. Stopped by `abort --uncordon`, it
    /// uncordons what it leaves cordoned first.
    /// However it ends, the marks it put for the cluster-autoscaler, its hold on kured's lock
    /// and its pause of Karpenter's NodePools go.
    pub async fn run(&mut self) -> Result<(), RotateError> {
        let result = match self.rotate_all().await {
            Err(RotateError::Stopped { request, at }) if request.uncordon => self
                .uncordon_left()
                .await
                .and(Err(RotateError::Stopped { request, at })),
            other => other,
        };
        self.release_scale_down_marks().await;
        self.release_kured_lock().await;
        self.resume_node_pools().await;
        result
    }

    async fn rotate_all(&mut self) -> Result<(), RotateError> {
        // The chosen groups' pods are listed while the Lease is read. A chosen group with no
        // nodes (one an earlier run emptied, or no group at all) is told apart below, after
        // which the groups are followed again.
        match self.follow_chosen_groups(&self.options()) {
            Err(RotateError::Plan(PlanError::UnknownGroup { .. })) => {}
            other => other?,
        }
        let left = self.cluster.lock_status().await?;
        // What held an earlier run that stopped is not what holds this one.
        if left
            .as_ref()
            .is_some_and(|l| l.state.contains_key(crate::keys::HOLDING))
        {
            self.kernel.record_holding(None).await?;
        }
        self.finish_stopped_steps(left).await?;
        let mut options = self.options();
        // A chosen group an earlier run emptied is not unknown: it is only left to wait for.
        let emptied = self.emptied_groups(&*self.view.caught_up().await?).await?;
        if !emptied.is_empty() {
            options.instance_groups.retain(|g| !emptied.contains(g));
            if options.instance_groups.is_empty() {
                return self.finish_left_groups().await;
            }
        }
        self.follow_chosen_groups(&options)?;
        let snapshot = self.view.caught_up().await?;
        let index = Index::new(&snapshot);
        let survey = prepare::survey(&snapshot, &index, self.policy, &options)?;
        for warning in decide::left_out_warnings(self.kernel.hooks)
            .iter()
            .chain(&survey.warnings)
        {
            self.warn(warning.clone());
        }
        let mut groups = Vec::new();
        for group in &survey.groups {
            match prepare::prepare_group(&index, self.policy, &options, group)? {
                // A disabled group is not an error, but it is said: its outdated instances stay.
                Prepared::Disabled(plan) if plan.group.selected > 0 => self.warn(format!(
                    "group {}: {}; its {} out-of-date instances are left as they are",
                    plan.group.name,
                    plan.note.as_deref().unwrap_or("rolling update disabled"),
                    plan.group.selected
                )),
                Prepared::Disabled(_) => {}
                Prepared::Ready(start) => {
                    self.estimates.plan_group(&group.name, group.role, &start);
                    let surges = start.info.max_surge > 0 && !start.cloud_only;
                    groups.push((group.name.clone(), group.role, surges));
                }
            }
        }
        // Every group has a provider, able to surge where the group surges, before the first
        // is touched.
        for (group, _, surges) in &groups {
            let provider = self
                .providers
                .for_group(group)
                .map_err(RotateError::NoProvider)?;
            if let Some(refusal) = provider.surge_refusal(group).filter(|_| *surges) {
                return Err(RotateError::CannotSurge(refusal));
            }
        }
        self.say_estimate().await;
        for (group, role, _) in groups {
            self.rotate_group(group, role).await?;
        }
        self.finish_left_groups().await?;
        self.run_done().await;
        match self.set_aside.is_empty() {
            true => Ok(()),
            false => Err(RotateError::SetAside {
                nodes: self.set_aside.clone(),
                stopped: None,
            }),
        }
    }

    /// Brings into view the pods of the nodes of the groups `options` choose, as they are now
    /// and as replacements join them: what the run drains and what its hooks are shown.
    fn follow_chosen_groups(&self, options: &PlanOptions) -> Result<(), RotateError> {
        let snapshot = self.view.current()?;
        let index = Index::new(&snapshot);
        let survey = prepare::survey(&snapshot, &index, self.policy, options)?;
        let chosen: std::collections::HashSet<String> =
            survey.groups.iter().map(|g| g.name.clone()).collect();
        let label = prepare::group_label(self.policy, options).map(str::to_string);
        self.view.follow(move |node| {
            chosen.contains(&crate::plan::groups::group_of(node, label.as_deref()))
        });
        Ok(())
    }

    /// Reads the cluster, starts the group's loop from it and drives the loop to its end.
    async fn rotate_group(&mut self, name: String, role: Role) -> Result<(), RotateError> {
        // A killed run may have left the group's NodePool paused.
        self.resume_node_pool(&name).await;
        let recorded = self
            .lock
            .state(&records::expected_key(&name))
            .await?
            .and_then(|v| v.parse::<usize>().ok());
        self.await_left_replacements(&name, recorded).await?;
        let snapshot = self.view.caught_up().await?;
        let mut options = self.options();
        options.instance_groups = vec![name.clone()];
        let (start, found_cordoned) = {
            let index = Index::new(&snapshot);
            let survey = match prepare::survey(&snapshot, &index, self.policy, &options) {
                // Every node of the group is gone: nothing is left to rotate in it.
                Err(PlanError::UnknownGroup { .. }) => return Ok(()),
                other => other?,
            };
            match prepare::prepare_group(&index, self.policy, &options, &survey.groups[0])? {
                Prepared::Ready(start) => (start, others::found_cordoned(&snapshot)),
                Prepared::Disabled(_) => return Ok(()),
            }
        };
        let mut machine = GroupLoop::new(start);
        let mut run = GroupRun {
            name,
            role,
            latest: snapshot,
            recorded,
            expected: 0,
            begun: false,
            found_cordoned,
            budget: 0,
        };
        let mut input = Input::Start;
        loop {
            self.kernel.check_lock()?;
            let selecting = matches!(input, Input::Selected(_));
            let step = machine.step(input);
            if selecting {
                self.estimates.chose(&run.name, &machine);
            }
            // Every step boundary is a safe point: no action is ever cut in half.
            if !matches!(step, Step::Done(_)) {
                let at = controls::safe_point(&step, &run.name);
                self.kernel.checkpoint(&at).await?;
            }
            input = match step {
                Step::Ask(Question::Select) => {
                    self.tell_others(&run);
                    let selected = self.select(&machine)?;
                    self.give_back_unchosen(&machine, &selected, &run).await?;
                    Input::Selected(selected)
                }
                Step::Ask(Question::BatchSize(sizing)) => {
                    let sizing = self.room_for_batch(&sizing, &mut run).await?;
                    Input::Sized(self.size(&machine, &sizing, &mut run).await?)
                }
                Step::Ask(Question::Gate { phase, batch }) => {
                    Input::Judged(self.judge(phase, &batch, &mut run).await?)
                }
                Step::Do(Action::Replace(batch)) => Input::Replaced {
                    set_aside: self.replace(&batch, &mut run).await?,
                },
                Step::Do(action) => {
                    self.carry_out(action, &mut run).await?;
                    Input::Done
                }
                Step::Done(Outcome::Finished) => break,
                Step::Done(Outcome::NoRoomLeft {
                    set_aside,
                    concurrency,
                }) => {
                    return Err(RotateError::SetAside {
                        nodes: self.set_aside.clone(),
                        stopped: Some(format!(
                            "stopped before the next batch of group {}: its {} node(s) set aside take the whole budget ({concurrency} at once)",
                            run.name,
                            set_aside.len()
                        )),
                    });
                }
                Step::Done(Outcome::Aborted {
                    phase,
                    batch,
                    decided_by,
                    reason,
                }) => {
                    let at = match phase {
                        Phase::BeforeGroup => format!("before group {}", run.name),
                        Phase::BeforeBatch => {
                            format!("before batch {} of group {}", batch + 1, run.name)
                        }
                        Phase::AfterBatch => {
                            format!("after batch {} of group {}", batch + 1, run.name)
                        }
                    };
                    return Err(RotateError::Aborted {
                        by: decided_by.to_string(),
                        at,
                        reason,
                    });
                }
            };
        }
        if run.begun {
            self.finish_group(&run).await?;
        }
        Ok(())
    }

    async fn carry_out(&mut self, action: Action, run: &mut GroupRun) -> Result<(), RotateError> {
        match action {
            Action::Validate => {
                // After a soak the cluster is read again: the replacements are part of it.
                self.refresh(run).await?;
                self.validate(&run.latest, &run.found_cordoned).await
            }
            Action::Soak { batch, seconds } => {
                let reason = format!(
                    "soak after batch {} of group {}, then the cluster is validated again",
                    batch + 1,
                    run.name
                );
                let soak = Duration::from_secs(u64::from(seconds));
                Ok(self.kernel.hold(soak, reason).await?)
            }
            Action::Begin { instances } => self.begin(&instances, run).await,
            Action::Surge { instances, canary } => self.surge(&instances, canary, run).await,
            Action::Replace(batch) => self.replace(&batch, run).await.map(|_| ()),
            Action::Wait(wait) => {
                let reason = format!("{} [{}]", wait.reason, wait.decided_by);
                let held = Duration::from_secs(u64::from(wait.seconds));
                Ok(self.kernel.hold(held, reason).await?)
            }
        }
    }

    /// Reads the cluster again from the view, once it shows the run's own last change.
    async fn refresh(&self, run: &mut GroupRun) -> Result<(), RotateError> {
        run.latest = self.view.caught_up().await?;
        Ok(())
    }

    /// The group starts: its expected size is recorded (or resumed), its instances are
    /// announced and tainted so that evicted pods prefer other nodes.
    async fn begin(&mut self, instances: &[String], run: &mut GroupRun) -> Result<(), RotateError> {
        // The provider's commands must fit every node before any is touched.
        for node in instances {
            let target = records::target(&run.latest, &run.name, node);
            self.providers
                .for_group(&run.name)
                .and_then(|p| p.check(&target))
                .map_err(|source| RotateError::Provider {
                    node: node.clone(),
                    source,
                })?;
        }
        self.kernel.reporter.report(Event::GroupStarted {
            group: run.name.clone(),
            instances: instances.to_vec(),
        });
        let tainted = !self.settings.plan.cloud_only && run.role != Role::Bastion;
        if tainted {
            let index = Index::new(&run.latest);
            let names: Vec<&str> = instances.iter().map(String::as_str).collect();
            for message in health::drain_blockers(&index, &names, &self.settings.plan.drain) {
                self.warn(message);
            }
        }
        let group = run.name.as_str();
        let this = &*self;
        // Each node is kept from the cluster-autoscaler's scale-down until the run ends, then
        // tainted: one after the other, as both write the Node (the taint is a compare-and-swap
        // that a concurrent write would send back); the nodes side by side.
        let marked_and_tainted = (instances.iter())
            .filter_map(|n| (run.latest.nodes.iter()).find(|x| &x.name == n && x.registered))
            .map(|node| async move {
                let mut presence = this.keep_from_scale_down(node).await?;
                if tainted && presence == Presence::Here {
                    let tainting = this.cluster.taint_prefer_no_schedule(
                        &node.name,
                        &this.settings.taint_key,
                        false,
                        this.kernel.reporter,
                    );
                    presence = Presence::after(tainting).await?;
                }
                // Removed since it was read: said, and its batch goes on without it.
                if presence == Presence::Gone {
                    this.node_gone(group, &node.name);
                }
                Ok::<_, RotateError>(())
            });
        // A taint or a mark needs no record first: each only steers others away, and a run
        // stopped before the record counts the group's nodes again, all of them still there
        // (its marks are removed by the next run).
        let (expected, _) = tokio::try_join!(
            self.expected_size(run),
            futures::future::try_join_all(marked_and_tainted)
        )?;
        run.expected = expected;
        run.begun = true;
        Ok(())
    }

    /// Waits for the replacements a stopped run left joining the group (its recorded expected
    /// size not Ready yet), before the group is read: until then a replacement still booting,
    /// a Machine whose Node has not registered yet, would be read as an instance that never
    /// registered, out of date, and replaced again.
    async fn await_left_replacements(
        &self,
        group: &str,
        recorded: Option<usize>,
    ) -> Result<(), RotateError> {
        let Some(expected) = recorded.filter(|_| !self.settings.plan.cloud_only) else {
            return Ok(());
        };
        let nodes = self.view.caught_up().await?;
        if self.ready_in(&nodes, group) < expected {
            self.wait_ready(group, expected).await?;
        }
        Ok(())
    }

    /// Waits for the group's last replacements, clears its record and reports it done.
    async fn finish_group(&mut self, run: &GroupRun) -> Result<(), RotateError> {
        if !self.settings.plan.cloud_only {
            if self.judges_by_pods(&run.name) {
                self.wait_pods_back(&run.name).await?;
            }
            self.wait_ready(&run.name, run.expected).await?;
        }
        // The group's record goes, and its progress says it is done, in one write.
        self.estimates.progress.group_done(&run.name);
        let (key, progress) = (
            records::expected_key(&run.name),
            self.estimates.progress.record(),
        );
        let states = [
            (key.as_str(), None),
            (keys::PROGRESS, Some(progress.as_str())),
        ];
        self.lock.set_states(&states).await?;
        self.kernel.reporter.report(Event::GroupDone {
            group: run.name.clone(),
        });
        Ok(())
    }
}
