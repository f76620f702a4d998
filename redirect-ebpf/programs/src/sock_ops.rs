//! `sock_ops`: hands a redirected connection's original destination from the application's
//! socket to the proxy's accepted socket, and counts the proxy's listeners.
//!
//! The application's socket (active side) publishes the destination kept in its socket storage
//! as a `TRACKED` entry (netns + 4-tuple) in `TCP_CONNECT_CB`, before the SYN leaves, within its
//! policy's hand-off quota. The proxy's accepted socket (passive side) claims the entry into its
//! own storage when the handshake completes and deletes it; an entry never claimed goes when the
//! application's socket closes (the rules: [`redirect_common::tracking`]).
use aya_ebpf::{
    bindings::{
        BPF_ANY, BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB, BPF_SOCK_OPS_STATE_CB,
        BPF_SOCK_OPS_STATE_CB_FLAG, BPF_SOCK_OPS_TCP_CONNECT_CB, BPF_SOCK_OPS_TCP_LISTEN_CB,
    },
    macros::sock_ops,
    programs::SockOpsContext,
};
use redirect_common::{
    outbound::is_loopback,
    sock::{self, SOCK_HANDOFF},
    tracking, Counter, ListenerKey, NetnsCookie, Tracked, AF_INET, AF_INET6,
};

use crate::{
    local::{forget_local_connect, record_local_connect},
    maps::{count, count_ns, sock_state, HANDOFFS, INBOUND, LISTENERS, NETNS_INBOUND, TRACKED},
    quota::{quota_add, quota_sub},
    readiness::{count_proxy_listener, uncount_proxy_listener, TCP_LISTEN},
    sock_ops_ctx::{key_as_client, key_as_proxy, ops_cookie, ops_netns},
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
        BPF_SOCK_OPS_TCP_LISTEN_CB => on_tcp_listen(ctx),
        // Dual-stack sockets connect to ::ffff:127.0.0.1; their keys fold to IPv4.
        BPF_SOCK_OPS_TCP_CONNECT_CB => on_tcp_connect(ctx),
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
        forget_local_connect(ctx);
    }
    if new != TCP_CLOSE {
        return;
    }
    if old == TCP_LISTEN {
        uncount_proxy_listener(ctx, ops_netns(ctx));
    } else {
        on_app_close(ctx);
    }
}

#[inline(always)]
fn watch_close(ctx: &SockOpsContext) {
    // Failure leaves the entry to the other side's close; nothing else to do here.
    let _ = ctx.set_cb_flags((ctx.cb_flags() | BPF_SOCK_OPS_STATE_CB_FLAG) as i32);
}

/// `tcp_connect()`: a redirected application socket publishes its hand-off under the
/// connection's 4-tuple, within its policy's quota, before the SYN leaves; any other connect
/// to one of its namespace's own addresses is recorded ([`record_local_connect`]). A redirected
/// socket connects to loopback, never to one of its pod's addresses, so the socket's storage
/// is read first and the address lookup is left to the others. A socket that connects again
/// after a redirected attempt failed keeps its mark, so the mark counts only for a connect
/// where the capture hooks sent it: loopback, or (TPROXY mode's inbound port) its original
/// address on another port.
fn on_tcp_connect(ctx: &SockOpsContext) {
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
        record_local_connect(ctx);
        return;
    };
    if state.flags & SOCK_HANDOFF != 0 && published_by(key, ops_cookie(ctx)) {
        // Already published for this connect: the pod cgroup's run of an attach scope switch.
        return;
    }
    let quota_key = state.quota_key;
    if !quota_add(&HANDOFFS, quota_key) {
        count(Counter::HandoffQuota);
        count_ns(ops_netns(ctx), Counter::HandoffQuota);
        return;
    }
    let entry = Tracked {
        dst: orig,
        client_cookie: ops_cookie(ctx),
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

/// Whether `key`'s `TRACKED` entry was written by socket `cookie`.
#[inline(always)]
fn published_by(key: redirect_common::ConnKey, cookie: u64) -> bool {
    // SAFETY: value read at once.
    unsafe { TRACKED.get(key) }.is_some_and(|e| e.client_cookie == cookie)
}

/// Registers the proxy's inbound listener of an enrolled namespace for sk_lookup.
fn on_tcp_listen(ctx: &SockOpsContext) {
    let ns = ops_netns(ctx);
    count_proxy_listener(ctx, ns);
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
fn on_app_close(ctx: &SockOpsContext) {
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
    if tracking::app_close_deletes(ops_cookie(ctx), unsafe { &*entry })
        && TRACKED.remove(key).is_ok()
    {
        quota_sub(&HANDOFFS, state.quota_key);
    }
}
