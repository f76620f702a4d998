//! `sk_lookup`: steers inbound TCP of an enrolled namespace to the proxy's inbound listener,
//! without NAT: the accepted socket's local address is the original destination. The decision
//! is [`redirect_common::inbound::decide`]; this file reads the context and acts on it.
use aya_ebpf::{
    bindings::sk_action::{SK_DROP, SK_PASS},
    macros::sk_lookup,
    programs::SkLookupContext,
};
use redirect_common::{
    inbound::{decide, without_listener, InboundConn, NoListener, Verdict, IFINDEX_UNKNOWN},
    types::IPPROTO_TCP,
    Counter, ListenerKey, NetnsCookie, OrigDst, PortBe, TraceEvent, Tracked, AF_INET, AF_INET6,
};

use crate::{
    inbound::{inbound_policy_of, netns_of, Maps},
    maps::{count, count_ns, tracing_on, INBOUND, LISTENERS, TRACE},
};

#[sk_lookup]
pub(crate) fn redirect_sk_lookup(ctx: SkLookupContext) -> u32 {
    try_sk_lookup::<true>(&ctx)
}

/// The same program for kernels without `ingress_ifindex` (Linux < 5.17, where reading it
/// fails verification): the arrival interface is unknown ([`IFINDEX_UNKNOWN`]); the loader
/// picks this one when the probe says the field is missing and refuses `-c`/`-k` then.
#[sk_lookup]
pub(crate) fn redirect_sk_lookup_no_ifindex(ctx: SkLookupContext) -> u32 {
    try_sk_lookup::<false>(&ctx)
}

/// Both programs: `IFINDEX` says whether the context's `ingress_ifindex` may be read.
#[inline(always)]
fn try_sk_lookup<const IFINDEX: bool>(ctx: &SkLookupContext) -> u32 {
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
    // decide() ignores other protocols too; leaving before any map lookup keeps UDP (every
    // datagram to an unconnected socket runs this program) cheap.
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
    let Some(netns) = netns_of(family, local) else {
        return SK_PASS; // not an address of an enrolled namespace
    };
    let Some(policy) = inbound_policy_of(netns) else {
        return SK_PASS;
    };
    // SAFETY: remote_port is a readable __be16 (with padding).
    let remote_port =
        u16::from_be(unsafe { core::ptr::read_volatile(&raw const (*sl).remote_port) });
    let ifindex = if IFINDEX {
        // SAFETY: ingress_ifindex is a readable u32 (Linux 5.17 and later: this program is
        // loaded only where the probe found it).
        unsafe { rd(&raw const (*sl).ingress_ifindex) }
    } else {
        IFINDEX_UNKNOWN
    };
    let conn = InboundConn {
        netns,
        family,
        tcp: true,
        local,
        local_port: local_port as u16,
        remote,
        remote_port,
        ifindex,
    };
    match decide(&policy, &conn, &Maps) {
        Verdict::Steer => {}
        Verdict::Pass(counter) => {
            counted(&conn, counter, 0);
            return SK_PASS;
        }
        Verdict::Ignore => return SK_PASS,
    }

    let mut key = ListenerKey {
        netns: NetnsCookie(netns),
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
        counted(&conn, Counter::InboundNoListener, 0);
        return match without_listener(&policy) {
            NoListener::Passthrough => SK_PASS,
            NoListener::Refuse => SK_DROP,
        };
    }
    record(&conn);
    counted(&conn, Counter::InboundSteered, policy.inbound_port);
    SK_PASS
}

/// Counts an inbound decision node-wide and for the namespace (`redirect stats`), and streams
/// it to `redirect trace` while one reads; `port` is the proxy port it was steered to (0: not).
#[inline(always)]
fn counted(conn: &InboundConn, counter: Counter, port: u16) {
    count(counter);
    count_ns(conn.netns, counter);
    if tracing_on() {
        trace_inbound(conn, counter, port);
    }
}

/// Streams one inbound decision; dropped silently when the ring is full. No caller runs here
/// (a SYN arriving): pid, uid, gid and comm stay zero and `direction` says so.
#[inline(never)]
fn trace_inbound(conn: &InboundConn, counter: Counter, port: u16) {
    let Some(mut entry) = TRACE.reserve::<TraceEvent>(0) else {
        return;
    };
    entry.write(TraceEvent {
        netns: NetnsCookie(conn.netns),
        dst: conn.local,
        pid: 0,
        uid: 0,
        gid: 0,
        dport: conn.local_port,
        redirect_port: port,
        family: conn.family,
        proto: 6,
        counter: counter as u8,
        comm: [0; 16],
        src: conn.remote,
        sport: conn.remote_port,
        direction: redirect_common::TRACE_INBOUND,
        _pad0: 0,
        _pad: [0; 2],
    });
    entry.submit(0);
}

/// Remembers the original destination for getsockopt(SO_ORIGINAL_DST) on the accepted socket.
/// IPv4 lookups are AF_INET even when a dual-stack listener takes them; the accepted socket's
/// v4-mapped addresses are folded to the same form by sock_ops and getsockopt.
#[inline(always)]
fn record(conn: &InboundConn) {
    let key = conn.key();
    let entry = Tracked {
        dst: OrigDst {
            addr: conn.local,
            port: PortBe::from_host(conn.local_port),
            family: conn.family,
            _pad: 0,
        },
        client_cookie: 0,
        quota_key: 0,
    };
    if INBOUND.insert(key, entry, 0).is_err() {
        count(Counter::InboundTrackError);
    }
}
