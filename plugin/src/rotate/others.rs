//! Other tools' disruptions (see [`crate::plan::ledger`]), counted before each batch is sized
//! and again right before its nodes are cordoned: a batch takes only what they leave of the
//! group's budget, and while they leave nothing, or are disrupting a node of the batch itself,
//! the run holds (abortable; `status` shows who holds it) and goes on once they are done.

use std::collections::HashSet;
use std::time::Duration;

use super::{GroupRun, RotateError, Rotation};
use crate::cluster::view::{Deadline, WaitError};
use crate::events::Event;
use crate::plan::group_loop::{BatchStep, Sizing};
use crate::plan::groups;
use crate::plan::ledger::Ledger;
use crate::plan::prepare;
use crate::policy::OthersDisruptions;
use crate::snapshot::Snapshot;

/// A hold on others has no deadline of its own: an abort ends it.
const NO_DEADLINE: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The time others' marks are read at (a kured lock's TTL runs out).
fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// The nodes the run found cordoned (not by itself) when a group started: reported then, never
/// counted as others' disruptions, and still failing validation as kops' would.
pub(super) fn found_cordoned(snapshot: &Snapshot) -> HashSet<String> {
    (snapshot.nodes.iter())
        .filter(|n| n.unschedulable && !n.annotations.contains_key(crate::keys::PHASE))
        .map(|n| n.name.clone())
        .collect()
}

impl Rotation<'_> {
    /// Whether the policy counts others' disruptions.
    pub(super) fn counts_others(&self) -> bool {
        self.policy.others_disruptions == OthersDisruptions::Count
    }

    /// `run`'s group's ledger in `snapshot`.
    fn ledger(&self, run: &GroupRun, snapshot: &Snapshot) -> Ledger {
        let label = prepare::group_label(self.policy, &self.settings.plan);
        let all = groups::collect(&snapshot.nodes, label);
        let nodes = all
            .iter()
            .find(|g| g.name == run.name)
            .map_or_else(Vec::new, |g| g.nodes.clone());
        Ledger::of_group(snapshot, &run.name, &nodes, &run.found_cordoned, now())
    }

    /// Tells the hooks of the questions that follow what others disrupt in `run`'s group, as
    /// the run last read it (nothing when the policy ignores them).
    pub(super) fn tell_others(&mut self, run: &GroupRun) {
        let others = match self.counts_others() {
            true => self.ledger(run, &run.latest).disruptions,
            false => Vec::new(),
        };
        self.kernel.tell_others(others);
    }

    /// `sizing` narrowed to what others leave of the budget's room (not of the batch's size: a
    /// last batch of one under a budget of two still has room beside one node of another's),
    /// holding first while they leave nothing. The budget is kept for the check before the
    /// cordons.
    pub(super) async fn room_for_batch(
        &mut self,
        sizing: &Sizing,
        run: &mut GroupRun,
    ) -> Result<Sizing, RotateError> {
        run.budget = sizing.room;
        if !self.counts_others() {
            return Ok(sizing.clone());
        }
        self.refresh(run).await?;
        let budget = sizing.room;
        let ledger = self.hold_for_others(run, |l| l.room(budget) > 0).await?;
        let room = ledger.room(budget);
        if room >= sizing.max_batch {
            return Ok(sizing.clone());
        }
        self.say_others(&ledger, room, budget);
        Ok(ledger.narrow(sizing))
    }

    /// Right before `batch`'s nodes are cordoned: holds while others and the batch together
    /// would take more than the budget, or others are disrupting a node of the batch. Returns
    /// whether it held (the cluster has moved on since the batch was read).
    pub(super) async fn room_for_cordons(
        &mut self,
        batch: &BatchStep,
        run: &mut GroupRun,
    ) -> Result<bool, RotateError> {
        if !self.counts_others() {
            return Ok(false);
        }
        let (budget, size) = (run.budget, batch.instances.len() as u32);
        let fits = |l: &Ledger| {
            l.disruptions.len() as u32 + size <= budget.max(size)
                && !batch.instances.iter().any(|n| l.disrupts(n))
        };
        if fits(&self.ledger(run, &run.latest)) {
            return Ok(false);
        }
        self.hold_for_others(run, fits).await?;
        self.refresh(run).await?;
        Ok(true)
    }

    /// Holds until `enough` holds of the group's ledger, with who holds the run recorded;
    /// returns the ledger that let it go on (at once when it already does).
    async fn hold_for_others(
        &self,
        run: &GroupRun,
        enough: impl Fn(&Ledger) -> bool,
    ) -> Result<Ledger, RotateError> {
        let now = self.ledger(run, &run.latest);
        if enough(&now) {
            return Ok(now);
        }
        let what = format!(
            "{}: the run holds until they leave room in the group's budget ({} at once)",
            now.describe(),
            run.budget
        );
        let wait = self.until_view(|snapshot| {
            let ledger = self.ledger(run, snapshot);
            if enough(&ledger) {
                Ok(ledger)
            } else {
                Err(ledger.disruptions)
            }
        });
        // Said once recorded: whoever sees the event finds the record.
        let waited = async {
            self.say_others(&now, 0, run.budget);
            wait.await
        };
        self.kernel.holding(what, None, waited).await
    }

    /// Waits until `ready` holds of the view, with no deadline of its own: a hold on others
    /// ends with them, or with an abort. A kured lock whose TTL runs out changes nothing in
    /// view, so the view is also looked at again when the next one does.
    pub(super) async fn until_view<T, P: PartialEq>(
        &self,
        mut ready: impl FnMut(&Snapshot) -> Result<T, P>,
    ) -> Result<T, RotateError> {
        loop {
            let at = now();
            let expiry = self.view.current()?.kured_next_expiry(at);
            // A second past it: the TTL has run out by the time the view is looked at.
            let wake = expiry.map(|end| Duration::from_secs((end - at + 1).unsigned_abs()));
            let waited = self
                .view
                .wait_until(Deadline::Within(wake.unwrap_or(NO_DEADLINE)), &mut ready);
            match waited.await {
                Ok(done) => return Ok(done),
                Err(WaitError::Expired(_)) if wake.is_some() => continue,
                Err(WaitError::Expired(_)) => {
                    return Err(crate::cluster::ClusterError::ViewStopped.into());
                }
                Err(WaitError::View(e)) => return Err(e.into()),
            }
        }
    }

    /// The nodes other tools are taking out, by a mark or a cordon the run did not find (not
    /// those merely NotReady), when the policy counts them: validation excuses them.
    pub(super) fn others_excused(
        &self,
        snapshot: &Snapshot,
        found_cordoned: &HashSet<String>,
    ) -> HashSet<String> {
        if !self.counts_others() {
            return HashSet::new();
        }
        let nodes: Vec<&crate::snapshot::Node> = snapshot.nodes.iter().collect();
        let ledger = Ledger::of_group(snapshot, "", &nodes, found_cordoned, now());
        (ledger.disruptions.into_iter())
            .filter(|d| d.by != crate::plan::ledger::NOT_READY)
            .map(|d| d.node)
            .collect()
    }

    /// Says what others disrupt in the group, and what it leaves the run.
    fn say_others(&self, ledger: &Ledger, room: u32, budget: u32) {
        self.kernel.reporter.report(Event::OthersDisrupting {
            group: ledger.group.clone(),
            disrupting: ledger.describe(),
            nodes: ledger.disruptions.iter().map(|d| d.node.clone()).collect(),
            room,
            budget,
        });
    }
}
