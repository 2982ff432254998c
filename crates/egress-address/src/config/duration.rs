//! Durations as flags take them: `500ms`, `5s`, `10m`, `1h`, or combined like `1m30s`.

use std::time::Duration;

/// Parses a Go-style duration (units ms, s, m, h; a bare `0` is zero).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let bad = || format!("{text:?} is not a duration (use e.g. 500ms, 5s, 10m, 1h)");
    if text.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let value: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        // A value past what a Duration holds is refused, not a panic at startup.
        let too_long = || format!("{text:?} is too long a duration");
        let part = Duration::try_from_secs_f64(value * scale).map_err(|_| too_long())?;
        total = total.checked_add(part).ok_or_else(too_long)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        for bad in ["", "5", "s", "5x", "-5s", "5 s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        // Found by the fuzzer (fuzz/ durations, flags): these panicked.
        for huge in [
            "99999999999999999999h",
            "1e400s",
            "5000000000000000h5000000000000000h",
        ] {
            let err = parse_duration(huge).unwrap_err();
            assert!(err.contains("duration"), "{huge}: {err}");
        }
    }
}
