//! The node daemon: enrollment over its socket, one daemon per node, SIGKILL without a gap in
//! capture, restart adoption without attaching twice, address following, uninstall.
use std::{process::Command, time::Duration};

use nix::sys::signal::Signal;
use redirect_testkit::{
    eventually, privileged,
    probe::{parse_lines, ProbeResult},
    Child,
};
use redirect_tests::{
    bin_path,
    conformance::{probe, reach, sidecar_listeners, World, POD4},
    node::Node,
    wait_detached,
};

/// `GET /metrics` from the host (the daemon listens in the host's namespace).
fn scrape(addr: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the metrics endpoint");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("send");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let (head, body) = text.split_once("\r\n\r\n").expect("http response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

const CAPTURED: &str = "at=proxy/[::]:15001 orig=192.0.2.10:80";

#[test]
fn daemon_enrolls_follows_addresses_and_is_alone() {
    privileged!();
    let node = Node::new();
    let w = World::new("rdp", false);
    let (_daemon, ready) =
        node.daemon_with(&["--metrics", "127.0.0.1:0", "--metrics-per-namespace"]);
    // One daemon per node.
    let second = node.run(&["daemon"]);
    assert!(!second.status.success());
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("another redirect daemon is running"),
        "{second:?}"
    );

    // The daemon would open /proc/self as itself (the host): refused, naming the path.
    let refused = node.run(&[
        "enroll",
        "--netns",
        "/proc/self/ns/net",
        "--istio-args",
        "-i '*'",
    ]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--netns /proc/self/ns/net"),
        "{refused:?}"
    );

    let netns = w.pod.path().display().to_string();
    let out = node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-u 1337 -i '*' -x '' -b '*' -d 15090,15021,15020",
    ]);
    assert!(out.contains("enrolled"), "{out}");
    let _l = sidecar_listeners(&w, node.cgroup.path());
    assert_eq!(
        reach(&w, node.cgroup.path(), (1000, 1000), "192.0.2.10:80"),
        CAPTURED
    );
    let list = node.ok(&["list", "--json"]);
    let list: serde_json::Value = serde_json::from_str(&list).expect("json");
    assert_eq!(list[0]["netns"], netns.as_str(), "{list}");
    assert_eq!(list[0]["addrs"][0], "10.200.0.2", "{list}");

    // An address added later is followed: the proxy reaching it goes to 15006, the app's own
    // traffic to it is left alone, as with iptables' `-o lo`.
    let added = "10.200.0.77";
    redirect_testkit::ip(&[
        "-n",
        w.pod.name(),
        "addr",
        "add",
        &format!("{added}/32"),
        "dev",
        "eth0",
    ])
    .expect("ip addr add");
    eventually(
        format!("the new address {added} to be followed (the proxy reaching it lands on 15006)"),
        Duration::from_secs(5),
        || {
            let p = probe(
                &w.pod,
                Some(node.cgroup.path()),
                Some((1337, 1337)),
                &[format!("tcp:{added}:8000")],
            );
            if p[0].at() == format!("at=proxy/[::]:15006 orig={added}:8000") {
                Ok(())
            } else {
                Err(p)
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let app = probe(
        &w.pod,
        Some(node.cgroup.path()),
        Some((1000, 1000)),
        &[format!("tcp:{added}:8000")],
    );
    assert_eq!(
        app[0].at(),
        format!("at=app/[::]:8000 orig={added}:8000"),
        "{app:?}"
    );

    // Explain answers from the same decision, reading the pinned maps.
    let why = node.ok(&[
        "explain",
        "--netns",
        &netns,
        "--uid",
        "1337",
        "--dst",
        &format!("{POD4}:8000"),
    ]);
    assert!(
        why.contains("proxy:15006") && why.contains("inbound_redirect_local"),
        "{why}"
    );
    let why = node.ok(&[
        "explain",
        "--netns",
        &netns,
        "--uid",
        "1000",
        "--dst",
        "192.0.2.10:80",
        "--json",
    ]);
    let why: serde_json::Value = serde_json::from_str(&why).expect("json");
    assert_eq!(why["outcome"], "proxy:15001", "{why}");
    // The answer echoes the query, with the namespace as a path and its cookie as a number.
    assert_eq!(why["direction"], "outbound", "{why}");
    assert_eq!(why["netns"], netns.as_str(), "{why}");
    assert!(why["cookie"].is_u64(), "{why}");
    assert_eq!(why["dst"], "192.0.2.10:80", "{why}");

    // The daemon's Prometheus endpoint, per namespace (asked for).
    let text = scrape(&redirect_tests::node::metrics_addr(&ready).to_string());
    redirect_tests::http::check_prometheus(&text).expect("valid exposition");
    let series = format!("redirect_netns_decisions_total{{netns=\"{netns}\",");
    assert!(
        text.lines()
            .any(|l| l.starts_with(&series) && l.contains("decision=\"redirected\"")),
        "{text}"
    );

    node.ok(&["unenroll", "--netns", &netns]);
    assert_eq!(
        reach(&w, node.cgroup.path(), (1000, 1000), "192.0.2.10:80"),
        "at=world/192.0.2.10:80 orig=192.0.2.10:80"
    );
    assert!(
        node.pins.exists(),
        "the daemon keeps its datapath with no enrollment"
    );
    node.ok(&["uninstall"]);
    assert!(!node.pins.exists());
}

#[test]
fn sigkill_leaves_no_gap_restart_adopts_uninstall_leaves_nothing() {
    privileged!();
    let node = Node::new();
    let w = World::new("rdk", false);
    let mut daemon = node.daemon();
    let netns = w.pod.path().display().to_string();
    node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-u 1337 -i '*'",
    ]);
    let _l = sidecar_listeners(&w, node.cgroup.path());
    let ids = node.link_ids();
    assert_eq!(ids.len(), 12, "every program attached once: {ids:?}");

    // A client loops connections while the daemon is SIGKILLed: every one is captured.
    let mut cmd = Command::new(bin_path("probe-matrix"));
    cmd.arg("--netns").arg(w.pod.path());
    cmd.arg("--cgroup").arg(node.cgroup.path());
    cmd.args(["--uid", "1000", "--gid", "1000", "--"])
        .args((0..400).map(|_| "tcp:192.0.2.10:80"));
    let mut looping = Child::spawn("probe-matrix", cmd).expect("start probe-matrix");
    looping
        .wait_line("its first connection", Duration::from_secs(10), |_| true)
        .expect("the client loop is running");
    daemon.stop(Signal::SIGKILL);
    let done_at_kill = looping.lines().len();
    println!("daemon SIGKILLed after {done_at_kill} of 400 connections");
    let status = looping
        .wait_exit(Duration::from_secs(120))
        .expect("the client loop ends");
    assert!(status.success(), "probe-matrix: {status}");
    assert!(
        done_at_kill < 400,
        "the daemon must die while the loop runs ({done_at_kill} of 400 done before)"
    );
    let lines = looping.lines().join("\n");
    let results: Vec<ProbeResult> = parse_lines(lines.as_bytes()).expect("probe-matrix output");
    assert_eq!(results.len(), 400);
    let escaped: Vec<&ProbeResult> = results.iter().filter(|r| r.at() != CAPTURED).collect();
    assert!(
        escaped.is_empty(),
        "{} of 400 not captured, e.g. {:?}",
        escaped.len(),
        escaped.first()
    );
    assert_eq!(node.link_ids(), ids, "capture stays attached after SIGKILL");

    // Restarted, it adopts: same programs, nothing attached twice, the enrollment is back.
    let _daemon = node.daemon();
    assert_eq!(node.link_ids(), ids, "restart attached again");
    let list = node.ok(&["list"]);
    assert!(list.contains(&netns), "{list}");
    assert_eq!(
        reach(&w, node.cgroup.path(), (1000, 1000), "192.0.2.10:80"),
        CAPTURED
    );

    // Uninstall: no pins, no programs, no enrollment files, none of the files the daemon and
    // the plugin write beside them (planted here as they write them: a repair's health record,
    // the plugin's log and its two failure counts).
    let left_by_others = [
        "health",
        "cni.log",
        "cni.log.1",
        "cni-add-unreachable",
        "cni-add-refused",
    ];
    for name in left_by_others {
        std::fs::write(node.dir.join(name), "1\n").expect("plant");
    }
    node.ok(&["uninstall"]);
    assert!(!node.pins.exists(), "pins left");
    wait_detached(node.cgroup.path());
    assert!(
        !node.dir.join("enrollments").exists(),
        "enrollment files left"
    );
    redirect_testkit::eventually(
        "the daemon directory emptied of ours",
        Duration::from_secs(10),
        || {
            let left: Vec<&str> = left_by_others
                .iter()
                .copied()
                .chain(["daemon.sock", "daemon.lock"])
                .filter(|n| node.dir.join(n).exists())
                .collect();
            left.is_empty().then_some(()).ok_or(left)
        },
    )
    .expect("uninstall left files in the daemon directory");
    assert_eq!(
        reach(&w, node.cgroup.path(), (1000, 1000), "192.0.2.10:80"),
        "at=world/192.0.2.10:80 orig=192.0.2.10:80"
    );
}

#[test]
fn a_proxy_in_a_sibling_cgroup_works_by_default() {
    privileged!();
    let node = Node::new();
    let app_cg = node.cgroup.child("app").expect("app cgroup");
    let proxy_cg = node.cgroup.child("proxy").expect("proxy cgroup");
    // Capture attaches at the app's cgroup only; the proxy lives beside it, not below.
    let mut cmd = node.cmd(&["daemon", "--cgroup"]);
    cmd.arg(app_cg.path());
    let mut daemon = Child::spawn("redirect daemon", cmd).expect("start the daemon");
    daemon
        .wait_line("daemon ready", Duration::from_secs(10), |l| {
            l.starts_with("ready ")
        })
        .expect("daemon ready");
    let w = World::new("rds", false);
    let netns = w.pod.path().display().to_string();
    node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-u 1337 -i '*'",
    ]);
    let _listeners = sidecar_listeners(&w, proxy_cg.path());
    assert_eq!(
        reach(&w, app_cg.path(), (1000, 1000), "192.0.2.10:80"),
        CAPTURED,
        "captured with its original destination"
    );
    let status = node.ok(&["status"]);
    assert!(
        status.contains(&format!(
            "attached at cgroup {}, proxy cgroup {}",
            app_cg.path().display(),
            redirect_testkit::cgroup2_root().expect("cgroup2").display()
        )),
        "{status}"
    );
    node.ok(&["uninstall"]);
    drop(daemon);
}

#[test]
fn a_daemon_a_debugger_attaches_to_keeps_serving() {
    privileged!();
    let node = Node::new();
    let mut daemon = node.daemon();
    // What a debugger or `strace -f` attaching does: the daemon's wait for SIGTERM/SIGINT
    // returns EINTR, which is not a request to stop.
    let mut strace = Command::new("strace");
    strace
        .args(["-f", "-o", "/dev/null", "-p"])
        .arg(daemon.pid().to_string());
    let mut tracer =
        Child::spawn("strace -f", strace).expect("start strace (xtask setup installs it)");
    tracer
        .wait_stderr_line("strace attached", Duration::from_secs(10), |l| {
            l.contains("attached")
        })
        .expect("strace attaches");
    tracer.terminate(Duration::from_secs(5));
    daemon
        .wait_stderr_line("the interrupted wait", Duration::from_secs(10), |l| {
            l.contains("was interrupted") || l.contains("stopping")
        })
        .expect("the daemon saw its wait interrupted");
    assert!(
        !daemon.stderr_lines().iter().any(|l| l.contains("stopping")),
        "strace attaching stopped the daemon: {:?}",
        daemon.stderr_lines()
    );
    assert!(daemon.exited().is_none(), "the daemon is still running");
    node.ok(&["list"]);
}

#[test]
fn status_reports_a_stopped_daemons_enrollments_from_its_files() {
    privileged!();
    let node = Node::new();
    let mut daemon = node.daemon();
    let w = World::new("rdd", false);
    let netns = w.pod.path().display().to_string();
    node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-u 1337 -i '*'",
    ]);
    let _listeners = sidecar_listeners(&w, node.cgroup.path());
    let up = node.ok(&["status"]);
    assert!(up.contains(&netns) && !up.contains("(daemon down)"), "{up}");
    // Stopped, the daemon leaves capture pinned: status still names what it enrolled, read
    // from its directory, says the daemon does not answer, and never waits on it.
    daemon.stop(Signal::SIGTERM);
    let down = node.ok(&["status"]);
    assert!(down.contains(&format!("{netns} (daemon down)")), "{down}");
    assert!(down.contains("does not answer"), "{down}");
    assert_eq!(
        reach(&w, node.cgroup.path(), (1000, 1000), "192.0.2.10:80"),
        CAPTURED,
        "capture stays while the daemon is down"
    );
    node.ok(&["uninstall"]);
}
