//! The route reader on a real kernel: a namespace of the test's own with interfaces (veth ends)
//! `eth0`, `net1`, `net2`, routes added with `ip`, and what `routes::resolve_in` makes of them
//! for `-c net1` (metrics, multipath over netlink, IPv6, the local table, policy routing).
// A test target links every dependency of its package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::net::IpAddr;

use redirect_datapath::test_support::{resolve_in, Resolved};
use redirect_testkit::{ip, privileged_or_skip, Netns};

/// What the BPF side's longest-prefix match on the entries answers for `dst`.
fn excluded_at(r: &Resolved, dst: &str) -> bool {
    let dst: IpAddr = dst.parse().expect("ip");
    r.entries
        .iter()
        .filter(|(net, _)| net.contains(&dst))
        .max_by_key(|(net, _)| net.prefix_len())
        .is_some_and(|(_, x)| *x)
}

fn ipn(ns: &Netns, args: &str) {
    let mut all = vec!["-n", ns.name()];
    all.extend(args.split_whitespace());
    ip(&all).unwrap_or_else(|e| panic!("{e:#}"));
}

fn pod() -> Netns {
    let ns = Netns::new("rrt").expect("netns");
    for (dev, v4, v6) in [
        ("eth0", "10.210.0.2/24", "fd00:210::2/64"),
        ("net1", "10.211.0.2/24", "fd00:211::2/64"),
        ("net2", "10.212.0.2/24", "fd00:212::2/64"),
    ] {
        ipn(&ns, &format!("link add {dev} type veth peer name p{dev}"));
        ipn(&ns, &format!("link set p{dev} up"));
        ipn(&ns, &format!("link set {dev} up"));
        ipn(&ns, &format!("addr add {v4} dev {dev}"));
        ipn(&ns, &format!("addr add {v6} dev {dev} nodad"));
    }
    ns
}

fn resolve(ns: &Netns, excluded: &[&str]) -> Resolved {
    let names: Vec<String> = excluded.iter().map(|s| (*s).to_owned()).collect();
    let handle = redirect_datapath::NetnsHandle::open(&ns.path()).expect("open the namespace");
    resolve_in(&handle, &names, usize::MAX).expect("resolve_in")
}

#[test]
fn metrics_multipath_ipv6_and_the_local_table_as_the_kernel_reads_them() {
    if !privileged_or_skip("routes_netlink_metrics") {
        return;
    }
    let ns = pod();
    ipn(&ns, "route add default via 10.210.0.1 dev eth0 metric 100");
    ipn(&ns, "route add default via 10.211.0.1 dev net1 metric 200");
    ipn(&ns, "route add 203.0.113.0/24 via 10.211.0.1 dev net1");
    ipn(
        &ns,
        "route add 198.51.100.0/24 nexthop via 10.210.0.1 dev eth0 nexthop via 10.211.0.1 dev net1",
    );
    ipn(
        &ns,
        "route add 198.51.101.0/24 nexthop via 10.211.0.1 dev net1 nexthop via 10.212.0.1 dev net2",
    );
    ipn(
        &ns,
        "-6 route add default via fd00:210::1 dev eth0 metric 100",
    );
    ipn(
        &ns,
        "-6 route add default via fd00:211::1 dev net1 metric 200",
    );
    ipn(&ns, "-6 route add 2001:db8::/64 via fd00:211::1 dev net1");
    ipn(
        &ns,
        "-6 route add 2001:db8:1::/64 nexthop via fd00:210::1 dev eth0 nexthop via fd00:211::1 dev net1",
    );
    let r = resolve(&ns, &["net1"]);
    assert!(r.doubts.is_empty(), "{r:?}");
    for (dst, want) in [
        ("192.0.2.10", false),     // default via eth0 (metric 100) beats net1's (200)
        ("203.0.113.10", true),    // a longer route via net1
        ("198.51.100.10", false),  // multipath, one nexthop not excluded
        ("198.51.101.10", false),  // multipath, net2 not excluded
        ("10.211.0.2", false),     // net1's own address: local delivery, by lo
        ("10.211.0.9", true),      // net1's subnet
        ("fd00:99::10", false),    // IPv6 default via eth0
        ("2001:db8::10", true),    // IPv6 route via net1
        ("2001:db8:1::10", false), // IPv6 multipath
        ("fd00:211::2", false),    // own IPv6 address
    ] {
        assert_eq!(excluded_at(&r, dst), want, "{dst}: {r:?}");
    }
    let both = resolve(&ns, &["net1", "net2"]);
    assert!(excluded_at(&both, "198.51.101.10"), "{both:?}");

    // Only the net1 default left: it wins.
    ipn(&ns, "route del default via 10.210.0.1 dev eth0 metric 100");
    ipn(
        &ns,
        "-6 route del default via fd00:210::1 dev eth0 metric 100",
    );
    let r = resolve(&ns, &["net1"]);
    assert!(excluded_at(&r, "192.0.2.10"), "{r:?}");
    assert!(excluded_at(&r, "fd00:99::10"), "{r:?}");
    // An interface the namespace lacks excludes nothing.
    assert_eq!(resolve(&ns, &["nope0"]), Resolved::default());
}

#[test]
fn policy_routing_leaves_the_family_captured() {
    if !privileged_or_skip("routes_netlink_policy") {
        return;
    }
    let ns = pod();
    ipn(&ns, "route add default via 10.211.0.1 dev net1");
    ipn(&ns, "-6 route add default via fd00:211::1 dev net1");
    let r = resolve(&ns, &["net1"]);
    assert!(r.doubts.is_empty(), "default rules: {r:?}");
    assert!(excluded_at(&r, "192.0.2.10") && excluded_at(&r, "fd00:99::10"));

    ipn(&ns, "rule add from 10.210.0.2 lookup 100");
    let r = resolve(&ns, &["net1"]);
    assert!(!excluded_at(&r, "192.0.2.10"), "{r:?}");
    assert!(
        excluded_at(&r, "fd00:99::10"),
        "IPv6 has default rules: {r:?}"
    );
    assert_eq!(r.doubts.len(), 1, "{r:?}");
    ipn(&ns, "rule del from 10.210.0.2 lookup 100");

    ipn(
        &ns,
        "-6 route add default via fd00:211::1 dev net1 table 100",
    );
    let r = resolve(&ns, &["net1"]);
    assert!(excluded_at(&r, "192.0.2.10"), "{r:?}");
    assert!(!excluded_at(&r, "fd00:99::10"), "{r:?}");
    assert!(r.doubts[0].contains("table 100"), "{r:?}");
}
