//! Plain aligned text tables for terminal output.

use std::io::Write;

/// Writes `rows` under `header`, each column as wide as its widest cell.
pub fn write<const N: usize>(
    out: &mut impl Write,
    header: &[&str; N],
    rows: &[[String; N]],
) -> std::io::Result<()> {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |out: &mut dyn Write, cells: Vec<&str>| -> std::io::Result<()> {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == N {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        writeln!(out, "{}", s.trim_end())
    };
    line(out, header.to_vec())?;
    for row in rows {
        line(out, row.iter().map(String::as_str).collect())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_are_aligned() {
        let mut out = Vec::new();
        super::write(
            &mut out,
            &["A", "BB"],
            &[["xyz".into(), "1".into()], ["q".into(), "22".into()]],
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "A    BB\nxyz  1\nq    22\n"
        );
    }
}
