//! Durations as people read them in plans, reasons and progress lines.

/// `3d4h`, `15m`, `42s`: the two largest units.
pub fn human_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    let (d, h, m, sec) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60, s % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{sec}s"),
        (0, 0, _) if sec == 0 => format!("{m}m"),
        (0, 0, _) => format!("{m}m{sec}s"),
        (0, _, 0) => format!("{h}h"),
        (0, _, _) => format!("{h}h{m}m"),
        (_, 0, _) => format!("{d}d"),
        _ => format!("{d}d{h}h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(42), "42s");
        assert_eq!(human_duration(900), "15m");
        assert_eq!(human_duration(5400), "1h30m");
        assert_eq!(human_duration(3 * 86_400 + 7200), "3d2h");
    }
}
