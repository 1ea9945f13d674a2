//! Maintenance window with slow start: outside the configured weekly windows nothing is
//! updated (the batch is paused until the next window opens); inside a window batches grow
//! 1, 2, 4, … doubling after each successful batch, up to `maxBatch`. A batch that would likely
//! not finish before its window closes (the plugin's cautious estimate of it, contract 0.3.5) is
//! not started: it waits for the next opening.
//!
//! Config:
//! ```json
//! {"windows": [{"days": ["sat", "sun"], "start": "22:00", "end": "06:00"}],
//!  "utcOffsetMinutes": 0, "initialBatch": 1, "maxBatch": 8}
//! ```
//! A window whose end is not after its start runs past midnight into the next day.

use rollout_ext_hooks::{
    BatchSize, Context, Pause, Policy, Progress, WeekTime, config, host, parse_clock, parse_config,
    parse_weekday, policy,
};
use serde::Deserialize;

const WEEK_MINUTES: i64 = 7 * 1440;
const DAY_NAMES: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    windows: Vec<Window>,
    #[serde(default)]
    utc_offset_minutes: i32,
    #[serde(default = "one")]
    initial_batch: u32,
    #[serde(default = "eight")]
    max_batch: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Window {
    days: Vec<String>,
    start: String,
    end: String,
}

fn one() -> u32 {
    1
}
fn eight() -> u32 {
    8
}

/// One opening of a window: start minute of the week and length in minutes.
struct Opening {
    start: i64,
    length: i64,
}

fn openings(cfg: &Config) -> Result<Vec<Opening>, String> {
    let mut out = Vec::new();
    for w in &cfg.windows {
        let start = i64::from(parse_clock(&w.start)?);
        let end = i64::from(parse_clock(&w.end)?);
        let length = if end > start {
            end - start
        } else {
            end + 1440 - start
        };
        for day in &w.days {
            out.push(Opening {
                start: i64::from(parse_weekday(day)?) * 1440 + start,
                length,
            });
        }
    }
    if out.is_empty() {
        return Err("config has no window: nothing could ever be updated".into());
    }
    Ok(out)
}

impl Config {
    /// The openings of a valid config; an error names what is wrong.
    fn check(&self) -> Result<Vec<Opening>, String> {
        if self.initial_batch == 0 || self.max_batch == 0 {
            return Err("initialBatch and maxBatch must be at least 1".into());
        }
        openings(self)
    }
}

/// `UTC`, `UTC+02:00`, `UTC-05:30`.
fn utc_offset(minutes: i32) -> String {
    if minutes == 0 {
        return "UTC".into();
    }
    let sign = if minutes < 0 { '-' } else { '+' };
    let m = minutes.unsigned_abs();
    format!("UTC{sign}{:02}:{:02}", m / 60, m % 60)
}

pub struct MaintenanceWindow;

#[policy]
impl Policy for MaintenanceWindow {
    const NAME: &'static str = "maintenance-window";

    fn validate_config(config: &str) -> Result<(), String> {
        parse_config::<Config>(config)?.check().map(drop)
    }

    fn next_batch(ctx: &Context, progress: &Progress) -> Result<BatchSize, String> {
        let cfg: Config = config(ctx)?;
        let openings = cfg.check()?;
        let now = WeekTime::at(ctx.now, cfg.utc_offset_minutes);
        let minute = i64::from(now.minute_of_week());
        let second = ctx.now.rem_euclid(60);
        let offset = cfg.utc_offset_minutes;

        let open = openings.iter().find_map(|o| {
            let into = (minute - o.start).rem_euclid(WEEK_MINUTES);
            (into < o.length).then_some(o.length - into)
        });
        let Some(minutes_left) = open else {
            let (seconds, next) = next_opening(&openings, minute, 0);
            let reason = format!(
                "outside the maintenance window; the next opens {}",
                at(next, offset)
            );
            return Ok(pause(seconds - second, reason));
        };

        // Closing minute of the window, and whether the batch likely ends before it.
        let closes = ctx.now - second + minutes_left * 60;
        if let Some(ends) = host::estimates().batch_ends(ctx.now)
            && ends > closes
        {
            let close = (minute + minutes_left).rem_euclid(WEEK_MINUTES);
            let (seconds, next) = next_opening(&openings, minute, minutes_left);
            let reason = format!(
                "a batch likely takes until {}, after the window closes at {}; the next opens {}",
                at(minute_at(ends, offset), offset),
                at(close, offset),
                at(next, offset)
            );
            return Ok(pause(seconds - second, reason));
        }

        let growth = 1u32.checked_shl(progress.batches_done).unwrap_or(u32::MAX);
        let wanted = cfg.initial_batch.saturating_mul(growth).min(cfg.max_batch);
        let size = wanted.min(progress.max_batch).max(1);
        let mut reason = format!(
            "window open: slow start {}, then doubling up to {}",
            cfg.initial_batch, cfg.max_batch
        );
        if size < wanted {
            reason.push_str(&format!(
                "; {wanted} due, the budget allows {}",
                progress.max_batch
            ));
        }
        Ok(BatchSize::size(size, reason))
    }
}

/// The first opening that starts at least `after` minutes from `minute` of the week: the
/// seconds until it starts (from the start of `minute`) and its minute of the week.
fn next_opening(openings: &[Opening], minute: i64, after: i64) -> (i64, i64) {
    let wait = |o: &Opening| (o.start - minute - after).rem_euclid(WEEK_MINUTES) + after;
    let next = openings
        .iter()
        .min_by_key(|o| wait(o))
        .expect("openings is not empty");
    (wait(next) * 60, next.start)
}

/// The minute of the week of `unix_seconds` at `offset`.
fn minute_at(unix_seconds: i64, offset: i32) -> i64 {
    i64::from(WeekTime::at(unix_seconds, offset).minute_of_week())
}

/// `Sat 22:00 UTC` for a minute of the week.
fn at(minute: i64, offset: i32) -> String {
    format!(
        "{} {:02}:{:02} {}",
        DAY_NAMES[(minute / 1440) as usize],
        (minute % 1440) / 60,
        minute % 60,
        utc_offset(offset)
    )
}

fn pause(seconds: i64, reason: String) -> BatchSize {
    BatchSize::Pause(Pause {
        seconds: u32::try_from(seconds.max(1)).unwrap_or(u32::MAX),
        reason,
    })
}

rollout_ext_hooks::export_policy!(MaintenanceWindow);

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_ext_hooks::testing::{self, context, group, node, progress};
    use serde_json::json;

    /// 2024-01-06T23:00:00Z, a Saturday.
    const SATURDAY_23H: i64 = 1_704_582_000;
    /// 2024-01-03T12:00:00Z, a Wednesday.
    const WEDNESDAY_NOON: i64 = 1_704_283_200;

    fn cfg() -> serde_json::Value {
        json!({"windows": [{"days": ["sat"], "start": "22:00", "end": "06:00"}], "maxBatch": 4})
    }

    fn pending(n: usize) -> Progress<'static> {
        let nodes: Vec<_> = (0..n).map(|i| node(&format!("n{i}"), "a")).collect();
        progress(group(&nodes, 0, 10), nodes, 0, 0)
    }

    #[test]
    fn doubles_inside_the_window_up_to_the_cap() {
        let mut p = pending(10);
        let sizes: Vec<_> = (0..5)
            .map(|done| {
                p.batches_done = done;
                MaintenanceWindow::next_batch(&context(SATURDAY_23H, cfg()), &p).unwrap()
            })
            .collect();
        let expected: Vec<_> = [1, 2, 4, 4, 4]
            .into_iter()
            .map(|n| BatchSize::size(n, "window open: slow start 1, then doubling up to 4"))
            .collect();
        assert_eq!(sizes, expected);
    }

    #[test]
    fn never_exceeds_the_budget() {
        let mut p = pending(10);
        p.max_batch = 3;
        p.batches_done = 3;
        let size = MaintenanceWindow::next_batch(&context(SATURDAY_23H, cfg()), &p).unwrap();
        assert_eq!(
            size,
            BatchSize::size(
                3,
                "window open: slow start 1, then doubling up to 4; 4 due, the budget allows 3"
            )
        );
    }

    #[test]
    fn window_runs_past_midnight() {
        // Sunday 05:00 is inside Saturday's 22:00-06:00 window.
        let sunday_5h = SATURDAY_23H + 6 * 3600;
        let size = MaintenanceWindow::next_batch(&context(sunday_5h, cfg()), &pending(3)).unwrap();
        assert_eq!(size.count(), Some(1));
    }

    #[test]
    fn pauses_until_the_next_opening() {
        let answer = MaintenanceWindow::next_batch(&context(WEDNESDAY_NOON, cfg()), &pending(3));
        match answer.unwrap() {
            BatchSize::Pause(p) => {
                // Wednesday 12:00 → Saturday 22:00 = 3 days 10 hours.
                assert_eq!(p.seconds, (3 * 24 + 10) * 3600);
                assert!(p.reason.contains("Sat 22:00 UTC"), "{}", p.reason);
            }
            other => panic!("expected a pause, got {other:?}"),
        }
    }

    /// What the plugin estimates: a batch of `seconds` (cautiously) and nothing about the rest.
    fn batch_takes<R>(seconds: u64, f: impl FnOnce() -> R) -> R {
        let timing = host::Timing {
            batch: Some(testing::estimate(seconds)),
            remaining: None,
        };
        testing::with_estimates(timing, f)
    }

    #[test]
    fn a_batch_that_would_outlast_the_window_waits_for_the_next_opening() {
        // Sunday 05:50, ten minutes before Saturday's window closes.
        let sunday_0550 = SATURDAY_23H + 6 * 3600 + 50 * 60;
        let ctx = context(sunday_0550, cfg());
        let answer = batch_takes(15 * 60, || MaintenanceWindow::next_batch(&ctx, &pending(3)));
        match answer.unwrap() {
            BatchSize::Pause(p) => {
                // Sunday 05:50 → Saturday 22:00 = 6 days 16 hours 10 minutes.
                assert_eq!(p.seconds, ((6 * 24 + 16) * 60 + 10) * 60);
                assert_eq!(
                    p.reason,
                    "a batch likely takes until Sun 06:05 UTC, after the window closes at Sun 06:00 UTC; the next opens Sat 22:00 UTC"
                );
            }
            other => panic!("expected a pause, got {other:?}"),
        }
        // A batch that ends in time goes.
        let answer = batch_takes(5 * 60, || MaintenanceWindow::next_batch(&ctx, &pending(3)));
        assert_eq!(answer.unwrap().count(), Some(1));
    }

    #[test]
    fn without_an_estimate_a_batch_goes_while_the_window_is_open() {
        let sunday_0559 = SATURDAY_23H + 6 * 3600 + 59 * 60;
        let answer = MaintenanceWindow::next_batch(&context(sunday_0559, cfg()), &pending(3));
        assert_eq!(answer.unwrap().count(), Some(1));
    }

    #[test]
    fn names_the_offset() {
        assert_eq!(utc_offset(120), "UTC+02:00");
        assert_eq!(utc_offset(-330), "UTC-05:30");
    }

    #[test]
    fn rejects_config_without_windows() {
        let ctx = context(WEDNESDAY_NOON, json!({"windows": []}));
        assert!(MaintenanceWindow::next_batch(&ctx, &pending(1)).is_err());
    }

    #[test]
    fn validates_its_config() {
        assert_eq!(
            MaintenanceWindow::validate_config(&cfg().to_string()),
            Ok(())
        );
        let invalid = [
            (
                json!({"windows": []}),
                "config has no window: nothing could ever be updated",
            ),
            (
                json!({"windows": [{"days": ["sat"], "start": "22:00", "end": "06:00"}], "maxBatch": 0}),
                "initialBatch and maxBatch must be at least 1",
            ),
            (
                json!({"windows": [{"days": ["someday"], "start": "22:00", "end": "06:00"}]}),
                "invalid weekday \"someday\"",
            ),
            (
                json!({"windows": [{"days": ["sat"], "start": "25:00", "end": "06:00"}]}),
                "invalid time \"25:00\"",
            ),
            (
                json!({"windows": [{"days": ["sat"], "from": "22:00", "end": "06:00"}]}),
                "unknown field `from`, expected one of `days`, `start`, `end`",
            ),
            (json!({}), "missing field `windows`"),
        ];
        for (config, error) in invalid {
            assert_eq!(
                MaintenanceWindow::validate_config(&config.to_string()),
                Err(error.to_string()),
                "{config}"
            );
        }
    }
}
