//! A selection answered flat (`flat-selection`, contract 0.3.4): the choices' names and reasons
//! laid end to end in one text, with three numbers per choice.
//!
//! Lifting a `list<choice>` out of the hook costs the host two strings per choice, which over
//! thousands of candidates was a fifth of a `select`; one list of numbers and one text are a few
//! copies. A policy still answers [`Choice`]s; the SDK lays them out here.

use crate::Selection;
use crate::bindings::exports::rollout_ext::policy::flat_selection::{FlatAnswer, FlatChoices};

/// `selection`, flat: per choice, the byte lengths of its name and reason and whether it is
/// forced; the name and then the reason in the text.
pub(crate) fn answer(selection: Selection) -> Result<FlatAnswer, String> {
    let choices = match selection {
        Selection::Defer => return Ok(FlatAnswer::Defer),
        Selection::Choose(choices) => choices,
    };
    let mut fields = Vec::with_capacity(choices.len() * 3);
    let bytes = choices.iter().map(|c| c.name.len() + c.reason.len()).sum();
    let mut text = String::with_capacity(bytes);
    let length = |s: &str| {
        u32::try_from(s.len()).map_err(|_| format!("a choice of {} bytes is too long", s.len()))
    };
    for choice in &choices {
        fields.extend([
            length(&choice.name)?,
            length(&choice.reason)?,
            u32::from(choice.force),
        ]);
        text.push_str(&choice.name);
        text.push_str(&choice.reason);
    }
    Ok(FlatAnswer::Choose(FlatChoices { fields, text }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Choice;

    #[test]
    fn each_choice_gives_its_name_and_reason_in_order() {
        let chosen = Selection::Choose(vec![Choice::new("né", "second"), Choice::forced("a", "")]);
        assert_eq!(
            answer(chosen),
            Ok(FlatAnswer::Choose(FlatChoices {
                fields: vec![3, 6, 0, 1, 0, 1],
                text: "néseconda".into(),
            }))
        );
        assert_eq!(answer(Selection::Defer), Ok(FlatAnswer::Defer));
        assert_eq!(
            answer(Selection::Choose(vec![])),
            Ok(FlatAnswer::Choose(FlatChoices {
                fields: vec![],
                text: String::new(),
            }))
        );
    }
}
