//! Loads Istio's golden iptables rules into a test namespace (the differential reference).
use std::{
    io::Write as _,
    path::PathBuf,
    process::{Command, Stdio},
};

use crate::netns::Netns;

/// `<repo>/../shared/istio-reference`, where the goldens live.
pub fn reference_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/istio-reference")
}

/// The IPv4 `iptables-restore` input of golden `name`: the first run of `* table ... COMMIT`
/// blocks (a dual-stack golden repeats the tables for ip6tables after them).
pub fn golden_v4(name: &str) -> String {
    let path = reference_dir()
        .join("capture-golden")
        .join(format!("{name}.golden"));
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut out = String::new();
    let mut seen = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if let Some(table) = line.strip_prefix("* ") {
            if seen.contains(&table.to_owned()) {
                break;
            }
            seen.push(table.to_owned());
            inside = true;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
        if line == "COMMIT" {
            inside = false;
        }
    }
    assert!(!out.is_empty(), "no IPv4 rules in {}", path.display());
    out
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
