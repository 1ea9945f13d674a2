//! The keys of `status --watch`: p pauses, r resumes, a aborts (after a reason and a
//! confirmation), q quits. A pure machine from keys to commands, so that what a key does is
//! tested without a terminal.

/// A key, as the view reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Enter,
    Esc,
    Backspace,
    /// Ctrl-C: quits whatever is asked.
    Interrupt,
}

/// What the operator asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Pause { reason: String },
    Resume,
    Abort { reason: String },
    Quit,
}

/// What the view asks while a key's command is being made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Prompt {
    #[default]
    None,
    /// A reason for a pause (Enter pauses, Esc cancels).
    PauseReason(String),
    /// A reason for an abort (Enter goes on to the confirmation).
    AbortReason(String),
    /// y aborts; any other key cancels.
    ConfirmAbort(String),
}

impl Prompt {
    /// The prompt's line, if one is shown; `subject` is what the keys act on ("the rotation").
    pub fn line(&self, subject: &str) -> Option<String> {
        match self {
            Prompt::None => None,
            Prompt::PauseReason(text) => Some(format!(
                "Pause {subject} at its next safe point. Reason: {text}_  (Enter pauses, Esc cancels)"
            )),
            Prompt::AbortReason(text) => Some(format!(
                "Abort {subject} after its current step. Reason: {text}_  (Enter, then y to confirm; Esc cancels)"
            )),
            Prompt::ConfirmAbort(reason) => Some(format!(
                "Abort {subject}{}? y aborts (running the same command again resumes it), any other key cancels",
                match reason.is_empty() {
                    true => String::new(),
                    false => format!(" ({reason})"),
                }
            )),
        }
    }

    /// Takes `key`; a command when one is made.
    pub fn key(&mut self, key: Key) -> Option<Command> {
        if key == Key::Interrupt {
            return Some(Command::Quit);
        }
        match std::mem::take(self) {
            Prompt::None => match key {
                Key::Char('p') => *self = Prompt::PauseReason(String::new()),
                Key::Char('a') => *self = Prompt::AbortReason(String::new()),
                Key::Char('r') => return Some(Command::Resume),
                Key::Char('q') | Key::Esc => return Some(Command::Quit),
                _ => {}
            },
            Prompt::PauseReason(text) => match key {
                Key::Enter => return Some(Command::Pause { reason: text }),
                Key::Esc => {}
                other => *self = Prompt::PauseReason(typed(text, other)),
            },
            Prompt::AbortReason(text) => match key {
                Key::Enter => *self = Prompt::ConfirmAbort(text),
                Key::Esc => {}
                other => *self = Prompt::AbortReason(typed(text, other)),
            },
            Prompt::ConfirmAbort(reason) => {
                if matches!(key, Key::Char('y' | 'Y')) {
                    return Some(Command::Abort { reason });
                }
            }
        }
        None
    }
}

/// `text` after `key` was typed into it.
fn typed(mut text: String, key: Key) -> String {
    match key {
        Key::Char(c) if !c.is_control() => text.push(c),
        Key::Backspace => {
            text.pop();
        }
        _ => {}
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(prompt: &mut Prompt, text: &str) -> Option<Command> {
        let mut last = None;
        for c in text.chars() {
            last = prompt.key(Key::Char(c));
        }
        last
    }

    #[test]
    fn pause_takes_a_reason_and_abort_asks_to_confirm() {
        let mut prompt = Prompt::default();
        assert_eq!(keys(&mut prompt, "pzone b"), None);
        prompt.key(Key::Backspace);
        assert_eq!(keys(&mut prompt, "c"), None);
        assert_eq!(
            prompt.key(Key::Enter),
            Some(Command::Pause {
                reason: "zone c".into()
            })
        );
        assert_eq!(prompt, Prompt::None);
        assert_eq!(prompt.key(Key::Char('r')), Some(Command::Resume));
        keys(&mut prompt, "abad image");
        assert_eq!(prompt.key(Key::Enter), None);
        assert!(
            prompt
                .line("the rotation")
                .unwrap()
                .contains("(bad image)? y aborts")
        );
        assert_eq!(
            prompt.key(Key::Char('y')),
            Some(Command::Abort {
                reason: "bad image".into()
            })
        );
    }

    #[test]
    fn anything_but_y_cancels_an_abort_and_esc_cancels_a_reason() {
        let mut prompt = Prompt::default();
        keys(&mut prompt, "ax");
        prompt.key(Key::Enter);
        assert_eq!(prompt.key(Key::Char('n')), None);
        assert_eq!(prompt, Prompt::None);
        keys(&mut prompt, "pq");
        assert_eq!(prompt.key(Key::Esc), None);
        assert_eq!(prompt, Prompt::None);
        // q typed into a reason is a letter; outside one it quits.
        assert_eq!(prompt.key(Key::Char('q')), Some(Command::Quit));
        keys(&mut prompt, "p");
        assert_eq!(prompt.key(Key::Interrupt), Some(Command::Quit));
    }
}
