//! `cgroup/connect4`: captures outbound IPv4 connects (TCP, and connected UDP for DNS) and
//! rewrites them to the proxy's port on 127.0.0.1.
use aya_ebpf::{macros::cgroup_sock_addr, programs::SockAddrContext};
use redirect_common::Counter;

use crate::{
    capture::decide_for,
    maps::count,
    sockaddr::{dest4, set_user4, LOCALHOST_NET},
};

/// Always allows the connect (returns 1); only the destination may change.
#[cgroup_sock_addr(connect4)]
pub fn redirect_connect4(ctx: SockAddrContext) -> i32 {
    count(capture4::<false>(&ctx));
    1
}

/// The capture decision and rewrite for an IPv4 destination (connect4 and sendmsg4, whose
/// sockets are all UDP: `UDP` says so as a constant, and the TCP rules fold away).
#[inline(never)]
pub(crate) fn capture4<const UDP: bool>(ctx: &SockAddrContext) -> Counter {
    let (counter, port) = decide_for(ctx, &dest4(ctx, UDP));
    if let Some(port) = port {
        set_user4(ctx, LOCALHOST_NET, port.to_be());
    }
    counter
}
