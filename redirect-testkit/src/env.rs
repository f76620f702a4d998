//! Privilege checks (fail in CI, skip with a reason elsewhere) and names unique to a run.
use std::sync::atomic::{AtomicU32, Ordering};

use crate::cgroup::cgroup2_root;

/// Returns true when the privileged tests can run. When they cannot: with `CI=true` this panics
/// with the reason (never a silent skip); otherwise it prints the reason and returns false.
pub fn privileged_or_skip(test: &str) -> bool {
    let reason = if !nix::unistd::geteuid().is_root() {
        Some("not running as root (BPF, cgroups and network namespaces need it)".to_owned())
    } else if !std::path::Path::new("/proc/self/mountinfo").exists() {
        Some("no /proc/self/mountinfo".to_owned())
    } else if let Err(e) = cgroup2_root() {
        Some(format!("{e:#}"))
    } else {
        None
    };
    match reason {
        None => true,
        Some(reason) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test}: privileged test cannot run in CI: {reason}"
            );
            eprintln!("SKIPPED {test}: {reason} (set CI=true to make this a failure)");
            false
        }
    }
}

/// A name unique to this process and call: `PREFIX` + pid (mod 100,000) + `x` + a counter;
/// short enough for interface names (<= 15 bytes) with a prefix of up to 4.
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}x{n}", std::process::id() % 100_000)
}

#[cfg(test)]
mod tests {
    use super::unique_name;

    #[test]
    fn names_are_unique_and_short() {
        let (a, b) = (unique_name("rth"), unique_name("rth"));
        assert_ne!(a, b);
        assert!(a.starts_with("rth") && a.len() <= 15, "{a}");
    }
}
