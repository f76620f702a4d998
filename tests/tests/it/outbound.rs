//! Outbound capture with real traffic: redirect to the proxy, bypasses, isolation, map hygiene.
use std::{net::SocketAddr, time::Duration};

use redirect_testkit::{
    eventually, privileged,
    probe::{ClientResult, Counts},
    Cgroup, Topology,
};
use redirect_tests::{client, spawn_client, Attach, ClientOpts, EchoServer, Proxy};

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("socket address")
}

/// The application's socket was rewritten to the proxy: its local end is on `loopback`.
fn local_on(r: &ClientResult, loopback: &str) -> bool {
    r.local.is_some_and(|l| l.ip().to_string() == loopback)
}

/// A pod (namespace + cgroup) with a server host, the proxy inside the pod, and capture attached.
struct Pod {
    topo: Topology,
    cgroup: Cgroup,
    server: EchoServer,
    proxy: Proxy,
    attach: Attach,
}

impl Pod {
    fn new(port: u16, tag: &str) -> Self {
        Self::with_attach_args(port, tag, &[])
    }

    fn with_attach_args(port: u16, tag: &str, attach_args: &[&str]) -> Self {
        let topo = Topology::new().expect("topology");
        let cgroup = Cgroup::new("rto").expect("cgroup");
        let server = EchoServer::start(&topo.server, &format!("{}:{port}", topo.server_ip), tag);
        let proxy = Proxy::start_in(&topo.pod, Some(cgroup.path()));
        let attach = Attach::start(cgroup.path(), attach_args);
        Self {
            topo,
            cgroup,
            server,
            proxy,
            attach,
        }
    }

    fn dst(&self) -> String {
        self.server.addr.to_string()
    }

    fn opts(&self) -> ClientOpts<'_> {
        ClientOpts {
            netns: Some(&self.topo.pod),
            cgroup: Some(self.cgroup.path()),
            ..ClientOpts::default()
        }
    }
}

#[test]
fn captured_client_reaches_server_through_proxy_with_original_destination() {
    privileged!();
    let pod = Pod::new(7001, "srv");
    let r = client(&pod.dst(), "hello", &pod.opts());
    assert!(r.ok, "{r:?}");
    let reply = r.reply.as_ref().expect("reply");
    assert_eq!(
        (reply.tag.as_str(), reply.peer.ip(), reply.got.as_str()),
        ("srv", addr("198.18.0.1:0").ip(), "hello"),
        "{reply:?}"
    );
    // The application's socket was rewritten to the proxy (its local end is on loopback),
    // yet getpeername shows the destination it asked for, as behind iptables.
    assert!(local_on(&r, "127.0.0.1"), "{r:?}");
    assert_eq!(r.peer, Some(addr("198.18.0.2:7001")), "{r:?}");

    let records = pod.proxy.wait_records(1);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["orig_dst"], "198.18.0.2:7001", "{records:?}");
    assert_eq!(records[0]["flags"], "-");
    assert_eq!(records[0]["cluster"], "PassthroughCluster");
    assert_eq!(records[0]["direction"], "outbound");
    assert_eq!(records[0]["bytes_up"], 6, "'hello\\n' went up");
    assert_eq!(
        records[0]["bytes_down"].as_u64(),
        Some(r.reply_bytes),
        "the echo line, newline included, went down"
    );

    assert_eq!(pod.server.hits().len(), 1);
    assert_eq!(pod.attach.counter("redirected"), 1);
    assert_eq!(pod.attach.counter("orig_dst_hit"), 1);
    // The proxy runs in the same cgroup as uid 1337: its upstream connect was not re-captured.
    assert_eq!(pod.attach.counter("bypass_uid"), 1);
}

#[test]
fn proxy_uid_and_gid_bypass_capture() {
    privileged!();
    let pod = Pod::new(7002, "srv");
    let as_uid = ClientOpts {
        uid: Some(1337),
        gid: Some(4242),
        ..pod.opts()
    };
    let r = client(&pod.dst(), "by-uid", &as_uid);
    assert!(r.ok, "{r:?}");
    assert_eq!(
        r.peer,
        Some(addr("198.18.0.2:7002")),
        "uid 1337 must connect directly: {r:?}"
    );

    let as_gid = ClientOpts {
        uid: Some(4242),
        gid: Some(1337),
        ..pod.opts()
    };
    let r = client(&pod.dst(), "by-gid", &as_gid);
    assert!(r.ok, "{r:?}");
    assert_eq!(
        r.peer,
        Some(addr("198.18.0.2:7002")),
        "gid 1337 must connect directly: {r:?}"
    );

    // A non-proxy uid/gid in the same cgroup is still captured.
    let other = ClientOpts {
        uid: Some(4242),
        gid: Some(4242),
        ..pod.opts()
    };
    let r = client(&pod.dst(), "other", &other);
    assert!(local_on(&r, "127.0.0.1"), "captured: {r:?}");
    assert_eq!(r.peer, Some(pod.server.addr), "{r:?}");

    let records = pod.proxy.wait_records(1);
    assert_eq!(
        records.len(),
        1,
        "only the third client went through the proxy: {records:?}"
    );
    let lines: Vec<String> = pod.server.hits().into_iter().map(|h| h.line).collect();
    assert!(
        lines.contains(&"by-uid".to_owned()) && lines.contains(&"by-gid".to_owned()),
        "{lines:?}"
    );
    assert_eq!(pod.attach.counter("bypass_gid"), 1);
    assert_eq!(
        pod.attach.counter("bypass_uid"),
        2,
        "the uid-1337 client and the proxy's upstream"
    );
    assert_eq!(pod.attach.counter("redirected"), 1);
}

#[test]
fn client_outside_the_cgroup_is_untouched() {
    privileged!();
    let pod = Pod::new(7003, "srv");
    let outside = ClientOpts {
        netns: Some(&pod.topo.pod),
        ..ClientOpts::default()
    };
    let r = client(&pod.dst(), "outside", &outside);
    assert!(r.ok, "{r:?}");
    assert_eq!(r.peer, Some(addr("198.18.0.2:7003")), "{r:?}");
    assert!(pod.proxy.records().is_empty());
    for c in [
        "redirected",
        "bypass_uid",
        "bypass_gid",
        "loopback",
        "not_tcp",
        "orig_dst_hit",
    ] {
        assert_eq!(
            pod.attach.counter(c),
            0,
            "{c}: connect4 must not run outside its cgroup"
        );
    }
}

#[test]
fn loopback_destinations_are_not_captured() {
    privileged!();
    let pod = Pod::new(7004, "srv");
    let local = EchoServer::start(&pod.topo.pod, "127.0.0.2:7100", "local");
    let r = client(&local.addr.to_string(), "lo", &pod.opts());
    assert!(r.ok, "{r:?}");
    assert_eq!(r.peer, Some(addr("127.0.0.2:7100")), "{r:?}");
    assert_eq!(pod.attach.counter("loopback"), 1);
    assert_eq!(pod.attach.counter("redirected"), 0);
}

#[test]
fn same_four_tuple_in_two_namespaces_gets_its_own_original_destination() {
    privileged!();
    // Two pods share one cgroup and one attached program set, as pods share a node.
    let cgroup = Cgroup::new("rtf").expect("cgroup");
    let (a, b) = (
        Topology::new().expect("topology a"),
        Topology::new().expect("topology b"),
    );
    let _server_a = EchoServer::start(&a.server, "198.18.0.2:7011", "A");
    let _server_b = EchoServer::start(&b.server, "198.18.0.2:7012", "B");
    let proxy_a = Proxy::start_in(&a.pod, Some(cgroup.path()));
    let proxy_b = Proxy::start_in(&b.pod, Some(cgroup.path()));
    let attach = Attach::start(cgroup.path(), &[]);

    // Same source port in both namespaces, held open together: both proxies accept
    // 127.0.0.1:40123 -> 127.0.0.1:15001 at the same time.
    let opts = |ns| ClientOpts {
        netns: Some(ns),
        cgroup: Some(cgroup.path()),
        bind_port: Some(40123),
        hold_ms: Some(400),
        ..ClientOpts::default()
    };
    let ra = spawn_client("198.18.0.2:7011", "to-a", &opts(&a.pod));
    let rb = spawn_client("198.18.0.2:7012", "to-b", &opts(&b.pod));
    let ra = ra.recv_timeout(Duration::from_secs(30)).expect("client a");
    let rb = rb.recv_timeout(Duration::from_secs(30)).expect("client b");
    assert_eq!(ra.local, Some(addr("127.0.0.1:40123")), "{ra:?}");
    assert_eq!(rb.local, Some(addr("127.0.0.1:40123")), "{rb:?}");
    let tag_got = |r: &ClientResult| {
        r.reply
            .as_ref()
            .map(|e| (e.tag.clone(), e.got.clone()))
            .unwrap_or_default()
    };
    assert_eq!(tag_got(&ra), ("A".into(), "to-a".into()), "{ra:?}");
    assert_eq!(tag_got(&rb), ("B".into(), "to-b".into()), "{rb:?}");
    assert_eq!(proxy_a.wait_records(1)[0]["orig_dst"], "198.18.0.2:7011");
    assert_eq!(proxy_b.wait_records(1)[0]["orig_dst"], "198.18.0.2:7012");
    assert_eq!(attach.counter("orig_dst_hit"), 2);
}

fn map_fill(attach: &Attach) -> (u64, u64) {
    let s = attach.status();
    let i = &s["instances"][0];
    (
        i["tracked_entries"].as_u64().expect("tracked"),
        i["inbound_entries"].as_u64().expect("inbound"),
    )
}

#[test]
fn ten_thousand_short_connections_leave_the_maps_empty() {
    privileged!();
    let pod = Pod::new(7005, "srv");
    assert_eq!(map_fill(&pod.attach), (0, 0));
    let opts = ClientOpts {
        count: Some(10_000),
        ..pod.opts()
    };
    let r = spawn_client(&pod.dst(), "churn", &opts)
        .recv_timeout(Duration::from_secs(600))
        .expect("client finished");
    assert_eq!(
        r.counts,
        Some(Counts {
            ok: 10_000,
            failed: 0
        }),
        "{r:?}"
    );
    assert_eq!(pod.attach.counter("redirected"), 10_000);
    assert_eq!(pod.attach.counter("orig_dst_hit"), 10_000);
    // Sockets finish closing asynchronously (FIN/ACK); the maps drain once they have.
    eventually(
        "no (tracked, pending) entries left after 10,000 connections",
        Duration::from_secs(20),
        || match map_fill(&pod.attach) {
            (0, 0) => Ok(()),
            fill => Err(fill),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn excluded_cidrs_are_not_captured() {
    privileged!();
    let dir = std::env::temp_dir().join(redirect_testkit::unique_name("rtx-cidrs-"));
    std::fs::write(
        &dir,
        "# istio -x, long form\n203.0.113.0/24\n198.18.0.2/32\n",
    )
    .expect("write cidr file");
    let pod = Pod::with_attach_args(
        7006,
        "srv",
        &[
            "--exclude-cidr",
            "192.0.2.0/24,100.64.0.0/10",
            "--exclude-cidr-file",
            dir.to_str().expect("utf8"),
        ],
    );
    let r = client(&pod.dst(), "excluded", &pod.opts());
    assert_eq!(
        r.peer,
        Some(addr("198.18.0.2:7006")),
        "an excluded destination connects directly: {r:?}"
    );
    assert_eq!(pod.attach.counter("excluded_cidr"), 1);
    assert_eq!(pod.attach.counter("redirected"), 0);
    let _ = std::fs::remove_file(dir);

    // Non-matching exclusions change nothing.
    let other = Pod::with_attach_args(
        7007,
        "srv",
        &["--exclude-cidr", "198.18.0.3/32,198.19.0.0/16"],
    );
    let r = client(&other.dst(), "captured", &other.opts());
    assert!(local_on(&r, "127.0.0.1"), "captured: {r:?}");
    assert_eq!(other.attach.counter("excluded_cidr"), 0);
}

#[test]
fn dual_stack_sockets_are_captured_through_v4_mapped_addresses() {
    privileged!();
    let pod = Pod::new(7009, "srv");
    // An AF_INET6 socket dialling ::ffff:198.18.0.2 bypasses connect4; connect6 must catch it.
    let r = client("[::ffff:198.18.0.2]:7009", "mapped", &pod.opts());
    assert!(r.ok, "{r:?}");
    // Rewritten to the proxy (local end on mapped loopback); getpeername6 restores the peer.
    assert!(local_on(&r, "::ffff:127.0.0.1"), "{r:?}");
    assert_eq!(r.peer, Some(addr("[::ffff:198.18.0.2]:7009")), "{r:?}");
    assert_eq!(r.reply.map(|e| e.got).as_deref(), Some("mapped"));
    assert_eq!(pod.proxy.wait_records(1)[0]["orig_dst"], "198.18.0.2:7009");
    assert_eq!(pod.attach.counter("redirected"), 1);
    assert_eq!(pod.attach.counter("orig_dst_hit"), 1);
    // The proxy's own upstream connect stays IPv4 and bypassed; nothing was counted as IPv6.
    assert_eq!(pod.attach.counter("ipv6_untouched"), 0);
    // A mapped loopback destination is left alone like 127.0.0.0/8.
    let _local = EchoServer::start(&pod.topo.pod, "127.0.0.3:7101", "local");
    let r = client("[::ffff:127.0.0.3]:7101", "lo", &pod.opts());
    assert_eq!(r.peer, Some(addr("[::ffff:127.0.0.3]:7101")), "{r:?}");
    assert_eq!(pod.attach.counter("loopback"), 1);
}
