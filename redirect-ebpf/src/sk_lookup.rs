//! `sk_lookup`: steers inbound TCP of an enrolled namespace to the proxy's inbound listener,
//! without NAT: the accepted socket's local address is the original destination.
use aya_ebpf::{
    bindings::sk_action::{SK_DROP, SK_PASS},
    macros::sk_lookup,
    programs::SkLookupContext,
};
use redirect_common::{
    AddrKey, ConnKey, Counter, IfKey, ListenerKey, OrigDst, PortKey, Tracked, AF_INET, AF_INET6,
    INBOUND_ALL_PORTS, INBOUND_NO_LISTENER_PASSTHROUGH, PORT_EXCLUDED, PORT_INCLUDED,
};

use crate::maps::{count, IFACES, INBOUND, INBOUND_PORTS, LISTENERS, NETNS_INBOUND, POD_ADDRS};

const IPPROTO_TCP: u32 = 6;
/// ::1 in network order.
const LOOPBACK_V6: [u32; 4] = [0, 0, 0, u32::from_ne_bytes([0, 0, 0, 1])];
/// 127.0.0.6 in network order (Istio's inbound passthrough source).
const PASSTHROUGH_V4: u32 = u32::from_ne_bytes([127, 0, 0, 6]);
/// ::6 in network order.
const PASSTHROUGH_V6: [u32; 4] = [0, 0, 0, u32::from_ne_bytes([0, 0, 0, 6])];

#[sk_lookup]
pub fn redirect_sk_lookup(ctx: SkLookupContext) -> u32 {
    try_sk_lookup(&ctx)
}

fn try_sk_lookup(ctx: &SkLookupContext) -> u32 {
    let sl = ctx.lookup;
    // Volatile loads keep LLVM from addressing context fields through a modified pointer,
    // which the verifier rejects.
    // SAFETY: kernel-provided context; every field read here is readable in sk_lookup.
    let rd = |p: *const u32| unsafe { core::ptr::read_volatile(p) };
    // SAFETY: field addresses of the context, not dereferenced here.
    let (protocol, family, local_port) = unsafe {
        (
            rd(&raw const (*sl).protocol),
            rd(&raw const (*sl).family),
            rd(&raw const (*sl).local_port),
        )
    };
    if protocol != IPPROTO_TCP {
        return SK_PASS;
    }
    // SAFETY: as above.
    let (family, local, remote) = unsafe {
        if family == u32::from(AF_INET) {
            (
                AF_INET,
                [rd(&raw const (*sl).local_ip4), 0, 0, 0],
                [rd(&raw const (*sl).remote_ip4), 0, 0, 0],
            )
        } else {
            let l = &raw const (*sl).local_ip6;
            let r = &raw const (*sl).remote_ip6;
            (
                AF_INET6,
                [
                    rd(&raw const (*l)[0]),
                    rd(&raw const (*l)[1]),
                    rd(&raw const (*l)[2]),
                    rd(&raw const (*l)[3]),
                ],
                [
                    rd(&raw const (*r)[0]),
                    rd(&raw const (*r)[1]),
                    rd(&raw const (*r)[2]),
                    rd(&raw const (*r)[3]),
                ],
            )
        }
    };
    // SAFETY: remote_port is a readable __be16 (with padding).
    let remote_port =
        u16::from_be(unsafe { core::ptr::read_volatile(&raw const (*sl).remote_port) });
    let Some(&netns) = (unsafe {
        POD_ADDRS.get(AddrKey {
            addr: local,
            family,
            _pad: [0; 6],
        })
    }) else {
        return SK_PASS; // not an address of an enrolled namespace
    };
    // SAFETY: value copied out at once.
    let Some(policy) = (unsafe { NETNS_INBOUND.get(netns) }).copied() else {
        return SK_PASS;
    };
    let port = local_port as u16;
    if port == policy.inbound_port {
        return SK_PASS;
    }
    let from_passthrough = if family == AF_INET {
        remote[0] == PASSTHROUGH_V4
    } else {
        remote == PASSTHROUGH_V6
    };
    if from_passthrough {
        count(Counter::InboundPassthroughSource);
        return SK_PASS;
    }
    // The pod talking to itself (from one of its own addresses or loopback): istio-iptables
    // decides that in OUTPUT, never in PREROUTING. The ingress ifindex cannot tell: traffic to
    // the pod's own address reports the device that owns the address, not lo.
    let from_loopback = if family == AF_INET {
        remote[0].to_ne_bytes()[0] == 127
    } else {
        remote == LOOPBACK_V6
    };
    // SAFETY: value copied out at once.
    let from_self = unsafe {
        POD_ADDRS.get(AddrKey {
            addr: remote,
            family,
            _pad: [0; 6],
        })
    }
    .copied()
        == Some(netns);
    if from_loopback || from_self {
        count(Counter::InboundLocal);
        return SK_PASS;
    }
    // PREROUTING -i <-c or -k interface> -j RETURN.
    // SAFETY: ingress_ifindex is a readable u32 of the context.
    let ifindex = unsafe { core::ptr::read_volatile(&raw const (*sl).ingress_ifindex) };
    // SAFETY: value copied out at once.
    if unsafe {
        IFACES.get(IfKey {
            netns,
            ifindex,
            _pad: 0,
        })
    }
    .is_some()
    {
        count(Counter::InboundInterface);
        return SK_PASS;
    }
    if port == policy.tunnel_port {
        count(Counter::InboundExcludedPort);
        return SK_PASS;
    }
    // SAFETY: value copied out at once.
    let rule = unsafe {
        INBOUND_PORTS.get(PortKey {
            netns,
            port,
            _pad: [0; 6],
        })
    }
    .copied()
    .unwrap_or(0);
    if rule == PORT_EXCLUDED {
        count(Counter::InboundExcludedPort);
        return SK_PASS;
    }
    if policy.flags & INBOUND_ALL_PORTS == 0 && rule != PORT_INCLUDED {
        count(Counter::InboundNotInList);
        return SK_PASS;
    }

    let mut key = ListenerKey {
        netns,
        family: u32::from(family),
        _pad: 0,
    };
    let mut steered = LISTENERS.redirect_sk_lookup(ctx, key, 0).is_ok();
    if !steered && family == AF_INET {
        // A dual-stack [::] listener also takes IPv4.
        key.family = u32::from(AF_INET6);
        steered = LISTENERS.redirect_sk_lookup(ctx, key, 0).is_ok();
    }
    if !steered {
        count(Counter::InboundNoListener);
        return if policy.flags & INBOUND_NO_LISTENER_PASSTHROUGH != 0 {
            SK_PASS
        } else {
            SK_DROP
        };
    }
    // Remember the original destination for getsockopt(SO_ORIGINAL_DST) on the accepted socket.
    // IPv4 lookups are AF_INET even when a dual-stack listener takes them; the accepted socket's
    // v4-mapped addresses are folded to the same form by sock_ops and getsockopt.
    let conn = ConnKey {
        netns,
        client_addr: remote,
        server_addr: local,
        client_port: remote_port,
        server_port: port,
        family,
        _pad: 0,
    };
    let entry = Tracked {
        dst: OrigDst {
            addr: local,
            port: port.to_be(),
            family,
            _pad: 0,
        },
        client_cookie: 0,
        proxy_cookie: 0,
    };
    if INBOUND.insert(conn, entry, 0).is_err() {
        count(Counter::TrackError);
    }
    count(Counter::InboundSteered);
    SK_PASS
}
