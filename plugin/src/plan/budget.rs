//! The rolling-update budget of one group: the seed's rules, settled where it is vague by what
//! kops' `resolveSettings` and group update loop do.

use crate::plan::Role;
use crate::policy::{IntOrPercent, RollingUpdate};

/// The resolved budget of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// maxSurge resolved against the group size (before capping at the selected count).
    pub max_surge: u32,
    pub max_unavailable: u32,
    /// maxSurge capped at the number of instances to update: the surges that will happen.
    pub surge: u32,
    /// How many instances may be in flight at once; 0 means the group is disabled.
    pub concurrency: u32,
}

/// Why a group's settings are refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetError {
    ControlPlaneSurge,
}

/// Everything a group's budget is resolved from but the number of instances selected, which
/// is known only once the selection hooks answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetRule {
    pub role: Role,
    pub cluster: RollingUpdate,
    pub group: RollingUpdate,
    pub size: u32,
    pub interactive: bool,
}

impl BudgetRule {
    pub fn resolve(&self, selected: u32) -> Result<Budget, BudgetError> {
        resolve(
            self.role,
            self.cluster,
            self.group,
            self.size,
            selected,
            self.interactive,
        )
    }
}

/// Resolves the budget of a group of `size` instances of which `selected` will be updated.
///
/// - Per-group fields override cluster-wide ones field by field.
/// - maxSurge % rounds up; maxUnavailable % rounds down but never below 1.
/// - maxUnavailable defaults to 1 when the resolved maxSurge is 0, else to 0.
/// - Control-plane groups cannot surge: a per-group maxSurge is an error, a cluster-wide one is
///   ignored, and if that leaves the concurrency at 0 it becomes 1.
/// - `interactive` updates one instance at a time.
pub fn resolve(
    role: Role,
    cluster: RollingUpdate,
    group: RollingUpdate,
    size: u32,
    selected: u32,
    interactive: bool,
) -> Result<Budget, BudgetError> {
    let control_plane = role == Role::ControlPlane;
    if control_plane && group.max_surge.is_some_and(|s| s != IntOrPercent::Int(0)) {
        return Err(BudgetError::ControlPlaneSurge);
    }
    let mut surge_setting = group.max_surge.or(cluster.max_surge);
    let mut ignored_surge = false;
    if control_plane && group.max_surge.is_none() {
        ignored_surge = surge_setting.is_some_and(|s| scaled(s, size, true) > 0);
        surge_setting = None;
    }
    let max_surge = surge_setting.map_or(0, |s| scaled(s, size, true));
    let unavailable_default = if max_surge == 0 { 1 } else { 0 };
    let max_unavailable = match group.max_unavailable.or(cluster.max_unavailable) {
        None => unavailable_default,
        Some(IntOrPercent::Int(n)) => n,
        Some(p @ IntOrPercent::Percent(_)) => scaled(p, size, false).max(1),
    };
    let surge = max_surge.min(selected);
    let mut concurrency = surge + max_unavailable;
    if ignored_surge && concurrency == 0 {
        concurrency = 1;
    }
    if interactive && concurrency > 0 {
        concurrency = 1;
    }
    Ok(Budget {
        max_surge,
        max_unavailable,
        surge: if interactive { surge.min(1) } else { surge },
        concurrency,
    })
}

/// A count or a percentage of `size`, rounded up or down.
pub fn scaled(value: IntOrPercent, size: u32, round_up: bool) -> u32 {
    match value {
        IntOrPercent::Int(n) => n,
        IntOrPercent::Percent(p) => {
            let product = u64::from(p) * u64::from(size);
            let v = if round_up {
                product.div_ceil(100)
            } else {
                product / 100
            };
            v as u32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use IntOrPercent::{Int, Percent};

    fn ru(surge: Option<IntOrPercent>, unavailable: Option<IntOrPercent>) -> RollingUpdate {
        RollingUpdate {
            max_surge: surge,
            max_unavailable: unavailable,
        }
    }

    /// (role, cluster-wide, per-group, size, selected) → (maxSurge, maxUnavailable, surge, concurrency)
    type Case = (
        Role,
        RollingUpdate,
        RollingUpdate,
        u32,
        u32,
        (u32, u32, u32, u32),
    );

    #[test]
    fn the_seed_budget_table() {
        let none = ru(None, None);
        let cases: &[Case] = &[
            // Nothing set: one at a time.
            (Role::Node, none, none, 6, 6, (0, 1, 0, 1)),
            // Absolute values.
            (Role::Node, ru(Some(Int(2)), None), none, 6, 6, (2, 0, 2, 2)),
            (Role::Node, ru(None, Some(Int(3))), none, 6, 6, (0, 3, 0, 3)),
            // maxSurge % rounds up: 25% of 10 = 2.5 → 3.
            (
                Role::Node,
                ru(Some(Percent(25)), None),
                none,
                10,
                10,
                (3, 0, 3, 3),
            ),
            // maxUnavailable % rounds down: 25% of 10 = 2.5 → 2.
            (
                Role::Node,
                ru(None, Some(Percent(25))),
                none,
                10,
                10,
                (0, 2, 0, 2),
            ),
            // ... but never below 1: 10% of 4 = 0.4 → 1; even 0% → 1.
            (
                Role::Node,
                ru(None, Some(Percent(10))),
                none,
                4,
                4,
                (0, 1, 0, 1),
            ),
            (
                Role::Node,
                ru(None, Some(Percent(0))),
                none,
                4,
                4,
                (0, 1, 0, 1),
            ),
            // An absolute 0 with surge stays 0.
            (
                Role::Node,
                ru(Some(Int(1)), Some(Int(0))),
                none,
                4,
                4,
                (1, 0, 1, 1),
            ),
            // maxUnavailable defaults to 0 when maxSurge > 0, to 1 when it resolves to 0.
            (
                Role::Node,
                ru(Some(Percent(10)), None),
                none,
                5,
                5,
                (1, 0, 1, 1),
            ),
            (
                Role::Node,
                ru(Some(Percent(0)), None),
                none,
                5,
                5,
                (0, 1, 0, 1),
            ),
            // Percentages are of the whole group; surge is capped at the selected count.
            (
                Role::Node,
                ru(Some(Percent(50)), None),
                none,
                10,
                2,
                (5, 0, 2, 2),
            ),
            (
                Role::Node,
                ru(Some(Int(4)), Some(Int(1))),
                none,
                10,
                3,
                (4, 1, 3, 4),
            ),
            // Per-group values override the cluster-wide ones field by field.
            (
                Role::Node,
                ru(Some(Int(2)), Some(Int(1))),
                ru(None, Some(Int(3))),
                6,
                6,
                (2, 3, 2, 5),
            ),
            (
                Role::Node,
                ru(Some(Int(2)), Some(Int(1))),
                ru(Some(Int(0)), None),
                6,
                6,
                (0, 1, 0, 1),
            ),
            // Both zero: disabled.
            (
                Role::Node,
                ru(Some(Int(0)), Some(Int(0))),
                none,
                6,
                6,
                (0, 0, 0, 0),
            ),
            (
                Role::Node,
                none,
                ru(Some(Int(0)), Some(Int(0))),
                6,
                6,
                (0, 0, 0, 0),
            ),
            // Control plane ignores a cluster-wide surge...
            (
                Role::ControlPlane,
                ru(Some(Int(2)), None),
                none,
                3,
                3,
                (0, 1, 0, 1),
            ),
            // ... and a concurrency left at 0 by that becomes 1.
            (
                Role::ControlPlane,
                ru(Some(Int(2)), Some(Int(0))),
                none,
                3,
                3,
                (0, 0, 0, 1),
            ),
            // Without an ignored surge, both zero still disables the control plane.
            (
                Role::ControlPlane,
                ru(Some(Int(0)), Some(Int(0))),
                none,
                3,
                3,
                (0, 0, 0, 0),
            ),
            // A per-group maxSurge of 0 on the control plane is allowed.
            (
                Role::ControlPlane,
                none,
                ru(Some(Int(0)), Some(Int(2))),
                3,
                3,
                (0, 2, 0, 2),
            ),
        ];
        for (i, (role, cluster, group, size, selected, expected)) in cases.iter().enumerate() {
            let b = resolve(*role, *cluster, *group, *size, *selected, false).unwrap();
            assert_eq!(
                (b.max_surge, b.max_unavailable, b.surge, b.concurrency),
                *expected,
                "case {i}: {role:?} {cluster:?} {group:?} size {size} selected {selected}"
            );
        }
    }

    #[test]
    fn control_plane_group_surge_is_an_error() {
        let r = resolve(
            Role::ControlPlane,
            ru(None, None),
            ru(Some(Int(1)), None),
            3,
            3,
            false,
        );
        assert_eq!(r, Err(BudgetError::ControlPlaneSurge));
        let r = resolve(
            Role::ControlPlane,
            ru(None, None),
            ru(Some(Percent(50)), None),
            3,
            3,
            false,
        );
        assert_eq!(r, Err(BudgetError::ControlPlaneSurge));
    }

    #[test]
    fn interactive_updates_one_at_a_time() {
        let b = resolve(
            Role::Node,
            ru(Some(Int(3)), Some(Int(2))),
            ru(None, None),
            9,
            9,
            true,
        )
        .unwrap();
        assert_eq!((b.surge, b.concurrency), (1, 1));
        let b = resolve(
            Role::Node,
            ru(Some(Int(0)), Some(Int(0))),
            ru(None, None),
            9,
            9,
            true,
        )
        .unwrap();
        assert_eq!(
            b.concurrency, 0,
            "interactive does not enable a disabled group"
        );
    }
}
