//! `sock_ops`: turns a redirected connect into a 4-tuple entry, and removes it on close.
//!
//! The application's socket (active side) moves its entry from `PENDING` (by socket cookie) to
//! `TRACKED` (by netns + 4-tuple) in `TCP_CONNECT_CB`, before the SYN leaves. The proxy's accepted
//! socket (passive side) claims the entry when the handshake completes. The entry is removed when
//! its owner closes: the proxy's socket once it claimed it, else the application's socket
//! (the rules: [`redirect_common::tracking`]).
use aya_ebpf::{
    bindings::{
        BPF_ANY, BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB, BPF_SOCK_OPS_STATE_CB,
        BPF_SOCK_OPS_STATE_CB_FLAG, BPF_SOCK_OPS_TCP_CONNECT_CB, BPF_SOCK_OPS_TCP_LISTEN_CB,
    },
    helpers::generated::{bpf_get_netns_cookie, bpf_get_socket_cookie},
    macros::sock_ops,
    programs::SockOpsContext,
    EbpfContext,
};
use redirect_common::{
    normalise_addr,
    tracking::{self, FoundAs, OnClose},
    ConnKey, Counter, ListenerKey, NetnsCookie, Tracked, AF_INET, AF_INET6,
};

use crate::{
    maps::{count, INBOUND, LISTENERS, NETNS_INBOUND, PENDING, TRACKED},
    readiness,
};

const TCP_CLOSE: u32 = 7;

#[sock_ops]
pub fn redirect_sock_ops(ctx: SockOpsContext) -> u32 {
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
        BPF_SOCK_OPS_STATE_CB if ctx.arg(1) == TCP_CLOSE && ctx.arg(0) == readiness::TCP_LISTEN => {
            readiness::on_listener_close(ctx, netns(ctx));
        }
        BPF_SOCK_OPS_STATE_CB if ctx.arg(1) == TCP_CLOSE => on_close(ctx),
        _ => {}
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
fn netns(ctx: &SockOpsContext) -> u64 {
    // SAFETY: bpf_get_netns_cookie accepts a sock_ops context.
    unsafe { bpf_get_netns_cookie(ctx.as_ptr()) }
}

#[inline(always)]
fn cookie(ctx: &SockOpsContext) -> u64 {
    // SAFETY: bpf_get_socket_cookie accepts a sock_ops context.
    unsafe { bpf_get_socket_cookie(ctx.as_ptr()) }
}

/// (family, local address, remote address) of the socket, v4-mapped folded to IPv4.
#[inline(always)]
fn addrs(ctx: &SockOpsContext) -> (u16, [u32; 4], [u32; 4]) {
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
fn key_as_client(ctx: &SockOpsContext) -> ConnKey {
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

fn on_connect(ctx: &SockOpsContext) {
    let sock = cookie(ctx);
    // SAFETY: the value is copied out at once; a concurrent delete cannot alias it because
    // only this socket's own callbacks touch its cookie's entry.
    let Some(orig) = (unsafe { PENDING.get(sock) }).copied() else {
        return;
    };
    // The PENDING entry stays for getpeername until the socket closes.
    let entry = Tracked {
        dst: orig,
        client_cookie: sock,
        proxy_cookie: 0,
    };
    if TRACKED.insert(key_as_client(ctx), entry, 0).is_err() {
        count(Counter::TrackError);
        return;
    }
    watch_close(ctx);
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

fn on_passive_established(ctx: &SockOpsContext) {
    let key = key_as_proxy(ctx);
    let Some(entry) = TRACKED
        .get_ptr_mut(key)
        .or_else(|| INBOUND.get_ptr_mut(key))
    else {
        return;
    };
    // SAFETY: pointer into a map value, valid for this program run.
    tracking::claim(unsafe { &mut *entry }, cookie(ctx));
    watch_close(ctx);
}

fn on_close(ctx: &SockOpsContext) {
    let sock = cookie(ctx);
    let _ = PENDING.remove(sock);
    // The socket's entry is under one of its two keys; the first it owns goes.
    let client_key = key_as_client(ctx);
    if let Some(entry) = TRACKED.get_ptr(client_key) {
        // SAFETY: pointer into a map value, valid for this program run.
        if tracking::on_close(sock, FoundAs::Client, unsafe { &*entry }) == OnClose::Delete {
            let _ = TRACKED.remove(client_key);
            return;
        }
    }
    let proxy_key = key_as_proxy(ctx);
    if let Some(entry) = TRACKED.get_ptr(proxy_key) {
        // SAFETY: as above.
        if tracking::on_close(sock, FoundAs::Proxy, unsafe { &*entry }) == OnClose::Delete {
            let _ = TRACKED.remove(proxy_key);
            return;
        }
    }
    if let Some(entry) = INBOUND.get_ptr(proxy_key) {
        // SAFETY: as above.
        if tracking::on_close(sock, FoundAs::Proxy, unsafe { &*entry }) == OnClose::Delete {
            let _ = INBOUND.remove(proxy_key);
        }
    }
}
