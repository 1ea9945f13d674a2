//! The full-screen driver of the live views (`status --watch`, `fleet status --watch`): takes
//! the terminal (crossterm's raw mode and alternate screen, through ratatui), redraws after each
//! change, key or second, turns keys into commands through [`Prompt`], and says what would go to
//! stderr in the view instead (a line there would scroll it).

use std::future::Future;
use std::time::Duration;

use ratatui::Frame;
use tokio::sync::mpsc::UnboundedReceiver;

use super::keys::{Command, Key, Prompt};
use crate::cli::Failure;

/// What the footer shows: a prompt, what the last command did, or the keys.
pub struct Footer<'a> {
    pub prompt: &'a Prompt,
    pub notice: Option<&'a str>,
    /// Colours (off with `--no-color`): emphasis stays.
    pub colour: bool,
}

/// A view the driver runs.
pub trait LiveScreen {
    type Change;
    fn apply(&mut self, change: Self::Change);
    fn draw(&self, frame: &mut Frame, footer: &Footer, now: jiff::Timestamp);
    /// Carries out `command` (never Quit); says what was done or why it was refused.
    fn act(&self, command: Command) -> impl Future<Output = String>;
}

/// Whether the view can take the terminal: stdout shows it and stdin gives its keys.
pub fn on_a_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal() && std::io::stdin().is_terminal()
}

/// Reads the terminal's keys on a thread of their own (crossterm's read blocks).
fn read_keys() -> UnboundedReceiver<Key> {
    use ratatui::crossterm::event::{self, KeyCode, KeyEventKind, KeyModifiers};
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        while let Ok(read) = event::read() {
            let event::Event::Key(k) = read else { continue };
            if k.kind != KeyEventKind::Press {
                continue;
            }
            let key = match k.code {
                KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => Key::Interrupt,
                KeyCode::Char(c) => Key::Char(c),
                KeyCode::Enter => Key::Enter,
                KeyCode::Esc => Key::Esc,
                KeyCode::Backspace => Key::Backspace,
                _ => continue,
            };
            if tx.send(key).is_err() {
                return;
            }
        }
    });
    rx
}

/// Runs `screen` on the terminal until q (or Ctrl-C), with `changes` applied as they come.
pub async fn full_screen<S: LiveScreen>(
    screen: &mut S,
    changes: UnboundedReceiver<S::Change>,
) -> Result<(), Failure> {
    let mut terminal = ratatui::try_init()
        .map_err(|e| Failure::failed(format!("cannot take over the terminal: {e}")))?;
    let (said, messages) = tokio::sync::mpsc::unbounded_channel();
    crate::report::divert(Some(Box::new(move |line| {
        let _ = said.send(line.to_string());
    })));
    let result = on_screen(&mut terminal, screen, changes, messages).await;
    crate::report::divert(None);
    ratatui::restore();
    result
}

async fn on_screen<S: LiveScreen>(
    terminal: &mut ratatui::DefaultTerminal,
    screen: &mut S,
    mut changes: UnboundedReceiver<S::Change>,
    mut messages: UnboundedReceiver<String>,
) -> Result<(), Failure> {
    let mut keys = read_keys();
    let mut prompt = Prompt::None;
    let mut notice: Option<String> = None;
    // Redraws the clock and the "for how long"s; the cluster is never asked on a tick.
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let colour = !crate::report::no_color();
    loop {
        let footer = Footer {
            prompt: &prompt,
            notice: notice.as_deref(),
            colour,
        };
        let now = jiff::Timestamp::now();
        (terminal.draw(|frame| screen.draw(frame, &footer, now)))
            .map_err(|e| Failure::failed(format!("cannot draw on the terminal: {e}")))?;
        tokio::select! {
            change = changes.recv() => {
                let change = change.ok_or_else(|| Failure::failed("the watches stopped"))?;
                screen.apply(change);
                while let Ok(next) = changes.try_recv() {
                    screen.apply(next);
                }
            }
            key = keys.recv() => match key.map(|k| prompt.key(k)) {
                None | Some(Some(Command::Quit)) => return Ok(()),
                Some(Some(command)) => notice = Some(screen.act(command).await),
                Some(None) => {}
            },
            Some(message) = messages.recv() => notice = Some(message),
            _ = tick.tick() => {}
        }
    }
}
