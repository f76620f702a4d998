//! The outbound capture decision for an IPv4 destination, shared by connect4 and connect6
//! (v4-mapped destinations of dual-stack sockets).
use aya_ebpf::{
    helpers::{bpf_get_current_uid_gid, generated::bpf_get_socket_cookie},
    programs::SockAddrContext,
    EbpfContext,
};
use aya_log_ebpf::{debug, warn};
use redirect_common::{Counter, OrigDst, AF_INET};

use crate::maps::{config, excluded_v4, PENDING};

/// What to do with a connect.
pub enum Verdict {
    /// Leave the destination alone, counted under this counter.
    Leave(Counter),
    /// Rewrite the destination to 127.0.0.1 on this port (host order), counted.
    Redirect(u16, Counter),
}

/// Decides for a TCP connect to `dst_ip:dst_port` (both network order) and, when capturing,
/// records the original destination under the socket's cookie.
#[inline(always)]
pub fn decide_v4(ctx: &SockAddrContext, dst_ip: u32, dst_port: u16) -> Verdict {
    // First octet of a network-order address is its lowest byte in memory.
    if dst_ip.to_ne_bytes()[0] == 127 {
        return Verdict::Leave(Counter::Loopback);
    }
    let Some(cfg) = config() else {
        return Verdict::Leave(Counter::TrackError);
    };
    let uid_gid = bpf_get_current_uid_gid();
    if uid_gid as u32 == cfg.proxy_uid {
        return Verdict::Leave(Counter::BypassUid);
    }
    if (uid_gid >> 32) as u32 == cfg.proxy_gid {
        return Verdict::Leave(Counter::BypassGid);
    }
    if excluded_v4(dst_ip) {
        return Verdict::Leave(Counter::ExcludedCidr);
    }
    // SAFETY: bpf_get_socket_cookie accepts a sock_addr context.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
    let orig = OrigDst {
        addr: [dst_ip, 0, 0, 0],
        port: dst_port,
        family: AF_INET,
        _pad: 0,
    };
    let (ip, port) = (u32::from_be(dst_ip), u16::from_be(dst_port));
    // Capture even when tracking failed: the proxy then refuses the connection, which is
    // safer than letting it leave the mesh unseen.
    if PENDING.insert(cookie, orig, 0).is_ok() {
        debug!(
            ctx,
            "capture: {:i}:{} -> 127.0.0.1:{} uid={}", ip, port, cfg.outbound_port, uid_gid as u32
        );
        Verdict::Redirect(cfg.outbound_port, Counter::Redirected)
    } else {
        warn!(
            ctx,
            "capture: PENDING full, {:i}:{} redirected untracked", ip, port
        );
        Verdict::Redirect(cfg.outbound_port, Counter::TrackError)
    }
}
