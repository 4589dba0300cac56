//! How the toolchain writes quantities for people: one spelling of a byte count, so a
//! lint, a hover, the explorer and `tessera run` never disagree on "48 KiB".

/// A byte count in binary units: `512 B`, `48 KiB`, `48.5 KiB`, `1.2 GiB`. A whole
/// number of the unit prints without decimals; anything else with one.
pub fn bytes(count: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut unit = 0;
    let mut scale = 1u64;
    while unit + 1 < UNITS.len() && count >= scale * 1024 {
        scale *= 1024;
        unit += 1;
    }
    if count.is_multiple_of(scale) {
        format!("{} {}", count / scale, UNITS[unit])
    } else {
        format!("{:.1} {}", count as f64 / scale as f64, UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn whole_units_have_no_decimals_and_others_one() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024), "1 KiB");
        assert_eq!(bytes(48 * 1024), "48 KiB");
        assert_eq!(bytes(48 * 1024 + 512), "48.5 KiB");
        assert_eq!(bytes(227 * 1024), "227 KiB");
        assert_eq!(bytes(3 << 30), "3 GiB");
        assert_eq!(bytes((1 << 30) + (1 << 29)), "1.5 GiB");
    }
}
