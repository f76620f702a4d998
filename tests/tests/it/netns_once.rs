//! A namespace path is opened once per apply and once per enrollment: the path is a bind
//! mount of the test's own, and a fanotify permission gate holds the first open of the
//! namespace while the test remounts the path onto another namespace. The apply must be
//! rolled back naming both cookies, with nothing ever written for (or attached in) the other
//! namespace; the daemon must follow an enrollment through the descriptor it opened.
use std::{path::Path, sync::Arc, time::Duration};

use redirect_testkit::{ip, privileged, until, Cgroup, Netns};
use redirect_tests::{
    gate::{cookie_and_inode, netns_link_inodes, pinned_u64s, OpenGate, SwapPath},
    node::{istio_iptables, ok, Node, Pins},
};

const ARGS: &[&str] = &[
    "-p", "15001", "-z", "15006", "-u", "1337", "-i", "*", "-b", "*",
];

/// A namespace with one address of its own (on one end of a veth pair it holds both ends of).
fn with_address(prefix: &str, addr: &str) -> Netns {
    let ns = Netns::new(prefix).expect("netns");
    let n = ns.name();
    // No link-local IPv6 addresses: the namespace has exactly the one address given.
    ns.sysctl(&[
        "net.ipv6.conf.default.disable_ipv6=1",
        "net.ipv6.conf.all.disable_ipv6=1",
    ])
    .expect("sysctl");
    ip(&[
        "-n", n, "link", "add", "d0", "type", "veth", "peer", "name", "d1",
    ])
    .expect("veth");
    ip(&["-n", n, "addr", "add", addr, "dev", "d0"]).expect("address");
    ip(&["-n", n, "link", "set", "d1", "up"]).expect("up");
    ip(&["-n", n, "link", "set", "d0", "up"]).expect("up");
    ns
}

/// The cookies that own something in the pinned maps: policies (outbound, inbound) and
/// addresses.
fn owners(pins: &Path) -> Vec<u64> {
    let mut all = pinned_u64s(&pins.join("maps/NETNS_OUTBOUND"), true);
    all.extend(pinned_u64s(&pins.join("maps/NETNS_INBOUND"), true));
    all.extend(pinned_u64s(&pins.join("maps/POD_ADDRS"), false));
    all
}

#[test]
fn a_namespace_swapped_mid_apply_is_rolled_back_and_the_other_is_never_touched() {
    privileged!();
    let a = with_address("rna", "198.18.201.1/32");
    let b = with_address("rnb", "198.18.202.1/32");
    let (a_cookie, a_ino) = cookie_and_inode(&a.path());
    let (b_cookie, b_ino) = cookie_and_inode(&b.path());
    let cgroup = Cgroup::new("rnc").expect("cgroup");
    let pins = Pins::new();
    let swap = Arc::new(SwapPath::new(&a.path()));

    // The apply's first open of A is held until the path names B.
    let gate = {
        let (swap, b_path) = (swap.clone(), b.path());
        OpenGate::new(&a.path(), None, move || swap.point_at(&b_path))
    };
    let out = istio_iptables(&pins.0, cgroup.path(), swap.path(), ARGS);
    let opens = gate.finish();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        opens.len(),
        1,
        "the gate held the apply's first open of A, and only that: {opens:?}"
    );
    assert!(
        !out.status.success(),
        "an apply whose path named another namespace by its end succeeded: {stderr}"
    );
    for want in [
        swap.path().display().to_string(),
        format!("netns cookie {a_cookie}"),
        format!("netns cookie {b_cookie}"),
    ] {
        assert!(stderr.contains(&want), "the error names {want}: {stderr}");
    }
    // Rolled back: nothing for A; never anything for B, in the maps or as a link.
    let left = owners(&pins.0);
    assert!(
        !left.contains(&a_cookie) && !left.contains(&b_cookie),
        "entries left (A {a_cookie}, B {b_cookie}): {left:?}"
    );
    let links = netns_link_inodes();
    assert!(
        !links.contains(&b_ino),
        "sk_lookup attached in B: {links:?}"
    );
    assert!(
        !links.contains(&a_ino),
        "A's link not rolled back: {links:?}"
    );

    // The same path, naming A again: A gets all of it, B still nothing.
    swap.point_at(&a.path());
    let text = ok(
        &istio_iptables(&pins.0, cgroup.path(), swap.path(), ARGS),
        "re-apply",
    );
    assert!(text.contains(&format!("netns cookie {a_cookie}")), "{text}");
    let outbound = pinned_u64s(&pins.0.join("maps/NETNS_OUTBOUND"), true);
    let inbound = pinned_u64s(&pins.0.join("maps/NETNS_INBOUND"), true);
    let addrs = pinned_u64s(&pins.0.join("maps/POD_ADDRS"), false);
    assert_eq!(outbound, [a_cookie], "outbound policies");
    assert_eq!(inbound, [a_cookie], "inbound policies");
    assert_eq!(addrs, [a_cookie], "A's one address, owned by A");
    let links = netns_link_inodes();
    assert!(links.contains(&a_ino), "sk_lookup in A: {links:?}");
    assert!(!links.contains(&b_ino), "sk_lookup in B: {links:?}");
}

#[test]
fn the_daemon_follows_an_enrollment_through_the_descriptor_it_opened() {
    privileged!();
    let a = with_address("rnd", "198.18.203.1/32");
    let b = with_address("rne", "198.18.204.1/32");
    let (a_cookie, _) = cookie_and_inode(&a.path());
    let (b_cookie, _) = cookie_and_inode(&b.path());
    let node = Node::new();
    let daemon = node.daemon();
    let swap = Arc::new(SwapPath::new(&a.path()));
    let path = swap.path().display().to_string();
    let out = node.ok(&["enroll", "--netns", &path, "--istio-args", &ARGS.join(" ")]);
    assert!(out.contains(&format!("netns cookie {a_cookie}")), "{out}");

    // From now on, an open of A by the daemon is held until the path names B: a follower
    // that reopens the path would then read B's addresses into A's enrollment.
    let gate = {
        let (swap, b_path) = (swap.clone(), b.path());
        OpenGate::new(&a.path(), Some(daemon.pid() as i32), move || {
            swap.point_at(&b_path)
        })
    };
    ip(&[
        "-n",
        a.name(),
        "addr",
        "add",
        "198.18.203.2/32",
        "dev",
        "d0",
    ])
    .expect("address");
    let listed = || -> serde_json::Value {
        serde_json::from_str(&node.ok(&["list", "--json"])).expect("list json")
    };
    let followed = until(
        "the daemon lists A's new address",
        Duration::from_secs(10),
        || listed()[0]["addrs"].to_string().contains("198.18.203.2"),
    );
    let opens = gate.finish();
    let list = listed();
    assert!(
        opens.is_empty(),
        "the daemon opened the enrolled path again {} time(s) while following it: {list}",
        opens.len()
    );
    followed.unwrap_or_else(|e| panic!("{e}: {list}"));
    assert_eq!(list[0]["cookie"], a_cookie, "{list}");
    let addrs = pinned_u64s(&node.pins.join("maps/POD_ADDRS"), false);
    assert_eq!(addrs, [a_cookie, a_cookie], "A's two addresses");
    assert!(!owners(&node.pins).contains(&b_cookie), "B got an entry");

    // The path now names B: the enrollment is gone, and B never had anything.
    swap.point_at(&b.path());
    until(
        "the swapped enrollment is dropped",
        Duration::from_secs(10),
        || listed().as_array().is_some_and(Vec::is_empty),
    )
    .expect("dropped");
    let left = owners(&node.pins);
    assert!(
        !left.contains(&a_cookie) && !left.contains(&b_cookie),
        "{left:?}"
    );
}
