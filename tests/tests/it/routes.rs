//! `-c` (excluded interfaces) on a multi-NIC pod, with real routes and real TCP: a backup
//! default route on the excluded `net1` does not exclude what the kernel sends by `eth0`, a
//! more specific route by `net1` does, and the daemon follows route and rule changes.
use std::{process::Command, time::Duration};

use redirect_testkit::{eventually, ip, privileged, Child};
use redirect_tests::{
    conformance::{listen, reach, sidecar_listeners, World},
    node::Node,
};

/// Behind the pod's eth0 (its default route) and net1 (its backup default, and the only
/// route to 203.0.113.0/24).
const BY_DEFAULT: &str = "192.0.2.10:80";
const BY_NET1: &str = "203.0.113.10:80";
const APP: (u32, u32) = (1000, 1000);

fn captured(dst: &str) -> String {
    format!("at=proxy/[::]:15001 orig={dst}")
}

fn direct(dst: &str) -> String {
    format!("at=world/{dst} orig={dst}")
}

/// `ip -n POD ARGS...`.
fn pod_ip(w: &World, args: &str) {
    let mut all = vec!["-n", w.pod.name()];
    all.extend(args.split_whitespace());
    ip(&all).unwrap_or_else(|e| panic!("{e:#}"));
}

/// The interface `ip route get` names for `dst` in the pod: the kernel's own choice.
fn kernel_dev(w: &World, dst: &str) -> String {
    let host = dst.split(':').next().expect("host");
    let out = Command::new("ip")
        .args(["-n", w.pod.name(), "route", "get", host])
        .output()
        .expect("ip route get");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut words = text.split_whitespace();
    words
        .by_ref()
        .find(|w| *w == "dev")
        .and_then(|_| words.next())
        .unwrap_or_else(|| panic!("ip route get {host}: {text}"))
        .to_owned()
}

/// The pod of the issue: `eth0` and `net1`, default via eth0 metric 100 and a backup default
/// via net1 metric 200 (plus the world's 203.0.113.0/24 via net1).
fn multi_nic_pod(prefix: &str) -> World {
    let w = World::with_nic(prefix, "net1");
    pod_ip(&w, "route del default");
    pod_ip(&w, "route add default via 10.200.0.1 dev eth0 metric 100");
    pod_ip(&w, "route add default via 10.201.0.1 dev net1 metric 200");
    assert_eq!(kernel_dev(&w, BY_DEFAULT), "eth0");
    assert_eq!(kernel_dev(&w, BY_NET1), "net1");
    w
}

/// Listeners: the sidecar's usual ones and a server behind net1's specific route.
fn listeners(w: &World, node: &Node) -> Vec<Child> {
    let mut l = sidecar_listeners(w, node.cgroup.path());
    l.push(listen(
        &w.world,
        None,
        None,
        "world",
        &[BY_NET1.into()],
        &[],
    ));
    l
}

/// `redirect explain --json` for the application connecting to `dst`: (outcome, counter).
fn explain(node: &Node, w: &World, dst: &str) -> (String, String) {
    let netns = w.pod.path().display().to_string();
    let out = node.ok(&[
        "explain", "--netns", &netns, "--uid", "1000", "--dst", dst, "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("explain json");
    (
        v["outcome"].as_str().expect("outcome").to_owned(),
        v["counter"].as_str().expect("counter").to_owned(),
    )
}

/// Polls explain until `dst` is (or is not) excluded by `-c`.
fn wait_excluded(node: &Node, w: &World, dst: &str, excluded: bool) {
    eventually(
        format!("{dst} to be excluded_interface: {excluded}"),
        Duration::from_secs(10),
        || {
            let why = explain(node, w, dst);
            if (why.1 == "excluded_interface") == excluded {
                Ok(())
            } else {
                Err(why)
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_backup_default_on_an_excluded_nic_is_captured_and_its_specific_route_is_not() {
    privileged!();
    let node = Node::new();
    let w = multi_nic_pod("rrb");
    node.apply(
        &w.pod.path(),
        &["-p", "15001", "-u", "1337", "-i", "*", "-c", "net1"],
    );
    let _l = listeners(&w, &node);

    // The kernel sends it by eth0: iptables' `-o net1 -j RETURN` does not match, so captured.
    assert_eq!(
        reach(&w, node.cgroup.path(), APP, BY_DEFAULT),
        captured(BY_DEFAULT)
    );
    let why = explain(&node, &w, BY_DEFAULT);
    assert_eq!(why, ("proxy:15001".into(), "redirected".into()));
    // The more specific route leaves by net1: not captured.
    assert_eq!(reach(&w, node.cgroup.path(), APP, BY_NET1), direct(BY_NET1));
    assert_eq!(explain(&node, &w, BY_NET1).1, "excluded_interface");
}

#[test]
fn the_daemon_follows_route_and_rule_changes() {
    privileged!();
    let node = Node::new();
    let w = multi_nic_pod("rrd");
    let _daemon = node.daemon();
    let netns = w.pod.path().display().to_string();
    node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-u 1337 -i '*' -c net1",
    ]);
    let _l = listeners(&w, &node);
    let cg = node.cgroup.path();
    assert_eq!(reach(&w, cg, APP, BY_DEFAULT), captured(BY_DEFAULT));
    assert_eq!(explain(&node, &w, BY_DEFAULT).1, "redirected");

    // eth0's default goes: the backup default by net1 carries it, uncaptured.
    pod_ip(&w, "route del default via 10.200.0.1 dev eth0 metric 100");
    assert_eq!(kernel_dev(&w, BY_DEFAULT), "net1");
    wait_excluded(&node, &w, BY_DEFAULT, true);
    assert_eq!(reach(&w, cg, APP, BY_DEFAULT), direct(BY_DEFAULT));

    // And back.
    pod_ip(&w, "route add default via 10.200.0.1 dev eth0 metric 100");
    assert_eq!(kernel_dev(&w, BY_DEFAULT), "eth0");
    wait_excluded(&node, &w, BY_DEFAULT, false);
    assert_eq!(reach(&w, cg, APP, BY_DEFAULT), captured(BY_DEFAULT));

    // A rule of its own (policy routing) cannot be emulated: captured, even by net1; and
    // excluded again once it is gone.
    assert_eq!(explain(&node, &w, BY_NET1).1, "excluded_interface");
    pod_ip(&w, "rule add from 10.201.0.2 lookup 100");
    wait_excluded(&node, &w, BY_NET1, false);
    assert_eq!(reach(&w, cg, APP, BY_NET1), captured(BY_NET1));
    pod_ip(&w, "rule del from 10.201.0.2 lookup 100");
    wait_excluded(&node, &w, BY_NET1, true);
    assert_eq!(reach(&w, cg, APP, BY_NET1), direct(BY_NET1));
    node.ok(&["uninstall"]);
}
