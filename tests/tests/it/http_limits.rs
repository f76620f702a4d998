//! The daemon's metrics port and the proxy's admin ports under hostile clients: a slow drip
//! does not hold the next scrape and is cut at the deadline, an oversized head is refused,
//! garbage never stops them; per-namespace series only when the operator asks.
use std::time::Duration;

use redirect_testkit::{privileged, Netns};
use redirect_tests::{
    abuse::{self, Outcome, Target},
    conformance::World,
    http::check_prometheus,
    node::{metrics_addr, Node},
    Proxy,
};

/// Each byte of the slow client comes this long after the previous one (within the old
/// per-read timeout of 2 s, so a per-read timeout never fires).
const DRIP: Duration = Duration::from_millis(1200);
/// The servers' whole-connection deadline (redirect-http's default).
const DEADLINE: Duration = Duration::from_secs(5);

pub(crate) fn daemon_target(node: &Node, extra: &[&str]) -> (redirect_testkit::Child, Target) {
    let mut args = vec!["--metrics", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let (daemon, ready) = node.daemon_with(&args);
    let target = Target {
        addr: metrics_addr(&ready),
        netns: None,
    };
    (daemon, target)
}

/// Slow clients connected first; a scrape after them is answered while they still drip, and
/// each of them is cut by the deadline.
fn slow_clients_do_not_hold_scrapes(target: &Target, path: &str) {
    let drips: Vec<_> = (0..4)
        .map(|_| {
            let s = target.connect().expect("connect the slow client");
            abuse::slow_drip(s, DRIP, DEADLINE * 4)
        })
        .collect();
    let (status, body) = target
        .get(path, DEADLINE)
        .unwrap_or_else(|e| panic!("a scrape behind slow clients: {e}"));
    assert_eq!(status, 200, "{body}");
    check_prometheus(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    for d in drips {
        let drip = d.join().expect("slow client thread");
        let cut = drip
            .cut_after
            .unwrap_or_else(|| panic!("a slow client was never cut: {drip:?}"));
        assert!(
            cut < DEADLINE * 2,
            "the slow client was cut only after {cut:?}: {drip:?}"
        );
    }
}

#[test]
fn daemon_metrics_cut_slow_clients_and_keep_answering() {
    privileged!();
    let node = Node::new();
    let (_daemon, target) = daemon_target(&node, &[]);
    slow_clients_do_not_hold_scrapes(&target, "/metrics");
}

/// A 1 MiB request line and a 1 MiB header are refused (431/400, or the connection closed),
/// and the next proper request is answered.
fn oversized_heads_are_refused(target: &Target, path: &str) {
    for (what, request) in [
        ("request line", abuse::long_request_line(1 << 20)),
        ("header", abuse::long_header(1 << 20)),
    ] {
        let outcome = abuse::send_raw(target, &request, DEADLINE * 2)
            .unwrap_or_else(|e| panic!("a 1 MiB {what}: {e}"));
        assert!(
            matches!(outcome, Outcome::Status(431 | 400) | Outcome::Closed),
            "a 1 MiB {what} was taken: {outcome:?}"
        );
        let (status, body) = target
            .get(path, DEADLINE)
            .unwrap_or_else(|e| panic!("GET {path} after a 1 MiB {what}: {e}"));
        assert_eq!(status, 200, "{body}");
    }
}

/// A few hundred deterministic garbage requests: none is held past the deadline, and a proper
/// request is answered every 50 and at the end.
fn garbage_never_stops_it(target: &Target, path: &str, seed: u64) {
    for (i, request) in abuse::garbage(seed, 320).iter().enumerate() {
        let outcome = abuse::send_raw(target, request, DEADLINE * 2)
            .unwrap_or_else(|e| panic!("garbage request {i}: {e}"));
        assert_ne!(
            outcome,
            Outcome::Hung,
            "garbage request {i} was held past the deadline: {:?}",
            String::from_utf8_lossy(&request[..request.len().min(200)])
        );
        if i % 50 == 49 {
            let answer = target.get(path, DEADLINE);
            assert!(
                matches!(answer, Ok((200, _))),
                "GET {path} after garbage request {i}: {answer:?}"
            );
        }
    }
    let answer = target.get(path, DEADLINE);
    assert!(
        matches!(answer, Ok((200, _))),
        "after the garbage: {answer:?}"
    );
}

#[test]
fn daemon_metrics_refuse_oversized_heads() {
    privileged!();
    let node = Node::new();
    let (_daemon, target) = daemon_target(&node, &[]);
    oversized_heads_are_refused(&target, "/metrics");
}

#[test]
fn daemon_metrics_survive_garbage() {
    privileged!();
    let node = Node::new();
    let (mut daemon, target) = daemon_target(&node, &[]);
    garbage_never_stops_it(&target, "/metrics", 0x5eed_0001);
    assert!(daemon.exited().is_none(), "the daemon exited");
}

#[test]
fn daemon_metrics_show_namespaces_only_when_asked() {
    privileged!();
    let node = Node::new();
    let w = World::new("rdh", false);
    let netns = w.pod.path().display().to_string();
    let (mut daemon, target) = daemon_target(&node, &[]);
    node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-u 1337 -i '*'",
    ]);
    let (status, text) = target.get("/metrics", DEADLINE).expect("scrape");
    assert_eq!(status, 200, "{text}");
    check_prometheus(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(
        text.contains("redirect_decisions_total{decision=\"redirected\"}")
            && text.contains("redirect_map_entries{map=\"NETNS_OUTBOUND\"} 1"),
        "node-wide counters and map fill are served: {text}"
    );
    assert!(
        !text.contains("redirect_netns_decisions_total") && !text.contains(&netns),
        "no per-namespace series and no namespace path by default: {text}"
    );

    // Asked for: the restarted daemon (it adopts the enrollment) serves them.
    assert!(
        daemon.stop(nix::sys::signal::Signal::SIGTERM),
        "daemon exit"
    );
    let (_daemon, target) = daemon_target(&node, &["--metrics-per-namespace"]);
    let (status, text) = target.get("/metrics", DEADLINE).expect("scrape");
    assert_eq!(status, 200, "{text}");
    check_prometheus(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let series = format!("redirect_netns_decisions_total{{netns=\"{netns}\",");
    assert!(
        text.lines().any(|l| l.starts_with(&series)),
        "--metrics-per-namespace serves the namespace's series: {text}"
    );
}

#[test]
fn proxy_admin_ports_cut_slow_clients_refuse_oversized_survive_garbage() {
    privileged!();
    let ns = Netns::new("rph").expect("netns");
    let mut proxy = Proxy::start(&ns);
    let at = |port: u16| Target {
        addr: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        netns: Some(ns.path()),
    };
    let stats = at(15090);
    slow_clients_do_not_hold_scrapes(&stats, "/stats/prometheus");
    oversized_heads_are_refused(&stats, "/stats/prometheus");
    garbage_never_stops_it(&stats, "/stats/prometheus", 0x5eed_0002);
    // Every admin port still answers.
    for (port, path) in [
        (15021, "/healthz/ready"),
        (15020, "/stats/prometheus"),
        (15000, "/ready"),
    ] {
        let answer = at(port).get(path, DEADLINE);
        assert!(matches!(answer, Ok((200, _))), "{port} {path}: {answer:?}");
    }
    assert!(proxy.child.exited().is_none(), "the proxy exited");
}
