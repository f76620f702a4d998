//! The rules istio-iptables builds for one family (nat, mangle, raw), in its build order.

use super::rules::{net, Family, Rules, Table};
use super::{Cidrs, InboundPorts, Mode, OwnerGroups, Policy};

use Table::{Mangle, Nat, Raw};

const INBOUND: &str = "ISTIO_INBOUND";
const REDIRECT: &str = "ISTIO_REDIRECT";
const IN_REDIRECT: &str = "ISTIO_IN_REDIRECT";
const OUTPUT: &str = "ISTIO_OUTPUT";
const OUTPUT_DNS: &str = "ISTIO_OUTPUT_DNS";
const DIVERT: &str = "ISTIO_DIVERT";
const TPROXY: &str = "ISTIO_TPROXY";
const DROP: &str = "ISTIO_DROP";

/// istio-agent's DNS listener.
const DNS_PORT: u16 = 15053;
/// istio's default `-t` (inbound TPROXY mark).
const TPROXY_MARK: u32 = 1337;
/// istio's mark for the proxy's own lo traffic in TPROXY mode.
const OUTBOUND_MARK: u32 = 1338;

/// Every rule of family `f`, in istio-iptables' build order.
pub(super) fn build(p: &Policy, f: &Family, r: &mut Rules) {
    let tproxy = p.mode == Mode::Tproxy;
    let tables: &[Table] = if tproxy { &[Nat, Mangle] } else { &[Nat] };
    for &table in tables {
        for x in &p.exclude_interfaces {
            r.append(table, "PREROUTING", format!("-i {x} -j RETURN"));
            r.append(table, "OUTPUT", format!("-o {x} -j RETURN"));
        }
    }
    for k in &p.kube_virt_interfaces {
        r.insert(Nat, "PREROUTING", 1, format!("-i {k} -j RETURN"));
    }
    if p.drop_invalid {
        r.append(
            Mangle,
            "PREROUTING",
            format!("-m conntrack --ctstate INVALID -j {DROP}"),
        );
        r.append(Mangle, DROP, "-j DROP");
    }
    r.append(
        Nat,
        INBOUND,
        format!("-p tcp --dport {} -j RETURN", p.tunnel_port),
    );
    r.append(
        Nat,
        REDIRECT,
        format!("-p tcp -j REDIRECT --to-ports {}", p.proxy_port),
    );
    r.append(
        Nat,
        IN_REDIRECT,
        format!("-p tcp -j REDIRECT --to-ports {}", p.inbound_capture_port),
    );
    inbound(p, f, r);
    outbound(p, f, r);
    if tproxy {
        tproxy_marks(p, f, r);
    }
    if p.dns_enabled() {
        dns_conntrack_zones(p, f, r);
    }
}

/// `-b`/`-d`: PREROUTING to ISTIO_INBOUND, in nat (REDIRECT) or mangle (TPROXY).
fn inbound(p: &Policy, f: &Family, r: &mut Rules) {
    if p.inbound_ports == InboundPorts::List(Vec::new()) {
        return;
    }
    let tproxy = p.mode == Mode::Tproxy;
    let table = if tproxy {
        r.append(Mangle, DIVERT, format!("-j MARK --set-mark {TPROXY_MARK}"));
        r.append(Mangle, DIVERT, "-j ACCEPT");
        r.append(
            Mangle,
            TPROXY,
            format!(
                "! -d {} -p tcp -j TPROXY --tproxy-mark {TPROXY_MARK}/0xffffffff --on-port {}",
                f.loopback(),
                p.inbound_capture_port
            ),
        );
        Mangle
    } else {
        Nat
    };
    r.append(table, "PREROUTING", format!("-p tcp -j {INBOUND}"));
    let established = "-m conntrack --ctstate RELATED,ESTABLISHED";
    match &p.inbound_ports {
        InboundPorts::All => {
            for port in &p.inbound_exclude_ports {
                r.append(table, INBOUND, format!("-p tcp --dport {port} -j RETURN"));
            }
            if tproxy {
                r.append(Mangle, INBOUND, format!("-p tcp {established} -j {DIVERT}"));
                r.append(Mangle, INBOUND, format!("-p tcp -j {TPROXY}"));
            } else {
                r.append(Nat, INBOUND, format!("-p tcp -j {IN_REDIRECT}"));
            }
        }
        InboundPorts::List(ports) => {
            for port in ports {
                if tproxy {
                    let m = format!("-p tcp --dport {port}");
                    r.append(Mangle, INBOUND, format!("{m} {established} -j {DIVERT}"));
                    r.append(Mangle, INBOUND, format!("{m} -j {TPROXY}"));
                } else {
                    r.append(
                        Nat,
                        INBOUND,
                        format!("-p tcp --dport {port} -j {IN_REDIRECT}"),
                    );
                }
            }
        }
    }
}

/// nat OUTPUT to ISTIO_OUTPUT and its rules, first match wins.
fn outbound(p: &Policy, f: &Family, r: &mut Rules) {
    r.append(Nat, "OUTPUT", format!("-j {OUTPUT}"));
    for port in &p.exclude_ports {
        r.append(Nat, OUTPUT, format!("-p tcp --dport {port} -j RETURN"));
        r.append(Nat, OUTPUT, format!("-p udp --dport {port} -j RETURN"));
    }
    r.append(
        Nat,
        OUTPUT,
        format!("-o lo -s {} -j RETURN", f.passthrough_source()),
    );
    let dns = p.dns_enabled();
    let lo_return = !p.include_has_loopback();
    let lb = f.loopback();
    let tunnel = p.tunnel_port;
    let owners = p.proxy_uids.iter().map(|u| ("--uid-owner", u, dns));
    // The gid rules never use the multiport form, even with DNS capture.
    let owners = owners.chain(p.proxy_gids.iter().map(|g| ("--gid-owner", g, false)));
    for (opt, id, multiport) in owners {
        let ports = if multiport {
            format!("-m multiport ! --dports 53,{tunnel}")
        } else {
            format!("! --dport {tunnel}")
        };
        r.append(
            Nat,
            OUTPUT,
            format!("-o lo ! -d {lb} -p tcp {ports} -m owner {opt} {id} -j {IN_REDIRECT}"),
        );
        if lo_return {
            let proto = if dns { "-p tcp ! --dport 53 " } else { "" };
            r.append(
                Nat,
                OUTPUT,
                format!("-o lo {proto}-m owner ! {opt} {id} -j RETURN"),
            );
        }
        r.append(Nat, OUTPUT, format!("-m owner {opt} {id} -j RETURN"));
    }
    match &p.owner_groups {
        OwnerGroups::All => {}
        OwnerGroups::Exclude(groups) => {
            for g in groups {
                r.append(
                    Nat,
                    OUTPUT,
                    format!("-m owner --gid-owner {} -j RETURN", g.name),
                );
            }
        }
        OwnerGroups::Include(groups) => {
            let mut spec = String::new();
            for g in groups {
                spec.push_str(&format!("-m owner ! --gid-owner {} ", g.name));
            }
            r.append(Nat, OUTPUT, format!("{spec}-j RETURN"));
        }
    }
    if dns {
        dns_redirect(p, f, r);
    }
    r.append(Nat, OUTPUT, format!("-d {lb} -j RETURN"));
    for c in p.exclude_cidrs.iter().filter(|c| f.owns(c)) {
        r.append(Nat, OUTPUT, format!("-d {} -j RETURN", net(c)));
    }
    for port in &p.include_ports {
        r.append(Nat, OUTPUT, format!("-p tcp --dport {port} -j {REDIRECT}"));
    }
    match &p.include_cidrs {
        Cidrs::All => {
            r.append(Nat, OUTPUT, format!("-j {REDIRECT}"));
            for k in &p.kube_virt_interfaces {
                r.insert(Nat, "PREROUTING", 1, format!("-i {k} -j {REDIRECT}"));
            }
        }
        Cidrs::List(cidrs) => {
            for c in cidrs.iter().filter(|c| f.owns(c)) {
                let c = net(c);
                for k in &p.kube_virt_interfaces {
                    r.insert(Nat, "PREROUTING", 1, format!("-i {k} -d {c} -j {REDIRECT}"));
                }
                r.append(Nat, OUTPUT, format!("-d {c} -j {REDIRECT}"));
            }
        }
    }
}

/// nat ISTIO_OUTPUT_DNS: port 53 to the agent, for every server or this family's servers.
fn dns_redirect(p: &Policy, f: &Family, r: &mut Rules) {
    let servers = f.dns_servers();
    if !p.capture_all_dns && servers.is_empty() {
        return;
    }
    r.append(Nat, OUTPUT, format!("-j {OUTPUT_DNS}"));
    if p.capture_all_dns {
        r.append(
            Nat,
            OUTPUT_DNS,
            format!("-p tcp --dport 53 -j REDIRECT --to-ports {DNS_PORT}"),
        );
        r.append(
            Nat,
            OUTPUT_DNS,
            format!("-p udp --dport 53 -j REDIRECT --to-port {DNS_PORT}"),
        );
        return;
    }
    for s in &servers {
        r.append(
            Nat,
            OUTPUT_DNS,
            format!("-p tcp --dport 53 -d {s} -j REDIRECT --to-ports {DNS_PORT}"),
        );
    }
    for s in &servers {
        r.append(
            Nat,
            OUTPUT_DNS,
            format!("-p udp --dport 53 -d {s} -j REDIRECT --to-port {DNS_PORT}"),
        );
    }
}

/// raw: DNS conntrack zones (1: proxy <-> upstream, 2: app <-> agent).
fn dns_conntrack_zones(p: &Policy, f: &Family, r: &mut Rules) {
    r.append(Raw, "OUTPUT", format!("-j {OUTPUT_DNS}"));
    let owners = p.proxy_uids.iter().map(|u| ("--uid-owner", u));
    for (opt, id) in owners.chain(p.proxy_gids.iter().map(|g| ("--gid-owner", g))) {
        r.append(
            Raw,
            OUTPUT_DNS,
            format!("-p udp --dport 53 -m owner {opt} {id} -j CT --zone 1"),
        );
        r.append(
            Raw,
            OUTPUT_DNS,
            format!("-p udp --sport {DNS_PORT} -m owner {opt} {id} -j CT --zone 2"),
        );
    }
    if p.capture_all_dns {
        r.append(Raw, "PREROUTING", format!("-j {INBOUND}"));
        r.append(Raw, OUTPUT_DNS, "-p udp --dport 53 -j CT --zone 2");
        r.append(Raw, INBOUND, "-p udp --sport 53 -j CT --zone 1");
        return;
    }
    let servers = f.dns_servers();
    if !servers.is_empty() {
        r.append(Raw, "PREROUTING", format!("-j {INBOUND}"));
    }
    for s in &servers {
        r.append(
            Raw,
            OUTPUT_DNS,
            format!("-p udp --dport 53 -d {s} -j CT --zone 2"),
        );
        r.append(
            Raw,
            INBOUND,
            format!("-p udp --sport 53 -s {s} -j CT --zone 1"),
        );
    }
}

/// mangle rules of TPROXY mode (built whether or not `-b` captures anything, as istio does).
fn tproxy_marks(p: &Policy, f: &Family, r: &mut Rules) {
    let lb = f.loopback();
    r.append(
        Mangle,
        "PREROUTING",
        format!("-p tcp -m mark --mark {TPROXY_MARK} -j CONNMARK --save-mark"),
    );
    r.append(
        Mangle,
        "OUTPUT",
        format!("-p tcp -o lo -m mark --mark {TPROXY_MARK} -j RETURN"),
    );
    let owners = p.proxy_uids.iter().map(|u| ("--uid-owner", u));
    for (opt, id) in owners.chain(p.proxy_gids.iter().map(|g| ("--gid-owner", g))) {
        r.append(
            Mangle,
            "OUTPUT",
            format!(
                "! -d {lb} -p tcp -o lo -m owner {opt} {id} -j MARK --set-mark {OUTBOUND_MARK}"
            ),
        );
    }
    r.append(
        Mangle,
        "OUTPUT",
        format!("-p tcp -m connmark --mark {TPROXY_MARK} -j CONNMARK --restore-mark"),
    );
    r.insert(
        Mangle,
        INBOUND,
        1,
        format!("-p tcp -m mark --mark {TPROXY_MARK} -j RETURN"),
    );
    r.insert(
        Mangle,
        INBOUND,
        2,
        format!("-p tcp -s {} -i lo -j RETURN", f.passthrough_source()),
    );
    r.insert(
        Mangle,
        INBOUND,
        3,
        format!("-p tcp -i lo -m mark ! --mark {OUTBOUND_MARK} -j RETURN"),
    );
}
