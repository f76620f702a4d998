//! Privilege checks (fail in CI, skip with a reason elsewhere) and names unique to a run.
use std::sync::atomic::{AtomicU32, Ordering};

use crate::cgroup::cgroup2_root;

/// The one CI rule of every test: with `CI=true` a test that cannot run (a missing privilege,
/// tool or kernel feature) fails; elsewhere it says why and is skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Whether `test` can run: `missing` is why it cannot. With [`in_ci`] a reason panics (never a
/// silent skip); otherwise it prints `SKIPPED test: reason` and returns false.
pub fn runs_or_skip(test: &str, missing: Option<String>) -> bool {
    match missing {
        None => true,
        Some(reason) => {
            assert!(!in_ci(), "{test}: cannot run in CI: {reason}");
            eprintln!("SKIPPED {test}: {reason} (set CI=true to make this a failure)");
            false
        }
    }
}

/// Why this process cannot run the privileged tests (root, /proc, cgroup v2), if it cannot.
pub fn unprivileged() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        Some("not running as root (BPF, cgroups and network namespaces need it)".to_owned())
    } else if !std::path::Path::new("/proc/self/mountinfo").exists() {
        Some("no /proc/self/mountinfo".to_owned())
    } else {
        cgroup2_root().err().map(|e| format!("{e:#}"))
    }
}

/// Returns true when the privileged tests can run ([`runs_or_skip`] with [`unprivileged`]).
/// Tests say [`privileged!`](crate::privileged) instead, which names the test by its path.
pub fn privileged_or_skip(test: &str) -> bool {
    runs_or_skip(test, unprivileged())
}

/// The calling function's path (`it::outbound::redirects_...`): a test's own name.
#[macro_export]
macro_rules! test_path {
    () => {{
        fn here() {}
        let name = ::std::any::type_name_of_val(&here);
        name.strip_suffix("::here").unwrap_or(name)
    }};
}

/// The guard that opens every privileged test: returns from it (skipped, naming the test's
/// path and why) unless it can run; with `CI=true` a test that cannot run fails instead. With
/// an argument, also the reason another need is missing (`Option<String>`).
#[macro_export]
macro_rules! privileged {
    () => {
        if !$crate::privileged_or_skip($crate::test_path!()) {
            return;
        }
    };
    ($missing:expr) => {
        if !$crate::privileged_or_skip($crate::test_path!())
            || !$crate::env::runs_or_skip($crate::test_path!(), $missing)
        {
            return;
        }
    };
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

    #[test]
    fn a_test_is_named_by_its_path() {
        assert_eq!(
            crate::test_path!(),
            "redirect_testkit::env::tests::a_test_is_named_by_its_path"
        );
    }

    #[test]
    fn nothing_missing_runs() {
        assert!(super::runs_or_skip("t", None));
    }
    use super::unique_name;

    #[test]
    fn names_are_unique_and_short() {
        let (a, b) = (unique_name("rth"), unique_name("rth"));
        assert_ne!(a, b);
        assert!(a.starts_with("rth") && a.len() <= 15, "{a}");
    }
}
