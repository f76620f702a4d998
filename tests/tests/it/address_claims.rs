//! What a pod does with its own addresses cannot cost it its capture, nor a neighbour its
//! addresses (issue 31, findings 4 and 5): a pod with NET_ADMIN that puts a neighbour's address
//! on its interface keeps its policy at its next re-apply (the address is left out, with an
//! alarm, and stays the neighbour's), and the address follower stores at most
//! `--quota-addresses` of a pod's addresses however many it adds. Real traffic from the pod
//! shows its capture.
use std::time::Duration;

use redirect_testkit::{eventually, ip, privileged, Netns};
use redirect_tests::{
    conformance::{reach, sidecar_listeners, World},
    node::Node,
};
use serde_json::Value;

const CAPTURED: &str = "at=proxy/[::]:15001 orig=192.0.2.10:80";
const DST: &str = "192.0.2.10:80";
const ARGS: &str = "-u 1337 -i '*'";
const NEIGHBOUR: &str = "10.215.0.9";

/// A namespace with one address on a link of its own.
fn neighbour() -> Netns {
    let ns = Netns::new("rcn").expect("netns");
    let n = ns.name();
    ip(&[
        "-n", n, "link", "add", "d0", "type", "veth", "peer", "name", "d1",
    ])
    .expect("link");
    ip(&[
        "-n",
        n,
        "addr",
        "add",
        &format!("{NEIGHBOUR}/32"),
        "dev",
        "d0",
    ])
    .expect("address");
    for dev in ["d0", "d1"] {
        ip(&["-n", n, "link", "set", dev, "up"]).expect("link up");
    }
    ns
}

fn enroll(node: &Node, netns: &std::path::Path) -> String {
    let netns = netns.display().to_string();
    node.ok(&["enroll", "--netns", &netns, "--istio-args", ARGS])
}

/// The addresses `redirect list` shows for the enrollment at `netns`.
fn addrs_of(node: &Node, netns: &std::path::Path) -> Vec<String> {
    let list: Vec<Value> = serde_json::from_str(&node.ok(&["list", "--json"])).expect("list");
    let e = list
        .iter()
        .find(|e| e["netns"] == netns.display().to_string())
        .unwrap_or_else(|| panic!("{} not listed: {list:?}", netns.display()));
    e["addrs"]
        .as_array()
        .expect("addrs")
        .iter()
        .map(|a| a.as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn a_neighbours_address_on_a_pod_costs_neither_its_capture_nor_the_neighbours_address() {
    privileged!();
    let node = Node::new();
    let w = World::new("rca", false);
    let _daemon = node.daemon();
    let _l = sidecar_listeners(&w, node.cgroup.path());
    let n = neighbour();
    enroll(&node, &n.path());
    enroll(&node, &w.pod.path());
    let app = (1000, 1000);
    assert_eq!(reach(&w, node.cgroup.path(), app, DST), CAPTURED);

    // The pod takes the neighbour's address; it is re-applied (enrolled again).
    ip(&[
        "-n",
        w.pod.name(),
        "addr",
        "add",
        &format!("{NEIGHBOUR}/32"),
        "dev",
        "lo",
    ])
    .expect("address");
    let out = enroll(&node, &w.pod.path());
    assert!(out.contains("enrolled"), "{out}");
    assert_eq!(
        reach(&w, node.cgroup.path(), app, DST),
        CAPTURED,
        "the re-applied pod lost its capture"
    );
    assert!(
        !addrs_of(&node, &w.pod.path()).contains(&NEIGHBOUR.to_owned()),
        "the pod was given its neighbour's address"
    );
    assert!(
        addrs_of(&node, &n.path()).contains(&NEIGHBOUR.to_owned()),
        "the neighbour lost its address"
    );
}

#[test]
fn the_address_follower_keeps_a_pod_within_its_address_quota() {
    privileged!();
    let node = Node::new();
    let w = World::new("rcq", false);
    let (_daemon, _) = node.daemon_with(&["--quota-addresses", "8"]);
    let _l = sidecar_listeners(&w, node.cgroup.path());
    enroll(&node, &w.pod.path());
    let before = addrs_of(&node, &w.pod.path()).len();
    assert!(before <= 8, "{before}");
    // Thirty more /32s on the pod's loopback: the follower sees them at its next tick.
    for i in 1..=30 {
        ip(&[
            "-n",
            w.pod.name(),
            "addr",
            "add",
            &format!("10.216.0.{i}/32"),
            "dev",
            "lo",
        ])
        .expect("address");
    }
    eventually(
        "the follower to take the new addresses in",
        Duration::from_secs(20),
        || {
            let now = addrs_of(&node, &w.pod.path());
            if now.iter().any(|a| a.starts_with("10.216.0.")) {
                Ok(now)
            } else {
                Err(now)
            }
        },
    )
    .map(|now| assert_eq!(now.len(), 8, "over --quota-addresses 8: {now:?}"))
    .unwrap_or_else(|e| panic!("{e}"));
    // The pod keeps its capture.
    assert_eq!(reach(&w, node.cgroup.path(), (1000, 1000), DST), CAPTURED);
    // The follower keeps at most 8 at every later tick too (never all 30).
    let again = addrs_of(&node, &w.pod.path());
    assert_eq!(again.len(), 8, "{again:?}");
}

/// A namespace with one link (`d0`, its peer `d1` inside too) holding `address` and nothing
/// the kernel would add.
fn holding(address: &str) -> Netns {
    let ns = Netns::new("rcl").expect("netns");
    let n = ns.name();
    ip(&[
        "-n", n, "link", "add", "d0", "type", "veth", "peer", "name", "d1",
    ])
    .expect("link");
    for dev in ["d0", "d1"] {
        ip(&["-n", n, "link", "set", dev, "addrgenmode", "none"]).expect("addrgenmode");
    }
    ip(&["-n", n, "addr", "add", address, "dev", "d0", "nodad"]).expect("address");
    for dev in ["d0", "d1"] {
        ip(&["-n", n, "link", "set", dev, "up"]).expect("link up");
    }
    ns
}

/// A link-local address is unique on its link only, and predictable (issue 46, finding 9): a
/// pod with NET_ADMIN that put its neighbour's link-local address on its own interface first
/// does not make the neighbour's enrollment fail; the neighbour enrolls without it.
#[test]
fn a_link_local_address_another_pod_took_first_does_not_refuse_a_new_pod() {
    privileged!();
    let node = Node::new();
    let _daemon = node.daemon();
    let (squatter, pod) = (holding("fe80::42/64"), holding("fe80::42/64"));
    enroll(&node, &squatter.path());
    assert_eq!(addrs_of(&node, &squatter.path()), ["fe80::42"]);
    enroll(&node, &pod.path());
    assert_eq!(addrs_of(&node, &pod.path()), Vec::<String>::new());
    assert_eq!(addrs_of(&node, &squatter.path()), ["fe80::42"]);
}
