//! Flooding tests' tools: `probe-flood` in a pod's namespace and cgroup, and what a pinned node
//! datapath reports about it (map fill, a namespace's counters).
use std::{path::Path, process::Command, time::Duration};

use redirect_testkit::{Cgroup, Child, Netns};

use crate::{bin_path, node::ok};

/// `probe-flood ARGS` in `ns` and `cgroup` as uid/gid `id`.
pub fn flood(ns: &Netns, cgroup: &Cgroup, id: (&str, &str), args: &[&str]) -> Command {
    let mut cmd = Command::new(bin_path("probe-flood"));
    cmd.arg("--netns")
        .arg(ns.path())
        .arg("--cgroup")
        .arg(cgroup.path())
        .args(["--uid", id.0, "--gid", id.1])
        .args(args);
    cmd
}

fn node_json(pins: &Path) -> serde_json::Value {
    let out = Command::new(bin_path("redirect"))
        .args(["status", "--json", "--bpffs"])
        .arg(pins)
        .output()
        .expect("run redirect status");
    serde_json::from_slice(&ok(&out, "status").into_bytes()).expect("status json")
}

/// Entries the node status of the datapath pinned at `pins` reports in `map`.
pub fn fill(pins: &Path, map: &str) -> u64 {
    let v = node_json(pins);
    v["node"]["fill"][map]
        .as_u64()
        .unwrap_or_else(|| panic!("no {map} fill in {v}"))
}

/// Counter `name` of namespace `ns` (`redirect stats --netns`).
pub fn counter(pins: &Path, ns: &Netns, name: &str) -> u64 {
    let out = Command::new(bin_path("redirect"))
        .args(["stats", "--json", "--bpffs"])
        .arg(pins)
        .arg("--netns")
        .arg(ns.path())
        .output()
        .expect("run redirect stats");
    let v: serde_json::Value = serde_json::from_slice(ok(&out, "stats").as_bytes()).expect("json");
    // A namespace (or counter) nothing has counted for yet is absent: zero.
    v.as_array()
        .and_then(|a| a.first())
        .and_then(|ns| ns["counters"][name].as_u64())
        .unwrap_or(0)
}

/// In `ns`: a listener on `port` (as `listener_id`) that never accepts, then `count` connects
/// to `dst` held open by an application (uid/gid 1000): past the listener's backlog they stay
/// in `SYN_SENT`. Both processes end when the returned children drop (the holder first).
pub fn hold_syn_sent(
    ns: &Netns,
    cgroup: &Cgroup,
    listener_id: (&str, &str),
    port: &str,
    dst: &str,
    count: usize,
) -> (Child, Child) {
    let mut stuck = Child::spawn(
        "probe-flood stuck listener",
        flood(ns, cgroup, listener_id, &["--stuck-listen", port]),
    )
    .expect("start the stuck listener");
    stuck
        .wait_line("listening", Duration::from_secs(10), |l| l == "listening")
        .expect("listening");
    let n = count.to_string();
    let mut held = Child::spawn(
        "probe-flood holder",
        flood(
            ns,
            cgroup,
            ("1000", "1000"),
            &["--hold-tcp", dst, "--count", &n],
        ),
    )
    .expect("start the holder");
    let want = format!("holding {count}");
    held.wait_line("holding", Duration::from_secs(20), |l| l == want)
        .unwrap_or_else(|e| panic!("{count} connects held: {e}"));
    (held, stuck)
}
