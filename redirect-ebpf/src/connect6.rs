//! `cgroup/connect6`: captures IPv4 destinations reached through dual-stack (AF_INET6)
//! sockets as v4-mapped addresses, which would otherwise bypass connect4 and leave the mesh.
//! Native IPv6 destinations are left alone and counted (`ipv6_untouched`).
use aya_ebpf::{macros::cgroup_sock_addr, programs::SockAddrContext};
use redirect_common::Counter;

use crate::{
    capture::{decide_v4, Verdict},
    connect4::{IPPROTO_TCP, LOCALHOST_NET},
    maps::count,
};

/// Word 2 of a v4-mapped address (`::ffff:0:0/96`) in network order.
const MAPPED_WORD: u32 = u32::from_ne_bytes([0, 0, 0xff, 0xff]);

#[cgroup_sock_addr(connect6)]
pub fn redirect_connect6(ctx: SockAddrContext) -> i32 {
    count(try_connect6(&ctx));
    1
}

fn try_connect6(ctx: &SockAddrContext) -> Counter {
    let sa = ctx.sock_addr;
    // Volatile loads and stores keep every context access a plain 4-byte access at a
    // constant offset, as the verifier requires.
    // SAFETY: `sa` is the kernel-provided context; these fields are readable in connect6.
    let rd = |p: *const u32| unsafe { core::ptr::read_volatile(p) };
    // SAFETY: field addresses of the context, read through `rd`.
    let (protocol, w0, w1, w2, w3, dst_port) = unsafe {
        let ip = &raw const (*sa).user_ip6;
        (
            rd(&raw const (*sa).protocol),
            rd(&raw const (*ip)[0]),
            rd(&raw const (*ip)[1]),
            rd(&raw const (*ip)[2]),
            rd(&raw const (*ip)[3]),
            rd(&raw const (*sa).user_port),
        )
    };
    if protocol != IPPROTO_TCP {
        return Counter::NotTcp;
    }
    if w0 != 0 || w1 != 0 || w2 != MAPPED_WORD {
        return Counter::Ipv6Untouched;
    }
    match decide_v4(ctx, w3, dst_port as u16) {
        Verdict::Leave(c) => c,
        Verdict::Redirect(port, c) => {
            // ::ffff:127.0.0.1 on the proxy's port; the proxy's IPv4 listener accepts it.
            // SAFETY: user_ip6 words and user_port are writable in connect6.
            unsafe {
                let ip = &raw mut (*sa).user_ip6;
                core::ptr::write_volatile(&raw mut (*ip)[3], LOCALHOST_NET);
                core::ptr::write_volatile(&raw mut (*sa).user_port, u32::from(port.to_be()));
            }
            c
        }
    }
}
