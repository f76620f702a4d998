//! Unit tests of the route choice (`table::resolve`): metric, longest prefix, multipath,
//! IPv6, the local table and what leaves a family captured.
use std::net::IpAddr;

use ipnet::IpNet;

use super::table::*;

const LO: u32 = 1;
const ETH0: u32 = 2;
const NET1: u32 = 3;
const NET2: u32 = 4;

fn route(table: u32, prefix: &str, metric: u32, devices: &[u32]) -> Route {
    Route {
        table,
        prefix: prefix.parse().expect("prefix"),
        metric,
        devices: devices.to_vec(),
        selective: false,
    }
}

fn main(prefix: &str, metric: u32, devices: &[u32]) -> Route {
    route(TABLE_MAIN, prefix, metric, devices)
}

fn tables(routes: Vec<Route>) -> Tables {
    Tables {
        routes,
        ..Tables::default()
    }
}

/// What the BPF side's longest-prefix match on the entries answers for `ip`.
fn excluded_at(r: &Resolved, ip: &str) -> bool {
    let ip: IpAddr = ip.parse().expect("ip");
    r.entries
        .iter()
        .filter(|(net, _)| net.contains(&ip))
        .max_by_key(|(net, _)| net.prefix_len())
        .is_some_and(|(_, x)| *x)
}

#[test]
fn a_backup_default_on_the_excluded_nic_with_a_higher_metric_is_captured() {
    let r = resolve(
        &tables(vec![
            main("0.0.0.0/0", 100, &[ETH0]),
            main("0.0.0.0/0", 200, &[NET1]),
        ]),
        &[NET1],
    );
    assert!(!excluded_at(&r, "192.0.2.10"), "{r:?}");
    // Listed the other way round, the metric still decides.
    let r = resolve(
        &tables(vec![
            main("0.0.0.0/0", 200, &[NET1]),
            main("0.0.0.0/0", 100, &[ETH0]),
        ]),
        &[NET1],
    );
    assert!(!excluded_at(&r, "192.0.2.10"), "{r:?}");
}

#[test]
fn the_lowest_metric_wins_when_it_is_the_excluded_nic() {
    let r = resolve(
        &tables(vec![
            main("0.0.0.0/0", 200, &[ETH0]),
            main("0.0.0.0/0", 100, &[NET1]),
        ]),
        &[NET1],
    );
    assert!(excluded_at(&r, "192.0.2.10"), "{r:?}");
    assert!(r.doubts.is_empty());
}

#[test]
fn the_longest_prefix_wins_before_the_metric_and_shadows_an_excluded_one() {
    let t = tables(vec![
        main("0.0.0.0/0", 0, &[ETH0]),
        main("203.0.113.0/24", 500, &[NET1]),
    ]);
    let r = resolve(&t, &[NET1]);
    assert!(excluded_at(&r, "203.0.113.10"), "{r:?}");
    assert!(!excluded_at(&r, "192.0.2.10"), "{r:?}");
    // A longer non-excluded route inside an excluded default is written, as captured.
    let r = resolve(
        &tables(vec![
            main("0.0.0.0/0", 0, &[NET1]),
            main("10.0.0.0/8", 500, &[ETH0]),
            main("10.1.0.0/16", 500, &[NET1]),
        ]),
        &[NET1],
    );
    assert!(excluded_at(&r, "192.0.2.10"), "{r:?}");
    assert!(!excluded_at(&r, "10.2.0.1"), "{r:?}");
    assert!(excluded_at(&r, "10.1.0.1"), "{r:?}");
    assert!(r
        .entries
        .contains(&("10.0.0.0/8".parse().expect("net"), false)));
}

#[test]
fn a_better_route_of_the_same_prefix_shadows_an_excluded_one() {
    let r = resolve(
        &tables(vec![
            main("0.0.0.0/0", 0, &[NET1]),
            main("10.0.0.0/8", 10, &[NET1]),
            main("10.0.0.0/8", 5, &[ETH0]),
        ]),
        &[NET1],
    );
    assert!(!excluded_at(&r, "10.1.2.3"), "{r:?}");
    assert!(excluded_at(&r, "192.0.2.10"), "{r:?}");
}

#[test]
fn ipv4_equal_metrics_take_the_first_route_listed() {
    let first_excluded = tables(vec![
        main("0.0.0.0/0", 0, &[NET1]),
        main("0.0.0.0/0", 0, &[ETH0]),
    ]);
    assert!(excluded_at(
        &resolve(&first_excluded, &[NET1]),
        "192.0.2.10"
    ));
    let first_captured = tables(vec![
        main("0.0.0.0/0", 0, &[ETH0]),
        main("0.0.0.0/0", 0, &[NET1]),
    ]);
    assert!(!excluded_at(
        &resolve(&first_captured, &[NET1]),
        "192.0.2.10"
    ));
}

#[test]
fn multipath_is_excluded_only_when_every_nexthop_is() {
    let partial = tables(vec![main("0.0.0.0/0", 0, &[ETH0, NET1])]);
    let r = resolve(&partial, &[NET1]);
    assert!(!excluded_at(&r, "192.0.2.10"), "{r:?}");
    let all = tables(vec![main("0.0.0.0/0", 0, &[NET1, NET2])]);
    assert!(excluded_at(&resolve(&all, &[NET1, NET2]), "192.0.2.10"));
    assert!(!excluded_at(&resolve(&all, &[NET1]), "192.0.2.10"));
}

#[test]
fn ipv6_follows_prefix_and_metric_and_equal_metrics_are_multipath() {
    let r = resolve(
        &tables(vec![
            main("::/0", 1024, &[ETH0]),
            main("::/0", 2048, &[NET1]),
            main("2001:db8::/64", 256, &[NET1]),
        ]),
        &[NET1],
    );
    assert!(!excluded_at(&r, "fd00:99::10"), "{r:?}");
    assert!(excluded_at(&r, "2001:db8::10"), "{r:?}");
    let lower = tables(vec![
        main("::/0", 1024, &[ETH0]),
        main("::/0", 512, &[NET1]),
    ]);
    assert!(excluded_at(&resolve(&lower, &[NET1]), "fd00:99::10"));
    // Equal metrics: ECMP siblings (or the kernel's choice among equals), listed either
    // way: excluded only when all are.
    for routes in [
        vec![main("::/0", 1024, &[NET1]), main("::/0", 1024, &[ETH0])],
        vec![main("::/0", 1024, &[ETH0]), main("::/0", 1024, &[NET1])],
        vec![main("::/0", 1024, &[ETH0, NET1])],
    ] {
        let r = resolve(&tables(routes), &[NET1]);
        assert!(!excluded_at(&r, "fd00:99::10"), "{r:?}");
    }
    let both = tables(vec![
        main("::/0", 1024, &[NET1]),
        main("::/0", 1024, &[NET2]),
    ]);
    assert!(excluded_at(&resolve(&both, &[NET1, NET2]), "fd00:99::10"));
    // IPv4 and IPv6 are chosen apart.
    let mixed = tables(vec![
        main("0.0.0.0/0", 0, &[NET1]),
        main("::/0", 1024, &[ETH0]),
    ]);
    let r = resolve(&mixed, &[NET1]);
    assert!(excluded_at(&r, "192.0.2.10") && !excluded_at(&r, "fd00:99::10"));
}

#[test]
fn the_local_table_comes_first_and_leaves_by_loopback() {
    let r = resolve(
        &tables(vec![
            route(TABLE_LOCAL, "10.201.0.2/32", 0, &[LO]),
            route(TABLE_LOCAL, "198.51.100.0/24", 0, &[LO]),
            main("0.0.0.0/0", 0, &[NET1]),
            main("198.51.100.7/32", 0, &[NET1]),
        ]),
        &[NET1],
    );
    assert!(excluded_at(&r, "192.0.2.10"), "{r:?}");
    assert!(!excluded_at(&r, "10.201.0.2"), "own address: {r:?}");
    assert!(
        !excluded_at(&r, "198.51.100.7"),
        "local wins over a longer main route: {r:?}"
    );
}

#[test]
fn a_route_without_a_device_is_not_excluded() {
    let r = resolve(
        &tables(vec![
            main("0.0.0.0/0", 0, &[NET1]),
            main("10.9.0.0/16", 0, &[]),
        ]),
        &[NET1],
    );
    assert!(!excluded_at(&r, "10.9.0.1"), "{r:?}");
}

#[test]
fn only_entries_that_matter_are_written() {
    let r = resolve(
        &tables(vec![
            main("0.0.0.0/0", 0, &[ETH0]),
            main("10.0.0.0/8", 0, &[NET1]),
            main("10.1.0.0/16", 0, &[ETH0]),
            main("192.168.0.0/16", 0, &[ETH0]),
            main("::/0", 1024, &[ETH0]),
        ]),
        &[NET1],
    );
    let want: Vec<(IpNet, bool)> = vec![
        ("10.0.0.0/8".parse().expect("net"), true),
        ("10.1.0.0/16".parse().expect("net"), false),
    ];
    assert_eq!(r.entries, want);
    let none = resolve(&tables(vec![main("0.0.0.0/0", 0, &[ETH0])]), &[NET1]);
    assert_eq!(none, Resolved::default());
}

#[test]
fn policy_routing_other_tables_and_source_routes_leave_the_family_captured() {
    let base = || vec![main("0.0.0.0/0", 0, &[NET1]), main("::/0", 1024, &[NET1])];
    let mut t = tables(base());
    t.policy_rules_v4 = true;
    let r = resolve(&t, &[NET1]);
    assert!(!excluded_at(&r, "192.0.2.10"), "{r:?}");
    assert!(
        excluded_at(&r, "fd00:99::10"),
        "IPv6 has no rules of its own: {r:?}"
    );
    assert!(r.doubts[0].starts_with("IPv4: ip rules"), "{r:?}");

    let mut routes = base();
    routes.push(route(100, "0.0.0.0/0", 0, &[NET1]));
    let r = resolve(&tables(routes), &[NET1]);
    assert!(!excluded_at(&r, "192.0.2.10"), "{r:?}");
    assert!(r.doubts[0].contains("table 100"), "{r:?}");

    // Another table that never names an excluded interface changes nothing.
    let mut routes = base();
    routes.push(route(100, "0.0.0.0/0", 0, &[ETH0]));
    let r = resolve(&tables(routes), &[NET1]);
    assert!(
        excluded_at(&r, "192.0.2.10") && r.doubts.is_empty(),
        "{r:?}"
    );

    let mut routes = base();
    routes.push(Route {
        selective: true,
        ..main("2001:db8::/64", 256, &[ETH0])
    });
    let r = resolve(&tables(routes), &[NET1]);
    assert!(excluded_at(&r, "192.0.2.10"), "{r:?}");
    assert!(!excluded_at(&r, "fd00:99::10"), "{r:?}");
    assert!(
        r.doubts[0].starts_with("IPv6: route 2001:db8::/64"),
        "{r:?}"
    );
}
