//! Loads Istio's golden iptables rules into a test namespace (the differential reference).
use std::{
    io::Write as _,
    path::PathBuf,
    process::{Command, Stdio},
};

use crate::netns::Netns;

/// `tests/data/istio`, where the vendored reference data lives.
pub fn reference_dir() -> PathBuf {
    redirect_testkit::reference::dir()
}

/// The IPv4 `iptables-restore` input of golden `name`.
pub fn golden_v4(name: &str) -> String {
    redirect_testkit::reference::golden(name).v4
}

/// Runs `iptables-restore` with `rules` inside `ns`.
pub fn restore(ns: &Netns, rules: &str) {
    restore_with(ns, "iptables-restore", rules);
}

/// Runs `tool` (`iptables-restore` or `ip6tables-restore`) with `rules` inside `ns`.
pub fn restore_with(ns: &Netns, tool: &str, rules: &str) {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name(), tool])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iptables-restore");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(rules.as_bytes())
        .expect("write rules");
    let out = child.wait_with_output().expect("iptables-restore");
    assert!(
        out.status.success(),
        "{tool}: {}\n{rules}",
        String::from_utf8_lossy(&out.stderr)
    );
}
