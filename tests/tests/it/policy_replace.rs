//! Replacing a namespace's policy removes every rule of the previous one, whether this daemon
//! wrote it (its own record of each namespace's entries, no map iterated) or another process
//! did (`redirect istio-iptables` run inside the pod while no daemon runs writes the maps
//! itself): real traffic from the pod shows which rules are left.
use std::process::Command;

use redirect_testkit::privileged;
use redirect_tests::{
    bin_path,
    conformance::{reach, sidecar_listeners, World},
    node::{ok, Node},
};

const CAPTURED: &str = "at=proxy/[::]:15001 orig=192.0.2.10:80";
const DIRECT: &str = "at=world/192.0.2.10:80 orig=192.0.2.10:80";
const DST: &str = "192.0.2.10:80";

/// Enrolls the pod through the daemon with istio-iptables arguments `args`.
fn enroll(node: &Node, w: &World, args: &str) {
    let netns = w.pod.path().display().to_string();
    let out = node.ok(&["enroll", "--netns", &netns, "--istio-args", args]);
    assert!(out.contains("enrolled"), "{out}");
}

#[test]
fn a_replaced_policy_leaves_none_of_its_rules_whoever_wrote_it() {
    privileged!();
    let node = Node::new();
    let w = World::new("rpr", false);
    let daemon = node.daemon();
    let _l = sidecar_listeners(&w, node.cgroup.path());
    let app = (1000, 1000);

    // Written by the daemon: each replacement drops what the previous one had (the last one
    // keeps port and CIDR rules of its own, so a stale entry of either kind would match).
    enroll(&node, &w, "-u 1337 -i '*' -x 192.0.2.0/24");
    assert_eq!(
        reach(&w, node.cgroup.path(), app, DST),
        DIRECT,
        "-x written"
    );
    enroll(&node, &w, "-u 1337 -i '*' -o 80");
    assert_eq!(
        reach(&w, node.cgroup.path(), app, DST),
        DIRECT,
        "-o written"
    );
    enroll(&node, &w, "-u 1337 -i '*' -x 10.250.0.0/16 -o 8080");
    assert_eq!(
        reach(&w, node.cgroup.path(), app, DST),
        CAPTURED,
        "the daemon's earlier -x 192.0.2.0/24 and -o 80 are gone"
    );
    let netns = w.pod.path().display().to_string();
    node.ok(&["unenroll", "--netns", &netns]);
    assert_eq!(
        reach(&w, node.cgroup.path(), app, DST),
        DIRECT,
        "unenrolled"
    );

    // Written by another process: istio-iptables inside the pod while the daemon is stopped
    // (an upgrade's gap) writes the maps directly; the daemon started again knows nothing of it.
    drop(daemon);
    // nsenter, not `ip netns exec`: that mounts a sysfs of the namespace's own over /sys,
    // hiding the host's bpffs.
    let direct = Command::new("nsenter")
        .arg(format!("--net={netns}"))
        .arg(bin_path("redirect"))
        .args(["istio-iptables", "--cgroup"])
        .arg(node.cgroup.path())
        .args(["-u", "1337", "-i", "*", "-x", "192.0.2.0/24", "-o", "80"])
        .env("REDIRECT_DAEMON_DIR", &node.dir)
        .env("REDIRECT_BPFFS", &node.pins)
        .output()
        .expect("run redirect istio-iptables in the pod");
    ok(&direct, "istio-iptables inside the pod");
    assert_eq!(
        reach(&w, node.cgroup.path(), app, DST),
        DIRECT,
        "the direct policy"
    );
    let _daemon = node.daemon();
    assert_eq!(
        reach(&w, node.cgroup.path(), app, DST),
        DIRECT,
        "the direct policy, kept by the daemon's start"
    );
    // The daemon replaces it: the rules it did not write are found in the maps and go too.
    enroll(&node, &w, "-u 1337 -i '*' -x 10.250.0.0/16 -o 8080");
    assert_eq!(
        reach(&w, node.cgroup.path(), app, DST),
        CAPTURED,
        "the direct policy's -x 192.0.2.0/24 and -o 80 are gone"
    );
    node.ok(&["unenroll", "--netns", &netns]);
    node.ok(&["uninstall"]);
}
