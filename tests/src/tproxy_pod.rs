//! The TPROXY side of the conformance topology: Istio's policy routing beside the golden rules
//! (istio-iptables makes it in Go, not in the golden), `redirect-proxy --tproxy-mark 1337` on
//! 15006 as Istio runs istio-proxy in a TPROXY pod (uid 0, gid 1337), and the outcome that adds
//! what the application behind the proxy saw; and istio-validation's check (issue 45): its
//! plain listeners on loopback and its dial, with the variants of it.
use std::{path::Path, process::Command, time::Duration};

use redirect_testkit::{probe::ProbeResult, Child, Netns};

use crate::{
    env::bin_path,
    world::{listen, probe, World, POD4, POD6},
};

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

/// The uid and gid istio-validation runs as (the proxy's, 1337).
pub const VALIDATOR: (u32, u32) = (1337, 1337);

/// The listeners of Istio's validator (`istio-iptables --run-validation`, our
/// `validation.rs`): plain, not transparent, on `127.0.0.1:15001` and `127.0.0.1:15006`
/// (`[::1]` too when `ipv6`), as [`VALIDATOR`], in `pod` (and `cgroup`, under capture).
pub fn validation_listeners(pod: &Netns, cgroup: Option<&Path>, ipv6: bool) -> Child {
    let mut tcp = vec!["127.0.0.1:15001".to_owned(), "127.0.0.1:15006".to_owned()];
    if ipv6 {
        tcp.extend(["[::1]:15001".to_owned(), "[::1]:15006".to_owned()]);
    }
    listen(pod, cgroup, Some(VALIDATOR), "validator", &tcp, &[])
}

/// The validator's dial, 127.0.0.6:15002 from a socket bound to 127.0.0.1, and its variants:
/// unbound, to another loopback address, to the pod's own address (bound to loopback or not),
/// from v4-mapped sockets; IPv6's (`[::6]` from `[::1]`) and the pod's IPv6 address when
/// `ipv6`. Nothing listens on 15002: only capture answers them.
pub fn validation_probes(ipv6: bool) -> Vec<String> {
    let mut p = vec![
        "tcpsrc:127.0.0.1:127.0.0.6:15002".to_owned(),
        "tcp:127.0.0.6:15002".to_owned(),
        "tcp:127.1.2.3:15002".to_owned(),
        format!("tcp:{POD4}:15002"),
        format!("tcpsrc:127.0.0.1:{POD4}:15002"),
        // From AF_INET6 sockets, v4-mapped.
        "tcpsrc:[::ffff:127.0.0.1]:127.0.0.6:15002".to_owned(),
        format!("tcp6:{POD4}:15002"),
    ];
    // Not an unbound dial to [::6]: it leaves from ::6 (on lo, its own best source), which
    // Istio's `-o lo -s ::6/128 -j RETURN` leaves alone, while our decision reads only a bound
    // source (and sends the proxy's to [::1]:15006, as dual_stack_pods expects).
    if ipv6 {
        p.extend([
            "tcpsrc:[::1]:[::6]:15002".to_owned(),
            format!("tcp:[{POD6}]:15002"),
        ]);
    }
    p
}

/// [`ProbeResult::outcome`] plus the peer the listener saw (the source a redirect kept).
pub fn validation_outcome(r: &ProbeResult) -> String {
    match &r.landing {
        Some(l) if r.ok => format!("{} listener-peer={}", r.outcome(), l.peer.ip()),
        _ => r.outcome(),
    }
}

/// istio-validation's check in a TPROXY pod on both sides: [`validation_listeners`] in `ipt`'s
/// pod (Istio's rules) and `ours`' (in `cgroup`), [`validation_probes`] dialled as
/// [`VALIDATOR`] in each; `(probe, Istio's outcome, ours)` per probe. The pods' other listeners
/// must be gone (the transparent proxy holds `[::]:15006`).
pub fn validation(ipt: &World, ours: &World, cgroup: &Path, ipv6: bool) -> Vec<[String; 3]> {
    let _ipt = validation_listeners(&ipt.pod, None, ipv6);
    let _ours = validation_listeners(&ours.pod, Some(cgroup), ipv6);
    let probes = validation_probes(ipv6);
    let want = probe(&ipt.pod, None, Some(VALIDATOR), &probes);
    let got = probe(&ours.pod, Some(cgroup), Some(VALIDATOR), &probes);
    probes
        .iter()
        .zip(want.iter().zip(&got))
        .map(|(p, (w, g))| [p.clone(), validation_outcome(w), validation_outcome(g)])
        .collect()
}
