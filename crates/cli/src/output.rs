//! Human formatting of amounts and plain-text tables.

/// Bytes for memory-like resources, plain numbers otherwise.
pub fn amount(resource: &str, value: f64) -> String {
    if resource == "memory" || resource.ends_with("_memory") {
        bytes(value)
    } else if value.fract() == 0.0 {
        format!("{value:.1}")
    } else {
        format!("{value}")
    }
}

pub fn bytes(value: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = value;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{v:.0}{}", UNITS[0])
    } else {
        format!("{v:.2}{}", UNITS[unit])
    }
}

/// Left-aligned columns separated by two spaces.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        padded.join("  ").trim_end().to_string()
    };
    let mut out = vec![line(headers.to_vec())];
    out.extend(rows.iter().map(|r| line(r.iter().map(String::as_str).collect())));
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_amounts() {
        assert_eq!(amount("CPU", 2.0), "2.0");
        assert_eq!(amount("CPU", 0.5), "0.5");
        assert_eq!(amount("memory", 1536.0 * 1024.0 * 1024.0), "1.50GiB");
        assert_eq!(amount("object_store_memory", 512.0), "512B");
    }

    #[test]
    fn aligns_columns() {
        let t = table(&["A", "BB"], &[vec!["long".into(), "x".into()]]);
        assert_eq!(t, "A     BB\nlong  x");
    }
}
