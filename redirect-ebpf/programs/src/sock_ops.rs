//! `sock_ops`: hands a redirected connection's original destination from the application's
//! socket to the proxy's accepted socket, and counts the proxy's listeners.
//!
//! The application's socket (active side) publishes the destination kept in its socket storage
//! as a `TRACKED` entry (netns + 4-tuple) in `TCP_CONNECT_CB`, before the SYN leaves, within its
//! policy's hand-off quota. The proxy's accepted socket (passive side) claims the entry into its
//! own storage when the handshake completes and deletes it; an entry never claimed goes when the
//! application's socket closes (the rules: [`redirect_common::tracking`]).
use core::intrinsics::{atomic_xadd, AtomicOrdering};

use aya_ebpf::{
    bindings::{
        BPF_ANY, BPF_NOEXIST, BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB, BPF_SOCK_OPS_STATE_CB,
        BPF_SOCK_OPS_STATE_CB_FLAG, BPF_SOCK_OPS_TCP_CONNECT_CB, BPF_SOCK_OPS_TCP_LISTEN_CB,
    },
    helpers::generated::{bpf_get_netns_cookie, bpf_get_socket_cookie},
    macros::sock_ops,
    maps::HashMap,
    programs::SockOpsContext,
    EbpfContext,
};
use redirect_common::{
    normalise_addr,
    outbound::is_loopback,
    sock::{self, SOCK_HANDOFF},
    tracking, ConnKey, Counter, ListenerKey, NetnsCookie, Tracked, AF_INET, AF_INET6,
};

use crate::{
    local,
    maps::{
        count, count_ns, handoff_quota, sock_state, HANDOFFS, INBOUND, LISTENERS, NETNS_INBOUND,
        TRACKED,
    },
    readiness,
};

const TCP_SYN_SENT: u32 = 2;
const TCP_CLOSE: u32 = 7;

#[sock_ops]
pub(crate) fn redirect_sock_ops(ctx: SockOpsContext) -> u32 {
    try_sock_ops(&ctx);
    1
}

fn try_sock_ops(ctx: &SockOpsContext) {
    let family = ctx.family();
    if family != u32::from(AF_INET) && family != u32::from(AF_INET6) {
        return;
    }
    match ctx.op() {
        BPF_SOCK_OPS_TCP_LISTEN_CB => on_listen(ctx),
        // Dual-stack sockets connect to ::ffff:127.0.0.1; their keys fold to IPv4.
        BPF_SOCK_OPS_TCP_CONNECT_CB => on_connect(ctx),
        BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB => on_passive_established(ctx),
        BPF_SOCK_OPS_STATE_CB => on_state(ctx),
        _ => {}
    }
}

/// `STATE_CB`: a local connect leaving `SYN_SENT` (established or failed) no longer needs its
/// record (a redirected socket, connected to loopback, returns at once); a closing listener or
/// application socket is handled as before.
fn on_state(ctx: &SockOpsContext) {
    let (old, new) = (ctx.arg(0), ctx.arg(1));
    if old == TCP_SYN_SENT {
        local::on_handshake_done(ctx);
    }
    if new != TCP_CLOSE {
        return;
    }
    if old == readiness::TCP_LISTEN {
        readiness::on_listener_close(ctx, netns(ctx));
    } else {
        on_close(ctx);
    }
}

/// Remote port in host order. sock_ops stores it in network order, in the high half on
/// little-endian kernels; accept either placement.
#[inline(always)]
fn remote_port(ctx: &SockOpsContext) -> u16 {
    let raw = ctx.remote_port();
    let net = if raw > 0xffff {
        (raw >> 16) as u16
    } else {
        raw as u16
    };
    u16::from_be(net)
}

#[inline(always)]
pub(crate) fn netns(ctx: &SockOpsContext) -> u64 {
    // SAFETY: bpf_get_netns_cookie accepts a sock_ops context.
    unsafe { bpf_get_netns_cookie(ctx.as_ptr()) }
}

#[inline(always)]
pub(crate) fn cookie(ctx: &SockOpsContext) -> u64 {
    // SAFETY: bpf_get_socket_cookie accepts a sock_ops context.
    unsafe { bpf_get_socket_cookie(ctx.as_ptr()) }
}

/// (family, local address, remote address) of the socket, v4-mapped folded to IPv4.
#[inline(always)]
pub(crate) fn addrs(ctx: &SockOpsContext) -> (u16, [u32; 4], [u32; 4]) {
    if ctx.family() == u32::from(AF_INET) {
        (
            AF_INET,
            [ctx.local_ip4(), 0, 0, 0],
            [ctx.remote_ip4(), 0, 0, 0],
        )
    } else {
        let (family, local) = normalise_addr(AF_INET6, ctx.local_ip6());
        let (_, remote) = normalise_addr(AF_INET6, ctx.remote_ip6());
        (family, local, remote)
    }
}

/// Key as seen from the application's (connecting) socket.
#[inline(always)]
pub(crate) fn key_as_client(ctx: &SockOpsContext) -> ConnKey {
    let (family, local, remote) = addrs(ctx);
    ConnKey {
        netns: NetnsCookie(netns(ctx)),
        client_addr: local,
        server_addr: remote,
        client_port: ctx.local_port() as u16,
        server_port: remote_port(ctx),
        family,
        _pad: 0,
    }
}

/// Key as seen from the proxy's accepted socket.
#[inline(always)]
fn key_as_proxy(ctx: &SockOpsContext) -> ConnKey {
    let (family, local, remote) = addrs(ctx);
    ConnKey {
        netns: NetnsCookie(netns(ctx)),
        client_addr: remote,
        server_addr: local,
        client_port: remote_port(ctx),
        server_port: ctx.local_port() as u16,
        family,
        _pad: 0,
    }
}

#[inline(always)]
fn watch_close(ctx: &SockOpsContext) {
    // Failure leaves the entry to the other side's close; nothing else to do here.
    let _ = ctx.set_cb_flags((ctx.cb_flags() | BPF_SOCK_OPS_STATE_CB_FLAG) as i32);
}

/// `tcp_connect()`: a redirected application socket publishes its hand-off under the
/// connection's 4-tuple, within its policy's quota, before the SYN leaves; any other connect
/// to one of its namespace's own addresses is recorded ([`local::on_connect`]). A redirected
/// socket connects to loopback, never to one of its pod's addresses, so the socket's storage
/// is read first and the address lookup is left to the others. A socket that connects again
/// after a redirected attempt failed keeps its mark, so the mark counts only for a connect
/// where the capture hooks sent it: loopback, or (TPROXY mode's inbound port) its original
/// address on another port.
fn on_connect(ctx: &SockOpsContext) {
    let redirected = sock_state(ctx, false).and_then(|state| {
        // SAFETY: the socket's own storage, valid for the program run; its callbacks run
        // under the socket's lock, one at a time.
        let state = unsafe { &mut *state };
        sock::redirected_to(state).map(|orig| (state, orig))
    });
    let key = key_as_client(ctx);
    let Some((state, orig)) = redirected.filter(|(_, orig)| {
        is_loopback(key.family, &key.server_addr)
            || (key.server_addr == orig.addr && key.server_port != orig.port.host())
    }) else {
        local::on_connect(ctx);
        return;
    };
    let quota_key = state.quota_key;
    if !quota_add(&HANDOFFS, quota_key) {
        count(Counter::HandoffQuota);
        count_ns(netns(ctx), Counter::HandoffQuota);
        return;
    }
    let entry = Tracked {
        dst: orig,
        client_cookie: cookie(ctx),
        quota_key,
    };
    if TRACKED.insert(key, entry, 0).is_err() {
        quota_sub(&HANDOFFS, quota_key);
        count(Counter::TrackError);
        return;
    }
    state.flags |= SOCK_HANDOFF;
    watch_close(ctx);
}

/// Counts one more entry for `key` in `counts` (`HANDOFFS` or `LOCAL_COUNTS`); false (and
/// nothing counted) when over the quota.
#[inline(always)]
pub(crate) fn quota_add(counts: &HashMap<u64, u64>, key: u64) -> bool {
    let slot = match counts.get_ptr_mut(key) {
        Some(n) => n,
        None => {
            // The key's first entry; a concurrent first insert makes this one fail.
            let _ = counts.insert(key, 0, u64::from(BPF_NOEXIST));
            match counts.get_ptr_mut(key) {
                Some(n) => n,
                None => return false,
            }
        }
    };
    // SAFETY: a map value valid for the program run, changed only by atomic adds (as in
    // `readiness`); the read after the add may see other CPUs' adds too, so a policy can go
    // over its quota by at most the number of CPUs adding at that instant.
    let after = unsafe {
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(slot, 1);
        core::ptr::read_volatile(slot)
    };
    if tracking::admit(after, handoff_quota()) {
        return true;
    }
    // SAFETY: as above.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(slot, u64::MAX) };
    false
}

/// Counts one entry of `key` less in `counts` (its entry was deleted).
#[inline(always)]
pub(crate) fn quota_sub(counts: &HashMap<u64, u64>, key: u64) {
    if let Some(slot) = counts.get_ptr_mut(key) {
        // SAFETY: as in `quota_add`.
        unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(slot, u64::MAX) };
    }
}

/// Registers the proxy's inbound listener of an enrolled namespace for sk_lookup.
fn on_listen(ctx: &SockOpsContext) {
    let ns = netns(ctx);
    readiness::on_listen(ctx, ns);
    // SAFETY: value copied out at once.
    let Some(policy) = (unsafe { NETNS_INBOUND.get(ns) }).copied() else {
        return;
    };
    if ctx.local_port() as u16 != policy.inbound_port {
        return;
    }
    let key = ListenerKey {
        netns: NetnsCookie(ns),
        family: ctx.family(),
        _pad: 0,
    };
    // SAFETY: the context pointer is valid for the program run; the helper takes the socket.
    if LISTENERS
        .update(key, unsafe { &mut *ctx.ops }, u64::from(BPF_ANY))
        .is_err()
    {
        count(Counter::ListenerError);
    }
}

/// The proxy's accepted socket completed its handshake: it claims the connection's hand-off
/// (a redirected connect's `TRACKED` entry, or sk_lookup's `INBOUND` entry) into its own
/// storage, and the entry goes at once.
fn on_passive_established(ctx: &SockOpsContext) {
    let key = key_as_proxy(ctx);
    let (entry, tracked) = match TRACKED.get_ptr(key) {
        Some(e) => (e, true),
        None => match INBOUND.get_ptr(key) {
            Some(e) => (e, false),
            None => return,
        },
    };
    // SAFETY: pointer into a map value, valid for this program run; copied out at once.
    let Tracked { dst, quota_key, .. } = unsafe { *entry };
    let Some(state) = sock_state(ctx, true) else {
        // The entry stays for its owner's close (or eviction); the proxy gets no answer.
        count(Counter::StateError);
        return;
    };
    // SAFETY: the socket's own storage, valid for the program run.
    sock::claim(unsafe { &mut *state }, dst);
    if tracked {
        // Only the delete that wins counts back: the application's close may race with it.
        if TRACKED.remove(key).is_ok() {
            quota_sub(&HANDOFFS, quota_key);
        }
    } else {
        let _ = INBOUND.remove(key);
    }
}

/// An application socket with a hand-off closes: an entry still there was never claimed and
/// goes with it.
fn on_close(ctx: &SockOpsContext) {
    let Some(state) = sock_state(ctx, false) else {
        return;
    };
    // SAFETY: the socket's own storage, valid for the program run.
    let state = unsafe { &mut *state };
    if state.flags & SOCK_HANDOFF == 0 {
        return;
    }
    state.flags &= !SOCK_HANDOFF;
    let key = key_as_client(ctx);
    let Some(entry) = TRACKED.get_ptr(key) else {
        return;
    };
    // SAFETY: pointer into a map value, valid for this program run.
    if tracking::app_close_deletes(cookie(ctx), unsafe { &*entry }) && TRACKED.remove(key).is_ok() {
        quota_sub(&HANDOFFS, state.quota_key);
    }
}
