//! A command run in a pseudo-terminal, as an operator's terminal runs it: its screen read back
//! through a VT100 parser (the `vt100` crate), keys typed into it, and the screen drawn as an
//! HTML page for a screenshot.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The parsed screen, and whether the program's side closed.
struct Screen {
    parser: vt100::Parser,
    /// The text of the screen when its program last finished drawing a frame: between two
    /// reads a frame may be half drawn.
    settled: vt100::Screen,
    closed: bool,
}

/// What ratatui writes at the end of each frame (it hides the cursor after every draw).
const FRAME_END: &[u8] = b"\x1b[?25l";

pub struct Terminal {
    master: std::fs::File,
    child: Child,
    screen: Arc<(Mutex<Screen>, Condvar)>,
}

impl Terminal {
    /// Starts `command` on a new `rows`×`cols` pseudo-terminal, as its controlling terminal.
    pub fn spawn(mut command: Command, rows: u16, cols: u16) -> Terminal {
        let (mut master, mut slave) = (0, 0);
        let size = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: openpty writes the two descriptors it opens; the rest are null or read only.
        let opened = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                &size,
            )
        };
        assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened and are owned here alone.
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        command
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave)
            .env("TERM", "xterm-256color");
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        // The parent's copies of the program's side go with `command`.
        drop(command);
        let master = std::fs::File::from(master);
        let screen = Arc::new((
            Mutex::new(Screen {
                parser: vt100::Parser::new(nonzero(rows), nonzero(cols), 0),
                settled: vt100::Parser::new(nonzero(rows), nonzero(cols), 0)
                    .screen()
                    .clone(),
                closed: false,
            }),
            Condvar::new(),
        ));
        let mut reader = master.try_clone().unwrap();
        let shared = screen.clone();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 8192];
            loop {
                // EIO once the program's side is closed.
                let read = reader.read(&mut buffer).unwrap_or(0);
                let (lock, changed) = &*shared;
                // A test that failed while it read the screen poisoned it; the screen is whole.
                let mut screen = lock.lock().unwrap_or_else(|p| p.into_inner());
                if read == 0 {
                    screen.closed = true;
                    changed.notify_all();
                    return;
                }
                let bytes = &buffer[..read];
                // Up to the last frame's end, then the rest (a marker cut between two reads is
                // found at the next frame's end).
                let end = (bytes.windows(FRAME_END.len()).rposition(|w| w == FRAME_END))
                    .map(|at| at + FRAME_END.len());
                match end {
                    Some(end) => {
                        screen.parser.process(&bytes[..end]);
                        screen.settled = screen.parser.screen().clone();
                        screen.parser.process(&bytes[end..]);
                    }
                    None => screen.parser.process(bytes),
                }
                changed.notify_all();
            }
        });
        Terminal {
            master,
            child,
            screen,
        }
    }

    /// Types `keys`.
    pub fn type_keys(&mut self, keys: &str) {
        self.master.write_all(keys.as_bytes()).unwrap();
        self.master.flush().unwrap();
    }

    /// Waits until a whole frame on the screen shows what `shows` looks for (checked at each
    /// frame), at most `within`; returns the screen's text then, or fails with it.
    pub fn wait_for(&self, what: &str, within: Duration, shows: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + within;
        let (lock, changed) = &*self.screen;
        let mut screen = lock.lock().unwrap();
        loop {
            let text = screen.settled.contents();
            if shows(&text) {
                return text;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero() && !screen.closed,
                "the terminal never showed {what}; it shows:\n{text}"
            );
            screen = changed.wait_timeout(screen, left).unwrap().0;
        }
    }

    /// Waits for the program to exit (after `q`), at most `within`; its exit code.
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            // The screen changes as the program leaves it (it restores the terminal).
            let (lock, changed) = &*self.screen;
            let screen = lock.lock().unwrap();
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "the program did not exit");
            let _ = changed
                .wait_timeout(screen, left.min(Duration::from_millis(200)))
                .unwrap();
        }
    }

    /// The screen as an HTML page: a cell per character with its colours and weight, for a
    /// screenshot that shows what the operator sees.
    pub fn html(&self) -> String {
        let lock = self.screen.0.lock().unwrap();
        let screen = &lock.settled;
        let (rows, cols) = screen.size();
        let mut body = String::new();
        for row in 0..rows.get() {
            for col in 0..cols.get() {
                let Some(cell) = screen.cell(row, col) else {
                    continue;
                };
                if cell.is_wide_continuation() {
                    continue;
                }
                let text = match cell.contents() {
                    "" => " ".to_string(),
                    c => c
                        .replace('&', "&amp;")
                        .replace('<', "&lt;")
                        .replace('>', "&gt;"),
                };
                let mut style = String::new();
                if let Some(colour) = css_colour(cell.fgcolor()) {
                    style.push_str(&format!("color:{colour};"));
                }
                if cell.bold() {
                    style.push_str("font-weight:bold;");
                }
                match style.is_empty() {
                    true => body.push_str(&text),
                    false => body.push_str(&format!("<span style=\"{style}\">{text}</span>")),
                }
            }
            body.push('\n');
        }
        format!(
            "<!DOCTYPE html><html><head><meta charset=\"utf-8\">\
             <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
             <style>body{{margin:0;background:#1e1e1e;}}pre{{margin:12px;color:#d4d4d4;\
             font:14px/1.25 'DejaVu Sans Mono',monospace;}}</style></head>\
             <body><pre>{body}</pre></body></html>"
        )
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nonzero(n: u16) -> std::num::NonZeroU16 {
    std::num::NonZeroU16::new(n).expect("a terminal has rows and columns")
}

/// The 16 colours of a dark terminal theme, for the screen's page.
fn css_colour(colour: vt100::Color) -> Option<String> {
    const ANSI: [&str; 16] = [
        "#1e1e1e", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#d4d4d4",
        "#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff",
    ];
    match colour {
        vt100::Color::Default => None,
        vt100::Color::Idx(i) if (i as usize) < ANSI.len() => Some(ANSI[i as usize].to_string()),
        vt100::Color::Idx(_) => None,
        vt100::Color::Rgb(r, g, b) => Some(format!("#{r:02x}{g:02x}{b:02x}")),
    }
}
