//! One pod flooding the per-connection state (hardening finding 4) never costs another pod its
//! DNS replies' source, its getpeername or its `SO_ORIGINAL_DST`: original destinations live in
//! each socket's own storage, and the keyed hand-off to the proxy has a per-namespace quota.
use std::{
    path::{Path, PathBuf},
    process::Output,
    time::Duration,
};

use redirect_testkit::{privileged, unique_name, Cgroup, Child, Netns};
use redirect_tests::{
    conformance::listen,
    flood::{counter, fill, flood, hold_syn_sent},
    node::{istio_iptables, istio_iptables_cmd, ok, Pins},
    wait_detached,
};

const DNS: &str = "10.96.0.10:53";
const SERVICE: &str = "192.0.2.10:80";
const APP: (&str, &str) = ("1000", "1000");

/// `redirect istio-iptables` capturing all TCP and DNS of `ns` (no process runs there: the
/// proxy's uid and the DNS servers are given).
fn enroll(pins: &Pins, cgroup: &Cgroup, ns: &Netns, env: &[(&str, &str)]) -> Output {
    let dns = DNS.trim_end_matches(":53");
    let args = [
        "-u",
        "1337",
        "-i",
        "*",
        "--redirect-dns",
        "--dns-servers",
        dns,
    ];
    istio_iptables_cmd(&pins.0, cgroup.path(), &ns.path(), &args)
        .envs(env.iter().copied())
        .output()
        .expect("run redirect istio-iptables")
}

fn cleanup(pins: &Pins, cgroup: &Cgroup, ns: &Netns) {
    let out = istio_iptables(&pins.0, cgroup.path(), &ns.path(), &["--cleanup-only"]);
    ok(&out, "cleanup");
}

/// The pod's proxy: TCP on 15001, DNS on 15053, as uid 1337.
fn proxy(ns: &Netns, cgroup: &Cgroup) -> Child {
    listen(
        ns,
        Some(cgroup.path()),
        Some((1337, 1337)),
        "proxy",
        &["0.0.0.0:15001".into()],
        &["127.0.0.1:15053".into()],
    )
}

/// A file that does not exist yet, removed on drop.
struct GoFile(PathBuf);

impl GoFile {
    fn new() -> Self {
        Self(std::env::temp_dir().join(unique_name("rfgo")))
    }
    fn path(&self) -> &Path {
        &self.0
    }
    fn create(&self) {
        std::fs::write(&self.0, b"go").expect("create the go file");
    }
}

impl Drop for GoFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Two pods of one node datapath (not created yet) in one cgroup.
struct Tenants {
    cgroup: Cgroup,
    pins: Pins,
    hostile: Netns,
    neighbour: Netns,
}

impl Tenants {
    fn new() -> Self {
        Self {
            cgroup: Cgroup::new("rfc").expect("cgroup"),
            pins: Pins::new(),
            hostile: Netns::new("rfa").expect("netns"),
            neighbour: Netns::new("rfb").expect("netns"),
        }
    }
}

#[test]
fn a_pod_churning_captured_dns_sockets_leaves_its_neighbours_replies_and_peers_alone() {
    privileged!();
    let Tenants {
        cgroup,
        pins,
        hostile,
        neighbour,
    } = Tenants::new();
    ok(
        &enroll(&pins, &cgroup, &hostile, &[]),
        "enroll the hostile pod",
    );
    ok(
        &enroll(&pins, &cgroup, &neighbour, &[]),
        "enroll the neighbour",
    );
    let _proxy = proxy(&neighbour, &cgroup);

    // The neighbour sends its DNS query and opens its connection, then waits for its replies
    // while the other pod churns captured DNS sockets.
    let go = GoFile::new();
    let mut cmd = flood(
        &neighbour,
        &cgroup,
        APP,
        &["--victim-dns", DNS, "--victim-tcp", SERVICE, "--go"],
    );
    cmd.arg(go.path());
    let mut victim = Child::spawn("probe-flood victim", cmd).expect("start the victim");
    victim
        .wait_line("ready", Duration::from_secs(20), |l| l == "ready")
        .expect("the victim's query and connection");

    // More captured sockets than the old node-wide 65,536-entry map held, in seconds.
    let out = flood(
        &hostile,
        &cgroup,
        APP,
        &["--udp", DNS, "--count", "200000", "--threads", "2"],
    )
    .output()
    .expect("run the flood");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.trim() == "done 200000",
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    go.create();
    let answer = victim
        .wait_line("its answers", Duration::from_secs(30), |l| {
            l.starts_with("dns-from=")
        })
        .expect("the victim's answers");
    assert!(
        answer.starts_with(&format!("dns-from={DNS} ")),
        "the neighbour's DNS reply still comes from its server: {answer}"
    );
    assert!(
        answer.contains(&format!("tcp-peer={SERVICE} ")),
        "getpeername still shows the service: {answer}"
    );
    assert!(
        answer.contains(&format!("\"orig\":\"{SERVICE}\"")) || answer.contains(SERVICE),
        "the proxy got the original destination: {answer}"
    );
    drop(victim);
    cleanup(&pins, &cgroup, &hostile);
    cleanup(&pins, &cgroup, &neighbour);
    wait_detached(cgroup.path());
}

#[test]
fn a_pod_holding_connections_in_hand_off_uses_only_its_own_quota() {
    privileged!();
    let Tenants {
        cgroup,
        pins,
        hostile,
        neighbour,
    } = Tenants::new();
    let sizing = [
        ("REDIRECT_MAX_PODS", "4"),
        ("REDIRECT_QUOTA_HANDSHAKES", "32"),
        // Just enough for every namespace's quota at once: (4 + 1) x 32 + 1024.
        ("REDIRECT_MAX_CONNECTIONS", "1184"),
    ];
    ok(
        &enroll(&pins, &cgroup, &hostile, &sizing),
        "enroll the hostile pod",
    );
    ok(
        &enroll(&pins, &cgroup, &neighbour, &[]),
        "enroll the neighbour",
    );
    assert_eq!(
        redirect_tests::node::map_max_entries(&pins.0, "TRACKED"),
        5 * 32 + 1024,
        "TRACKED is sized from --max-connections"
    );

    // The hostile pod's "proxy" never accepts: past its backlog, connects stay in SYN_SENT
    // and their hand-offs are never claimed.
    let (held, stuck) = hold_syn_sent(&hostile, &cgroup, ("1337", "1337"), "15001", SERVICE, 300);
    redirect_testkit::until(
        "the hand-offs past the quota are counted",
        Duration::from_secs(20),
        || counter(&pins.0, &hostile, "handoff_quota") >= 300 - 32 - 2,
    )
    .expect("handoff_quota counted for the hostile pod");
    let in_flight = fill(&pins.0, "TRACKED");
    assert!(
        (30..=40).contains(&in_flight),
        "the hostile pod holds about its quota of 32 hand-offs, not 300: {in_flight}"
    );

    // The neighbour's connections all get their original destination.
    let _proxy = proxy(&neighbour, &cgroup);
    for _ in 0..20 {
        let r = redirect_tests::conformance::probe(
            &neighbour,
            Some(cgroup.path()),
            Some((1000, 1000)),
            &[format!("tcp:{SERVICE}")],
        );
        assert_eq!(
            r[0].at(),
            format!("at=proxy/0.0.0.0:15001 orig={SERVICE}"),
            "{r:?}"
        );
    }
    assert_eq!(counter(&pins.0, &neighbour, "handoff_quota"), 0);

    // The holder goes: its unclaimed hand-offs go with its sockets.
    drop(held);
    redirect_testkit::until("the hand-offs are gone", Duration::from_secs(20), || {
        fill(&pins.0, "TRACKED") == 0
    })
    .expect("TRACKED back to empty");
    drop(stuck);
    cleanup(&pins, &cgroup, &hostile);
    cleanup(&pins, &cgroup, &neighbour);
    wait_detached(cgroup.path());
}
