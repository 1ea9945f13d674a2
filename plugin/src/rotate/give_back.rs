//! Giving back the nodes a rotation cordoned and will not replace after all: those a resumed
//! run does not choose, and those `abort --uncordon` leaves. Each is uncordoned without our
//! phase and load-balancer label (someone else's stays), and the drain's lifecycle conditions,
//! and said.

use super::{GroupRun, RotateError, Rotation};
use crate::cluster::nodes::DrainCondition;
use crate::events::Event;
use crate::plan::group_loop::GroupLoop;
use crate::plan::prepare;

impl Rotation<'_> {
    /// Uncordons `node` without our marks, and says so.
    async fn give_back(&self, node: &crate::snapshot::Node) -> Result<(), RotateError> {
        self.cluster.release(node).await?;
        self.mark_drain(&node.name, DrainCondition::Cleared).await;
        self.kernel.reporter.report(Event::Uncordoned {
            node: node.name.clone(),
        });
        Ok(())
    }

    /// Gives back the nodes of the group an earlier run cordoned and this one does not choose
    /// (a hook left them out, or they ask not to be disrupted now): uncordoned, without our
    /// phase and load-balancer label, each said. Nodes set aside or detached stay as they are.
    pub(super) async fn give_back_unchosen(
        &self,
        machine: &GroupLoop,
        selected: &crate::plan::decide::Selected,
        run: &GroupRun,
    ) -> Result<(), RotateError> {
        let candidates = machine.candidates();
        let unchosen = (candidates.iter().enumerate())
            .filter(|(i, _)| !selected.chosen.iter().any(|c| c.index == *i))
            .filter_map(|(_, c)| run.latest.nodes.iter().find(|n| n.name == c.name))
            .filter(|n| cordoned_by_a_run(n));
        for node in unchosen {
            self.warn(format!(
                "node {} of group {} was cordoned by an earlier run and is not chosen by this one: uncordoning it",
                node.name, run.name
            ));
            self.give_back(node).await?;
        }
        Ok(())
    }

    /// After `abort --uncordon`: the nodes of the chosen groups that this run (or an earlier
    /// one) cordoned for replacement and did not terminate are uncordoned, without our phase
    /// and load-balancer label (someone else's stays). Nodes set aside, and nodes detached for
    /// a surge (their replacement is up already), stay as they are.
    pub(super) async fn uncordon_left(&self) -> Result<(), RotateError> {
        let options = self.options();
        let label = prepare::group_label(self.policy, &options);
        let now = self.view.caught_up().await?;
        let left = (now.nodes.iter()).filter(|n| {
            cordoned_by_a_run(n)
                && (options.instance_groups.is_empty()
                    || (options.instance_groups).contains(&crate::plan::groups::group_of(n, label)))
        });
        for node in left {
            self.give_back(node).await?;
        }
        Ok(())
    }
}

/// Whether `node` is one a rotation cordoned for replacement and still holds (not set aside,
/// not detached for a surge): one to give back when it is not replaced after all.
fn cordoned_by_a_run(node: &crate::snapshot::Node) -> bool {
    let phase = node.annotations.get(crate::keys::PHASE).map(String::as_str);
    node.registered
        && matches!(phase, Some("cordoned" | "drained"))
        && !node.annotations.contains_key(crate::keys::DETACHED)
}
