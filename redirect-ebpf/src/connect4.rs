//! `cgroup/connect4`: captures outbound IPv4 TCP connects and rewrites them to the proxy.
use aya_ebpf::{macros::cgroup_sock_addr, programs::SockAddrContext};
use redirect_common::Counter;

use crate::{
    capture::{decide_v4, Verdict},
    maps::count,
};

pub(crate) const IPPROTO_TCP: u32 = 6;
/// 127.0.0.1 as `user_ip4` holds it (network byte order read as a little-endian u32).
pub(crate) const LOCALHOST_NET: u32 = u32::from_ne_bytes([127, 0, 0, 1]);

/// Always allows the connect (returns 1); only the destination may change.
#[cgroup_sock_addr(connect4)]
pub fn redirect_connect4(ctx: SockAddrContext) -> i32 {
    count(try_connect4(&ctx));
    1
}

fn try_connect4(ctx: &SockAddrContext) -> Counter {
    let sa = ctx.sock_addr;
    // SAFETY: `sa` is the kernel-provided context; these fields are readable in connect4.
    let (protocol, dst_ip, dst_port) = unsafe { ((*sa).protocol, (*sa).user_ip4, (*sa).user_port) };
    if protocol != IPPROTO_TCP {
        return Counter::NotTcp;
    }
    match decide_v4(ctx, dst_ip, dst_port as u16) {
        Verdict::Leave(c) => c,
        Verdict::Redirect(port, c) => {
            // SAFETY: user_ip4 and user_port are writable in connect4.
            unsafe {
                (*sa).user_ip4 = LOCALHOST_NET;
                (*sa).user_port = u32::from(port.to_be());
            }
            c
        }
    }
}
