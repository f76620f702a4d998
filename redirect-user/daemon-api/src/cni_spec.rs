//! The CNI specification versions `redirect-cni` speaks, and which commands each has: read by
//! the plugin (VERSION, every command's check) and by `install-cni` and its readiness check,
//! which refuse a conflist the plugin would fail on.

/// The versions the plugin speaks (VERSION's `supportedVersions`): every version a primary
/// plugin's stock conflist still says (flannel and Calico ship `0.3.1`), through 1.1.0.
/// `prevResult` has the same `ips[].address` in all of them, and the plugin's result is
/// `prevResult` itself, so it is in the list's version by construction.
pub const SUPPORTED_VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// Whether the plugin speaks `version`.
pub fn supported(version: &str) -> bool {
    SUPPORTED_VERSIONS.contains(&version)
}

/// The first version that has `command`: CHECK came with 0.4.0, STATUS and GC with 1.1.0;
/// ADD, DEL and VERSION are in every version.
pub fn introduced(command: &str) -> Option<&'static str> {
    match command {
        "CHECK" => Some("0.4.0"),
        "STATUS" | "GC" => Some("1.1.0"),
        _ => None,
    }
}

/// Whether a configuration of `version` (one of [`SUPPORTED_VERSIONS`]) allows `command`.
pub fn allows(version: &str, command: &str) -> bool {
    introduced(command).is_none_or(|since| ordinal(version) >= ordinal(since))
}

/// Where `version` stands among [`SUPPORTED_VERSIONS`] (an unknown one first).
fn ordinal(version: &str) -> usize {
    SUPPORTED_VERSIONS
        .iter()
        .position(|v| *v == version)
        .map_or(0, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_follow_their_versions() {
        for v in SUPPORTED_VERSIONS {
            assert!(
                allows(v, "ADD") && allows(v, "DEL") && allows(v, "VERSION"),
                "{v}"
            );
        }
        assert!(!allows("0.3.1", "CHECK"));
        assert!(allows("0.4.0", "CHECK"));
        assert!(!allows("1.0.0", "GC") && !allows("1.0.0", "STATUS"));
        assert!(allows("1.1.0", "GC") && allows("1.1.0", "STATUS"));
        assert!(supported("0.3.1") && !supported("0.2.0") && !supported("2.0.0"));
    }
}
