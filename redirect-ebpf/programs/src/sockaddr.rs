//! Field access to the `bpf_sock_addr` context shared by the connect, sendmsg, recvmsg and
//! getpeername hooks. Every access is a volatile 4-byte load or store at a constant offset,
//! which is what the verifier accepts (LLVM would otherwise merge neighbouring fields).
use aya_ebpf::{
    bindings::{bpf_sock_addr, sockaddr},
    helpers::generated::bpf_bind,
    programs::SockAddrContext,
};

use crate::{
    capture::{is_passthrough_v4, Dest, FAMILY_V4},
    sockaddr_in::{SockaddrIn, SockaddrIn6},
};
use redirect_common::{outbound::TPROXY_MARK, AF_INET6};

pub(crate) use redirect_common::types::IPPROTO_TCP;
/// 127.0.0.1 as a network-order word.
pub(crate) const LOCALHOST_NET: u32 = u32::from_ne_bytes([127, 0, 0, 1]);
/// Word 2 of a v4-mapped address (`::ffff:0:0/96`) in network order.
pub(crate) const MAPPED_WORD: u32 = u32::from_ne_bytes([0, 0, 0xff, 0xff]);
/// Word 3 of `::1` and `::6`.
const V6_ONE: u32 = u32::from_ne_bytes([0, 0, 0, 1]);
const V6_SIX: u32 = u32::from_ne_bytes([0, 0, 0, 6]);

#[inline(always)]
fn rd(p: *const u32) -> u32 {
    // SAFETY: callers pass addresses of context fields that are readable for the hook.
    unsafe { core::ptr::read_volatile(p) }
}

#[inline(always)]
fn wr(p: *mut u32, v: u32) {
    // SAFETY: callers pass addresses of context fields that are writable for the hook.
    unsafe { core::ptr::write_volatile(p, v) }
}

#[inline(always)]
fn sa(ctx: &SockAddrContext) -> *mut bpf_sock_addr {
    ctx.sock_addr
}

/// The socket's protocol.
#[inline(always)]
pub(crate) fn protocol(ctx: &SockAddrContext) -> u32 {
    // SAFETY: field address of the context.
    rd(unsafe { &raw const (*sa(ctx)).protocol })
}

/// The user port in host order (bind, connect: both families keep it in the same field).
#[inline(always)]
pub(crate) fn user_port(ctx: &SockAddrContext) -> u16 {
    // SAFETY: field address of the context.
    u16::from_be(rd(unsafe { &raw const (*sa(ctx)).user_port }) as u16)
}

/// The IPv4 user address (network order) and port (network order, low 16 bits).
#[inline(always)]
pub(crate) fn user4(ctx: &SockAddrContext) -> (u32, u16) {
    // SAFETY: field addresses of the context.
    unsafe {
        (
            rd(&raw const (*sa(ctx)).user_ip4),
            rd(&raw const (*sa(ctx)).user_port) as u16,
        )
    }
}

/// The IPv6 user address words (network order) and port (network order).
#[inline(always)]
pub(crate) fn user6(ctx: &SockAddrContext) -> ([u32; 4], u16) {
    // SAFETY: field addresses of the context.
    unsafe {
        let ip = &raw const (*sa(ctx)).user_ip6;
        (
            [
                rd(&raw const (*ip)[0]),
                rd(&raw const (*ip)[1]),
                rd(&raw const (*ip)[2]),
                rd(&raw const (*ip)[3]),
            ],
            rd(&raw const (*sa(ctx)).user_port) as u16,
        )
    }
}

/// Rewrites the IPv4 user address and port (both network order).
#[inline(always)]
pub(crate) fn set_user4(ctx: &SockAddrContext, ip: u32, port: u16) {
    // SAFETY: field addresses of the context, writable in these hooks.
    unsafe {
        wr(&raw mut (*sa(ctx)).user_ip4, ip);
        wr(&raw mut (*sa(ctx)).user_port, u32::from(port));
    }
}

/// Rewrites the IPv6 user address and port (network order).
#[inline(always)]
pub(crate) fn set_user6(ctx: &SockAddrContext, ip: [u32; 4], port: u16) {
    // SAFETY: field addresses of the context, writable in these hooks.
    unsafe {
        let p = &raw mut (*sa(ctx)).user_ip6;
        wr(&raw mut (*p)[0], ip[0]);
        wr(&raw mut (*p)[1], ip[1]);
        wr(&raw mut (*p)[2], ip[2]);
        wr(&raw mut (*p)[3], ip[3]);
        wr(&raw mut (*sa(ctx)).user_port, u32::from(port));
    }
}

/// The socket's bound IPv4 source (network order; 0 when unbound).
#[inline(always)]
pub(crate) fn bound_src4(ctx: &SockAddrContext) -> u32 {
    // SAFETY: `sk` is a valid socket pointer for sock_addr hooks; src_ip4 is readable.
    unsafe {
        let sk = (*sa(ctx)).__bindgen_anon_1.sk;
        rd(&raw const (*sk).src_ip4)
    }
}

/// The socket's bound IPv6 source words (network order).
#[inline(always)]
pub(crate) fn bound_src6(ctx: &SockAddrContext) -> [u32; 4] {
    // SAFETY: as in `bound_src4`.
    unsafe {
        let sk = (*sa(ctx)).__bindgen_anon_1.sk;
        let ip = &raw const (*sk).src_ip6;
        [
            rd(&raw const (*ip)[0]),
            rd(&raw const (*ip)[1]),
            rd(&raw const (*ip)[2]),
            rd(&raw const (*ip)[3]),
        ]
    }
}

/// The socket carries the TPROXY mark (the proxy's transparent hop, `SO_MARK` 1337).
#[inline(always)]
pub(crate) fn tproxy_marked(ctx: &SockAddrContext) -> bool {
    // SAFETY: as in `bound_src4`; `mark` is readable.
    unsafe {
        let sk = (*sa(ctx)).__bindgen_anon_1.sk;
        rd(&raw const (*sk).mark) == TPROXY_MARK
    }
}

/// True for a v4-mapped address.
#[inline(always)]
pub(crate) fn is_mapped(ip: &[u32; 4]) -> bool {
    ip[0] == 0 && ip[1] == 0 && ip[2] == MAPPED_WORD
}

/// Whether the socket is TCP; `false` without reading it when the hook only sees UDP.
#[inline(always)]
fn is_tcp(ctx: &SockAddrContext, udp: bool) -> bool {
    !udp && protocol(ctx) == IPPROTO_TCP
}

/// The destination of an IPv4 hook (`udp`: the hook only sees UDP sockets).
#[inline(always)]
pub(crate) fn dest4(ctx: &SockAddrContext, udp: bool) -> Dest {
    let (ip, port) = user4(ctx);
    let src = bound_src4(ctx);
    Dest {
        family: FAMILY_V4,
        tcp: is_tcp(ctx, udp),
        addr: [ip, 0, 0, 0],
        port,
        passthrough_src: is_passthrough_v4(src),
        bound: src != 0,
        tproxy_marked: !udp && tproxy_marked(ctx),
    }
}

/// The destination of an IPv6 hook whose address is v4-mapped (`mapped`, known by the
/// caller) or native; v4-mapped destinations are IPv4 (their packets are).
#[inline(always)]
pub(crate) fn dest6(ctx: &SockAddrContext, udp: bool, mapped: bool) -> Dest {
    let (ip, port) = user6(ctx);
    let src = bound_src6(ctx);
    let tcp = is_tcp(ctx, udp);
    let bound = src[0] | src[1] | src[2] | src[3] != 0;
    if mapped {
        Dest {
            family: FAMILY_V4,
            tcp,
            addr: [ip[3], 0, 0, 0],
            port,
            passthrough_src: is_mapped(&src) && is_passthrough_v4(src[3]),
            bound,
            tproxy_marked: !udp && tproxy_marked(ctx),
        }
    } else {
        Dest {
            family: AF_INET6,
            tcp,
            addr: ip,
            port,
            passthrough_src: src[0] == 0 && src[1] == 0 && src[2] == 0 && src[3] == V6_SIX,
            bound,
            tproxy_marked: !udp && tproxy_marked(ctx),
        }
    }
}

/// Loopback in the form an IPv6 socket dials for `family`: `::1`, or `::ffff:127.0.0.1`.
#[inline(always)]
pub(crate) fn loopback6(family: u16) -> [u32; 4] {
    if family == AF_INET6 {
        [0, 0, 0, V6_ONE]
    } else {
        [0, 0, MAPPED_WORD, LOCALHOST_NET]
    }
}

/// Binds the connecting socket to `ip` (network order) with port 0: the kernel picks the port
/// at connect, as with `IP_BIND_ADDRESS_NO_PORT`. connect4 only (`bpf_bind`); the kernel's
/// refusal is left to the caller, whose connect then leaves from the route's source.
#[inline(always)]
pub(crate) fn bind4(ctx: &SockAddrContext, ip: u32) -> bool {
    let mut addr = SockaddrIn {
        family: FAMILY_V4,
        port: 0,
        addr: ip,
        zero: [0; 8],
    };
    // SAFETY: the helper reads `size_of::<SockaddrIn>()` bytes of the initialised stack value;
    // the context is connect4's.
    unsafe {
        bpf_bind(
            sa(ctx),
            (&raw mut addr).cast::<sockaddr>(),
            core::mem::size_of::<SockaddrIn>() as i32,
        ) == 0
    }
}

/// [`bind4`] for an IPv6 socket (connect6): `ip` native or v4-mapped, network-order words.
#[inline(always)]
pub(crate) fn bind6(ctx: &SockAddrContext, ip: [u32; 4]) -> bool {
    let mut addr = SockaddrIn6 {
        family: AF_INET6,
        port: 0,
        flowinfo: 0,
        addr: ip,
        scope_id: 0,
    };
    // SAFETY: as in `bind4`.
    unsafe {
        bpf_bind(
            sa(ctx),
            (&raw mut addr).cast::<sockaddr>(),
            core::mem::size_of::<SockaddrIn6>() as i32,
        ) == 0
    }
}
