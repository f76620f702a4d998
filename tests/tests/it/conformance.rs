//! Differential conformance against istio-iptables: every row of Istio's capture-cases.tsv is
//! loaded twice, as its golden iptables rules (iptables-restore) in one pod and as `redirect
//! istio-iptables` with the same arguments in an identical pod, and the same matrix of real
//! connections must reach the same listener with the same original destination.
//!
//! TPROXY rows (`inbound-ports-tproxy`, `inbound-ports-wildcard-tproxy`, `tproxy`) also get
//! Istio's policy routing beside the golden (`ip rule fwmark 1337 lookup 133`, a local table),
//! and 15006 is `redirect-proxy --tproxy-mark 1337` run as Istio runs istio-proxy there (uid 0,
//! gid 1337) on both sides: it forwards to the original destination transparently, from the
//! client's address, so each connection the application answers also says which peer it saw
//! and whether the proxy stood between; that identity is probed as well. Their pods then run
//! istio-validation's check as Istio's validator makes it (uid 1337, plain listeners on
//! 127.0.0.1:15001 and :15006, the dial to 127.0.0.6:15002 and its variants).
use std::{collections::BTreeMap, process::Command};

use redirect_testkit::{probe::ProbeResult, Cgroup, Child};
use redirect_tests::{
    bin_path,
    conformance::{cases, golden, listen, probe, Case, World, POD4, POD6, WORLD4, WORLD6},
    node::Pins,
    tproxy_pod, wait_detached,
};

/// Ports the pod's own application listens on (local destinations and inbound targets).
const APP_PORTS: [u16; 14] = [
    8000, 15008, 53, 80, 4000, 5000, 6000, 7000, 32000, 31000, 15021, 15090, 15020, 22,
];

fn last_list(args: &[String], flag: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for w in args.windows(2) {
        if w[0] == flag {
            out = w[1].split(',').filter_map(|s| s.parse().ok()).collect();
        }
    }
    out
}

/// (label, uid, gid): the application, each proxy uid, each proxy gid, each owner group.
fn identities(case: &Case) -> Vec<(String, u32, u32)> {
    let mut ids = vec![("app".to_owned(), 1000, 1000)];
    if case.tproxy {
        ids.push(("istio-proxy uid 0 gid 1337".to_owned(), 0, 1337));
    }
    for u in last_list(&case.args, "-u") {
        ids.push((format!("uid {u}"), u, 1000));
    }
    for g in last_list(&case.args, "-g") {
        ids.push((format!("gid {g}"), 1000, g));
    }
    for (k, v) in &case.env {
        if k.contains("OWNER_GROUPS") {
            for g in v.split(',').filter_map(|s| s.parse::<u32>().ok()) {
                ids.push((format!("group {g}"), 1000, g));
            }
        }
    }
    ids
}

fn outbound_probes(ipv6: bool) -> Vec<String> {
    let mut p: Vec<String> = [
        "tcp:127.0.0.1:8000".to_owned(),
        "tcp:127.0.0.2:8000".to_owned(),
        "tcp:127.1.2.3:8000".to_owned(),
        // The unspecified address reaches the host itself (`-o lo` for iptables).
        "tcp:0.0.0.0:8000".to_owned(),
        format!("tcp:{POD4}:8000"),
        format!("tcp:{POD4}:15008"),
        "tcp:10.201.0.2:8000".to_owned(),
        format!("tcpsrc:127.0.0.6:{POD4}:8000"),
        "tcpsrc:127.0.0.6:127.0.0.2:8000".to_owned(),
        "tcp6:127.0.0.1:8000".to_owned(),
        "udp:127.0.0.1:8000".to_owned(),
        "udp:127.0.0.53:53".to_owned(),
        "udps:127.0.0.53:53".to_owned(),
        "tcp:127.0.0.53:53".to_owned(),
        "udp:192.0.2.10:53".to_owned(),
        "tcp:192.0.2.10:53".to_owned(),
    ]
    .into();
    for a in WORLD4 {
        p.push(format!("tcp:{a}:80"));
    }
    p.extend(
        [
            "tcp:192.0.2.10:32000",
            "tcp:192.0.2.10:31000",
            "tcp6:10.1.2.3:80",
            "tcp6:192.0.2.10:80",
            "tcp6:198.19.9.9:80",
        ]
        .map(str::to_owned),
    );
    if ipv6 {
        p.extend([
            "tcp:[::1]:8000".to_owned(),
            "tcp:[::]:8000".to_owned(),
            format!("tcp:[{POD6}]:8000"),
            format!("tcp:[{POD6}]:15008"),
            format!("tcpsrc:[::6]:[{POD6}]:8000"),
            "tcp:[2001:db8::10]:80".to_owned(),
            "tcp:[fd00:99::10]:80".to_owned(),
            "tcp:[fd00:99::10]:32000".to_owned(),
            "udp:[::127.0.0.53]:53".to_owned(),
            "udps:[::127.0.0.53]:53".to_owned(),
            "tcp:[::127.0.0.53]:53".to_owned(),
        ]);
    }
    p
}

fn inbound_probes(ipv6: bool) -> Vec<String> {
    let mut p: Vec<String> = APP_PORTS
        .iter()
        .filter(|p| **p != 53)
        .map(|port| format!("tcp:{POD4}:{port}"))
        .collect();
    if ipv6 {
        p.extend([80, 4000, 6000, 15008].map(|port| format!("tcp:[{POD6}]:{port}")));
    }
    p
}

/// The outbound probes `(uid, gid)` runs. In TPROXY rows a proxy identity's TCP connect to
/// the pod's own DNS address on port 53 loops through 15006 under Istio's rules as under ours
/// (nat's gid rule has no port-53 exemption, so the proxy's every hop is sent back to it): the
/// loop only ends when the proxy runs out of sockets, which would fail every later probe on
/// either side. Those probes are left out for those identities.
fn probes_for(case: &Case, uid: u32, gid: u32, all: &[String]) -> Vec<String> {
    let proxy =
        last_list(&case.args, "-u").contains(&uid) || last_list(&case.args, "-g").contains(&gid);
    all.iter()
        .filter(|p| !(case.tproxy && proxy && p.starts_with("tcp:") && p.contains("127.0.0.53")))
        .cloned()
        .collect()
}

/// Listeners of one pod and its world; killed on drop (the field only keeps them alive).
struct Listeners(#[allow(dead_code)] Vec<Child>);

/// The proxy runs as the case's first proxy uid and gid, as istio-proxy does: its DNS replies
/// must match the conntrack zone the raw-table rules give them. In TPROXY rows 15006 is
/// `redirect-proxy --tproxy-mark` ([`tproxy_pod::inbound_proxy`]).
fn start_listeners(w: &World, cgroup: Option<&std::path::Path>, case: &Case) -> Listeners {
    let any = |port: u16| format!("[::]:{port}");
    let proxy_tcp = if case.tproxy {
        vec![any(15001), any(15053)]
    } else {
        vec![any(15001), any(15006), any(15053)]
    };
    let proxy_id = (
        last_list(&case.args, "-u").first().copied().unwrap_or(1337),
        last_list(&case.args, "-g").first().copied().unwrap_or(1337),
    );
    let proxy = listen(
        &w.pod,
        cgroup,
        Some(proxy_id),
        "proxy",
        &proxy_tcp,
        // Bound to loopback like istio-agent's DNS proxy, so replies leave from the address
        // REDIRECT sent the query to (a wildcard socket would answer from ::127.0.0.53, which
        // conntrack cannot match to the redirected query).
        &["127.0.0.1:15053".to_owned(), "[::1]:15053".to_owned()],
    );
    let app_tcp: Vec<String> = APP_PORTS.iter().map(|p| any(*p)).collect();
    let app = listen(&w.pod, cgroup, None, "app", &app_tcp, &[any(53), any(8000)]);
    let ipv6 = case.ipv6;
    let mut world_tcp = Vec::new();
    for a in WORLD4 {
        for port in [80, 32000, 31000, 53] {
            world_tcp.push(format!("{a}:{port}"));
        }
    }
    if ipv6 {
        for a in WORLD6 {
            world_tcp.push(format!("[{a}]:80"));
            world_tcp.push(format!("[{a}]:32000"));
        }
    }
    let world = listen(
        &w.world,
        None,
        None,
        "world",
        &world_tcp,
        &["192.0.2.10:53".to_owned()],
    );
    let mut all = vec![proxy, app, world];
    if case.tproxy {
        all.push(tproxy_pod::inbound_proxy(&w.pod, cgroup));
    }
    Listeners(all)
}

fn redirect(case: &Case, args: &[String]) -> std::process::Output {
    let mut cmd = Command::new(bin_path("redirect"));
    cmd.arg("istio-iptables").args(args);
    for (k, v) in &case.env {
        cmd.env(k, v);
    }
    cmd.output().expect("run redirect istio-iptables")
}

/// Runs one case and asserts zero mismatches.
fn run_case(name: &str) {
    let case = cases()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no case {name}"));
    let (v4, v6) = golden(&case);

    // Reference: the golden rules.
    let ipt = World::new("rci", case.ipv6);
    ipt.pod
        .restore("iptables-restore", &v4)
        .expect("load the golden (IPv4)");
    if let Some(v6) = &v6 {
        ipt.pod
            .restore("ip6tables-restore", v6)
            .expect("load the golden (IPv6)");
    }
    if case.tproxy {
        tproxy_pod::istio_routing(&ipt.pod, case.ipv6);
    }
    let outcome = |r: &ProbeResult| {
        if case.tproxy {
            tproxy_pod::outcome(r)
        } else {
            r.outcome()
        }
    };

    // Ours: the same arguments, through the pinned datapath in a cgroup of the test's own.
    let ours = World::new("rce", case.ipv6);
    let cgroup = Cgroup::new("rcc").expect("cgroup");
    let pins = Pins::new();
    let bpffs = pins.0.clone();
    let mut args: Vec<String> = vec![
        "--netns".into(),
        ours.pod.path().display().to_string(),
        "--cgroup".into(),
        cgroup.path().display().to_string(),
        "--bpffs".into(),
        bpffs.display().to_string(),
    ];
    // The case's servers, or explicitly none (Istio's harness found none in resolv.conf).
    args.push("--dns-servers".into());
    args.push(case.dns.join(","));
    let mut apply = args.clone();
    apply.extend(case.args.iter().cloned());
    let out = redirect(&case, &apply);
    assert!(
        out.status.success(),
        "{name}: redirect istio-iptables {apply:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let listeners = (
        start_listeners(&ipt, None, &case),
        start_listeners(&ours, Some(cgroup.path()), &case),
    );

    let mut compared = 0;
    let mut mismatches: BTreeMap<String, (String, String)> = BTreeMap::new();
    let all_probes = outbound_probes(case.ipv6);
    for (label, uid, gid) in identities(&case) {
        let probes = probes_for(&case, uid, gid, &all_probes);
        let want = probe(&ipt.pod, None, Some((uid, gid)), &probes);
        let got = probe(&ours.pod, Some(cgroup.path()), Some((uid, gid)), &probes);
        for ((p, w), g) in probes.iter().zip(&want).zip(&got) {
            compared += 1;
            let (w, g) = (outcome(w), outcome(g));
            if w != g {
                mismatches.insert(format!("{label} {p}"), (w, g));
            }
        }
    }
    let inbound = inbound_probes(case.ipv6);
    let want = probe(&ipt.world, None, None, &inbound);
    let got = probe(&ours.world, None, None, &inbound);
    for ((p, w), g) in inbound.iter().zip(&want).zip(&got) {
        compared += 1;
        let (w, g) = (outcome(w), outcome(g));
        if w != g {
            mismatches.insert(format!("inbound {p}"), (w, g));
        }
    }
    // istio-validation's check (issue 45), with its own plain listeners on loopback in place
    // of the pod's.
    drop(listeners);
    if case.tproxy {
        for [p, w, g] in tproxy_pod::validation(&ipt, &ours, cgroup.path(), case.ipv6) {
            compared += 1;
            if w != g {
                mismatches.insert(format!("istio-validation {p}"), (w, g));
            }
        }
    }

    // --cleanup-only removes the last policy, and with it the whole pinned datapath.
    let mut cleanup = args.clone();
    cleanup.push("--cleanup-only".into());
    let out = redirect(&case, &cleanup);
    assert!(
        out.status.success(),
        "{name}: cleanup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !bpffs.exists(),
        "{name}: {} still pinned after --cleanup-only",
        bpffs.display()
    );
    // Unpinned links are released asynchronously by the kernel.
    wait_detached(cgroup.path());

    println!(
        "conformance {name}: {compared} connections compared, {} mismatches",
        mismatches.len()
    );
    let report: Vec<String> = mismatches
        .iter()
        .map(|(k, (w, g))| format!("  {k}\n    iptables: {w}\n    redirect: {g}"))
        .collect();
    assert!(
        mismatches.is_empty(),
        "{name}: {} mismatches:\n{}",
        mismatches.len(),
        report.join("\n")
    );
}

macro_rules! conformance {
    ($($test:ident => $case:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                redirect_testkit::privileged!();
                run_case($case);
            }
        )*

        /// Every row of capture-cases.tsv has a test above.
        #[test]
        fn every_case_is_covered() {
            let covered = [$($case),*];
            for c in cases() {
                assert!(covered.contains(&c.name.as_str()), "{}: no test", c.name);
            }
        }
    };
}

conformance! {
    empty => "empty",
    ipnets => "ipnets",
    ip_range => "ip-range",
    loopback_outbound_iprange => "loopback-outbound-iprange",
    kube_virt_interfaces => "kube-virt-interfaces",
    ipnets_with_kube_virt_interfaces => "ipnets-with-kube-virt-interfaces",
    inbound_ports_include => "inbound-ports-include",
    inbound_ports_wildcard => "inbound-ports-wildcard",
    outbound_ports_include => "outbound-ports-include",
    outbound_owner_groups => "outbound-owner-groups",
    outbound_owner_groups_exclude => "outbound-owner-groups-exclude",
    dns_uid_gid => "dns-uid-gid",
    basic_exclude_nic => "basic-exclude-nic",
    drop_invalid => "drop-invalid",
    host_ipv4_loopback_cidr => "host-ipv4-loopback-cidr",
    ipv6_empty_inbound_ports => "ipv6-empty-inbound-ports",
    ipv6_inbound_ports => "ipv6-inbound-ports",
    ipv6_virt_interfaces => "ipv6-virt-interfaces",
    ipv6_ipnets => "ipv6-ipnets",
    ipv6_uid_gid => "ipv6-uid-gid",
    ipv6_outbound_ports => "ipv6-outbound-ports",
    ipv6_dns_uid_gid => "ipv6-dns-uid-gid",
    ipv6_dns_outbound_owner_groups => "ipv6-dns-outbound-owner-groups",
    ipv6_dns_outbound_owner_groups_exclude => "ipv6-dns-outbound-owner-groups-exclude",
    inbound_ports_tproxy => "inbound-ports-tproxy",
    inbound_ports_wildcard_tproxy => "inbound-ports-wildcard-tproxy",
    tproxy => "tproxy",
}
