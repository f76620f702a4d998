//! What the sock_ops programs read of their context: the socket's namespace and cookie, its
//! addresses (v4-mapped folded to IPv4) and the connection's key as either end sees it.
use aya_ebpf::{
    helpers::generated::{bpf_get_netns_cookie, bpf_get_socket_cookie},
    programs::SockOpsContext,
    EbpfContext,
};
use redirect_common::{normalise_addr, ConnKey, NetnsCookie, AF_INET, AF_INET6};

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
pub(crate) fn ops_netns(ctx: &SockOpsContext) -> u64 {
    // SAFETY: bpf_get_netns_cookie accepts a sock_ops context.
    unsafe { bpf_get_netns_cookie(ctx.as_ptr()) }
}

#[inline(always)]
pub(crate) fn ops_cookie(ctx: &SockOpsContext) -> u64 {
    // SAFETY: bpf_get_socket_cookie accepts a sock_ops context.
    unsafe { bpf_get_socket_cookie(ctx.as_ptr()) }
}

/// (family, local address, remote address) of the socket, v4-mapped folded to IPv4.
#[inline(always)]
pub(crate) fn ops_addrs(ctx: &SockOpsContext) -> (u16, [u32; 4], [u32; 4]) {
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
    let (family, local, remote) = ops_addrs(ctx);
    ConnKey {
        netns: NetnsCookie(ops_netns(ctx)),
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
pub(crate) fn key_as_proxy(ctx: &SockOpsContext) -> ConnKey {
    let (family, local, remote) = ops_addrs(ctx);
    ConnKey {
        netns: NetnsCookie(ops_netns(ctx)),
        client_addr: remote,
        server_addr: local,
        client_port: remote_port(ctx),
        server_port: ctx.local_port() as u16,
        family,
        _pad: 0,
    }
}
