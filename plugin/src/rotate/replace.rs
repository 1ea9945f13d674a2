//! Replacing one batch: cordon and drain its nodes, wait the post-drain delay, delete each Node
//! and terminate its instance (recorded first, so a stopped run finishes it), wait the role's
//! interval, then for the replacements to be Ready, and validate. A node whose drain cannot
//! finish stops the run, or with `drain.undrainable: Quarantine` is set aside: left cordoned with
//! its pods, not terminated, while the batch's other nodes are replaced. A node someone else
//! removes (another tool, a person) at any point of its batch is said and dropped, never a stop.

use std::io::{BufRead, Write};

use super::blocked::BlockedEvictions;
use super::records::{self, expected_key, record_of, terminating_key};
use super::timing::BatchClock;
use super::{GroupRun, Presence, RotateError, Rotation, SetAside};
use crate::cluster::drain::{Cordon, DrainError};
use crate::cluster::nodes::{Deleted, DrainCondition};
use crate::events::{Event, Reporter};
use crate::keys;
use crate::plan::Role;
use crate::plan::drain::asking_not_to_be_disrupted;
use crate::plan::estimate::Stage;
use crate::plan::group_loop::BatchStep;

impl Rotation<'_> {
    /// Replaces `batch`; returns the nodes it set aside.
    pub(super) async fn replace(
        &mut self,
        batch: &BatchStep,
        run: &mut GroupRun,
    ) -> Result<Vec<String>, RotateError> {
        let group = run.name.clone();
        let mut clock = BatchClock::start();
        // The batch's nodes as they are now (surges may have detached some since its sizing,
        // and others may have removed some).
        self.refresh(run).await?;
        let chosen = batch.instances.len();
        let batch = &self.without_gone(batch, run);
        if batch.instances.is_empty() {
            // Nothing of it is left: no batch to run, and nothing of it left to do.
            self.estimates.dropped(&group, chosen);
            return Ok(Vec::new());
        }
        // Replacements of earlier batches first: never disrupt more than the budget. Only when
        // the group lacks Ready nodes is the cluster watched for them.
        if !self.settings.plan.cloud_only {
            // A stopped run's batch may still owe its evicted pods.
            if self.judges_by_pods(&group) {
                self.wait_pods_back(&group).await?;
            }
            if self.ready_in(&run.latest, &group) < run.expected {
                self.wait_ready(&group, run.expected).await?;
            }
        }
        // kured's lock and a pause of Karpenter's own disruptions, then others' disruptions read
        // again, right before the cordons: no lock is shared with the others. A run that held
        // reads its batch again.
        let held_for_kured = self.take_kured_lock(&batch.instances, run).await?;
        self.pause_node_pool(&group).await;
        if held_for_kured {
            self.refresh(run).await?;
        }
        let batch = &match self.room_for_cordons(batch, run).await? || held_for_kured {
            true => self.without_gone(batch, run),
            false => batch.clone(),
        };
        if batch.instances.is_empty() {
            self.estimates.dropped(&group, chosen);
            self.batch_let_go(&group).await;
            return Ok(Vec::new());
        }
        if self.settings.plan.interactive && !confirm(&group, batch) {
            return Err(RotateError::Declined {
                group,
                batch: batch.index + 1,
            });
        }
        self.kernel.reporter.report(Event::BatchStarted {
            group: group.clone(),
            index: batch.index,
            nodes: batch.instances.clone(),
            canary: batch.canary,
            decided_by: batch.decided_by.to_string(),
        });
        self.batch_begins(&group, &clock);
        (self.estimates.progress).batch_started(&group, batch.index, &batch.instances);
        self.record_progress().await?;
        let move_pods = !self.settings.plan.cloud_only && run.role != Role::Bastion;
        if move_pods && self.judges_by_pods(&group) {
            self.record_owed(&group, &batch.instances).await?;
        }
        let mut set_aside = Vec::new();
        let mut gone: Vec<String> = Vec::new();
        if move_pods {
            self.tell_others(run);
            let orders = self.drain_orders(batch, run.asking_batch()).await?;
            let rules = &self.settings.drain.options.rules;
            // An instance that never registered as a node has nothing to cordon or drain.
            let cordons: Vec<(&String, Cordon)> = (batch.instances.iter())
                .filter(|node| run.registered(node))
                .map(|node| (node, run.cordon(node, rules)))
                .collect();
            // With a load-balancer drain delay, the batch's nodes are cordoned (and labelled out
            // of load balancers) first, and the delay is held once before any eviction.
            let delay = rules.load_balancer_drain_delay;
            let delayed = !delay.is_zero() && rules.exclude_from_load_balancers;
            if delayed {
                let reporter = self.kernel.reporter;
                let cordoned = futures::future::try_join_all(
                    (cordons.iter())
                        .map(|(node, c)| self.cluster.cordon(node, *c, false, reporter))
                        .map(Presence::after),
                )
                .await?;
                for ((node, _), presence) in cordons.iter().zip(cordoned) {
                    if presence == Presence::Gone {
                        self.node_gone(&group, node);
                        gone.push(node.to_string());
                    }
                }
                let reason = "load-balancer drain delay: load balancers deregister the cordoned nodes before their pods are evicted";
                clock.hold(self.kernel.hold(delay, reason.into())).await?;
            }
            let blocked = BlockedEvictions::new(self.kernel.reporter);
            let draining: Vec<&(&String, Cordon)> = (cordons.iter())
                .filter(|(n, _)| !gone.contains(n))
                .collect();
            let drains = draining.iter().map(|(node, cordon)| {
                let cordon = (!delayed).then_some(*cordon);
                let turns = orders.get(*node).map(Vec::as_slice);
                self.drain_one(node, cordon, turns, &blocked)
            });
            let drained = futures::future::join_all(drains);
            let drains = self.recording_blocks(&blocked, drained);
            let results =
                (clock.time(Stage::Drain, self.watched(&group, Stage::Drain, drains))).await?;
            for ((node, _), result) in draining.into_iter().zip(results) {
                match result {
                    Ok(Presence::Here) => {}
                    Ok(Presence::Gone) => {
                        self.node_gone(&group, node);
                        gone.push(node.to_string());
                    }
                    Err(RotateError::Drain(e))
                        if !matches!(e, DrainError::Cluster(_))
                            && rules.undrainable.sets_aside(self.set_aside.len()) =>
                    {
                        self.quarantine(node, &e).await?;
                        set_aside.push(node.to_string());
                    }
                    Err(e) => return Err(e),
                }
            }
            if !self.settings.post_drain_delay.is_zero() {
                let reason = "post-drain delay: connections to the evicted pods close";
                let delay = self.settings.post_drain_delay;
                clock.hold(self.kernel.hold(delay, reason.into())).await?;
            }
        }
        self.kernel.check_lock()?;
        let replaced = BatchStep {
            instances: (batch.instances.iter())
                .filter(|n| !set_aside.contains(n) && !gone.contains(n))
                .cloned()
                .collect(),
            ..batch.clone()
        };
        (clock.time(Stage::Replacement, self.terminate_batch(&replaced, run))).await?;
        let interval = self.interval(run.role);
        if !interval.is_zero() {
            let reason = format!("{} interval after terminating", run.role.as_str());
            clock.hold(self.kernel.hold(interval, reason)).await?;
        }
        if self.settings.plan.cloud_only {
            self.batch_let_go(&group).await;
            return Ok(set_aside);
        }
        if self.judges_by_pods(&group) {
            (clock.time(Stage::PodsBack, self.wait_pods_back(&group))).await?;
        }
        let joining = self.watched(
            &group,
            Stage::Replacement,
            self.wait_ready(&group, run.expected),
        );
        let fresh = clock.time(Stage::Replacement, joining).await?;
        (clock.time(
            Stage::Validation,
            self.validate(&fresh, &run.found_cordoned),
        ))
        .await?;
        // Done with: the nodes replaced, and those removed by someone else.
        let done = chosen - set_aside.len();
        self.batch_replaced(&group, done, clock).await;
        self.batch_let_go(&group).await;
        Ok(set_aside)
    }

    /// The batch of `group` is over: kured's lock and Karpenter's pool are let go.
    async fn batch_let_go(&self, group: &str) {
        self.release_kured_lock().await;
        self.resume_node_pool(group).await;
    }

    /// Sets aside `node`, whose drain failed with `error`: it stays cordoned with the pods it
    /// still has and is not terminated (see [`crate::cluster::Cluster::set_aside`]).
    async fn quarantine(&mut self, node: &str, error: &DrainError) -> Result<(), RotateError> {
        let now = self.view.caught_up().await?;
        let reason = error.to_string();
        if let Some(found) = now.nodes.iter().find(|n| n.name == node) {
            self.cluster
                .set_aside(found, &reason, self.kernel.reporter)
                .await?;
        }
        self.set_aside.push(SetAside {
            node: node.into(),
            reason,
        });
        Ok(())
    }

    /// Deletes each node of the batch and terminates its instance. Detached instances are not
    /// replaced: the group's expected size shrinks back by as many. Instances that never
    /// registered as nodes are: it grows by as many.
    async fn terminate_batch(
        &self,
        batch: &BatchStep,
        run: &mut GroupRun,
    ) -> Result<(), RotateError> {
        let detached = run
            .latest
            .nodes
            .iter()
            .filter(|n| {
                batch.instances.contains(&n.name) && n.annotations.contains_key(keys::DETACHED)
            })
            .count();
        let unregistered = batch
            .instances
            .iter()
            .filter(|n| !run.registered(n))
            .count();
        if detached > 0 || unregistered > 0 {
            run.expected = (run.expected + unregistered).saturating_sub(detached);
            self.lock
                .set_state(&expected_key(&run.name), Some(&run.expected.to_string()))
                .await?;
        }
        for node in &batch.instances {
            let target = records::target(&run.latest, &run.name, node);
            let key = terminating_key(&run.name);
            let _step = self.steps.begin().await;
            self.lock
                .set_state(&key, Some(&record_of(&target).to_string()))
                .await?;
            // A Node removed by someone else since its drain is said; its instance is still
            // terminated (a provider's terminate accepts one already gone).
            if run.registered(node) && self.cluster.delete_node(node).await? == Deleted::AlreadyGone
            {
                self.node_gone(&run.name, node);
            }
            self.terminate(&target, &key).await?;
        }
        Ok(())
    }

    /// Cordons (unless `cordon` is none: done already) and drains one node, recording the
    /// phase; `turns`: a `drain-order` hook's. A node removed meanwhile is [`Presence::Gone`].
    async fn drain_one(
        &self,
        node: &str,
        cordon: Option<Cordon>,
        turns: Option<&[Vec<String>]>,
        reporter: &dyn Reporter,
    ) -> Result<Presence, RotateError> {
        if let Some(cordon) = cordon {
            let cordoned = self.cluster.cordon(node, cordon, false, reporter);
            if Presence::after(cordoned).await? == Presence::Gone {
                return Ok(Presence::Gone);
            }
        }
        // The mark tells others, the drain needs nothing from it: the two go side by side.
        let marked = self.mark_drain(node, DrainCondition::Draining);
        let drained = (self.cluster).drain_ordered(node, &self.settings.drain, turns, reporter);
        match tokio::join!(marked, drained).1 {
            Ok(()) => {}
            // A pod that asks not to be disrupted, and a ladder that ends in Stop, stop the run
            // whatever --fail-on-drain-error says: both are the policy's explicit word.
            Err(e @ (DrainError::Held { .. } | DrainError::LadderEnded { .. })) => {
                return Err(e.into());
            }
            Err(e) if !self.settings.fail_on_drain_error => {
                // Never past a pod that still asks not to be disrupted, however the drain
                // failed.
                if let Some(pod) = self.asking_not_to_be_disrupted(node).await? {
                    self.warn(format!(
                        "pod {pod} on node {node} asks not to be disrupted: --fail-on-drain-error=false does not apply"
                    ));
                    return Err(e.into());
                }
                self.warn(format!("{e}; continuing (--fail-on-drain-error=false)"));
            }
            Err(e) => return Err(e.into()),
        }
        // Others are told before the run records the drain as done.
        self.mark_drain(node, DrainCondition::Drained).await;
        Ok(Presence::after(self.cluster.set_phase(node, "drained")).await?)
    }
}

impl Rotation<'_> {
    /// A pod on `node` that asks not to be disrupted, as the node is now.
    async fn asking_not_to_be_disrupted(&self, node: &str) -> Result<Option<String>, RotateError> {
        let pods = self.cluster.pods_on(node).await?;
        let options = &self.settings.drain.options;
        Ok(asking_not_to_be_disrupted(&pods, options).map(|p| p.id()))
    }
}

/// Asks the operator before a batch (`-i`). Anything but yes stops the run, resumably.
fn confirm(group: &str, batch: &BatchStep) -> bool {
    eprint!(
        "Replace batch {} of group {group} ({})? [y/N] ",
        batch.index + 1,
        batch.instances.join(", ")
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer).is_ok()
        && matches!(answer.trim(), "y" | "Y" | "yes")
}
