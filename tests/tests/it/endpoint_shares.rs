//! The daemon's metrics port and the proxy's merged-stats port against a pod that hogs them
//! (issue 31, finding 10): one peer address holding idle connections gets its share and no
//! more, so Prometheus is still answered; one rendering of the daemon's metrics serves every
//! scrape within `--metrics-cache-ms` (the maps are walked once, however often a pod
//! scrapes); the proxy fetches at most 4 merged pages at once and answers the next 503 at once
//! instead of holding one more application fetch and its buffer.
use std::{
    net::{Ipv4Addr, SocketAddr, TcpStream},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use redirect_testkit::{eventually, listener::Listen, privileged, Netns};
use redirect_tests::{abuse::Target, conformance::World, node::Node, Proxy};

const WAIT: Duration = Duration::from_secs(5);

use crate::http_limits::daemon_target;

#[test]
fn a_peer_holding_every_connection_leaves_prometheus_its_scrape() {
    privileged!();
    let node = Node::new();
    let (_daemon, target) = daemon_target(&node, &[]);
    // A pod's 64 idle connections (the endpoint's whole cap), from one address.
    let hog = Ipv4Addr::new(127, 0, 0, 2);
    let held: Vec<TcpStream> = (0..64)
        .map(|i| {
            target
                .connect_from(hog)
                .unwrap_or_else(|e| panic!("idle connection #{i}: {e}"))
        })
        .collect();
    let (status, body) = target
        .get("/metrics", WAIT)
        .unwrap_or_else(|e| panic!("the scrape beside 64 held connections: {e}"));
    assert_eq!(status, 200, "{body}");
    drop(held);
}

#[test]
fn one_rendering_serves_every_scrape_within_the_cache() {
    privileged!();
    let node = Node::new();
    let w = World::new("rdc", false);
    let (_daemon, target) = daemon_target(&node, &["--metrics-cache-ms", "60000"]);
    let scrape = || {
        let (status, body) = target.get("/metrics", WAIT).expect("scrape");
        assert_eq!(status, 200, "{body}");
        body
    };
    let first = scrape();
    assert!(
        first.contains("redirect_map_entries{map=\"NETNS_OUTBOUND\"} 0"),
        "{first}"
    );
    // The maps change; within the minute the same rendering is served.
    let netns = w.pod.path().display().to_string();
    node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-u 1337 -i '*'",
    ]);
    assert_eq!(
        scrape(),
        first,
        "the maps were walked again within the cache"
    );
}

/// An application metrics endpoint that accepts and never answers, counting its connections.
fn silent_app(ns: &Netns) -> Arc<AtomicUsize> {
    let listener = Listen::on("127.0.0.1:9091")
        .netns(ns)
        .tcp()
        .expect("the application's metrics listener");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
            count.fetch_add(1, Ordering::SeqCst);
        }
    });
    accepted
}

#[test]
fn the_proxy_fetches_four_merged_pages_at_once_and_refuses_a_fifth() {
    privileged!();
    let ns = Netns::new("rpm").expect("netns");
    let accepted = silent_app(&ns);
    let mut proxy = Proxy::start_with(
        &ns,
        None,
        &["--app-metrics", "http://127.0.0.1:9091/metrics"],
    );
    let merged = Target {
        addr: SocketAddr::from(([127, 0, 0, 1], 15020)),
        netns: Some(ns.path()),
    };
    let waiting: Vec<_> = (0..4)
        .map(|_| {
            let t = merged.clone();
            std::thread::spawn(move || t.get("/stats/prometheus", WAIT * 2))
        })
        .collect();
    eventually!(
        WAIT,
        accepted.load(Ordering::SeqCst) == 4,
        "the 4 merged fetches waiting on the application"
    );
    let (status, body) = merged.get("/stats/prometheus", WAIT).expect("a fifth");
    assert_eq!(
        status, 503,
        "a fifth merged fetch at once was taken: {body}"
    );
    for w in waiting {
        let answer = w.join().expect("thread");
        assert!(matches!(answer, Ok((200, _))), "{answer:?}");
    }
    assert!(proxy.child.exited().is_none(), "the proxy exited");
}
