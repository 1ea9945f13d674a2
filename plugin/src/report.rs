//! Messages for the operator on stderr: warnings always, info with `-v`, debug with `-vv`, and
//! with `-vvv` one line per API request (its method, path, status and latency, as kubectl's
//! `-v=6`), to see where a run's time goes.
//! Data goes to stdout elsewhere; this never writes there.

use std::sync::atomic::{AtomicU8, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
    Trace = 4,
}

static VERBOSITY: AtomicU8 = AtomicU8::new(Level::Warn as u8);
static NO_COLOR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `--no-color` was given.
pub fn set_no_color(no_color: bool) {
    NO_COLOR.store(no_color, Ordering::Relaxed);
}

pub fn no_color() -> bool {
    NO_COLOR.load(Ordering::Relaxed)
}

/// Sets the most detailed level printed.
pub fn set_verbosity(level: Level) {
    VERBOSITY.store(level as u8, Ordering::Relaxed);
}

pub fn enabled(level: Level) -> bool {
    level as u8 <= VERBOSITY.load(Ordering::Relaxed)
}

pub fn log(level: Level, message: &str) {
    if enabled(level) {
        let tag = match level {
            Level::Error => "error",
            Level::Warn => "warning",
            Level::Info => "info",
            Level::Debug => "debug",
            Level::Trace => "trace",
        };
        say(&format!("{tag}: {message}"));
    }
}

/// Where messages go instead of stderr while a full-screen view owns the terminal.
type Diverted = Box<dyn Fn(&str) + Send>;
static DIVERTED: std::sync::Mutex<Option<Diverted>> = std::sync::Mutex::new(None);

/// Sends every message to `to` rather than stderr (a line written under a full-screen view
/// would scroll it), or, with `None`, to stderr again.
pub fn divert(to: Option<Diverted>) {
    *DIVERTED.lock().unwrap_or_else(|p| p.into_inner()) = to;
}

/// Says `line` to the operator: on stderr, or where it is diverted.
pub fn say(line: &str) {
    match &*DIVERTED.lock().unwrap_or_else(|p| p.into_inner()) {
        Some(to) => to(line),
        None => eprintln!("{line}"),
    }
}
