//! `cgroup/connect4`: captures outbound IPv4 connects (TCP, and connected UDP for DNS) and
//! rewrites them to the proxy's port on 127.0.0.1 (TPROXY mode's mangle step: on the same
//! address), binding the socket first where [`redirect_common::outbound::target`] says.
use aya_ebpf::{macros::cgroup_sock_addr, programs::SockAddrContext};
use redirect_common::Counter;

use crate::{
    capture::decide_for,
    maps::count,
    sockaddr::{bind4, dest4, set_user4, LOCALHOST_NET},
};

/// Always allows the connect (returns 1); only the destination may change.
#[cgroup_sock_addr(connect4)]
pub(crate) fn redirect_connect4(ctx: SockAddrContext) -> i32 {
    count(capture4::<false>(&ctx));
    1
}

/// The capture decision and rewrite for an IPv4 destination (connect4 and sendmsg4, whose
/// sockets are all UDP: `UDP` says so as a constant, and the TCP rules fold away).
#[inline(never)]
pub(crate) fn capture4<const UDP: bool>(ctx: &SockAddrContext) -> Counter {
    let dst = dest4(ctx, UDP);
    let (counter, target) = decide_for(ctx, &dst);
    if let Some(t) = target {
        // sendmsg4 (`UDP`) may not call bpf_bind, and never binds: the constant removes it.
        if !UDP && t.bind_dst {
            bind4(ctx, dst.addr[0]);
        }
        let ip = if t.keep_addr {
            dst.addr[0]
        } else {
            LOCALHOST_NET
        };
        set_user4(ctx, ip, t.port.to_be());
    }
    counter
}
