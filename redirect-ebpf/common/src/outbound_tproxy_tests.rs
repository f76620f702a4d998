//! Unit tests of TPROXY mode's mangle rule in the outbound decision (no kernel): the proxy's
//! own connects to its pod, by uid and by gid, marked and unmarked, against the tproxy golden.
use crate::{
    outbound::*,
    outbound_fake::{OnePod, POD},
    Counter, AF_INET,
};

/// The pod owns POD; its inbound capture takes every port but 9000 (`-b '*' -d 9000`).
const THE_POD: OnePod = OnePod {
    inbound_but: Some(9000),
};

/// The `tproxy` golden's arguments: -m TPROXY -u 1337 -g 1337 -i '*'.
fn tproxy() -> OutboundPolicy {
    let mut p = OutboundPolicy::ZERO;
    p.flags = OUT_ENABLED | OUT_INCLUDE_ALL_V4 | OUT_TPROXY;
    (p.uids[0], p.n_uids, p.gids[0], p.n_gids) = (1337, 1, 1337, 1);
    p.loopback_v4 = u32::from_ne_bytes([127, 0, 0, 1]);
    p.loopback_v4_mask = u32::MAX;
    (p.proxy_port, p.inbound_port, p.tunnel_port, p.dns_port) = (15001, 15006, 15008, 15053);
    p
}

fn conn(uid: u32, gid: u32, dst: [u8; 4], dport: u16) -> Conn {
    Conn {
        family: AF_INET,
        tcp: true,
        dst: [u32::from_ne_bytes(dst), 0, 0, 0],
        dport,
        uid,
        gid,
        passthrough_src: false,
        bound: false,
        in_proxy_cgroup: false,
        tproxy_marked: false,
    }
}

#[test]
fn the_proxys_plain_connect_to_its_pod_lands_on_the_inbound_port() {
    let p = tproxy();
    let d = |c: Conn| decide(&p, &c, &THE_POD);
    let mangle = Verdict::Redirect(15006, Counter::TproxyLocal);
    // Istio runs the proxy as uid 0, gid 1337 in a TPROXY pod: nat's `-o lo ! --uid-owner
    // 1337 -j RETURN` lets it through, the mangle rule marks it 1338 and TPROXY takes it,
    // whatever the port (the mangle rules exempt neither 15008 nor 53).
    assert_eq!(d(conn(0, 1337, POD, 8000)), mangle);
    assert_eq!(d(conn(0, 1337, POD, 15008)), mangle);
    assert_eq!(d(conn(0, 1337, [127, 0, 0, 2], 8000)), mangle);
    // The uid: nat's ISTIO_IN_REDIRECT first; the ports it exempts fall to the mangle rule.
    assert_eq!(
        d(conn(1337, 0, POD, 8000)),
        Verdict::Redirect(15006, Counter::InboundRedirectLocal)
    );
    assert_eq!(d(conn(1337, 0, POD, 15008)), mangle);
    // Never 127.0.0.1 (nor the unspecified address routed there), never off the pod.
    assert_eq!(
        d(conn(0, 1337, [127, 0, 0, 1], 8000)),
        Verdict::Pass(Counter::Loopback)
    );
    assert_eq!(
        d(conn(0, 1337, [0, 0, 0, 0], 8000)),
        Verdict::Pass(Counter::Loopback)
    );
    assert_eq!(
        d(conn(0, 1337, [198, 18, 0, 2], 80)),
        Verdict::Pass(Counter::BypassGid)
    );
    // A port inbound capture does not take falls out of ISTIO_INBOUND: untouched.
    assert_eq!(
        d(conn(0, 1337, POD, 9000)),
        Verdict::Pass(Counter::Loopback)
    );
    // The application's connect to its own pod is not the proxy's: untouched.
    assert_eq!(
        d(conn(1000, 1000, POD, 8000)),
        Verdict::Pass(Counter::Loopback)
    );
}

#[test]
fn the_transparent_hop_and_the_passthrough_source_are_left_alone() {
    let p = tproxy();
    let d = |c: Conn| decide(&p, &c, &THE_POD);
    let mut hop = conn(0, 1337, POD, 8000);
    hop.tproxy_marked = true;
    assert_eq!(d(hop), Verdict::Pass(Counter::Loopback));
    let mut from6 = conn(0, 1337, POD, 8000);
    from6.passthrough_src = true;
    assert_eq!(d(from6), Verdict::Pass(Counter::PassthroughSource));
    let mut udp = conn(0, 1337, POD, 53);
    udp.tcp = false;
    assert_eq!(d(udp), Verdict::Pass(Counter::Loopback));
}

/// Where `conn`'s verdict sends it under `p` (`bound`: the socket has a source address).
fn sent(p: &OutboundPolicy, conn: &Conn, bound: bool) -> Option<Target> {
    let conn = Conn { bound, ..*conn };
    target(p, decide(p, &conn, &THE_POD), &conn)
}

const fn at(port: u16, keep_addr: bool, bind_dst: bool) -> Option<Target> {
    Some(Target {
        port,
        keep_addr,
        bind_dst,
    })
}

#[test]
fn istio_validations_dial_goes_to_loopback_where_its_plain_listener_takes_it() {
    // Issue 45: istio-validation (uid 1337, bound to 127.0.0.1) dials 127.0.0.6:15002 and
    // listens on 127.0.0.1:15006 only. Istio's nat REDIRECT sends it to 127.0.0.1:15006 in
    // TPROXY mode too (its mangle step never sees 127.0.0.1), so it goes to loopback; an
    // address kept (127.0.0.6:15006) reaches no listener.
    let p = tproxy();
    let probe = conn(1337, 1337, [127, 0, 0, 6], 15002);
    assert_eq!(
        decide(&p, &probe, &THE_POD),
        Verdict::Redirect(15006, Counter::InboundRedirectLocal)
    );
    assert_eq!(sent(&p, &probe, true), at(15006, false, false));
    assert_eq!(sent(&p, &probe, false), at(15006, false, false));
    // To the pod's own address: loopback too, from that address when the socket is unbound
    // (the source the route chose, which REDIRECT keeps), else from its own.
    let to_pod = conn(1337, 1337, POD, 15002);
    assert_eq!(sent(&p, &to_pod, false), at(15006, false, true));
    assert_eq!(sent(&p, &to_pod, true), at(15006, false, false));
    // The mangle step (nat let it through): TPROXY keeps the address, and the source with it.
    assert_eq!(
        sent(&p, &conn(0, 1337, POD, 8000), false),
        at(15006, true, false)
    );
    assert_eq!(
        sent(&p, &conn(0, 1337, [127, 0, 0, 6], 8000), false),
        at(15006, true, false)
    );
    // Outbound capture and untouched connects as before.
    assert_eq!(
        sent(&p, &conn(1000, 1000, [198, 18, 0, 2], 80), false),
        at(15001, false, false)
    );
    assert_eq!(sent(&p, &conn(1000, 1000, POD, 8000), false), None);
    // IPv6's dial, [::6] from a socket bound to ::1: to [::1]; ::6 is loopback's, never bound.
    let mut v6 = p;
    v6.flags |= OUT_IPV6;
    let mut six = conn(1337, 1337, [0, 0, 0, 0], 15002);
    (six.family, six.dst) = (crate::AF_INET6, crate::types::PASSTHROUGH_V6);
    assert_eq!(sent(&v6, &six, true), at(15006, false, false));
    assert_eq!(sent(&v6, &six, false), at(15006, false, false));
}

#[test]
fn redirect_mode_has_no_mangle_rule_and_keeps_loopback_rewrites() {
    let mut p = tproxy();
    p.flags &= !OUT_TPROXY;
    assert_eq!(
        sent(&p, &conn(1337, 1337, POD, 8000), false),
        at(15006, false, false)
    );
    assert_eq!(
        decide(&p, &conn(0, 1337, POD, 8000), &THE_POD),
        Verdict::Pass(Counter::Loopback)
    );
    assert_eq!(
        decide(&p, &conn(1337, 0, POD, 15008), &THE_POD),
        Verdict::Pass(Counter::BypassUid)
    );
}
