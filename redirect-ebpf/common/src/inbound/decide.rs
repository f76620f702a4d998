//! istio-iptables' nat `PREROUTING` / `ISTIO_INBOUND` chain as one function, rule by rule, plus
//! the two rules the kernel side needs on top of it (the pod's own connections, no listener).
use super::*;
use crate::{
    types::{LOOPBACK_V6, PASSTHROUGH_V4, PASSTHROUGH_V6},
    AF_INET,
};

/// `addr` is the proxy's passthrough source (127.0.0.6, `::6`).
#[inline(always)]
pub fn is_passthrough(family: u16, addr: &[u32; 4]) -> bool {
    if family == AF_INET {
        addr[0] == PASSTHROUGH_V4
    } else {
        *addr == PASSTHROUGH_V6
    }
}

/// `addr` is loopback (127/8, `::1`).
#[inline(always)]
pub fn is_loopback(family: u16, addr: &[u32; 4]) -> bool {
    if family == AF_INET {
        addr[0].to_ne_bytes()[0] == 127
    } else {
        *addr == LOOPBACK_V6
    }
}

/// Evaluates istio-iptables' nat `PREROUTING` chain (REDIRECT mode) for `conn`, a connection
/// to an address of the namespace whose inbound policy is `p`.
#[inline(always)]
pub fn decide<L: Lookups>(p: &InboundPolicy, conn: &InboundConn, lk: &L) -> Verdict {
    // PREROUTING -p tcp -j ISTIO_INBOUND
    if !conn.tcp {
        return Verdict::Ignore;
    }
    // The proxy's own listener, reached directly: nothing to steer.
    if conn.local_port == p.inbound_port {
        return Verdict::Ignore;
    }
    // The proxy's hop to the application, from 127.0.0.6 / ::6 (`-o lo -s 127.0.0.6/32 -j
    // RETURN` in OUTPUT), and the pod talking to itself (from loopback or one of its own
    // addresses): istio-iptables decides both in OUTPUT, never in PREROUTING. Only a connect
    // made inside the pod counts (sock_ops recorded it): the ingress ifindex cannot tell (local
    // traffic reports the device owning the address, not lo), and a SYN from the wire may
    // claim any of these sources; without the record it is captured like any other.
    // In TPROXY mode the source does not matter: the proxy's transparent hop comes from the
    // client's address (and is marked), and the mangle chain returns for every connection
    // that arrives on lo unless the proxy's own identity marked it 1338 (which the nat OUTPUT
    // chain already sent to the inbound port: connect4's `inbound_redirect_local`).
    let passthrough = is_passthrough(conn.family, &conn.remote);
    if (passthrough
        || p.has(INBOUND_TPROXY)
        || is_loopback(conn.family, &conn.remote)
        || lk.remote_is_own(conn))
        && lk.local_connect(conn)
    {
        return Verdict::Pass(if passthrough {
            Counter::InboundPassthroughSource
        } else {
            Counter::InboundLocal
        });
    }
    // PREROUTING -i <-c nic> -j RETURN; -I PREROUTING 1 -i <-k nic> -j RETURN
    // (without the arrival interface no such rule can match: nothing is looked up).
    if conn.ifindex != IFINDEX_UNKNOWN && lk.exempt_interface(conn) {
        return Verdict::Pass(Counter::InboundInterface);
    }
    // ISTIO_INBOUND -p tcp --dport <-e> -j RETURN (nat's chain: TPROXY mode's mangle chain
    // has no such rule, so the tunnel port is captured there like any other)
    if conn.local_port == p.tunnel_port && !p.has(INBOUND_TPROXY) {
        return Verdict::Pass(Counter::InboundExcludedPort);
    }
    let rule = lk.port_rule(conn);
    match port_verdict(p, rule) {
        Some(c) => Verdict::Pass(c),
        // ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports <-z> (TPROXY: ISTIO_TPROXY)
        None => Verdict::Steer,
    }
}

/// The port rules of `ISTIO_INBOUND` for a port whose `INBOUND_PORTS` bits are `rule`: the
/// counter of the rule that returns, or `None` when the port is captured.
/// `--dport <-d> -j RETURN` (only with -b '*'); then -b '*': `-p tcp -j ISTIO_IN_REDIRECT`,
/// -b list: `-p tcp --dport <port> -j ISTIO_IN_REDIRECT`, one per port.
#[inline(always)]
fn port_verdict(p: &InboundPolicy, rule: u8) -> Option<Counter> {
    if rule == PORT_EXCLUDED {
        return Some(Counter::InboundExcludedPort);
    }
    if !p.has(INBOUND_ALL_PORTS) && rule != PORT_INCLUDED {
        return Some(Counter::InboundNotInList);
    }
    None
}

/// TPROXY mode: whether `ISTIO_INBOUND`'s port rules send a connection to `port` (whose
/// `INBOUND_PORTS` bits are `rule`) to the inbound port, as they do for the proxy's own connect
/// to its pod once the mangle `OUTPUT` chain marked it 1338 (never the inbound port itself).
#[inline(always)]
pub fn tproxy_takes(p: &InboundPolicy, port: u16, rule: u8) -> bool {
    p.has(INBOUND_TPROXY) && port != p.inbound_port && port_verdict(p, rule).is_none()
}

/// What a [`Verdict::Steer`] connection gets when the proxy has no inbound listener (counted
/// as [`Counter::InboundNoListener`] either way).
#[inline(always)]
pub fn without_listener(p: &InboundPolicy) -> NoListener {
    if p.has(INBOUND_NO_LISTENER_PASSTHROUGH) {
        NoListener::Passthrough
    } else {
        NoListener::Refuse
    }
}
