//! The `drain-order` point: the turns in which a node's drain evicts its pods, as the first hook
//! that answers says, checked against the pods the drain evicts.

use std::collections::HashSet;

use super::{HookFailed, decides, on_fault};
use crate::plan::hook::{CallContext, DecidedBy, DrainOrderAnswer, Hook, HookFault};
use crate::policy::HookPoint;
use crate::snapshot::Pod;

/// How a node's evictions are ordered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainOrdered {
    /// Turns of `namespace/name`; none: the policy's `drain.order`.
    pub turns: Option<Vec<Vec<String>>>,
    pub by: DecidedBy,
}

impl DrainOrdered {
    /// The decision in words: `turns web-1, web-2 | db-0`, or `policy order`.
    pub fn describe(&self) -> String {
        describe(self.turns.as_deref())
    }
}

/// Turns in words: `turns web-1, web-2 | db-0`, or `policy order` for none.
pub fn describe(turns: Option<&[Vec<String>]>) -> String {
    match turns {
        None => "policy order".into(),
        Some([]) => "no turns (policy order)".into(),
        Some(turns) => {
            let turns: Vec<String> = turns.iter().map(|t| t.join(", ")).collect();
            format!("turns {}", turns.join(" | "))
        }
    }
}

/// Asks the hooks serving `drain-order`, in policy order, about the drain of `node`: the first
/// that does not defer decides, and the rest are not asked.
pub fn drain_order(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    node: &str,
    pods: &[Pod],
    warnings: &mut Vec<String>,
) -> Result<DrainOrdered, HookFailed> {
    for hook in hooks.iter_mut() {
        if !decides(hook.as_ref(), HookPoint::DrainOrder) {
            continue;
        }
        match ask(hook.as_mut(), ctx, node, pods) {
            Ok(None) => {}
            Ok(Some(turns)) => {
                return Ok(DrainOrdered {
                    turns: Some(turns),
                    by: DecidedBy::Hook(hook.name().to_string()),
                });
            }
            Err(fault) => on_fault(hook.as_ref(), HookPoint::DrainOrder, fault, warnings)?,
        }
    }
    Ok(DrainOrdered {
        turns: None,
        by: DecidedBy::BuiltIn,
    })
}

/// One hook's turns for the drain of `node`, checked: `None` when it defers.
pub fn ask(
    hook: &mut dyn Hook,
    ctx: &CallContext,
    node: &str,
    pods: &[Pod],
) -> Result<Option<Vec<Vec<String>>>, HookFault> {
    hook.drain_order(ctx, node, pods)
        .and_then(|answer| checked(answer, pods))
}

/// A hook's turns, if valid: every name one of `pods`, each at most once; empty turns dropped.
fn checked(answer: DrainOrderAnswer, pods: &[Pod]) -> Result<Option<Vec<Vec<String>>>, HookFault> {
    let DrainOrderAnswer::Turns(turns) = answer else {
        return Ok(None);
    };
    let known: HashSet<String> = pods.iter().map(Pod::id).collect();
    let mut seen = HashSet::new();
    for name in turns.iter().flatten() {
        if !known.contains(name) {
            return Err(HookFault::InvalidAnswer(format!(
                "drain order names {name:?}, which is not one of the pods the drain evicts"
            )));
        }
        if !seen.insert(name.as_str()) {
            return Err(HookFault::InvalidAnswer(format!(
                "drain order names {name:?} twice"
            )));
        }
    }
    Ok(Some(turns.into_iter().filter(|t| !t.is_empty()).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::decide::tests::{FakeHook, ctx};

    fn pod(name: &str) -> Pod {
        let json = format!(
            r#"{{"kind": "List", "items": [{{"kind": "Pod", "apiVersion": "v1", "metadata": {{"name": "{name}", "namespace": "ns"}}, "spec": {{"nodeName": "n1"}}}}]}}"#
        );
        crate::snapshot::Snapshot::from_json(json.as_bytes())
            .unwrap()
            .pods
            .remove(0)
            .as_ref()
            .clone()
    }

    #[test]
    fn the_first_hook_that_answers_decides_and_bad_answers_are_faults() {
        let pods = [pod("a"), pod("b"), pod("c")];
        let mut quiet = FakeHook::new("quiet", &[HookPoint::DrainOrder]);
        quiet.drain_order = Some(DrainOrderAnswer::Defer);
        let mut orders = FakeHook::new("orders", &[HookPoint::DrainOrder]);
        orders.drain_order = Some(DrainOrderAnswer::Turns(vec![
            vec!["ns/c".into()],
            vec![],
            vec!["ns/a".into()],
        ]));
        let mut never = FakeHook::new("never", &[HookPoint::DrainOrder]);
        never.drain_order = Some(DrainOrderAnswer::Turns(vec![vec!["ns/b".into()]]));
        let mut hooks: Vec<Box<dyn Hook>> =
            vec![Box::new(quiet), Box::new(orders), Box::new(never)];
        let mut warnings = Vec::new();
        let ordered = drain_order(&mut hooks, &ctx(), "n1", &pods, &mut warnings).unwrap();
        assert_eq!(
            ordered.turns,
            Some(vec![vec!["ns/c".to_string()], vec!["ns/a".to_string()]])
        );
        assert_eq!(ordered.by, DecidedBy::Hook("orders".into()));
        assert_eq!(ordered.describe(), "turns ns/c | ns/a");

        for bad in [
            vec![vec!["ns/x".to_string()]],
            vec![vec!["ns/a".into(), "ns/a".into()]],
        ] {
            let mut hook = FakeHook::new("bad", &[HookPoint::DrainOrder]);
            hook.drain_order = Some(DrainOrderAnswer::Turns(bad));
            let mut hooks: Vec<Box<dyn Hook>> = vec![Box::new(hook)];
            let failed = drain_order(&mut hooks, &ctx(), "n1", &pods, &mut warnings).unwrap_err();
            assert!(
                matches!(failed.fault, HookFault::InvalidAnswer(_)),
                "{failed}"
            );
        }
        let mut none: Vec<Box<dyn Hook>> = Vec::new();
        let built_in = drain_order(&mut none, &ctx(), "n1", &pods, &mut warnings).unwrap();
        assert_eq!(built_in.turns, None);
        assert_eq!(built_in.describe(), "policy order");
    }
}
