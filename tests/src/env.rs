//! Privilege checks (fail in CI, skip with a reason elsewhere), unique names and binary paths.
use std::{
    path::PathBuf,
    sync::atomic::{AtomicU32, Ordering},
};

/// Returns true when the privileged tests can run. When they cannot: with `CI=true` this panics
/// with the reason (never a silent skip); otherwise it prints the reason and returns false.
pub fn privileged_or_skip(test: &str) -> bool {
    let reason = if !nix::unistd::geteuid().is_root() {
        Some("not running as root (BPF, cgroups and network namespaces need it)".to_owned())
    } else if !std::path::Path::new("/proc/self/mountinfo").exists() {
        Some("no /proc/self/mountinfo".to_owned())
    } else if cgroup2_root().is_none() {
        Some("no cgroup v2 filesystem is mounted".to_owned())
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

/// The cgroup v2 mount point, from /proc/self/mountinfo.
pub fn cgroup2_root() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mount_point = left.split_whitespace().nth(4)?;
        (right.split_whitespace().next()? == "cgroup2").then(|| PathBuf::from(mount_point))
    })
}

/// A name unique to this process and call, short enough for interface names (<= 15 chars).
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}x{n}", std::process::id() % 100_000)
}

/// Path of a workspace binary (`redirect`, `redirect-proxy`) next to the test executable's
/// profile directory. `cargo xtask test` builds them before running the tests.
pub fn bin_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binary lives in target/<profile>/deps");
    let path = profile_dir.join(name);
    assert!(
        path.is_file(),
        "{} is missing: run the tests with `cargo xtask test`, which builds the binaries with the BPF object",
        path.display()
    );
    path
}
