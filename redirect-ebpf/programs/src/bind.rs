//! `cgroup/bind4`, `bind6`: a socket the namespace's proxy binds to its outbound port is marked
//! in `SOCK_STATE`, so sock_ops counts only the proxy's own listeners in `PROXY_LISTENERS`
//! (sock_ops cannot see the caller's uid; a bind runs in the caller's context and can).
use aya_ebpf::{
    helpers::generated::bpf_get_netns_cookie, macros::cgroup_sock_addr, programs::SockAddrContext,
    EbpfContext as _,
};
use redirect_common::sock::{marks_proxy_bind, SOCK_PROXY_OUTBOUND};

use crate::{
    capture::{caller, outbound_policy_of},
    maps::SOCK_STATE,
    sockaddr::user_port,
};

/// Always allows the bind (returns 1).
#[cgroup_sock_addr(bind4)]
pub(crate) fn redirect_bind4(ctx: SockAddrContext) -> i32 {
    mark(&ctx);
    1
}

/// Always allows the bind (returns 1).
#[cgroup_sock_addr(bind6)]
pub(crate) fn redirect_bind6(ctx: SockAddrContext) -> i32 {
    mark(&ctx);
    1
}

#[inline(always)]
fn mark(ctx: &SockAddrContext) {
    // SAFETY: bpf_get_netns_cookie accepts a sock_addr context.
    let netns = unsafe { bpf_get_netns_cookie(ctx.as_ptr()) };
    let Some((policy, _)) = outbound_policy_of(netns) else {
        return;
    };
    let port = user_port(ctx);
    let (uid, gid, in_proxy_cgroup) = caller(policy);
    if !marks_proxy_bind(policy, port, uid, gid, in_proxy_cgroup) {
        return;
    }
    // SAFETY: the bound socket's own storage, created zeroed when absent.
    let state = unsafe { SOCK_STATE.get_or_insert_ptr_mut(ctx, None) };
    if !state.is_null() {
        // SAFETY: valid for the program run; the socket is locked while it binds.
        unsafe { (*state).flags |= SOCK_PROXY_OUTBOUND };
    }
}
