//! TPROXY mode for real (issue 33, items 1 and 3): with `-m TPROXY` the application behind
//! the proxy sees the client's own address, IPv4 and IPv6. The client connects from a world
//! address to the pod; sk_lookup steers it to `redirect-proxy --tproxy-mark 1337` (run as
//! Istio runs istio-proxy in a TPROXY pod: uid 0, gid 1337), which connects to the
//! application transparently from the client's address with mark 1337; that connection is left
//! alone (made inside the pod), and the application's replies come back to the proxy through
//! the pod's fwmark rule and local table. Every rule, route and the sysctl go with
//! `--cleanup-only`.
use std::process::Command;

use redirect_testkit::{privileged, Cgroup, Child, Netns};
use redirect_tests::{
    bin_path,
    conformance::{listen, probe, World, POD4, POD6},
    node::Pins,
    wait_detached,
};

fn redirect(args: &[String]) -> String {
    let out = Command::new(bin_path("redirect"))
        .arg("istio-iptables")
        .args(args)
        .env("ISTIO_DUAL_STACK", "true")
        .output()
        .expect("run redirect istio-iptables");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "istio-iptables {args:?}: {said}");
    said
}

/// `redirect-proxy --tproxy-mark 1337` in the pod and its cgroup, as uid 0 and gid 1337.
fn tproxy_proxy(pod: &Netns, cgroup: &Cgroup) -> Child {
    let mut cmd = Command::new(bin_path("redirect"));
    cmd.arg("exec")
        .arg("--cgroup")
        .arg(cgroup.path())
        .args(["--", "ip", "netns", "exec", pod.name()])
        .args(["setpriv", "--regid", "1337", "--clear-groups", "--"])
        .arg(bin_path("redirect-proxy"))
        .args([
            "--log-format",
            "json",
            "--tproxy-mark",
            "1337",
            "--inbound",
            "[::]:15006",
        ]);
    let mut child = Child::spawn("redirect-proxy --tproxy-mark", cmd).expect("the proxy");
    child
        .wait_line("its ready line", std::time::Duration::from_secs(10), |l| {
            l.contains("\"kind\":\"ready\"")
        })
        .expect("proxy listening");
    child
}

fn ip(pod: &Netns, args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["-n", pod.name()])
        .args(args)
        .output()
        .expect("ip");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fwmark_accept(pod: &Netns) -> String {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            pod.name(),
            "cat",
            "/proc/sys/net/ipv4/tcp_fwmark_accept",
        ])
        .output()
        .expect("net.ipv4.tcp_fwmark_accept");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The pod's TPROXY routing as `ip` shows it: (IPv4 rules, IPv6 rules, IPv4 table 133, IPv6
/// table 133), each line that names our mark or table.
fn routing(pod: &Netns) -> [String; 4] {
    let ours = |s: String| {
        s.lines()
            .filter(|l| l.contains("133") || l.contains("0x539"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    [
        ours(ip(pod, &["-4", "rule"])),
        ours(ip(pod, &["-6", "rule"])),
        ip(pod, &["-4", "route", "show", "table", "133"])
            .trim()
            .to_owned(),
        ip(pod, &["-6", "route", "show", "table", "133"])
            .trim()
            .to_owned(),
    ]
}

#[test]
fn the_application_sees_the_clients_own_address_and_cleanup_removes_the_routing() {
    privileged!();
    let w = World::new("rtp", true);
    let cgroup = Cgroup::new("rtpc").expect("cgroup");
    let pins = Pins::new();
    let base = pins.cli_args(&w.pod.path(), cgroup.path());
    let before = fwmark_accept(&w.pod);
    let mut apply = base.clone();
    apply.extend(
        [
            "-p", "15001", "-z", "15006", "-u", "1337", "-m", "TPROXY", "-b", "*", "-i", "*",
        ]
        .map(str::to_owned),
    );
    // Applied twice (a re-apply: the proxy container binding, a repair): one rule each.
    redirect(&apply);
    redirect(&apply);
    let [rule4, rule6, table4, table6] = routing(&w.pod);
    assert_eq!(
        (rule4.lines().count(), rule6.lines().count()),
        (1, 1),
        "one rule per family after a re-apply: {rule4:?} {rule6:?}"
    );
    assert!(
        rule4.contains("fwmark 0x539 lookup 133"),
        "IPv4 rule: {rule4}"
    );
    assert!(
        rule6.contains("fwmark 0x539 lookup 133"),
        "IPv6 rule: {rule6}"
    );
    assert!(
        table4.starts_with("local default dev lo"),
        "IPv4 table 133: {table4}"
    );
    assert!(
        table6.starts_with("local default dev lo"),
        "IPv6 table 133: {table6}"
    );
    assert_eq!(fwmark_accept(&w.pod), "1");
    // A re-apply in REDIRECT mode takes the routing away; TPROXY again puts it back.
    let redirect_mode: Vec<String> = apply
        .iter()
        .map(|a| {
            if a == "TPROXY" {
                "REDIRECT".to_owned()
            } else {
                a.clone()
            }
        })
        .collect();
    redirect(&redirect_mode);
    assert_eq!(
        routing(&w.pod),
        [String::new(), String::new(), String::new(), String::new()],
        "TPROXY routing left after a re-apply in REDIRECT mode"
    );
    assert_eq!(fwmark_accept(&w.pod), "0");
    redirect(&apply);
    assert_eq!(routing(&w.pod)[0].lines().count(), 1);

    // explain names the mode for a client from the wire; list shows it.
    let explain = Command::new(bin_path("redirect"))
        .args(["explain", "--inbound", "--netns"])
        .arg(w.pod.path())
        .args([
            "--src",
            "192.0.2.10:40000",
            "--dst",
            &format!("{POD4}:8080"),
            "--json",
        ])
        .arg("--bpffs")
        .arg(&pins.0)
        .output()
        .expect("explain");
    let explained: serde_json::Value =
        serde_json::from_slice(&explain.stdout).unwrap_or_else(|e| {
            panic!(
                "explain --json: {e}: {}",
                String::from_utf8_lossy(&explain.stderr)
            )
        });
    assert_eq!(explained["outcome"], "proxy:15006", "{explained}");
    assert!(
        explained["detail"]
            .as_str()
            .is_some_and(|d| d.contains("TPROXY mode")),
        "{explained}"
    );
    let list = Command::new(bin_path("redirect"))
        .args(["list", "--json"])
        .env("REDIRECT_BPFFS", &pins.0)
        .env(
            "REDIRECT_DAEMON_DIR",
            std::env::temp_dir().join(redirect_testkit::unique_name("rtpd")),
        )
        .output()
        .expect("list");
    let listed: serde_json::Value = serde_json::from_slice(&list.stdout).expect("list --json");
    assert_eq!(listed[0]["tproxy"], true, "{listed}");
    // explain names the mode for a connect too, and takes the socket's mark: the proxy's
    // plain connect to its pod (uid 0, gid 1337, as Istio runs it here) goes to 15006 with its
    // address kept (Istio's mark 1338); its transparent hop, marked 1337, is left alone.
    let explain_out = |mark: &str| -> serde_json::Value {
        let out = Command::new(bin_path("redirect"))
            .args(["explain", "--netns"])
            .arg(w.pod.path())
            .args([
                "--uid",
                "0",
                "--gid",
                "1337",
                "--dst",
                &format!("{POD4}:8080"),
            ])
            .args(["--mark", mark, "--json", "--bpffs"])
            .arg(&pins.0)
            .output()
            .expect("explain");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "explain --json: {e}: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    };
    let plain = explain_out("0");
    assert_eq!(
        (&plain["outcome"], &plain["counter"], &plain["tproxy"]),
        (&"proxy:15006".into(), &"tproxy_local".into(), &true.into()),
        "{plain}"
    );
    let hop = explain_out("1337");
    assert_eq!(hop["outcome"], "untouched", "{hop}");
    assert_eq!(hop["caller"]["mark"], 1337, "{hop}");

    let _app = listen(
        &w.pod,
        Some(cgroup.path()),
        None,
        "app",
        &["[::]:8080".into()],
        &[],
    );
    let proxy = tproxy_proxy(&w.pod, &cgroup);
    // trace shows the mode of every decision it streams for the namespace.
    let mut traced = Command::new(bin_path("redirect"));
    traced
        .args(["trace", "--netns"])
        .arg(w.pod.path())
        .args(["--count", "2", "--json", "--bpffs"])
        .arg(&pins.0)
        .env(
            "REDIRECT_DAEMON_DIR",
            std::env::temp_dir().join(redirect_testkit::unique_name("rtpd")),
        );
    let trace = redirect_tests::trace::spawn(traced);
    let probes = [
        format!("tcpsrc:192.0.2.10:{POD4}:8080"),
        format!("tcp:[{POD6}]:8080"),
    ];
    let got = probe(&w.world, None, None, &probes);
    for (p, r) in probes.iter().zip(&got) {
        let landing = r.landing.as_ref().unwrap_or_else(|| {
            let ss = Command::new("ip")
                .args(["netns", "exec", w.pod.name(), "ss", "-tanoe"])
                .output()
                .expect("ss");
            panic!(
                "{p}: not answered: {r:?}\n{}",
                String::from_utf8_lossy(&ss.stdout)
            )
        });
        assert_eq!(landing.at, "app/[::]:8080", "{p}: {r:?}");
        // IPv4 from one of the world's addresses, IPv6 from its address on the link.
        let client = if p.contains('[') {
            "fd00:200::1"
        } else {
            "192.0.2.10"
        };
        assert_eq!(
            landing.peer.ip().to_string(),
            client,
            "{p}: the application saw another peer than the client: {r:?}"
        );
    }
    for event in redirect_tests::trace::events(&trace, 2) {
        assert_eq!(event["tproxy"], true, "trace --json: {event}");
    }
    // Through the proxy, each with its original destination (a record is written when the
    // connection has ended both ways).
    let want = [format!("{POD4}:8080"), format!("[{POD6}]:8080")];
    let inbound_dsts = || -> Vec<String> {
        proxy
            .lines()
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["kind"] == "access" && v["direction"] == "inbound")
            .filter_map(|v| v["orig_dst"].as_str().map(str::to_owned))
            .collect()
    };
    let seen = redirect_testkit::wait::until(
        "the proxy's inbound access records",
        std::time::Duration::from_secs(10),
        || want.iter().all(|d| inbound_dsts().contains(d)),
    );
    assert!(
        seen.is_ok(),
        "the proxy's inbound records: {:?}",
        inbound_dsts()
    );

    let mut cleanup = base.clone();
    cleanup.push("--cleanup-only".into());
    redirect(&cleanup);
    wait_detached(cgroup.path());
    let [rule4, rule6, table4, table6] = routing(&w.pod);
    assert!(
        rule4.is_empty() && rule6.is_empty() && table4.is_empty() && table6.is_empty(),
        "left behind: {rule4:?} {rule6:?} {table4:?} {table6:?}"
    );
    assert_eq!(fwmark_accept(&w.pod), before, "the sysctl was not put back");
}
