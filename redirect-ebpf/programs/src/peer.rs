//! `cgroup/recvmsg4|6` and `cgroup/getpeername4|6`: a redirected socket sees its original
//! destination as the peer (the DNS server as the source of a captured reply; the service, not
//! 127.0.0.1:15001, from getpeername).
use aya_ebpf::{
    helpers::generated::bpf_get_netns_cookie, macros::cgroup_sock_addr, programs::SockAddrContext,
    EbpfContext,
};
use redirect_common::{sock, Counter, OrigDst, AF_INET, AF_INET6};

use crate::{
    capture::outbound_policy_of,
    maps::{count, SOCK_STATE},
    sockaddr::{
        is_mapped, loopback6, set_user4, set_user6, user4, user6, LOCALHOST_NET, MAPPED_WORD,
    },
};

/// Which peer ports a rewrite may replace: DNS only (recvmsg) or any capture port.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ports {
    Dns,
    Any,
}

/// The original destination of this socket, when `port` (host order) is one of the capture
/// ports it could have been sent to.
#[inline(always)]
fn original(ctx: &SockAddrContext, port: u16, which: Ports) -> Option<OrigDst> {
    // SAFETY: the helper accepts a sock_addr context.
    let netns = unsafe { bpf_get_netns_cookie(ctx.as_ptr()) };
    let (policy, _) = outbound_policy_of(netns)?;
    let known = port == policy.dns_port
        || (which == Ports::Any && (port == policy.proxy_port || port == policy.inbound_port));
    if !known {
        return None;
    }
    // SAFETY: the socket's own storage (lookup only), copied out at once.
    let state = unsafe { SOCK_STATE.get_ptr_mut(ctx) };
    if state.is_null() {
        return None;
    }
    // SAFETY: as above.
    sock::redirected_to(unsafe { &*state })
}

/// A redirected socket's peer is loopback, or (getpeername only: TPROXY mode's inbound port
/// keeps the address) its original address on a capture port.
#[inline(always)]
fn restore4(ctx: &SockAddrContext, which: Ports) {
    let (ip, port) = user4(ctx);
    if ip != LOCALHOST_NET && which == Ports::Dns {
        return;
    }
    if let Some(orig) = original(ctx, u16::from_be(port), which) {
        if orig.family == AF_INET && (ip == LOCALHOST_NET || ip == orig.addr[0]) {
            set_user4(ctx, orig.addr[0], orig.port.raw());
            count(Counter::PeerRestored);
        }
    }
}

#[inline(always)]
fn restore6(ctx: &SockAddrContext, which: Ports) {
    let (ip, port) = user6(ctx);
    let mapped = is_mapped(&ip);
    let family = if mapped { AF_INET } else { AF_INET6 };
    let loopback = ip == loopback6(family);
    if !loopback && which == Ports::Dns {
        return;
    }
    let Some(orig) = original(ctx, u16::from_be(port), which) else {
        return;
    };
    if orig.family != family {
        return;
    }
    let addr = if mapped {
        [0, 0, MAPPED_WORD, orig.addr[0]]
    } else {
        orig.addr
    };
    if !loopback && ip != addr {
        return;
    }
    set_user6(ctx, addr, orig.port.raw());
    count(Counter::PeerRestored);
}

#[cgroup_sock_addr(recvmsg4)]
pub(crate) fn redirect_recvmsg4(ctx: SockAddrContext) -> i32 {
    restore4(&ctx, Ports::Dns);
    1
}

#[cgroup_sock_addr(recvmsg6)]
pub(crate) fn redirect_recvmsg6(ctx: SockAddrContext) -> i32 {
    restore6(&ctx, Ports::Dns);
    1
}

#[cgroup_sock_addr(getpeername4)]
pub(crate) fn redirect_getpeername4(ctx: SockAddrContext) -> i32 {
    restore4(&ctx, Ports::Any);
    1
}

#[cgroup_sock_addr(getpeername6)]
pub(crate) fn redirect_getpeername6(ctx: SockAddrContext) -> i32 {
    restore6(&ctx, Ports::Any);
    1
}
