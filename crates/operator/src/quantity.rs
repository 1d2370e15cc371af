//! Kubernetes resource quantities ("500m", "2Gi", "1e3") as numbers.

/// The value of a quantity in its base unit (cores, bytes), or None when malformed.
pub fn parse(text: &str) -> Option<f64> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exp if exp.starts_with(['e', 'E']) => 10f64.powi(exp[1..].parse().ok()?),
        _ => return None,
    };
    Some(number * factor).filter(|v| v.is_finite() && *v >= 0.0)
}

/// Whole units, rounded up as Kubernetes does for integer views of a quantity.
pub fn ceil_units(text: &str) -> Option<u64> {
    parse(text).map(|v| (v - 1e-9).ceil().max(0.0) as u64)
}

/// A sum of quantities written back in the form status fields use.
pub fn format_cpu(cores: f64) -> String {
    if cores.fract().abs() < 1e-9 {
        format!("{}", cores as u64)
    } else {
        format!("{}m", (cores * 1000.0).round() as u64)
    }
}

pub fn format_bytes(bytes: f64) -> String {
    let bytes = bytes.round() as u64;
    for (suffix, unit) in [("Gi", 1u64 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_suffixes_kubernetes_accepts() {
        assert_eq!(parse("500m"), Some(0.5));
        assert_eq!(parse("2"), Some(2.0));
        assert_eq!(parse("2Gi"), Some(2.0 * 1024.0 * 1024.0 * 1024.0));
        assert_eq!(parse("1G"), Some(1e9));
        assert_eq!(parse("1e3"), Some(1000.0));
        assert_eq!(parse("1.5"), Some(1.5));
        assert_eq!(parse("12Zi"), None);
        assert_eq!(parse("abc"), None);
        assert_eq!(parse("-1"), None);
    }

    #[test]
    fn rounds_up_to_whole_units() {
        assert_eq!(ceil_units("500m"), Some(1));
        assert_eq!(ceil_units("2"), Some(2));
        assert_eq!(ceil_units("2500m"), Some(3));
        assert_eq!(ceil_units("0"), Some(0));
    }

    #[test]
    fn formats_sums_as_status_fields_show_them() {
        assert_eq!(format_cpu(3.0), "3");
        assert_eq!(format_cpu(1.5), "1500m");
        assert_eq!(format_bytes(3.0 * 1024.0 * 1024.0 * 1024.0), "3Gi");
        assert_eq!(format_bytes(1536.0 * 1024.0 * 1024.0), "1536Mi");
        assert_eq!(format_bytes(1000.0), "1000");
    }
}
