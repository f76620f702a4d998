//! A pod claims its own addresses only (issue 31, finding 5): the daemon gives a pod's
//! namespace the addresses of its pod (prevResult at CNI ADD, `status.podIPs` in place) and
//! link-local ones, whatever else it puts on its interfaces. A pod with NET_ADMIN that adds the
//! address the runtime will give the next pod no longer claims it at the follower's next tick,
//! so that next pod's ADD is not refused as claiming a neighbour's address, and it is captured.
use std::{net::Ipv4Addr, time::Duration};

use redirect_testkit::{eventually, ip, privileged, unique_name};
use redirect_tests::{
    apiserver::{recorded_pod, PodServer},
    cni::{entry, plugins_missing, CniHost},
    node::Node,
};
use serde_json::Value;

const NODE: &str = "node-own";

/// The addresses `redirect list` shows for the enrollment of pod `name`.
fn addrs_of(node: &Node, name: &str) -> Vec<String> {
    let list: Vec<Value> = serde_json::from_str(&node.ok(&["list", "--json"])).expect("list");
    list.iter()
        .find(|e| e["pod"]["name"] == name)
        .and_then(|e| e["addrs"].as_array())
        .map(|a| {
            a.iter()
                .filter_map(|a| a.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_pod_never_claims_the_address_the_next_pod_will_be_given() {
    privileged!(plugins_missing());
    let node = Node::new();
    let api = PodServer::start(&node.dir.join("api"));
    let _daemon = node.pod_daemon(&api, None, &[]).0;
    let conf = entry(&node.dir.join("daemon.sock"));
    let host = CniHost::new();
    let (uid_a, uid_b) = (unique_name("uid-a"), unique_name("uid-b"));
    api.put(&recorded_pod("hello.yaml", "shop", "a-1", &uid_a, NODE));
    api.put(&recorded_pod("hello.yaml", "shop", "b-1", &uid_b, NODE));
    let a = host.sandbox("shop", "a-1", &uid_a);
    let ran = a.redirect_cni("ADD", &conf);
    assert!(ran.ok(), "a's ADD: {}", ran.text());
    // host-local gives the next pod the next address.
    let mine: Ipv4Addr = a.ip().parse().expect("a's address");
    let next = Ipv4Addr::from(u32::from(mine) + 1).to_string();
    let n = a.netns.name();
    ip(&["-n", n, "addr", "add", &format!("{next}/32"), "dev", "eth0"]).expect("addr");
    ip(&["-n", n, "addr", "add", "fe80::1234/64", "dev", "eth0"]).expect("addr");
    // The follower's tick has seen both once the link-local one is listed.
    let addrs = eventually(
        "the follower to see a's new addresses",
        Duration::from_secs(20),
        || {
            let now = addrs_of(&node, "a-1");
            if now.iter().any(|a| a == "fe80::1234") {
                Ok(now)
            } else {
                Err(now)
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !addrs.contains(&next),
        "a claimed the next pod's address: {addrs:?}"
    );

    let b = host.sandbox("shop", "b-1", &uid_b);
    assert_eq!(b.ip(), next, "host-local gave b another address");
    let ran = b.redirect_cni("ADD", &conf);
    assert!(ran.ok(), "b's ADD: {}", ran.text());
    assert!(
        addrs_of(&node, "b-1").contains(&next),
        "b does not own its address"
    );
    for s in [&a, &b] {
        let del = s.redirect_cni("DEL", &conf);
        assert!(del.ok(), "DEL: {}", del.text());
    }
}
