//! The TPROXY side of the conformance topology: Istio's policy routing beside the golden rules
//! (istio-iptables makes it in Go, not in the golden), `redirect-proxy --tproxy-mark 1337` on
//! 15006 as Istio runs istio-proxy in a TPROXY pod (uid 0, gid 1337), and the outcome that adds
//! what the application behind the proxy saw.
use std::{path::Path, process::Command, time::Duration};

use redirect_testkit::{probe::ProbeResult, Child, Netns};

use crate::env::bin_path;

/// istio-iptables' TPROXY routing in `pod`: `ip rule add fwmark 1337 lookup 133` and `ip route
/// add local default dev lo table 133`, per family (IPv6 when `ipv6`).
pub fn istio_routing(pod: &Netns, ipv6: bool) {
    let families: &[&str] = if ipv6 { &["-4", "-6"] } else { &["-4"] };
    for family in families {
        for args in [
            &["rule", "add", "fwmark", "1337", "lookup", "133"][..],
            &[
                "route", "add", "local", "default", "dev", "lo", "table", "133",
            ][..],
        ] {
            let out = Command::new("ip")
                .args(["-n", pod.name(), family])
                .args(args)
                .output()
                .expect("run ip");
            assert!(
                out.status.success(),
                "ip -n {} {family} {args:?}: {}",
                pod.name(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// `redirect-proxy --tproxy-mark 1337` on `[::]:15006` in `pod` (and `cgroup`, under capture),
/// as uid 0 and gid 1337; its other listeners on loopback ports no probe uses.
pub fn inbound_proxy(pod: &Netns, cgroup: Option<&Path>) -> Child {
    let mut cmd = match cgroup {
        Some(cg) => {
            let mut c = Command::new(bin_path("redirect"));
            c.arg("exec").arg("--cgroup").arg(cg).args(["--", "ip"]);
            c
        }
        None => Command::new("ip"),
    };
    cmd.args(["netns", "exec", pod.name()])
        .args(["setpriv", "--regid", "1337", "--clear-groups", "--"])
        .arg(bin_path("redirect-proxy"))
        .args(["--log-format", "json", "--tproxy-mark", "1337"])
        .args(["--inbound", "[::]:15006", "--outbound", "127.0.0.1:25001"])
        .args([
            "--readiness",
            "127.0.0.1:25021",
            "--stats",
            "127.0.0.1:25090",
        ])
        .args([
            "--merged-stats",
            "127.0.0.1:25020",
            "--admin",
            "127.0.0.1:25000",
        ]);
    let mut child = Child::spawn("redirect-proxy --tproxy-mark 1337", cmd).expect("the proxy");
    child
        .wait_line("its ready line", Duration::from_secs(10), |l| {
            l.contains("\"kind\":\"ready\"")
        })
        .expect("redirect-proxy listening");
    child
}

/// [`ProbeResult::outcome`] plus, when the application answered a TCP probe, the peer address
/// it saw and whether a proxy hop stood between (its peer is not the client's own address).
pub fn outcome(r: &ProbeResult) -> String {
    let base = r.outcome();
    match (&r.landing, r.local) {
        (Some(l), Some(local)) if l.at.starts_with("app/") => {
            let hop = if l.peer == local { "direct" } else { "proxied" };
            format!("{base} app-peer={} {hop}", l.peer.ip())
        }
        _ => base,
    }
}
