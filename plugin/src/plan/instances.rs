//! The instance list of a group's plan: the chosen instances in update order, then the others
//! with why they stay.

use super::InstancePlan;
use super::group_loop::GroupLoop;
use super::groups;
use super::hook::DecidedBy;

/// Every instance of the group: the chosen ones in update order, then the others. Whoever
/// decided the selection also decided who was left out.
pub(super) fn instance_list(group: &GroupLoop) -> Vec<InstancePlan> {
    let candidates = group.candidates();
    let Some(selected) = group.selected() else {
        return Vec::new();
    };
    let mut out: Vec<InstancePlan> = selected
        .chosen
        .iter()
        .map(|c| {
            let cand = &candidates[c.index];
            InstancePlan {
                name: cand.name.clone(),
                zone: cand.zone.clone(),
                update: true,
                reason: c.reason.clone(),
                decided_by: c.by.clone(),
                pods: cand.pods,
            }
        })
        .collect();
    let selected_by = &selected.by;
    for (i, cand) in candidates.iter().enumerate() {
        if selected.chosen.iter().any(|c| c.index == i) {
            continue;
        }
        let (reason, by) = match (&cand.reason, selected_by) {
            (Some(r), DecidedBy::Hook(_)) => (
                format!("left out by {selected_by} (built-in: {r})"),
                selected_by.clone(),
            ),
            (None, _) if !cand.up_to_date => (
                groups::left_alone(&cand.annotations).unwrap_or_else(|| "left alone".into()),
                DecidedBy::BuiltIn,
            ),
            (None, DecidedBy::Hook(_)) => ("up to date".to_string(), selected_by.clone()),
            _ => ("up to date".to_string(), DecidedBy::BuiltIn),
        };
        out.push(InstancePlan {
            name: cand.name.clone(),
            zone: cand.zone.clone(),
            update: false,
            reason,
            decided_by: by,
            pods: cand.pods,
        });
    }
    out
}
