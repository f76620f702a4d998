//! `cgroup/connect6`: captures outbound IPv6 connects (native, following the namespace's IPv6
//! policy, and v4-mapped destinations of dual-stack sockets, following its IPv4 policy).
use aya_ebpf::{macros::cgroup_sock_addr, programs::SockAddrContext};
use redirect_common::Counter;

use crate::{
    capture::decide_for,
    maps::count,
    sockaddr::{dest6, loopback6, set_user6},
};

#[cgroup_sock_addr(connect6)]
pub fn redirect_connect6(ctx: SockAddrContext) -> i32 {
    count(capture6(&ctx));
    1
}

/// The capture decision and rewrite for an IPv6 destination (connect6 and sendmsg6).
pub(crate) fn capture6(ctx: &SockAddrContext) -> Counter {
    let dst = dest6(ctx);
    let (counter, port) = decide_for(ctx, &dst);
    if let Some(port) = port {
        set_user6(ctx, loopback6(dst.family), port.to_be());
    }
    counter
}
