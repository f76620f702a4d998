//! `cgroup/connect4`: captures outbound IPv4 TCP connects and rewrites them to the proxy.
use aya_ebpf::{
    helpers::{bpf_get_current_uid_gid, generated::bpf_get_socket_cookie},
    macros::cgroup_sock_addr,
    programs::SockAddrContext,
    EbpfContext,
};
use aya_log_ebpf::{debug, warn};
use redirect_common::{Counter, OrigDst, AF_INET};

use crate::maps::{config, count, excluded_v4, PENDING};

const IPPROTO_TCP: u32 = 6;
/// 127.0.0.1 as `user_ip4` holds it (network byte order read as a little-endian u32).
const LOCALHOST_NET: u32 = u32::from_ne_bytes([127, 0, 0, 1]);

/// Always allows the connect (returns 1); only the destination may change.
#[cgroup_sock_addr(connect4)]
pub fn redirect_connect4(ctx: SockAddrContext) -> i32 {
    let decision = try_connect4(&ctx);
    count(decision);
    1
}

fn try_connect4(ctx: &SockAddrContext) -> Counter {
    let sa = ctx.sock_addr;
    // SAFETY: `sa` is the kernel-provided context; these fields are readable in connect4.
    let (protocol, dst_ip, dst_port) = unsafe { ((*sa).protocol, (*sa).user_ip4, (*sa).user_port) };
    if protocol != IPPROTO_TCP {
        return Counter::NotTcp;
    }
    // First octet of a network-order address is its lowest byte in memory.
    if dst_ip.to_ne_bytes()[0] == 127 {
        return Counter::Loopback;
    }
    let Some(cfg) = config() else {
        return Counter::TrackError;
    };
    let uid_gid = bpf_get_current_uid_gid();
    if uid_gid as u32 == cfg.proxy_uid {
        return Counter::BypassUid;
    }
    if (uid_gid >> 32) as u32 == cfg.proxy_gid {
        return Counter::BypassGid;
    }
    if excluded_v4(dst_ip) {
        return Counter::ExcludedCidr;
    }

    // SAFETY: bpf_get_socket_cookie accepts a sock_addr context.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
    let orig = OrigDst {
        addr: [dst_ip, 0, 0, 0],
        port: dst_port as u16,
        family: AF_INET,
        _pad: 0,
    };
    let tracked = PENDING.insert(cookie, orig, 0).is_ok();
    // SAFETY: user_ip4 and user_port are writable in connect4.
    unsafe {
        (*sa).user_ip4 = LOCALHOST_NET;
        (*sa).user_port = u32::from(cfg.outbound_port.to_be());
    }
    // Capture even when tracking failed: the proxy then refuses the connection, which is
    // safer than letting it leave the mesh unseen.
    let (ip, port) = (u32::from_be(dst_ip), u16::from_be(dst_port as u16));
    if tracked {
        debug!(
            ctx,
            "connect4: {:i}:{} -> 127.0.0.1:{} uid={}", ip, port, cfg.outbound_port, uid_gid as u32
        );
        Counter::Redirected
    } else {
        warn!(
            ctx,
            "connect4: PENDING full, {:i}:{} redirected untracked", ip, port
        );
        Counter::TrackError
    }
}
