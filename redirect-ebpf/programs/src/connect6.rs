//! `cgroup/connect6`: captures outbound IPv6 connects (native, following the namespace's IPv6
//! policy, and v4-mapped destinations of dual-stack sockets, following its IPv4 policy), as
//! connect4 does.
use aya_ebpf::{macros::cgroup_sock_addr, programs::SockAddrContext};
use redirect_common::Counter;

use crate::{
    capture::decide_for,
    maps::count,
    sockaddr::{bind6, dest6, is_mapped, loopback6, set_user6, user6},
};

#[cgroup_sock_addr(connect6)]
pub(crate) fn redirect_connect6(ctx: SockAddrContext) -> i32 {
    count(capture6::<false>(&ctx));
    1
}

/// The capture decision and rewrite for an IPv6 destination (connect6 and sendmsg6; `UDP` as
/// in `capture4`). A v4-mapped destination follows the IPv4 policy, a native one the IPv6
/// policy: two subprograms, so the verifier walks each decision with its family known.
#[inline(always)]
pub(crate) fn capture6<const UDP: bool>(ctx: &SockAddrContext) -> Counter {
    if is_mapped(&user6(ctx).0) {
        capture6_family::<UDP, true>(ctx)
    } else {
        capture6_family::<UDP, false>(ctx)
    }
}

#[inline(never)]
fn capture6_family<const UDP: bool, const MAPPED: bool>(ctx: &SockAddrContext) -> Counter {
    let dst = dest6(ctx, UDP, MAPPED);
    let (counter, target) = decide_for(ctx, &dst);
    if let Some(t) = target {
        // As in connect4: sendmsg6 (`UDP`) never binds.
        if !UDP && t.bind_dst {
            bind6(ctx, user6(ctx).0);
        }
        let ip = if t.keep_addr {
            user6(ctx).0
        } else {
            loopback6(dst.family)
        };
        set_user6(ctx, ip, t.port.to_be());
    }
    counter
}
