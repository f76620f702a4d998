//! A pod holding connects to its own address in handshake (`LOCAL_CONNECTS`, the record that
//! lets sk_lookup exempt the pod's own connections) uses only its own `--quota-handshakes`:
//! past it, its connects are captured instead (fail closed), a neighbour's own connections stay
//! exempt, and every record goes with its socket.
use std::{process::Output, time::Duration};

use redirect_testkit::{ip, privileged, until, Cgroup, Netns};
use redirect_tests::{
    conformance::{listen, probe},
    flood::{counter, fill, hold_syn_sent},
    node::{istio_iptables, istio_iptables_cmd, map_max_entries, ok, Pins},
    wait_detached,
};

const APP: (&str, &str) = ("1000", "1000");

/// A namespace with `addr`/24 on a veth link (both ends inside it).
fn pod(prefix: &str, addr: &str) -> Netns {
    let ns = Netns::new(prefix).expect("netns");
    let n = ns.name();
    for args in [
        &[
            "-n", n, "link", "add", "d0", "type", "veth", "peer", "name", "d1",
        ][..],
        &["-n", n, "link", "set", "d1", "up"],
        &["-n", n, "addr", "add", &format!("{addr}/24"), "dev", "d0"],
        &["-n", n, "link", "set", "d0", "up"],
    ] {
        ip(args).expect("ip");
    }
    ns
}

/// `redirect istio-iptables` capturing every inbound port of `ns`.
fn enroll(pins: &Pins, cgroup: &Cgroup, ns: &Netns, env: &[(&str, &str)]) -> Output {
    istio_iptables_cmd(
        &pins.0,
        cgroup.path(),
        &ns.path(),
        &["-u", "1337", "-i", "*", "-b", "*"],
    )
    .envs(env.iter().copied())
    .output()
    .expect("run redirect istio-iptables")
}

#[test]
fn a_pod_holding_connects_to_itself_uses_only_its_own_quota() {
    privileged!();
    let cgroup = Cgroup::new("rlq").expect("cgroup");
    let pins = Pins::new();
    let hostile = pod("rla", "10.77.0.1");
    let neighbour = pod("rlb", "10.77.1.1");
    let sizing = [
        ("REDIRECT_MAX_PODS", "4"),
        ("REDIRECT_QUOTA_HANDSHAKES", "32"),
        // Just enough for every namespace's quota at once: (4 + 1) x 32 + 1024.
        ("REDIRECT_MAX_CONNECTIONS", "1184"),
    ];
    ok(&enroll(&pins, &cgroup, &hostile, &sizing), "enroll hostile");
    ok(&enroll(&pins, &cgroup, &neighbour, &[]), "enroll neighbour");
    assert_eq!(
        map_max_entries(&pins.0, "LOCAL_CONNECTS"),
        5 * 32 + 1024,
        "LOCAL_CONNECTS is sized from --max-connections"
    );

    // A listener that never accepts: past its backlog, the pod's connects to itself stay in
    // SYN_SENT, each holding its record.
    let (held, stuck) = hold_syn_sent(&hostile, &cgroup, APP, "8000", "10.77.0.1:8000", 300);
    // About two complete into the backlog; 32 are recorded; the rest are refused a record.
    until(
        "the connects past the quota are counted",
        Duration::from_secs(20),
        || counter(&pins.0, &hostile, "local_quota") >= 300 - 32 - 4,
    )
    .expect("local_quota counted for the hostile pod");
    let in_flight = fill(&pins.0, "LOCAL_CONNECTS");
    assert!(
        (30..=40).contains(&in_flight),
        "the hostile pod holds about its quota of 32 records, not 300: {in_flight}"
    );
    assert!(
        counter(&pins.0, &hostile, "inbound_no_listener") > 0,
        "unrecorded connects are captured (no proxy listens: refused)"
    );

    // The neighbour's connections to itself are still its own.
    let _app = listen(
        &neighbour,
        Some(cgroup.path()),
        None,
        "app",
        &["0.0.0.0:8000".into()],
        &[],
    );
    for _ in 0..10 {
        let r = probe(
            &neighbour,
            Some(cgroup.path()),
            Some((1000, 1000)),
            &["tcp:10.77.1.1:8000".into()],
        );
        assert_eq!(
            r[0].at(),
            "at=app/0.0.0.0:8000 orig=10.77.1.1:8000",
            "{r:?}"
        );
    }
    assert_eq!(counter(&pins.0, &neighbour, "inbound_local"), 10);
    assert_eq!(counter(&pins.0, &neighbour, "local_quota"), 0);

    // The holder goes: its records go with its sockets.
    drop(held);
    until("the records are gone", Duration::from_secs(20), || {
        fill(&pins.0, "LOCAL_CONNECTS") == 0
    })
    .expect("LOCAL_CONNECTS back to empty");
    drop(stuck);
    for ns in [&hostile, &neighbour] {
        let out = istio_iptables(&pins.0, cgroup.path(), &ns.path(), &["--cleanup-only"]);
        ok(&out, "cleanup");
    }
    wait_detached(cgroup.path());
}
