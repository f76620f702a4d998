//! Golden test of the inbound decision: for every REDIRECT row of Istio's capture cases, the
//! kernel form of the parsed policy run through `inbound::decide` lands every connection on the
//! same port as the golden's nat `PREROUTING` rules do, for a grid of sources, destinations,
//! ports, protocols and arrival interfaces (IPv4, and IPv6 on dual-stack rows).
//!
//! Modelling choices, each what the kernel does with iptables:
//! - A connection from the pod itself (loopback, 127.0.0.6/::6, the pod's own addresses) is
//!   NATed in `OUTPUT`; its first packet then reaches `PREROUTING` with a conntrack entry, so
//!   the nat `PREROUTING` rules never see it: iptables leaves it alone there. sk_lookup must
//!   pass it too, counted as `inbound_passthrough_source` or `inbound_local`.
//! - External sources arrive on the pod's interfaces (eth0, ens5 and the row's `-c`/`-k` ones),
//!   never on lo (the kernel drops them as martians); local sources on every interface and lo.
//! - Destinations are the pod's own addresses: sk_lookup only runs for local delivery.
//! - istio's `-k` rule `-i <nic> [-d X] -j ISTIO_REDIRECT` sends such traffic to 15001; the
//!   eBPF datapath does not (docs/operator.md, "Behaviour worth knowing": forwarded KubeVirt
//!   traffic is not reproduced). Those packets are checked to be passed as
//!   `inbound_interface` and counted separately, not compared.
//! - Outcome = the port the connection lands on: a REDIRECT's port, else its own destination
//!   port (so a connection to 15006 itself lands on 15006 either way); and when iptables left it
//!   alone, the counter must name the rule that did (`-i` RETURN, `--dport` RETURN, no rule).
//! - No Istio row combines `-b '*'` with `-d`, so the `-d` rule is covered by the unit tests only.
// A test target links every dependency of its package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::collections::HashMap;
use std::net::IpAddr;

use redirect_common::{
    inbound::{decide, InboundConn, Lookups, Verdict},
    Counter, IFACE_KUBEVIRT,
};
use redirect_datapath::test_support::addr_key;
use redirect_policy::{
    inbound_kernel, parse_invocation, InboundKernel, LookupError, PodFile, PodSource, Sources, View,
};
use redirect_testkit::reference;

#[path = "inbound_golden/iptables.rs"]
mod iptables;
use iptables::{nat_chains, prerouting, Match, Packet, Rule};

/// resolv.conf from the row's notes; no users or groups beyond the two the cases name.
struct Sys(String);

impl PodSource for Sys {
    fn describe(&self) -> String {
        "the case's notes".into()
    }
    fn views(&self, file: PodFile) -> Result<Vec<View>, LookupError> {
        let text = match file {
            PodFile::ResolvConf => self.0.clone(),
            PodFile::Group => "java:x:1001:\nftp:x:14:\n".into(),
            PodFile::Passwd => String::new(),
        };
        Ok(vec![View {
            text,
            from: file.path().into(),
        }])
    }
}

/// The pod as the maps describe it, for the map-backed lookups' host twin.
struct Pod<'a> {
    addrs: &'a [IpAddr],
    ifaces: &'a [String],
    kernel: &'a InboundKernel,
}

impl Lookups for Pod<'_> {
    fn remote_is_own(&self, c: &InboundConn) -> bool {
        self.addrs
            .iter()
            .any(|a| addr_key(*a).addr == c.remote && addr_key(*a).family == c.family)
    }
    fn local_connect(&self, _: &InboundConn) -> bool {
        true
    }
    fn exempt_interface(&self, c: &InboundConn) -> bool {
        let name = &self.ifaces[c.ifindex as usize - 1];
        self.kernel.interfaces.iter().any(|(n, _)| n == name)
    }
    fn port_rule(&self, c: &InboundConn) -> u8 {
        let rule = self.kernel.ports.iter().find(|(p, _)| *p == c.local_port);
        rule.map_or(0, |(_, r)| *r)
    }
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().expect("address")).collect()
}

/// The counter sk_lookup must give a connection iptables left alone by `rule`
/// (`None`: ran off the end of PREROUTING).
fn explains(rule: Option<&Rule>) -> Counter {
    let Some(rule) = rule else {
        return Counter::InboundNotInList;
    };
    let has = |f: fn(&Match) -> bool| rule.matches.iter().any(|(_, m)| f(m));
    if has(|m| matches!(m, Match::In(_))) {
        Counter::InboundInterface
    } else if has(|m| matches!(m, Match::Dport(_))) {
        Counter::InboundExcludedPort
    } else {
        panic!("no counter explains {}", rule.text)
    }
}

#[derive(Default)]
struct Tally {
    checked: usize,
    steered: usize,
    kube_virt_15001: usize,
    failures: Vec<String>,
}

/// One row of the cases: its name, kernel form and outbound port (istio's -k target).
struct Row {
    name: String,
    kernel: InboundKernel,
    outbound_port: u16,
}

/// The grid of one family: the pod's addresses, other hosts, the pod's loopback sources.
fn grid(v6: bool) -> [Vec<IpAddr>; 3] {
    if v6 {
        let pod = ips(&["fd00::2", "2001:db8::2"]);
        [
            pod,
            ips(&["2001:db8::9", "fd00:9::9"]),
            ips(&["::1", "::6"]),
        ]
    } else {
        let pod = ips(&["10.200.0.2", "192.168.77.2"]);
        let external = ips(&["10.1.0.9", "192.0.2.7", "10.200.0.3"]);
        [pod, external, ips(&["127.0.0.1", "127.0.0.6", "127.1.2.3"])]
    }
}

/// Compares one half (one family) of one row over the whole grid.
fn check_half(row: &Row, half: &str, v6: bool, t: &mut Tally) {
    let chains = nat_chains(half);
    let kernel = &row.kernel;
    let [pod, external, local] = grid(v6);
    // ens5: an interface no row names, so rows exempting eth0 still capture somewhere.
    let mut ifaces: Vec<String> = vec!["lo".into(), "eth0".into(), "ens5".into()];
    for (n, _) in &kernel.interfaces {
        if !ifaces.contains(n) {
            ifaces.push(n.clone());
        }
    }
    let mut ports = vec![22, 53, 80, 443, 4000, 5000, 6000, 7000, 15001, 15006, 15008];
    ports.extend([15020, 15021, 15053, 15090, 31000, 32000]);
    ports.extend(kernel.ports.iter().map(|(p, _)| *p));
    ports.sort_unstable();
    ports.dedup();
    let lk = Pod {
        addrs: &pod,
        ifaces: &ifaces,
        kernel,
    };
    let sources = external.iter().map(|s| (s, false));
    let sources: Vec<_> = sources
        .chain(local.iter().chain(&pod).map(|s| (s, true)))
        .collect();
    for &(src, from_pod) in &sources {
        for dst in &pod {
            for &dport in &ports {
                for (ifindex, iface) in ifaces.iter().enumerate() {
                    if iface == "lo" && !from_pod {
                        continue;
                    }
                    for tcp in [true, false] {
                        let pkt = Packet {
                            tcp,
                            src: *src,
                            dst: *dst,
                            dport,
                            iface,
                        };
                        check_one(row, &chains, &lk, &pkt, ifindex as u32 + 1, from_pod, t);
                    }
                }
            }
        }
    }
}

/// Compares one connection: where iptables and `inbound::decide` land it, and why.
fn check_one(
    row: &Row,
    chains: &HashMap<String, Vec<Rule>>,
    lk: &Pod,
    pkt: &Packet,
    ifindex: u32,
    from_pod: bool,
    t: &mut Tally,
) {
    // From the pod itself: decided in OUTPUT, unseen by nat PREROUTING.
    let (redirect, why) = if from_pod {
        (None, None)
    } else {
        prerouting(chains, pkt)
    };
    let verdict = row.kernel.policy.map(|p| {
        let (local, remote) = (addr_key(pkt.dst), addr_key(pkt.src));
        let conn = InboundConn {
            netns: 1,
            family: local.family,
            tcp: pkt.tcp,
            local: local.addr,
            local_port: pkt.dport,
            remote: remote.addr,
            remote_port: 40000,
            ifindex,
        };
        (p.inbound_port, decide(&p, &conn, lk))
    });
    let want = redirect.unwrap_or(pkt.dport);
    let got = match verdict {
        Some((inbound, Verdict::Steer)) => inbound,
        _ => pkt.dport,
    };
    t.checked += 1;
    t.steered += usize::from(matches!(verdict, Some((_, Verdict::Steer))));
    let ok = if redirect == Some(row.outbound_port) {
        // istio's -k ISTIO_REDIRECT: sk_lookup passes it as arriving on an exempt interface.
        t.kube_virt_15001 += 1;
        let kube_virt =
            (row.kernel.interfaces.iter()).any(|(n, b)| n == pkt.iface && b & IFACE_KUBEVIRT != 0);
        kube_virt
            && match verdict {
                None | Some((_, Verdict::Pass(Counter::InboundInterface))) => true,
                Some((inbound, Verdict::Ignore)) => !pkt.tcp || pkt.dport == inbound,
                Some(_) => false,
            }
    } else if want != got {
        false
    } else {
        match verdict {
            None | Some((_, Verdict::Steer)) => true,
            Some((inbound, Verdict::Ignore)) => !pkt.tcp || pkt.dport == inbound,
            Some((_, Verdict::Pass(c))) if from_pod => {
                let passthrough = ips(&["127.0.0.6", "::6"]).contains(&pkt.src);
                c == if passthrough {
                    Counter::InboundPassthroughSource
                } else {
                    Counter::InboundLocal
                }
            }
            Some((_, Verdict::Pass(c))) => c == explains(why),
        }
    };
    if !ok && t.failures.len() < 40 {
        let rule = why.map_or("(no rule)", |r| r.text.as_str());
        t.failures.push(format!(
            "{}: {pkt:?}: iptables lands on {want} ({rule}), eBPF on {got} ({verdict:?})",
            row.name
        ));
    }
}

#[test]
fn inbound_decision_matches_istio_prerouting_for_every_redirect_case() {
    let cases = reference::cases();
    let mut t = Tally::default();
    let mut rows = 0;
    for case in cases.iter().filter(|c| !c.tproxy) {
        let resolv: String = case
            .dns
            .iter()
            .map(|s| format!("nameserver {s}\n"))
            .collect();
        let env: HashMap<String, String> = case.env.iter().cloned().collect();
        let inv = parse_invocation(
            &case.args(),
            &env,
            &Sources::new("the case's pod", vec![Box::new(Sys(resolv))]),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let row = Row {
            name: case.name.clone(),
            kernel: inbound_kernel(&inv.policy),
            outbound_port: inv.policy.proxy_port,
        };
        let golden = reference::golden(&case.name);
        check_half(&row, &golden.v4, false, &mut t);
        if case.ipv6 {
            let v6 = golden
                .v6
                .unwrap_or_else(|| panic!("{}: no IPv6 half", case.name));
            check_half(&row, &v6, true, &mut t);
        }
        rows += 1;
    }
    println!(
        "{rows} rows, {} connections, {} steered, {} sent to 15001 by istio's -k rule",
        t.checked, t.steered, t.kube_virt_15001
    );
    assert!(rows >= 23, "only {rows} REDIRECT rows");
    assert!(
        t.steered > 0 && t.kube_virt_15001 > 0,
        "the grid reaches every outcome"
    );
    assert!(t.failures.is_empty(), "{}", t.failures.join("\n"));
}
