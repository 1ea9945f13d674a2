//! The rotation's safe points: between two steps of the machine (so never inside a drain's
//! evictions or a termination), named as a pause or an abort reports them. The kernel honours
//! the operator's requests there ([`crate::kernel`]).

use crate::plan::group_loop::{Action, Question, Step};
use crate::plan::hook::Phase;

/// Where the run stands before `step` of group `group`, as a pause or an abort reports it.
pub(super) fn safe_point(step: &Step, group: &str) -> String {
    let batch = |index: u32| format!("before batch {} of group {group}", index + 1);
    match step {
        Step::Ask(Question::Select)
        | Step::Do(Action::Begin { .. })
        | Step::Ask(Question::Gate {
            phase: Phase::BeforeGroup,
            ..
        }) => format!("before group {group} starts"),
        Step::Ask(Question::BatchSize(sizing)) => batch(sizing.batches_done),
        Step::Ask(Question::Gate {
            phase: Phase::BeforeBatch,
            batch: info,
        }) => batch(info.index),
        Step::Do(Action::Replace(step)) => batch(step.index),
        Step::Ask(Question::Gate {
            phase: Phase::AfterBatch,
            batch: info,
        }) => format!("after batch {} of group {group}", info.index + 1),
        Step::Do(Action::Soak { batch, .. }) => {
            format!(
                "after batch {} of group {group}, before its soak",
                batch + 1
            )
        }
        Step::Do(Action::Surge { .. }) => format!("before group {group} surges"),
        Step::Do(Action::Validate) => format!("in group {group}, before validating the cluster"),
        Step::Do(Action::Wait(wait)) => {
            format!("in group {group}, before a hold ({})", wait.reason)
        }
        Step::Done(_) => format!("at the end of group {group}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::group_loop::BatchStep;
    use crate::plan::hook::DecidedBy;

    #[test]
    fn a_safe_point_names_the_batch_ahead() {
        let replace = Step::Do(Action::Replace(BatchStep {
            index: 1,
            instances: vec!["n2".into()],
            canary: false,
            decided_by: DecidedBy::BuiltIn,
            size_reason: String::new(),
        }));
        assert_eq!(
            safe_point(&replace, "nodes"),
            "before batch 2 of group nodes"
        );
        let soak = Step::Do(Action::Soak {
            batch: 0,
            seconds: 60,
        });
        assert_eq!(
            safe_point(&soak, "nodes"),
            "after batch 1 of group nodes, before its soak"
        );
        assert_eq!(
            safe_point(&Step::Ask(Question::Select), "nodes"),
            "before group nodes starts"
        );
    }
}
