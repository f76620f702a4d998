//! Unit tests of the outbound decision against istio-iptables' decision table (no kernel).
use crate::{outbound::*, Counter, AF_INET, AF_INET6};

/// Lookups from plain lists: own addresses, CIDR sets as (network word, mask word), ports.
#[derive(Default)]
struct Fake {
    own: [u32; 2],
    exclude: Option<(u32, u32)>,
    include: Option<(u32, u32)>,
    nic: Option<(u32, u32)>,
    ports: [(u16, u8); 2],
}

fn hit(set: Option<(u32, u32)>, c: &Conn) -> bool {
    set.is_some_and(|(net, mask)| c.family == AF_INET && c.dst[0] & mask == net & mask)
}

impl Lookups for Fake {
    fn is_own_addr(&self, c: &Conn) -> bool {
        c.family == AF_INET && self.own.contains(&c.dst[0]) && c.dst[0] != 0
    }
    fn via_excluded_nic(&self, c: &Conn) -> bool {
        hit(self.nic, c)
    }
    fn excluded_cidr(&self, c: &Conn) -> bool {
        hit(self.exclude, c)
    }
    fn included_cidr(&self, c: &Conn) -> bool {
        hit(self.include, c)
    }
    fn port_rule(&self, c: &Conn) -> u8 {
        self.ports
            .iter()
            .find(|(p, _)| *p == c.dport)
            .map_or(0, |(_, b)| *b)
    }
    fn tproxy_takes(&self, _: &Conn) -> bool {
        false
    }
}

fn v4(a: [u8; 4]) -> u32 {
    u32::from_ne_bytes(a)
}

const POD: [u8; 4] = [10, 200, 0, 2];

/// istio-iptables' defaults for a sidecar: -u 1337 -g 1337 -i '*'.
fn sidecar() -> OutboundPolicy {
    let mut p = OutboundPolicy::ZERO;
    p.flags = OUT_ENABLED | OUT_INCLUDE_ALL_V4 | OUT_INCLUDE_ALL_V6;
    p.uids[0] = 1337;
    p.n_uids = 1;
    p.gids[0] = 1337;
    p.n_gids = 1;
    p.loopback_v4 = v4([127, 0, 0, 1]);
    p.loopback_v4_mask = u32::MAX;
    (p.proxy_port, p.inbound_port, p.tunnel_port, p.dns_port) = (15001, 15006, 15008, 15053);
    p
}

fn conn(uid: u32, gid: u32, dst: [u8; 4], dport: u16) -> Conn {
    Conn {
        family: AF_INET,
        tcp: true,
        dst: [v4(dst), 0, 0, 0],
        dport,
        uid,
        gid,
        passthrough_src: false,
        bound: false,
        in_proxy_cgroup: false,
        tproxy_marked: false,
    }
}

fn pod() -> Fake {
    Fake {
        own: [v4(POD), 0],
        ..Fake::default()
    }
}

#[test]
fn sidecar_decision_table() {
    let (p, lk) = (sidecar(), pod());
    let d = |c: Conn| decide(&p, &c, &lk);
    // The application: remote destinations to 15001, loopback and its own address untouched.
    assert_eq!(
        d(conn(1000, 1000, [198, 18, 0, 2], 80)),
        Verdict::Redirect(15001, Counter::Redirected)
    );
    assert_eq!(
        d(conn(1000, 1000, [127, 0, 0, 2], 80)),
        Verdict::Pass(Counter::Loopback)
    );
    assert_eq!(
        d(conn(1000, 1000, POD, 80)),
        Verdict::Pass(Counter::Loopback)
    );
    // The proxy: its own pod address (not 127.0.0.1, not the tunnel port) goes to 15006.
    let local = Verdict::Redirect(15006, Counter::InboundRedirectLocal);
    assert_eq!(d(conn(1337, 1000, POD, 80)), local);
    assert_eq!(d(conn(1337, 1000, [127, 0, 0, 2], 80)), local);
    assert_eq!(
        d(conn(1337, 1000, POD, 15008)),
        Verdict::Pass(Counter::BypassUid)
    );
    assert_eq!(
        d(conn(1337, 1000, [127, 0, 0, 1], 80)),
        Verdict::Pass(Counter::BypassUid)
    );
    assert_eq!(
        d(conn(1337, 1000, [198, 18, 0, 2], 80)),
        Verdict::Pass(Counter::BypassUid)
    );
    // gid 1337 alone: the uid rules' `-o lo ! --uid-owner` RETURN comes first on lo.
    assert_eq!(
        d(conn(1000, 1337, POD, 80)),
        Verdict::Pass(Counter::Loopback)
    );
    assert_eq!(
        d(conn(1000, 1337, [198, 18, 0, 2], 80)),
        Verdict::Pass(Counter::BypassGid)
    );
    // Source 127.0.0.6 on lo passes before any owner rule.
    let mut c = conn(1337, 1000, POD, 80);
    c.passthrough_src = true;
    assert_eq!(d(c), Verdict::Pass(Counter::PassthroughSource));
    // UDP is never sent to 15001.
    let mut c = conn(1000, 1000, [198, 18, 0, 2], 80);
    c.tcp = false;
    assert_eq!(d(c), Verdict::Pass(Counter::NotTcp));
}

#[test]
fn later_uids_see_only_earlier_uids_loopback_traffic() {
    let mut p = sidecar();
    (p.uids[1], p.n_uids) = (4, 2);
    let lk = pod();
    // uid 4 is caught by uid 1337's `-o lo ! --uid-owner 1337 -j RETURN` first.
    assert_eq!(
        decide(&p, &conn(4, 1000, POD, 80), &lk),
        Verdict::Pass(Counter::Loopback)
    );
    assert_eq!(
        decide(&p, &conn(4, 1000, [198, 18, 0, 2], 80), &lk),
        Verdict::Pass(Counter::BypassUid)
    );
    // Without those RETURNs (an include CIDR names loopback) uid 4 reaches its own rule.
    p.flags |= OUT_NO_LO_RETURN_V4;
    assert_eq!(
        decide(&p, &conn(4, 1000, POD, 80), &lk),
        Verdict::Redirect(15006, Counter::InboundRedirectLocal)
    );
}

#[test]
fn cidrs_ports_and_interfaces_in_chain_order() {
    let mut p = sidecar();
    p.flags &= !(OUT_INCLUDE_ALL_V4 | OUT_INCLUDE_ALL_V6);
    p.flags |= OUT_HAS_PORTS | OUT_HAS_EXCLUDED_NIC;
    let lk = Fake {
        own: [v4(POD), 0],
        include: Some((v4([10, 0, 0, 0]), v4([255, 0, 0, 0]))),
        exclude: Some((v4([10, 1, 0, 0]), v4([255, 255, 0, 0]))),
        nic: Some((v4([203, 0, 113, 0]), v4([255, 255, 255, 0]))),
        ports: [(32000, OUT_PORT_INCLUDE), (9999, OUT_PORT_EXCLUDE)],
    };
    let d = |dst, port| decide(&p, &conn(1000, 1000, dst, port), &lk);
    assert_eq!(
        d([10, 2, 0, 1], 80),
        Verdict::Redirect(15001, Counter::Redirected)
    );
    assert_eq!(d([10, 1, 0, 1], 80), Verdict::Pass(Counter::ExcludedCidr));
    assert_eq!(
        d([10, 1, 0, 1], 32000),
        Verdict::Pass(Counter::ExcludedCidr),
        "-x before -q"
    );
    assert_eq!(
        d([192, 0, 2, 1], 32000),
        Verdict::Redirect(15001, Counter::Redirected)
    );
    assert_eq!(d([192, 0, 2, 1], 80), Verdict::Pass(Counter::NotIncluded));
    assert_eq!(d([10, 2, 0, 1], 9999), Verdict::Pass(Counter::ExcludedPort));
    assert_eq!(
        d([203, 0, 113, 9], 32000),
        Verdict::Pass(Counter::ExcludedInterface)
    );
}

#[test]
fn dns_capture_and_owner_groups() {
    let mut p = sidecar();
    p.flags |= OUT_DNS;
    (p.dns_v4[0], p.n_dns_v4) = (v4([127, 0, 0, 53]), 1);
    let lk = pod();
    let mut q = conn(1000, 1000, [127, 0, 0, 53], 53);
    q.tcp = false;
    assert_eq!(
        decide(&p, &q, &lk),
        Verdict::Redirect(15053, Counter::DnsRedirected)
    );
    q.tcp = true;
    assert_eq!(
        decide(&p, &q, &lk),
        Verdict::Redirect(15053, Counter::DnsRedirected)
    );
    q.uid = 1337;
    assert_eq!(
        decide(&p, &q, &lk),
        Verdict::Pass(Counter::BypassUid),
        "the proxy's own DNS"
    );
    let mut other = conn(1000, 1000, [192, 0, 2, 53], 53);
    other.tcp = false;
    assert_eq!(decide(&p, &other, &lk), Verdict::Pass(Counter::NotTcp));

    let mut g = sidecar();
    g.flags |= OUT_GROUPS_INCLUDE;
    (g.groups[0], g.n_groups) = (2000, 1);
    let remote = |gid| decide(&g, &conn(1000, gid, [198, 18, 0, 2], 80), &lk);
    assert_eq!(remote(2000), Verdict::Redirect(15001, Counter::Redirected));
    assert_eq!(remote(1000), Verdict::Pass(Counter::OwnerGroup));
    g.flags ^= OUT_GROUPS_INCLUDE | OUT_GROUPS_EXCLUDE;
    let remote = |gid| decide(&g, &conn(1000, gid, [198, 18, 0, 2], 80), &lk);
    assert_eq!(remote(2000), Verdict::Pass(Counter::OwnerGroup));
    assert_eq!(remote(1000), Verdict::Redirect(15001, Counter::Redirected));
}

#[test]
fn families_and_missing_policy() {
    let p = sidecar();
    let lk = pod();
    let mut c = conn(1000, 1000, [0, 0, 0, 0], 80);
    c.family = AF_INET6;
    c.dst = [v4([0x20, 0x01, 0x0d, 0xb8]), 0, 0, 1];
    assert_eq!(decide(&p, &c, &lk), Verdict::Pass(Counter::Ipv6Untouched));
    let mut dual = p;
    dual.flags |= OUT_IPV6;
    assert_eq!(
        decide(&dual, &c, &lk),
        Verdict::Redirect(15001, Counter::Redirected)
    );
    c.dst = [0, 0, 0, v4([0, 0, 0, 1])];
    assert_eq!(
        decide(&dual, &c, &lk),
        Verdict::Pass(Counter::Loopback),
        "::1"
    );
    assert_eq!(
        decide(
            &OutboundPolicy::ZERO,
            &conn(1000, 1000, [198, 18, 0, 2], 80),
            &lk
        ),
        Verdict::Pass(Counter::NoPolicy)
    );
}

#[test]
fn proxy_identity_bound_to_its_cgroup() {
    let mut p = sidecar();
    p.flags |= OUT_PROXY_CGROUP;
    p.proxy_cgroup = 42;
    let lk = pod();
    // uid 1337 outside the proxy's cgroup is an application: captured, and flagged.
    let c = conn(1337, 1337, [198, 18, 0, 2], 80);
    assert_eq!(
        decide(&p, &c, &lk),
        Verdict::Redirect(15001, Counter::Redirected)
    );
    assert!(proxy_id_elsewhere(&p, &c));
    let mut inside = c;
    inside.in_proxy_cgroup = true;
    assert_eq!(decide(&p, &inside, &lk), Verdict::Pass(Counter::BypassUid));
    assert!(!proxy_id_elsewhere(&p, &inside));
    assert!(!proxy_id_elsewhere(
        &p,
        &conn(1000, 1000, [198, 18, 0, 2], 80)
    ));
}

#[test]
fn the_unspecified_address_is_loopback() {
    let (p, lk) = (sidecar(), pod());
    let d = |c: Conn| decide(&p, &c, &lk);
    // iptables sees a connect to 0.0.0.0 as one to 127.0.0.1: untouched for the application
    // and for the proxy alike (the differential suite checks it against real iptables).
    assert_eq!(
        d(conn(1000, 1000, [0, 0, 0, 0], 8080)),
        Verdict::Pass(Counter::Loopback)
    );
    assert_eq!(
        d(conn(1337, 1000, [0, 0, 0, 0], 8080)),
        Verdict::Pass(Counter::BypassUid)
    );
    let mut p6 = sidecar();
    p6.flags |= OUT_IPV6;
    let mut c = conn(1000, 1000, [0, 0, 0, 0], 8080);
    c.family = AF_INET6;
    c.dst = [0; 4];
    assert_eq!(decide(&p6, &c, &lk), Verdict::Pass(Counter::Loopback));
}

#[test]
fn passthrough_v6_is_on_lo_without_being_an_own_address() {
    let mut p = sidecar();
    p.flags |= OUT_IPV6;
    let lk = pod();
    let at = |uid: u32, last: u8| {
        let mut c = conn(uid, uid, [0, 0, 0, 0], 8080);
        c.family = AF_INET6;
        c.dst = [0, 0, 0, u32::from_ne_bytes([0, 0, 0, last])];
        decide(&p, &c, &lk)
    };
    // `-o lo ! --uid-owner 1337 -j RETURN`: the application's connect stays on lo.
    assert_eq!(at(1000, 6), Verdict::Pass(Counter::Loopback));
    // `-o lo ! -d ::1/128 ... --uid-owner 1337 -j ISTIO_IN_REDIRECT`: ::6 is not ::1.
    assert_eq!(
        at(1337, 6),
        Verdict::Redirect(15006, Counter::InboundRedirectLocal)
    );
    assert_eq!(at(1337, 1), Verdict::Pass(Counter::BypassUid));
    // ::7 is just another destination.
    assert_eq!(at(1000, 7), Verdict::Redirect(15001, Counter::Redirected));
}
