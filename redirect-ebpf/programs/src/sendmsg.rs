//! `cgroup/sendmsg4` / `sendmsg6`: unconnected UDP datagrams, decided exactly like connects.
//! The only UDP the policy captures is DNS (`--redirect-dns`): rewritten to the DNS capture port
//! on loopback, the server kept in the socket's storage for recvmsg. These hooks only see UDP
//! sockets, so the decision is compiled for UDP (its TCP rules fold away).
use aya_ebpf::{macros::cgroup_sock_addr, programs::SockAddrContext};

use crate::{connect4::capture4, connect6::capture6, maps::count};

#[cgroup_sock_addr(sendmsg4)]
pub(crate) fn redirect_sendmsg4(ctx: SockAddrContext) -> i32 {
    count(capture4::<true>(&ctx));
    1
}

#[cgroup_sock_addr(sendmsg6)]
pub(crate) fn redirect_sendmsg6(ctx: SockAddrContext) -> i32 {
    count(capture6::<true>(&ctx));
    1
}
