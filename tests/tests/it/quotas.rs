//! Per-namespace quotas on the shared maps and all-or-nothing enrollment: a policy over a quota,
//! a pod beyond `--max-pods` or a pod claiming another's address writes nothing, names the
//! limit, and leaves no entry that would refuse the next pod.
use std::process::Output;

use redirect_testkit::{ip, privileged, Cgroup, Netns};
use redirect_tests::{
    node::{istio_iptables_cmd, ok, Pins},
    wait_detached,
};

/// A pod namespace with one address on a link (a veth pair inside it: no module needed).
fn pod(prefix: &str, addr: &str) -> Netns {
    let ns = Netns::new(prefix).expect("netns");
    let n = ns.name();
    ip(&[
        "-n", n, "link", "add", "d0", "type", "veth", "peer", "name", "d1",
    ])
    .expect("link");
    ip(&["-n", n, "addr", "add", &format!("{addr}/32"), "dev", "d0"]).expect("address");
    for dev in ["d0", "d1"] {
        ip(&["-n", n, "link", "set", dev, "up"]).expect("link up");
    }
    ns
}

/// `redirect istio-iptables` for `ns` with `env` set.
fn apply(pins: &Pins, cgroup: &Cgroup, ns: &Netns, env: &[(&str, &str)], args: &[&str]) -> Output {
    // No process runs in these namespaces: the proxy's uid is given, not looked up.
    let uid: &[&str] = if args.contains(&"--cleanup-only") {
        &[]
    } else {
        &["-u", "1337"]
    };
    istio_iptables_cmd(&pins.0, cgroup.path(), &ns.path(), &[uid, args].concat())
        .envs(env.iter().copied())
        .output()
        .expect("run redirect istio-iptables")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn cleanup(pins: &Pins, cgroup: &Cgroup, pods: &[&Netns]) {
    for ns in pods {
        ok(
            &apply(pins, cgroup, ns, &[], &["--cleanup-only"]),
            "cleanup",
        );
    }
    assert!(!pins.0.exists(), "the last cleanup unpins the datapath");
    wait_detached(cgroup.path());
}

/// `-d` with `n` distinct ports.
fn ports(n: u16) -> String {
    (1..=n)
        .map(|p| (20_000 + p).to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn a_policy_over_a_quota_writes_nothing_and_names_the_flag() {
    privileged!();
    let cgroup = Cgroup::new("rqc").expect("cgroup");
    let pins = Pins::new();
    let first = pod("rqa", "10.210.0.1");
    ok(
        &apply(&pins, &cgroup, &first, &[], &["-i", "*"]),
        "first pod",
    );

    let greedy = pod("rqb", "10.210.0.2");
    let too_many = ports(1025);
    let out = apply(
        &pins,
        &cgroup,
        &greedy,
        &[],
        &["-i", "*", "-b", "*", "-d", &too_many],
    );
    assert!(!out.status.success(), "1,025 ports in -d are refused");
    let e = stderr(&out);
    assert!(
        e.contains("1025 -d (excluded inbound ports)")
            && e.contains("quota of 1024")
            && e.contains("--quota-ports"),
        "names the list, the count, the quota and the flag: {e}"
    );
    // Nothing of it stayed: a pod given its address enrolls, with exactly the quota.
    drop(greedy);
    let next = pod("rqd", "10.210.0.2");
    let at_quota = ports(1024);
    ok(
        &apply(
            &pins,
            &cgroup,
            &next,
            &[],
            &["-i", "*", "-b", "*", "-d", &at_quota],
        ),
        "a pod with the freed address and 1,024 ports",
    );
    cleanup(&pins, &cgroup, &[&first, &next]);
}

#[test]
fn max_pods_sizes_the_maps_and_a_refused_pod_leaves_nothing() {
    privileged!();
    let cgroup = Cgroup::new("rqc").expect("cgroup");
    let pins = Pins::new();
    let sizing = [
        ("REDIRECT_MAX_PODS", "2"),
        ("REDIRECT_QUOTA_ADDRESSES", "8"),
    ];
    let a = pod("rqe", "10.211.0.1");
    let b = pod("rqf", "10.211.0.2");
    let c = pod("rqg", "10.211.0.3");
    ok(
        &apply(&pins, &cgroup, &a, &sizing, &["-i", "*"]),
        "pod a creates the datapath",
    );
    // The sizing of the creating run holds: the maps are sized from it.
    assert_eq!(
        redirect_tests::node::map_max_entries(&pins.0, "POD_ADDRS"),
        3 * 8,
        "(max pods + 1) x addresses"
    );
    ok(&apply(&pins, &cgroup, &b, &[], &["-i", "*"]), "pod b");
    let out = apply(&pins, &cgroup, &c, &[], &["-i", "*"]);
    assert!(!out.status.success(), "a third pod is over --max-pods 2");
    let e = stderr(&out);
    assert!(e.contains("--max-pods") && e.contains("quota of 2"), "{e}");
    ok(
        &apply(&pins, &cgroup, &a, &[], &["--cleanup-only"]),
        "cleanup a",
    );
    ok(
        &apply(&pins, &cgroup, &c, &[], &["-i", "*"]),
        "c fits once a is gone",
    );
    cleanup(&pins, &cgroup, &[&b, &c]);
}

#[test]
fn a_pod_claiming_anothers_address_writes_none_of_its_addresses() {
    privileged!();
    let cgroup = Cgroup::new("rqc").expect("cgroup");
    let pins = Pins::new();
    let a = pod("rqh", "10.212.0.9");
    ok(&apply(&pins, &cgroup, &a, &[], &["-i", "*"]), "pod a");
    // b's own address first (in insertion and in sorted order), then a's: the conflict is
    // found only at the second one.
    let b = pod("rqi", "10.212.0.1");
    ip(&["-n", b.name(), "addr", "add", "10.212.0.9/32", "dev", "d0"]).expect("address");
    let out = apply(&pins, &cgroup, &b, &[], &["-i", "*"]);
    assert!(
        !out.status.success(),
        "an address of another pod is refused"
    );
    assert!(stderr(&out).contains("10.212.0.9"), "{}", stderr(&out));
    drop(b);
    // Its own address was not left behind: the pod given it next enrolls.
    let c = pod("rqj", "10.212.0.1");
    ok(
        &apply(&pins, &cgroup, &c, &[], &["-i", "*"]),
        "pod c reuses b's address",
    );
    cleanup(&pins, &cgroup, &[&a, &c]);
}

#[test]
fn a_handshake_quota_the_connection_maps_cannot_hold_creates_nothing() {
    privileged!();
    let cgroup = Cgroup::new("rqk").expect("cgroup");
    let pins = Pins::new();
    let a = pod("rqk", "10.213.0.1");
    // 111 namespaces x 2048 + 1024 cannot fit in the default 16384 connections.
    let out = apply(
        &pins,
        &cgroup,
        &a,
        &[("REDIRECT_QUOTA_HANDSHAKES", "2048")],
        &["-i", "*"],
    );
    assert!(!out.status.success(), "refused");
    let e = stderr(&out);
    assert!(
        e.contains("--quota-handshakes 2048")
            && e.contains("--max-connections of at least 228352")
            && e.contains("not 16384"),
        "{e}"
    );
    assert!(!pins.0.exists(), "nothing pinned");
    // With connection maps large enough for every namespace's quota, the same sizing holds.
    ok(
        &apply(
            &pins,
            &cgroup,
            &a,
            &[
                ("REDIRECT_QUOTA_HANDSHAKES", "2048"),
                ("REDIRECT_MAX_CONNECTIONS", "228352"),
            ],
            &["-i", "*"],
        ),
        "pod a with room for every quota",
    );
    assert_eq!(
        redirect_tests::node::map_max_entries(&pins.0, "TRACKED"),
        228_352
    );
    // Once pinned, the datapath's own sizing rules: the same quota without the larger
    // --max-connections (an old deployment's environment) still enrolls the next pod.
    let b = pod("rql", "10.213.0.2");
    ok(
        &apply(
            &pins,
            &cgroup,
            &b,
            &[("REDIRECT_QUOTA_HANDSHAKES", "2048")],
            &["-i", "*"],
        ),
        "pod b under the pinned sizing",
    );
    cleanup(&pins, &cgroup, &[&a, &b]);
}
