//! Timestamps as the apiserver's Go decoder reads them, refused in its words.
//!
//! `metav1.Time` decodes with Go's `time.Parse(time.RFC3339, ..)`, which also takes a fraction of
//! a second; `metav1.MicroTime` with the layout `2006-01-02T15:04:05.000000Z07:00`, which takes
//! exactly six fractional digits, so `2026-01-01T00:00:00Z` is not a MicroTime. A value that does
//! not parse fails the whole request with the `parsing time ...` message Go's `time.ParseError`
//! prints.

/// Which of the two layouts a field is decoded with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeLayout {
    /// `metav1.Time`: `2006-01-02T15:04:05Z07:00`.
    Rfc3339,
    /// `metav1.MicroTime`: `2006-01-02T15:04:05.000000Z07:00`.
    Micro,
}

impl TimeLayout {
    pub fn layout(self) -> &'static str {
        match self {
            TimeLayout::Rfc3339 => "2006-01-02T15:04:05Z07:00",
            TimeLayout::Micro => "2006-01-02T15:04:05.000000Z07:00",
        }
    }
}

/// Go's `time.quote`: double quotes, with quotes, backslashes and control bytes escaped.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One element of a layout: literal text, or a number or zone the parser reads.
#[derive(Clone, Copy)]
enum Elem {
    Lit(&'static str),
    Year,
    Month,
    Day,
    Hour,
    Minute,
    Second,
    Micros,
    Zone,
}

impl Elem {
    /// How Go names the element in `cannot parse .. as ..`.
    fn text(self) -> &'static str {
        match self {
            Elem::Lit(s) => s,
            Elem::Year => "2006",
            Elem::Month => "01",
            Elem::Day => "02",
            Elem::Hour => "15",
            Elem::Minute => "04",
            Elem::Second => "05",
            Elem::Micros => ".000000",
            Elem::Zone => "Z07:00",
        }
    }
}

fn elems(layout: TimeLayout) -> Vec<Elem> {
    let mut v = vec![
        Elem::Year,
        Elem::Lit("-"),
        Elem::Month,
        Elem::Lit("-"),
        Elem::Day,
        Elem::Lit("T"),
        Elem::Hour,
        Elem::Lit(":"),
        Elem::Minute,
        Elem::Lit(":"),
        Elem::Second,
    ];
    if layout == TimeLayout::Micro {
        v.push(Elem::Micros);
    }
    v.push(Elem::Zone);
    v
}

fn digit(s: &[u8], i: usize) -> bool {
    s.get(i).is_some_and(u8::is_ascii_digit)
}

/// Go's `getnum`: one or two digits (exactly two when `fixed`).
fn getnum(s: &[u8], fixed: bool) -> Option<(u32, usize)> {
    if !digit(s, 0) {
        return None;
    }
    if !digit(s, 1) {
        return (!fixed).then(|| (u32::from(s[0] - b'0'), 1));
    }
    Some((u32::from(s[0] - b'0') * 10 + u32::from(s[1] - b'0'), 2))
}

fn days_in(month: u32, year: i64) -> u32 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses `value` as Go does with `layout`, and returns Go's error message if it does not.
pub fn parse(layout: TimeLayout, value: &str) -> Result<(), String> {
    let whole = quote(value);
    let lay = quote(layout.layout());
    let cannot = |elem: &str, rest: &str| {
        format!(
            "parsing time {whole} as {lay}: cannot parse {} as {}",
            quote(rest),
            quote(elem)
        )
    };
    let out_of_range = |what: &str| format!("parsing time {whole}: {what} out of range");
    let b = value.as_bytes();
    let mut pos = 0usize;
    let (mut year, mut month, mut day) = (0i64, 0u32, 0u32);
    for e in elems(layout) {
        let rest = &b[pos..];
        let rest_str = &value[pos..];
        let bad = || cannot(e.text(), rest_str);
        match e {
            Elem::Lit(l) => {
                if !rest.starts_with(l.as_bytes()) {
                    return Err(bad());
                }
                pos += l.len();
            }
            Elem::Year => {
                if rest.len() < 4 || !digit(rest, 0) {
                    return Err(bad());
                }
                year = rest_str[..4].parse().map_err(|_| bad())?;
                pos += 4;
            }
            Elem::Month | Elem::Day | Elem::Minute | Elem::Second | Elem::Hour => {
                let (n, used) = getnum(rest, !matches!(e, Elem::Hour)).ok_or_else(bad)?;
                pos += used;
                let range = match e {
                    Elem::Month if !(1..=12).contains(&n) => Some("month"),
                    Elem::Hour if n >= 24 => Some("hour"),
                    Elem::Minute if n >= 60 => Some("minute"),
                    Elem::Second if n >= 60 => Some("second"),
                    _ => None,
                };
                if let Some(what) = range {
                    return Err(out_of_range(what));
                }
                match e {
                    Elem::Month => month = n,
                    Elem::Day => day = n,
                    _ => {}
                }
                // Go takes a fraction after the seconds even when the layout has none.
                if matches!(e, Elem::Second)
                    && layout == TimeLayout::Rfc3339
                    && b.len() > pos + 1
                    && matches!(b[pos], b'.' | b',')
                    && digit(b, pos + 1)
                {
                    pos += 2;
                    while digit(b, pos) {
                        pos += 1;
                    }
                }
            }
            Elem::Micros => {
                if rest.len() < 7 || !matches!(rest[0], b'.' | b',') {
                    return Err(bad());
                }
                if !rest[1..7].iter().all(u8::is_ascii_digit) {
                    return Err(bad());
                }
                pos += 7;
            }
            Elem::Zone => {
                if rest.first() == Some(&b'Z') {
                    pos += 1;
                } else {
                    if rest.len() < 6 || rest[3] != b':' || !matches!(rest[0], b'+' | b'-') {
                        return Err(bad());
                    }
                    let num = |s: &[u8]| {
                        (s.len() == 2 && s.iter().all(u8::is_ascii_digit))
                            .then(|| u32::from(s[0] - b'0') * 10 + u32::from(s[1] - b'0'))
                    };
                    let (Some(h), Some(m)) = (num(&rest[1..3]), num(&rest[4..6])) else {
                        return Err(bad());
                    };
                    if h > 24 {
                        return Err(out_of_range("time zone offset hour"));
                    }
                    if m > 60 {
                        return Err(out_of_range("time zone offset minute"));
                    }
                    pos += 6;
                }
            }
        }
    }
    if pos < b.len() {
        return Err(format!(
            "parsing time {whole}: extra text: {}",
            quote(&value[pos..])
        ));
    }
    if day < 1 || day > days_in(month, year) {
        return Err(out_of_range("day"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_time_takes_exactly_six_fractional_digits() {
        assert_eq!(
            parse(TimeLayout::Micro, "2026-01-02T03:04:05.123456Z"),
            Ok(())
        );
        assert_eq!(
            parse(TimeLayout::Micro, "2026-01-02T03:04:05.123456+02:00"),
            Ok(())
        );
        assert_eq!(
            parse(TimeLayout::Micro, "2026-01-02T03:04:05Z").unwrap_err(),
            r#"parsing time "2026-01-02T03:04:05Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000""#
        );
        assert_eq!(
            parse(TimeLayout::Micro, "yesterday").unwrap_err(),
            r#"parsing time "yesterday" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "yesterday" as "2006""#
        );
    }

    #[test]
    fn rfc3339_takes_an_optional_fraction() {
        assert_eq!(parse(TimeLayout::Rfc3339, "2026-01-02T03:04:05Z"), Ok(()));
        assert_eq!(parse(TimeLayout::Rfc3339, "2026-01-02T03:04:05.5Z"), Ok(()));
        assert_eq!(
            parse(TimeLayout::Rfc3339, "2026-01-02 03:04:05Z").unwrap_err(),
            r#"parsing time "2026-01-02 03:04:05Z" as "2006-01-02T15:04:05Z07:00": cannot parse " 03:04:05Z" as "T""#
        );
        assert_eq!(
            parse(TimeLayout::Rfc3339, "2026-13-02T03:04:05Z").unwrap_err(),
            r#"parsing time "2026-13-02T03:04:05Z": month out of range"#
        );
        assert_eq!(
            parse(TimeLayout::Rfc3339, "2026-02-30T03:04:05Z").unwrap_err(),
            r#"parsing time "2026-02-30T03:04:05Z": day out of range"#
        );
        assert_eq!(
            parse(TimeLayout::Rfc3339, "2026-02-03T03:04:05Zjunk").unwrap_err(),
            r#"parsing time "2026-02-03T03:04:05Zjunk": extra text: "junk""#
        );
    }
}
