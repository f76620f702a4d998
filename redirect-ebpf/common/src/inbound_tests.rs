//! Unit tests of the inbound decision, one per rule of istio-iptables' `ISTIO_INBOUND` chain
//! and the kernel-side rules on top of it (no kernel).
use core::cell::Cell;

use crate::{inbound::*, Counter, AF_INET, AF_INET6};

const NS: u64 = 7;
const ETH0: u32 = 2;
const NET1: u32 = 3;

/// Lookups from plain lists; counts the lookups each rule made.
#[derive(Default)]
struct Fake {
    /// (netns, IPv4 address) of enrolled addresses.
    addrs: [(u64, u32); 2],
    /// Exempt interfaces of namespace [`NS`].
    ifaces: [u32; 1],
    /// `INBOUND_PORTS` of namespace [`NS`].
    ports: [(u16, u8); 3],
    /// The connection came from the wire: sock_ops recorded no local connect for it.
    wire: bool,
    calls: Cell<u32>,
}

impl Lookups for Fake {
    fn remote_is_own(&self, c: &InboundConn) -> bool {
        self.calls.set(self.calls.get() + 1);
        c.family == AF_INET && self.addrs.contains(&(c.netns, c.remote[0]))
    }
    fn local_connect(&self, _: &InboundConn) -> bool {
        self.calls.set(self.calls.get() + 1000);
        !self.wire
    }
    fn exempt_interface(&self, c: &InboundConn) -> bool {
        self.calls.set(self.calls.get() + 10);
        c.netns == NS && c.ifindex != 0 && self.ifaces.contains(&c.ifindex)
    }
    fn port_rule(&self, c: &InboundConn) -> u8 {
        self.calls.set(self.calls.get() + 100);
        self.ports
            .iter()
            .find(|(p, _)| c.netns == NS && *p == c.local_port && *p != 0)
            .map_or(0, |(_, r)| *r)
    }
}

fn v4(a: [u8; 4]) -> u32 {
    u32::from_ne_bytes(a)
}

fn v6(last: u8) -> [u32; 4] {
    [0, 0, 0, u32::from_ne_bytes([0, 0, 0, last])]
}

const POD: [u8; 4] = [10, 200, 0, 2];
const PEER: [u8; 4] = [10, 200, 9, 9];

/// Istio's sidecar defaults: -b '*' -d 15090,15021,15020 -z 15006 -e 15008, one -k interface.
fn sidecar() -> (InboundPolicy, Fake) {
    let p = InboundPolicy {
        inbound_port: 15006,
        tunnel_port: 15008,
        flags: INBOUND_ALL_PORTS,
        _pad: 0,
    };
    let lk = Fake {
        addrs: [(NS, v4(POD)), (NS + 1, v4(PEER))],
        ifaces: [NET1],
        ports: [
            (15090, PORT_EXCLUDED),
            (15021, PORT_EXCLUDED),
            (15020, PORT_EXCLUDED),
        ],
        ..Fake::default()
    };
    (p, lk)
}

/// `-b 9080,15008` instead of '*'.
fn listed() -> (InboundPolicy, Fake) {
    let (mut p, mut lk) = sidecar();
    p.flags = 0;
    lk.ports = [(9080, PORT_INCLUDED), (15008, PORT_INCLUDED), (0, 0)];
    (p, lk)
}

fn from(src: [u8; 4], port: u16) -> InboundConn {
    InboundConn {
        netns: NS,
        family: AF_INET,
        tcp: true,
        local: [v4(POD), 0, 0, 0],
        local_port: port,
        remote: [v4(src), 0, 0, 0],
        remote_port: 40000,
        ifindex: ETH0,
    }
}

fn run(p: &InboundPolicy, lk: &Fake, c: &InboundConn) -> Verdict {
    lk.calls.set(0);
    decide(p, c, lk)
}

#[test]
fn sidecar_captures_every_port_but_the_excluded_ones() {
    let (p, lk) = sidecar();
    let remote = [192, 0, 2, 7];
    for port in [80, 9080, 15001, 15053, 65535] {
        assert_eq!(run(&p, &lk, &from(remote, port)), Verdict::Steer, "{port}");
    }
    for port in [15090, 15021, 15020] {
        let want = Verdict::Pass(Counter::InboundExcludedPort);
        assert_eq!(run(&p, &lk, &from(remote, port)), want, "{port}");
    }
    // A pod in another namespace is just another peer.
    assert_eq!(run(&p, &lk, &from(PEER, 80)), Verdict::Steer);
}

#[test]
fn tunnel_port_is_never_captured_even_when_listed() {
    let (p, lk) = sidecar();
    let want = Verdict::Pass(Counter::InboundExcludedPort);
    assert_eq!(run(&p, &lk, &from(PEER, 15008)), want);
    let (p, lk) = listed();
    assert_eq!(run(&p, &lk, &from(PEER, 15008)), want);
}

#[test]
fn port_list_captures_only_its_ports() {
    let (p, lk) = listed();
    assert_eq!(run(&p, &lk, &from(PEER, 9080)), Verdict::Steer);
    for port in [80, 9081, 15090] {
        let want = Verdict::Pass(Counter::InboundNotInList);
        assert_eq!(run(&p, &lk, &from(PEER, port)), want, "{port}");
    }
}

#[test]
fn excluded_beats_included_for_the_same_port() {
    let (p, mut lk) = listed();
    lk.ports[2] = (9090, PORT_EXCLUDED);
    let want = Verdict::Pass(Counter::InboundExcludedPort);
    assert_eq!(run(&p, &lk, &from(PEER, 9090)), want);
}

#[test]
fn inbound_port_itself_and_other_protocols_are_ignored_uncounted() {
    let (p, lk) = sidecar();
    assert_eq!(run(&p, &lk, &from(PEER, 15006)), Verdict::Ignore);
    // Before any rule, even from the passthrough source or on an exempt interface.
    assert_eq!(run(&p, &lk, &from([127, 0, 0, 6], 15006)), Verdict::Ignore);
    let udp = InboundConn {
        tcp: false,
        ..from(PEER, 53)
    };
    assert_eq!(run(&p, &lk, &udp), Verdict::Ignore);
    assert_eq!(lk.calls.get(), 0, "decided without a lookup");
}

#[test]
fn passthrough_source_is_the_proxy_hop_to_the_app() {
    let (p, lk) = sidecar();
    let want = Verdict::Pass(Counter::InboundPassthroughSource);
    // Counted as passthrough although 127.0.0.6 is loopback too, and on any port.
    assert_eq!(run(&p, &lk, &from([127, 0, 0, 6], 9080)), want);
    assert_eq!(run(&p, &lk, &from([127, 0, 0, 6], 15090)), want);
    assert_eq!(
        lk.calls.get(),
        1000,
        "only the local-connect record is looked up"
    );
    let c6 = InboundConn {
        family: AF_INET6,
        local: [1, 2, 3, 4],
        remote: v6(6),
        ..from(PEER, 9080)
    };
    assert_eq!(run(&p, &lk, &c6), want);
}

#[test]
fn the_pod_talking_to_itself_is_left_to_the_outbound_rules() {
    let (p, lk) = sidecar();
    let want = Verdict::Pass(Counter::InboundLocal);
    for src in [[127, 0, 0, 1], [127, 1, 2, 3], POD] {
        assert_eq!(run(&p, &lk, &from(src, 9080)), want, "{src:?}");
    }
    let c6 = InboundConn {
        family: AF_INET6,
        local: [1, 2, 3, 4],
        remote: v6(1),
        ..from(PEER, 9080)
    };
    assert_eq!(run(&p, &lk, &c6), want);
    // ::7 is neither loopback nor passthrough.
    let other = InboundConn {
        remote: v6(7),
        ..c6
    };
    assert_eq!(run(&p, &lk, &other), Verdict::Steer);
    // Loopback needs only the local-connect record; an own address its lookup too.
    run(&p, &lk, &from([127, 0, 0, 1], 9080));
    assert_eq!(lk.calls.get(), 1000);
    run(&p, &lk, &from(POD, 9080));
    assert_eq!(lk.calls.get(), 1001);
}

#[test]
fn sources_claimed_from_the_wire_are_captured_like_any_other() {
    let (p, mut lk) = sidecar();
    lk.wire = true;
    for src in [[127, 0, 0, 6], [127, 0, 0, 1], POD] {
        assert_eq!(run(&p, &lk, &from(src, 9080)), Verdict::Steer, "{src:?}");
        // The rest of the chain still applies: an excluded port stays excluded.
        let want = Verdict::Pass(Counter::InboundExcludedPort);
        assert_eq!(run(&p, &lk, &from(src, 15090)), want, "{src:?}");
    }
    for last in [6, 1] {
        let c6 = InboundConn {
            family: AF_INET6,
            local: [1, 2, 3, 4],
            remote: v6(last),
            ..from(PEER, 9080)
        };
        assert_eq!(run(&p, &lk, &c6), Verdict::Steer, "::{last}");
    }
    // A peer that claims nothing needs no record lookup.
    run(&p, &lk, &from(PEER, 9080));
    assert!(lk.calls.get() < 1000, "{}", lk.calls.get());
}

#[test]
fn exempt_interfaces_are_not_captured_on_any_port() {
    let (p, lk) = sidecar();
    let want = Verdict::Pass(Counter::InboundInterface);
    for port in [80, 15008, 15090] {
        let c = InboundConn {
            ifindex: NET1,
            ..from(PEER, port)
        };
        assert_eq!(run(&p, &lk, &c), want, "{port}");
        assert_eq!(
            lk.calls.get(),
            11,
            "no port lookup after the interface rule"
        );
    }
    // The same ifindex means nothing in another namespace.
    let elsewhere = InboundConn {
        netns: NS + 1,
        ifindex: NET1,
        ..from([192, 0, 2, 7], 80)
    };
    assert_eq!(run(&p, &lk, &elsewhere), Verdict::Steer);
}

#[test]
fn an_unknown_interface_matches_no_interface_rule_and_is_not_looked_up() {
    let (p, lk) = sidecar();
    let c = InboundConn {
        ifindex: IFINDEX_UNKNOWN,
        ..from(PEER, 80)
    };
    assert_eq!(run(&p, &lk, &c), Verdict::Steer);
    assert_eq!(lk.calls.get(), 101, "own-address and port lookups only");
    // Excluded ports and the tunnel port still pass, by their own rules.
    for port in [15008, 15090] {
        let c = InboundConn {
            ifindex: IFINDEX_UNKNOWN,
            ..from(PEER, port)
        };
        assert_eq!(
            run(&p, &lk, &c),
            Verdict::Pass(Counter::InboundExcludedPort),
            "{port}"
        );
    }
}

#[test]
fn lookups_happen_lazily_in_rule_order() {
    let (p, lk) = sidecar();
    run(&p, &lk, &from(PEER, 15008));
    assert_eq!(
        lk.calls.get(),
        11,
        "tunnel port: own-address and interface lookups only"
    );
    run(&p, &lk, &from(PEER, 80));
    assert_eq!(lk.calls.get(), 111, "every lookup once");
}

#[test]
fn without_a_listener_refuses_unless_passthrough() {
    let (mut p, _) = sidecar();
    assert_eq!(without_listener(&p), NoListener::Refuse);
    p.flags |= INBOUND_NO_LISTENER_PASSTHROUGH;
    assert_eq!(without_listener(&p), NoListener::Passthrough);
    p.flags = INBOUND_NO_LISTENER_PASSTHROUGH;
    assert_eq!(without_listener(&p), NoListener::Passthrough);
}

#[test]
fn tproxy_leaves_every_connection_made_inside_the_pod_and_steers_the_wires() {
    let (mut p, mut lk) = sidecar();
    let client = [192, 0, 2, 7];
    // REDIRECT: a connect made inside the pod from a foreign source (a transparent socket) is
    // captured like any other.
    assert_eq!(run(&p, &lk, &from(client, 8080)), Verdict::Steer);
    // TPROXY: it is the proxy's transparent hop to the application, left alone.
    p.flags |= INBOUND_TPROXY;
    assert_eq!(
        run(&p, &lk, &from(client, 8080)),
        Verdict::Pass(Counter::InboundLocal)
    );
    // The same source from the wire (no local connect) is steered, and excluded ports stay so.
    lk.wire = true;
    assert_eq!(run(&p, &lk, &from(client, 8080)), Verdict::Steer);
    assert_eq!(
        run(&p, &lk, &from(client, 15020)),
        Verdict::Pass(Counter::InboundExcludedPort)
    );
}
