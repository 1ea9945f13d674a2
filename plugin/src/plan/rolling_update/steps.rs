//! The step arithmetic of the simple rolling update, as legacy kubectl computed it: how far the
//! next controller may grow and the old one shrink without leaving the surge and availability
//! budgets. Pure; the planner and the executor both use it.

use crate::plan::budget::scaled;
use crate::policy::IntOrPercent;

/// The resolved budgets of one rolling update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Budgets {
    pub max_surge: i32,
    pub max_unavailable: i32,
    /// Pods that must stay available throughout.
    pub min_available: i32,
}

/// Resolves `--max-surge` (percent rounds up) and `--max-unavailable` (percent rounds down)
/// against the desired count. Both zero would never progress, so unavailable becomes 1; a
/// desired count of zero may take the old controller down at once.
pub fn budgets(
    max_surge: IntOrPercent,
    max_unavailable: IntOrPercent,
    desired: i32,
    old_replicas: i32,
) -> Budgets {
    let size = desired.max(0) as u32;
    let surge = scaled(max_surge, size, true) as i32;
    let mut unavailable = scaled(max_unavailable, size, false) as i32;
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    if desired == 0 {
        return Budgets {
            max_surge: surge,
            max_unavailable: old_replicas.max(0),
            min_available: 0,
        };
    }
    Budgets {
        max_surge: surge,
        max_unavailable: unavailable,
        min_available: (desired - unavailable).max(0),
    }
}

/// How many replicas the next controller may add now; `None` when it may not grow.
pub fn scale_up(old: i32, next: i32, desired: i32, budgets: &Budgets) -> Option<i32> {
    if next >= desired {
        return None;
    }
    let increment = if old == 0 {
        desired - next
    } else {
        (desired + budgets.max_surge) - (old + next)
    };
    let increment = increment.min(desired - next);
    (increment > 0).then_some(increment)
}

/// How many replicas the old controller may drop now, given how many of the next controller's
/// pods are available; `None` when it may not shrink.
pub fn scale_down(
    old: i32,
    next: i32,
    next_available: i32,
    desired: i32,
    budgets: &Budgets,
) -> Option<i32> {
    if old <= 0 {
        return None;
    }
    // Once the next controller is complete and fully available, the old one goes at once.
    if next == desired && next_available >= desired {
        return Some(old);
    }
    let next_unavailable = (next - next_available).max(0);
    let decrement = (old + next) - budgets.min_available - next_unavailable;
    (decrement > 0).then_some(decrement.min(old))
}

#[cfg(test)]
mod tests {
    use super::*;
    use IntOrPercent::{Int, Percent};

    /// Runs the loop assuming every new pod is available at once; returns (side, replicas).
    fn simulate(
        old: i32,
        desired: i32,
        surge: IntOrPercent,
        unavailable: IntOrPercent,
    ) -> Vec<(&'static str, i32)> {
        let b = budgets(surge, unavailable, desired, old);
        let (mut old, mut next) = (old, 0);
        let mut steps = Vec::new();
        while next != desired || old != 0 {
            if let Some(n) = scale_up(old, next, desired, &b) {
                next += n;
                steps.push(("next", next));
            }
            if let Some(n) = scale_down(old, next, next, desired, &b) {
                old -= n;
                steps.push(("old", old));
            }
            assert!(steps.len() < 100, "no progress");
        }
        steps
    }

    #[test]
    fn thirty_percent_unavailable_without_surge_takes_three_at_a_time() {
        assert_eq!(
            simulate(10, 10, Int(0), Percent(30)),
            vec![
                ("old", 7),
                ("next", 3),
                ("old", 4),
                ("next", 6),
                ("old", 1),
                ("next", 9),
                ("old", 0),
                ("next", 10)
            ]
        );
    }

    #[test]
    fn the_default_surge_of_one_adds_then_removes_one() {
        assert_eq!(
            simulate(3, 3, Int(1), Int(0)),
            vec![
                ("next", 1),
                ("old", 2),
                ("next", 2),
                ("old", 1),
                ("next", 3),
                ("old", 0)
            ]
        );
    }

    #[test]
    fn surge_and_unavailable_together_move_faster() {
        // desired 10, surge 20% (2), unavailable 10% (1): min available 9.
        assert_eq!(
            simulate(10, 10, Percent(20), Percent(10)),
            vec![
                ("next", 2),
                ("old", 7),
                ("next", 5),
                ("old", 4),
                ("next", 8),
                ("old", 1),
                ("next", 10),
                ("old", 0)
            ]
        );
    }

    #[test]
    fn percentages_round_surge_up_and_unavailable_down() {
        let b = budgets(Percent(25), Percent(25), 3, 3);
        assert_eq!((b.max_surge, b.max_unavailable, b.min_available), (1, 0, 3));
    }

    #[test]
    fn both_budgets_zero_means_one_unavailable() {
        let b = budgets(Int(0), Int(0), 4, 4);
        assert_eq!((b.max_unavailable, b.min_available), (1, 3));
        assert_eq!(simulate(2, 2, Int(0), Int(0)).len(), 4);
    }

    #[test]
    fn growing_and_shrinking_the_count() {
        // 2 old pods to 4 new ones with surge 1.
        assert_eq!(
            simulate(2, 4, Int(1), Int(0)),
            vec![("next", 3), ("old", 1), ("next", 4), ("old", 0)]
        );
        // 5 to 2 without surge, 1 unavailable.
        let steps = simulate(5, 2, Int(0), Int(1));
        assert_eq!(steps.last(), Some(&("next", 2)));
        assert!(steps.contains(&("old", 0)));
    }

    #[test]
    fn zero_desired_takes_the_old_controller_down_at_once() {
        assert_eq!(simulate(4, 0, Int(1), Int(0)), vec![("old", 0)]);
    }

    #[test]
    fn unavailable_new_pods_hold_the_scale_down() {
        let b = budgets(Int(1), Int(0), 3, 3);
        // next 1 not yet available: old may not drop below 3 - 0.
        assert_eq!(scale_down(3, 1, 0, 3, &b), None);
        assert_eq!(scale_down(3, 1, 1, 3, &b), Some(1));
    }
}
