//! Typed helpers for the small computations most policies need.

use crate::{Batch, Context, Instance, Pause, Verdict};

/// Parses the hook's `config` (JSON from the policy file) into `T`.
pub fn config<T: serde::de::DeserializeOwned>(ctx: &Context) -> Result<T, String> {
    parse_config(&ctx.config).map_err(|e| format!("invalid config for hook {}: {e}", ctx.hook_name))
}

/// Checks that `config` (the hook's config as JSON) parses into `T`: the body of a
/// [`crate::Policy::validate_config`] for a policy whose config is a serde struct. Give the
/// struct `#[serde(deny_unknown_fields)]` so that a misspelt key is an error:
///
/// ```
/// #[derive(serde::Deserialize)]
/// #[serde(rename_all = "camelCase", deny_unknown_fields)]
/// struct Config {
///     #[serde(default)]
///     max_per_zone: u32,
/// }
///
/// assert_eq!(rollout_ext_hooks::check_config::<Config>(r#"{"maxPerZone": 2}"#), Ok(()));
/// assert_eq!(
///     rollout_ext_hooks::check_config::<Config>(r#"{"maxPerZon": 2}"#),
///     Err("unknown field `maxPerZon`, expected `maxPerZone`".to_string())
/// );
/// ```
pub fn check_config<T: serde::de::DeserializeOwned>(config: &str) -> Result<(), String> {
    parse_config::<T>(config).map(drop)
}

/// Parses `config` (the hook's config as JSON) into `T`, for a [`crate::Policy::validate_config`]
/// that checks more than the shape. The error is serde's message without its JSON position,
/// which means nothing to whoever wrote the policy file (the host names the policy file's line).
pub fn parse_config<T: serde::de::DeserializeOwned>(config: &str) -> Result<T, String> {
    serde_json::from_str(config).map_err(|e| without_position(&e.to_string()))
}

/// `message` without a trailing ` at line L column C`.
fn without_position(message: &str) -> String {
    if let Some((text, position)) = message.rsplit_once(" at line ") {
        let numbers = position.split_once(" column ");
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if numbers.is_some_and(|(line, column)| digits(line) && digits(column)) {
            return text.to_string();
        }
    }
    message.to_string()
}

/// `percent` of `total`, rounded up or down, as the seed's budget math does (maxSurge rounds
/// up, maxUnavailable rounds down).
pub fn percent_of(percent: u32, total: u32, round_up: bool) -> u32 {
    let product = u64::from(percent) * u64::from(total);
    let value = if round_up {
        product.div_ceil(100)
    } else {
        product / 100
    };
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// The verdict of a gate whose condition does not hold yet: wait `retry_seconds` and check again,
/// up to `max_checks` checks of the same batch in all, then abort. Bounds a hold that would
/// otherwise wait forever on something that will not recover (a stuck pod, a budget that never
/// allows a disruption), leaving the run resumable.
///
/// `batch.attempt` counts the waits answered so far, so this check is number
/// `batch.attempt + 1`: it waits while that is below `max_checks` (the reason says
/// `(check k of N)`), and the `max_checks`-th check aborts. A `max_checks` of 0 or 1 aborts at
/// the first check.
///
/// ```
/// use rollout_ext_hooks::{hold, testing, Pause, Verdict};
///
/// let mut batch = testing::batch(&["n1"]);
/// assert_eq!(
///     hold(&batch, 3, 30, "2 pods not Ready"),
///     Verdict::Wait(Pause { seconds: 30, reason: "2 pods not Ready (check 1 of 3)".into() })
/// );
/// batch.attempt = 2;
/// assert_eq!(
///     hold(&batch, 3, 30, "2 pods not Ready"),
///     Verdict::Abort("2 pods not Ready after 3 checks".into())
/// );
/// ```
pub fn hold(
    batch: &Batch,
    max_checks: u32,
    retry_seconds: u32,
    reason: impl Into<String>,
) -> Verdict {
    let reason = reason.into();
    let check = batch.attempt.saturating_add(1);
    if check < max_checks {
        Verdict::Wait(Pause {
            seconds: retry_seconds,
            reason: format!("{reason} (check {check} of {max_checks})"),
        })
    } else {
        let checks = max_checks.max(1);
        let plural = if checks == 1 { "" } else { "s" };
        Verdict::Abort(format!("{reason} after {checks} check{plural}"))
    }
}

/// The gate's answer while something is in the way: proceed when `blockers` is empty, else
/// [`hold`] naming them (`what: a, b (check 1 of 5)`), aborting at the last check.
///
/// ```
/// use rollout_ext_hooks::{hold_while, testing, Verdict};
///
/// let batch = testing::batch(&["n1"]);
/// assert_eq!(hold_while(&batch, 5, 60, "blocked", Vec::new()), Verdict::Proceed);
/// let Verdict::Wait(pause) = hold_while(&batch, 5, 60, "blocked", vec!["shop/db".into()]) else {
///     unreachable!()
/// };
/// assert_eq!(pause.reason, "blocked: shop/db (check 1 of 5)");
/// ```
pub fn hold_while(
    batch: &Batch,
    max_checks: u32,
    retry_seconds: u32,
    what: &str,
    blockers: Vec<String>,
) -> Verdict {
    match blockers.is_empty() {
        true => Verdict::Proceed,
        false => hold(
            batch,
            max_checks,
            retry_seconds,
            format!("{what}: {}", blockers.join(", ")),
        ),
    }
}

/// A gate's answer that stops the run at once, for `reason` (as the Python and JavaScript
/// SDKs' `abort`).
pub fn abort(reason: impl Into<String>) -> Verdict {
    Verdict::Abort(reason.into())
}

/// The gate's answer when anything listed must stop the run: proceed when `blockers` is empty,
/// else abort naming them (`what: a, b`).
pub fn abort_if_any(what: &str, blockers: Vec<String>) -> Verdict {
    match blockers.is_empty() {
        true => Verdict::Proceed,
        false => Verdict::Abort(format!("{what}: {}", blockers.join(", "))),
    }
}

/// Sorts `instances` oldest first. `created` is optional: an instance whose creation time is
/// unknown sorts first, as the oldest (a node that never registered, a Machine without a
/// Node); names break ties, so the order is the same on every run.
pub fn oldest_first(instances: &mut [Instance]) {
    instances.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
}

/// The instant of `clock` (`HH:MM`) on the day of `now` (Unix seconds, days as seen at
/// `utc_offset_minutes`): "18:00 today", to compare with when a batch likely ends.
///
/// ```
/// // 2026-11-27T12:00:00Z; 18:00 that day, in UTC and at UTC+01:00.
/// assert_eq!(rollout_ext_hooks::today_at(1_795_780_800, "18:00", 0), Ok(1_795_802_400));
/// assert_eq!(rollout_ext_hooks::today_at(1_795_780_800, "18:00", 60), Ok(1_795_798_800));
/// ```
pub fn today_at(now: i64, clock: &str, utc_offset_minutes: i32) -> Result<i64, String> {
    let offset = i64::from(utc_offset_minutes) * 60;
    let midnight = (now + offset).div_euclid(86_400) * 86_400 - offset;
    Ok(midnight + i64::from(parse_clock(clock)?) * 60)
}

/// The instance's zone, or `""` when it has none.
pub fn zone(instance: &Instance) -> &str {
    instance.zone.as_deref().unwrap_or("")
}

/// Parses a duration such as `90s`, `15m`, `1h30m` or `2d` into seconds. A bare number is
/// seconds.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(seconds);
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for ch in text.chars() {
        if ch.is_ascii_digit() {
            digits.push(ch);
            continue;
        }
        let unit = match ch {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(format!("invalid duration {text:?}: unknown unit {ch:?}")),
        };
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("invalid duration {text:?}: a number must precede {ch:?}"))?;
        total = total
            .checked_add(n.saturating_mul(unit))
            .ok_or_else(|| format!("duration {text:?} is too large"))?;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(format!(
            "invalid duration {text:?}: missing unit after {digits}"
        ));
    }
    Ok(total)
}

/// A point in the week: day 0 = Monday … 6 = Sunday, minute of that day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeekTime {
    pub weekday: u32,
    pub minute: u32,
}

impl WeekTime {
    /// The week time of `unix_seconds` shifted by `utc_offset_minutes`.
    pub fn at(unix_seconds: i64, utc_offset_minutes: i32) -> Self {
        let local = unix_seconds + i64::from(utc_offset_minutes) * 60;
        let days = local.div_euclid(86_400);
        let minute = (local.rem_euclid(86_400) / 60) as u32;
        // 1970-01-01 was a Thursday (weekday 3 with Monday = 0).
        let weekday = (days + 3).rem_euclid(7) as u32;
        WeekTime { weekday, minute }
    }

    /// Minutes since Monday 00:00.
    pub fn minute_of_week(self) -> u32 {
        self.weekday * 1440 + self.minute
    }
}

/// The weekdays as schedules and [`day_and_time`] write them, Monday first.
const WEEKDAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// An instant as a reason says it: its weekday and time of day, as seen at
/// `utc_offset_minutes` ("fri 18:05"), which no other instant of the week shares.
///
/// ```
/// // 2026-11-27T12:00:00Z is a Friday.
/// assert_eq!(rollout_ext_hooks::day_and_time(1_795_780_800, 0), "fri 12:00");
/// assert_eq!(rollout_ext_hooks::day_and_time(1_795_780_800, 13 * 60), "sat 01:00");
/// ```
pub fn day_and_time(unix_seconds: i64, utc_offset_minutes: i32) -> String {
    let at = WeekTime::at(unix_seconds, utc_offset_minutes);
    let day = WEEKDAYS[at.weekday as usize];
    format!("{day} {:02}:{:02}", at.minute / 60, at.minute % 60)
}

/// Parses a weekday name (`mon`, `Monday`, …) into 0 = Monday … 6 = Sunday.
pub fn parse_weekday(text: &str) -> Result<u32, String> {
    let lower = text.trim().to_ascii_lowercase();
    WEEKDAYS
        .iter()
        .position(|d| lower.starts_with(d))
        .map(|i| i as u32)
        .ok_or_else(|| format!("invalid weekday {text:?}"))
}

/// Parses `HH:MM` into minutes of the day.
pub fn parse_clock(text: &str) -> Result<u32, String> {
    let (h, m) = text
        .split_once(':')
        .ok_or_else(|| format!("invalid time {text:?}: expected HH:MM"))?;
    let h: u32 = h.parse().map_err(|_| format!("invalid hour in {text:?}"))?;
    let m: u32 = m
        .parse()
        .map_err(|_| format!("invalid minute in {text:?}"))?;
    if h > 24 || m > 59 || (h == 24 && m != 0) {
        return Err(format!("invalid time {text:?}"));
    }
    Ok(h * 60 + m)
}

/// Whether `now` (Unix seconds, shifted by `utc_offset_minutes`) falls in a weekly schedule of
/// `spans` such as `mon-fri 09:00-17:00` or `sat,sun 22:00-06:00`: days (one, a range, or a list
/// of either), then hours; an end not after its start runs past midnight into the next day. An
/// error names a span that does not read.
pub fn in_schedule(now: i64, spans: &[&str], utc_offset_minutes: i32) -> Result<bool, String> {
    let at = i64::from(WeekTime::at(now, utc_offset_minutes).minute_of_week());
    for span in spans {
        for (start, length) in schedule_openings(span)? {
            if (at - start).rem_euclid(7 * 1440) < length {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// The openings of one span: each start (minute of the week) and length in minutes.
fn schedule_openings(span: &str) -> Result<Vec<(i64, i64)>, String> {
    let bad =
        |why: String| format!("schedule {span:?}: {why} (expected e.g. \"mon-fri 09:00-17:00\")");
    let (days, hours) = (span.trim().split_once(' ')).ok_or_else(|| bad("no hours".into()))?;
    let (from, to) =
        (hours.trim().split_once('-')).ok_or_else(|| bad("hours are FROM-TO".into()))?;
    let from = i64::from(parse_clock(from.trim()).map_err(bad)?);
    let to = i64::from(parse_clock(to.trim()).map_err(bad)?);
    let length = if to > from {
        to - from
    } else {
        to + 1440 - from
    };
    let mut openings = Vec::new();
    for item in days.split(',') {
        let (first, last) = match item.split_once('-') {
            Some((a, b)) => (
                parse_weekday(a).map_err(bad)?,
                parse_weekday(b).map_err(bad)?,
            ),
            None => {
                let day = parse_weekday(item).map_err(bad)?;
                (day, day)
            }
        };
        let mut day = first;
        loop {
            openings.push((i64::from(day) * 1440 + from, length));
            if day == last {
                break;
            }
            day = (day + 1) % 7;
        }
    }
    Ok(openings)
}

/// `items` with those `last` holds for moved to the end, each part in its order: "these last".
pub fn these_last<T>(items: Vec<T>, last: impl Fn(&T) -> bool) -> Vec<T> {
    let (later, mut first): (Vec<T>, Vec<T>) = items.into_iter().partition(|i| last(i));
    first.extend(later);
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-11-27T12:00:00Z is a Friday.
    const FRIDAY_NOON: i64 = 1_795_780_800;

    #[test]
    fn a_schedule_holds_day_ranges_lists_and_spans_past_midnight() {
        let office = ["mon-fri 09:00-17:00"];
        assert_eq!(in_schedule(FRIDAY_NOON, &office, 0), Ok(true));
        assert_eq!(in_schedule(FRIDAY_NOON + 6 * 3600, &office, 0), Ok(false));
        assert_eq!(
            in_schedule(FRIDAY_NOON + 86_400, &office, 0),
            Ok(false),
            "Saturday"
        );
        // Offsets: noon UTC is 18:00 at UTC+06:00.
        assert_eq!(in_schedule(FRIDAY_NOON, &office, 360), Ok(false));
        let nights = ["sat,sun 22:00-06:00", "fri-mon 12:00-12:30"];
        assert_eq!(in_schedule(FRIDAY_NOON, &nights, 0), Ok(true));
        // Sunday 03:00 is in Saturday's night; Monday 03:00 in Sunday's.
        let sunday_3am = FRIDAY_NOON + 86_400 + 15 * 3600;
        assert_eq!(in_schedule(sunday_3am, &nights, 0), Ok(true));
        assert_eq!(in_schedule(sunday_3am + 86_400, &nights, 0), Ok(true));
        assert_eq!(in_schedule(sunday_3am + 2 * 86_400, &nights, 0), Ok(false));
        let err = in_schedule(0, &["weekdays 09:00-17:00"], 0).unwrap_err();
        assert!(
            err.starts_with("schedule \"weekdays 09:00-17:00\": invalid weekday"),
            "{err}"
        );
        let err = in_schedule(0, &["mon-fri 9-5"], 0).unwrap_err();
        assert!(err.contains("invalid time \"9\": expected HH:MM"), "{err}");
    }

    #[test]
    fn abort_if_any_names_what_is_in_the_way() {
        assert_eq!(abort_if_any("short", Vec::new()), Verdict::Proceed);
        assert_eq!(
            abort_if_any("short", vec!["shop/web".into(), "shop/api".into()]),
            Verdict::Abort("short: shop/web, shop/api".into())
        );
    }

    #[test]
    fn these_last_keeps_each_part_in_its_order() {
        let order = these_last(vec![1, 2, 3, 4, 5], |n| n % 2 == 0);
        assert_eq!(order, [1, 3, 5, 2, 4]);
    }

    #[test]
    fn oldest_first_puts_an_unknown_creation_first_and_breaks_ties_by_name() {
        let at = |name: &str, created: Option<i64>| {
            let mut node = crate::testing::node(name, "a").instance;
            node.created = created;
            node
        };
        let mut nodes = vec![
            at("c", Some(200)),
            at("b", Some(100)),
            at("a", Some(100)),
            at("x", None),
        ];
        oldest_first(&mut nodes);
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["x", "a", "b", "c"]);
    }

    #[test]
    fn percent_rounding_follows_the_seed() {
        assert_eq!(percent_of(25, 10, true), 3);
        assert_eq!(percent_of(25, 10, false), 2);
        assert_eq!(percent_of(100, 7, false), 7);
        assert_eq!(percent_of(0, 7, true), 0);
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    #[allow(dead_code)]
    struct Config {
        #[serde(default)]
        max_per_zone: u32,
    }

    #[test]
    fn config_errors_name_the_problem_not_the_json_position() {
        assert_eq!(check_config::<Config>("{}"), Ok(()));
        assert_eq!(check_config::<Config>(r#"{"maxPerZone": 3}"#), Ok(()));
        assert_eq!(
            check_config::<Config>(r#"{"maxPerZon": 3}"#),
            Err("unknown field `maxPerZon`, expected `maxPerZone`".into())
        );
        assert_eq!(
            check_config::<Config>(r#"{"maxPerZone": "three"}"#),
            Err("invalid type: string \"three\", expected u32".into())
        );
        let ctx = crate::testing::context(0, serde_json::json!({"maxPerZone": -1}));
        let err = config::<Config>(&ctx).unwrap_err();
        assert_eq!(
            err,
            "invalid config for hook test: invalid value: integer `-1`, expected u32"
        );
        assert_eq!(without_position("fine at line one"), "fine at line one");
    }

    #[test]
    fn hold_waits_until_the_last_check_then_aborts() {
        let at = |attempt: u32| Batch {
            attempt,
            ..crate::testing::batch(&["n1"])
        };
        let wait = |k: u32| {
            Verdict::Wait(Pause {
                seconds: 15,
                reason: format!("budget exhausted (check {k} of 4)"),
            })
        };
        let abort = Verdict::Abort("budget exhausted after 4 checks".into());
        assert_eq!(hold(&at(0), 4, 15, "budget exhausted"), wait(1));
        assert_eq!(hold(&at(2), 4, 15, "budget exhausted"), wait(3));
        // attempt N-1 is the N-th check: the last one.
        assert_eq!(hold(&at(3), 4, 15, "budget exhausted"), abort);
        assert_eq!(hold(&at(4), 4, 15, "budget exhausted"), abort);
        assert_eq!(hold(&at(u32::MAX), 4, 15, "budget exhausted"), abort);
        // No retries allowed: the first check aborts.
        for max in [0, 1] {
            assert_eq!(
                hold(&at(0), max, 15, "x"),
                Verdict::Abort("x after 1 check".into())
            );
        }
        assert_eq!(
            hold(&at(0), 2, 15, String::from("x")),
            Verdict::Wait(Pause {
                seconds: 15,
                reason: "x (check 1 of 2)".into()
            })
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Ok(90));
        assert_eq!(parse_duration("15m"), Ok(900));
        assert_eq!(parse_duration("1h30m"), Ok(5400));
        assert_eq!(parse_duration("2d"), Ok(172_800));
        assert!(parse_duration("1x").is_err());
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("10m5").is_err());
    }

    #[test]
    fn week_time_of_known_instants() {
        // 2024-01-01T00:00:00Z was a Monday.
        assert_eq!(
            WeekTime::at(1_704_067_200, 0),
            WeekTime {
                weekday: 0,
                minute: 0
            }
        );
        // Two hours earlier in UTC-2 is still Monday midnight locally.
        assert_eq!(
            WeekTime::at(1_704_067_200 + 7200, -120),
            WeekTime {
                weekday: 0,
                minute: 0
            }
        );
        // Sunday 23:59.
        assert_eq!(
            WeekTime::at(1_704_067_200 - 60, 0),
            WeekTime {
                weekday: 6,
                minute: 1439
            }
        );
    }

    #[test]
    fn weekdays_and_clocks() {
        assert_eq!(parse_weekday("Saturday"), Ok(5));
        assert_eq!(parse_weekday("sun"), Ok(6));
        assert!(parse_weekday("someday").is_err());
        assert_eq!(parse_clock("22:30"), Ok(1350));
        assert!(parse_clock("25:00").is_err());
    }
}
