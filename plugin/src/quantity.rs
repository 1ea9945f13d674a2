//! Kubernetes resource quantities (`500m`, `0.5`, `128Mi`, `1G`, `1e9`), read the way the API
//! server and the scheduler read them: CPU in millicores and memory in bytes, rounded up (as
//! `Quantity.MilliValue()` and `Quantity.Value()` do), so a request is never under-counted.
//!
//! The grammar is apimachinery's: a non-negative decimal number (`1`, `1.5`, `.5`, `5.`) and one
//! suffix, binary (`Ki` … `Ei`), decimal (`n`, `u`, `m`, none, `k`, `M`, `G`, `T`, `P`, `E`) or
//! a decimal exponent (`e3`, `E-3`). Negative quantities are refused: nothing we read (requests,
//! allocatable, a hook's memory limit) can be negative.

/// CPU in millicores: `500m` is 500, `2` is 2000, `0.5` is 500, `1u` rounds up to 1.
pub fn parse_cpu(text: &str) -> Result<u64, String> {
    parse_scaled(text, 3, "500m or 2")
}

/// Memory in bytes: `128Mi`, `1Gi`, `1G`, `1e9`, `1048576`; fractions of a byte round up.
pub fn parse_memory(text: &str) -> Result<u64, String> {
    parse_scaled(text, 0, "128Mi or 1G")
}

/// Millicores as Kubernetes writes them: `2` for whole cores, else `500m`.
pub fn format_cpu(millis: u64) -> String {
    if millis.is_multiple_of(1000) {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

/// Bytes with the largest suffix that divides them exactly, binary first: `1Gi`, `1536Mi`,
/// `1G`, `1000`.
pub fn format_memory(bytes: u64) -> String {
    const BINARY: [(&str, u32); 6] = [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ];
    const DECIMAL: [(&str, u32); 6] = [
        ("E", 18),
        ("P", 15),
        ("T", 12),
        ("G", 9),
        ("M", 6),
        ("k", 3),
    ];
    if bytes == 0 {
        return "0".into();
    }
    for (suffix, shift) in BINARY {
        if bytes.trailing_zeros() >= shift {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    for (suffix, exp) in DECIMAL {
        let unit = 10u64.pow(exp);
        if bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// Most significant digits a quantity may carry; more cannot be held exactly (and no real
/// quantity has them).
const MAX_DIGITS: usize = 30;

/// The quantity `text` times `10^target`, rounded up; `example` goes in the error.
fn parse_scaled(text: &str, target: i32, example: &str) -> Result<u64, String> {
    let invalid = || format!("invalid quantity {text:?}: expected e.g. {example}");
    let t = text.trim();
    let t = t.strip_prefix('+').unwrap_or(t);
    if t.starts_with('-') {
        return Err(format!("invalid quantity {text:?}: must not be negative"));
    }
    let end = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.len() + fraction.len() == 0 || fraction.contains('.') {
        return Err(invalid());
    }
    // The digits as one integer, leading zeros aside (no allocation: quantities are many).
    let (mut mantissa, mut digits) = (0u128, 0);
    for d in whole.bytes().chain(fraction.bytes()).map(|b| b - b'0') {
        if mantissa == 0 && d == 0 {
            continue;
        }
        digits += 1;
        if digits > MAX_DIGITS {
            return Err(format!("quantity {text:?} has too many digits"));
        }
        mantissa = mantissa * 10 + u128::from(d);
    }
    let (exp10, shift) = suffix_scale(suffix).ok_or_else(invalid)?;
    let too_large = || format!("quantity {text:?} is too large");
    let value = mantissa
        .checked_shl(shift)
        .filter(|v| v >> shift == mantissa);
    let value = value.ok_or_else(too_large)?;
    let exponent = exp10 + target - fraction.len() as i32;
    let scaled = if exponent >= 0 {
        10u128
            .checked_pow(exponent as u32)
            .and_then(|p| value.checked_mul(p))
            .ok_or_else(too_large)?
    } else {
        match 10u128.checked_pow(exponent.unsigned_abs()) {
            Some(p) => value.div_ceil(p),
            // Smaller than any unit we count in, but not nothing.
            None => u128::from(value > 0),
        }
    };
    u64::try_from(scaled).map_err(|_| too_large())
}

/// A suffix as a power of ten and a power of two; none when it is not one.
fn suffix_scale(suffix: &str) -> Option<(i32, u32)> {
    let scale = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        _ => {
            let exponent = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            (exponent.parse::<i32>().ok().filter(|e| e.abs() <= 64)?, 0)
        }
    };
    Some(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_in_millicores() {
        assert_eq!(parse_cpu("500m"), Ok(500));
        assert_eq!(parse_cpu("2"), Ok(2000));
        assert_eq!(parse_cpu("0.5"), Ok(500));
        assert_eq!(parse_cpu(".25"), Ok(250));
        assert_eq!(parse_cpu("1."), Ok(1000));
        assert_eq!(parse_cpu("+1"), Ok(1000));
        assert_eq!(parse_cpu("0"), Ok(0));
        assert_eq!(parse_cpu("2e-3"), Ok(2));
        // Below a millicore rounds up, as the scheduler counts it.
        assert_eq!(parse_cpu("1u"), Ok(1));
        assert_eq!(parse_cpu("100n"), Ok(1));
        assert_eq!(parse_cpu("0.0001"), Ok(1));
        assert_eq!(parse_cpu("1500u"), Ok(2));
    }

    #[test]
    fn memory_in_bytes() {
        assert_eq!(parse_memory("128Mi"), Ok(128 << 20));
        assert_eq!(parse_memory("1Gi"), Ok(1 << 30));
        assert_eq!(parse_memory("1G"), Ok(1_000_000_000));
        assert_eq!(parse_memory("1e9"), Ok(1_000_000_000));
        assert_eq!(parse_memory("1E9"), Ok(1_000_000_000));
        assert_eq!(parse_memory("1e+3"), Ok(1000));
        assert_eq!(parse_memory("1048576"), Ok(1 << 20));
        assert_eq!(parse_memory("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_memory("64k"), Ok(64_000));
        assert_eq!(parse_memory("64Ki"), Ok(64 << 10));
        assert_eq!(parse_memory("2E"), Ok(2_000_000_000_000_000_000));
        assert_eq!(parse_memory("1Ei"), Ok(1 << 60));
        assert_eq!(parse_memory(" 1Mi "), Ok(1 << 20));
        // A fraction of a byte (legal, if odd) rounds up.
        assert_eq!(parse_memory("1500m"), Ok(2));
        assert_eq!(parse_memory("1e-40"), Ok(1));
        assert_eq!(parse_memory("0e-40"), Ok(0));
    }

    #[test]
    fn what_is_not_a_quantity() {
        for bad in [
            "", "Mi", ".", "1..5", "1.2.3", "1mi", "1 Mi", "1e", "e3", "1e3.5", "1Ki2", "abc",
            "0x10", "1e999", "1e3m",
        ] {
            assert!(parse_memory(bad).is_err(), "{bad:?} parsed");
        }
        assert!(
            parse_cpu("-1")
                .unwrap_err()
                .contains("must not be negative")
        );
        assert!(parse_memory("16Ei").unwrap_err().contains("too large"));
        assert!(parse_cpu("1e20").unwrap_err().contains("too large"));
        assert!(
            parse_memory("1234567890123456789012345678901")
                .unwrap_err()
                .contains("too many digits")
        );
        // Leading zeros are not digits that count.
        assert_eq!(parse_memory("0000000000000000000000000000000001"), Ok(1));
    }

    #[test]
    fn formats_back_in_kubernetes_units() {
        assert_eq!(format_cpu(500), "500m");
        assert_eq!(format_cpu(2000), "2");
        assert_eq!(format_cpu(0), "0");
        assert_eq!(format_memory(1 << 30), "1Gi");
        assert_eq!(format_memory(3 << 29), "1536Mi");
        assert_eq!(format_memory(1_000_000_000), "1G");
        assert_eq!(format_memory(1_000), "1k");
        assert_eq!(format_memory(1_001), "1001");
        assert_eq!(format_memory(0), "0");
        for text in ["128Mi", "1G", "1536Mi", "7"] {
            assert_eq!(format_memory(parse_memory(text).unwrap()), text);
        }
    }
}
