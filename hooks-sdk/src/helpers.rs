//! Typed helpers for the small computations most policies need.

use crate::{Context, Instance};

/// Parses the hook's `config` (JSON from the policy file) into `T`.
pub fn config<T: serde::de::DeserializeOwned>(ctx: &Context) -> Result<T, String> {
    serde_json::from_str(&ctx.config)
        .map_err(|e| format!("invalid config for hook {}: {e}", ctx.hook_name))
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

/// The instance's zone, or `""` when it has none.
pub fn zone(instance: &Instance) -> &str {
    instance.zone.as_deref().unwrap_or("")
}

/// The value of a label of the instance.
pub fn label<'a>(instance: &'a Instance, key: &str) -> Option<&'a str> {
    instance
        .labels
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| kv.value.as_str())
}

/// The value of an annotation of the instance.
pub fn annotation<'a>(instance: &'a Instance, key: &str) -> Option<&'a str> {
    instance
        .annotations
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| kv.value.as_str())
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

/// Parses a weekday name (`mon`, `Monday`, …) into 0 = Monday … 6 = Sunday.
pub fn parse_weekday(text: &str) -> Result<u32, String> {
    let lower = text.trim().to_ascii_lowercase();
    let days = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
    days.iter()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_rounding_follows_the_seed() {
        assert_eq!(percent_of(25, 10, true), 3);
        assert_eq!(percent_of(25, 10, false), 2);
        assert_eq!(percent_of(100, 7, false), 7);
        assert_eq!(percent_of(0, 7, true), 0);
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
