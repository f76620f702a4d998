//! `cgroup/getsockopt`: answers `SO_ORIGINAL_DST` (SOL_IP, sockaddr_in) and
//! `IP6T_SO_ORIGINAL_DST` (SOL_IPV6, sockaddr_in6) for redirected and steered connections, from
//! the original destination the proxy's accepted socket claimed into its socket storage.
//!
//! Every other (level, optname) pair, and every miss, leaves the kernel's answer untouched.
use aya_ebpf::{bindings::bpf_sockopt, macros::cgroup_sockopt, programs::SockoptContext};
use redirect_common::{sock, types::V4_MAPPED_WORD, Counter, OrigDst, AF_INET, AF_INET6};

use crate::{
    maps::{count, sock_state_of},
    sockaddr_in::{SockaddrIn, SockaddrIn6},
};

const SOL_IP: i32 = 0;
const SOL_IPV6: i32 = 41;
/// `SO_ORIGINAL_DST` and `IP6T_SO_ORIGINAL_DST` share the number 80.
const ORIGINAL_DST: i32 = 80;
const PAGE_SIZE: i32 = 4096;

#[cgroup_sockopt(getsockopt)]
pub(crate) fn redirect_getsockopt(ctx: SockoptContext) -> i32 {
    try_getsockopt(&ctx);
    1
}

fn try_getsockopt(ctx: &SockoptContext) {
    let so = ctx.sockopt;
    // SAFETY: `so` is the kernel-provided context; level/optname/optlen are readable.
    let (level, optname, optlen) = unsafe { ((*so).level, (*so).optname, (*so).optlen) };
    if optname != ORIGINAL_DST || (level != SOL_IP && level != SOL_IPV6) {
        if optlen > PAGE_SIZE {
            // Tell the kernel to hand the caller its own (untruncated) buffer.
            // SAFETY: optlen is writable in getsockopt programs.
            unsafe { core::ptr::write_volatile(&raw mut (*so).optlen, 0) };
        }
        return;
    }
    // SAFETY: reading the socket pointer from the context.
    let sk = unsafe { (*so).__bindgen_anon_1.sk };
    if sk.is_null() {
        return;
    }
    // The proxy's accepted socket claimed its original destination into its own storage.
    // SAFETY: the state is the socket's own, valid for this run; copied out at once.
    let dst = sock_state_of(sk, false).and_then(|s| sock::original_dst(unsafe { &*s }));
    let Some(dst) = dst else {
        count(Counter::OrigDstMiss);
        return;
    };
    let answered = if level == SOL_IP {
        answer_v4(so, &dst)
    } else {
        answer_v6(so, &dst)
    };
    count(if answered {
        Counter::OrigDstHit
    } else {
        Counter::OrigDstMiss
    });
}

/// Bounds of the caller's buffer.
#[inline(always)]
fn buffer(so: *mut bpf_sockopt) -> (*mut u8, *mut u8) {
    // SAFETY: optval/optval_end are the kernel's buffer bounds for this call.
    unsafe {
        (
            (*so).__bindgen_anon_2.optval as *mut u8,
            (*so).__bindgen_anon_3.optval_end as *mut u8,
        )
    }
}

/// Marks the call answered with `len` bytes.
#[inline(always)]
fn set_answer(so: *mut bpf_sockopt, len: usize) {
    // SAFETY: optlen and retval are writable; volatile keeps LLVM from merging the two 4-byte
    // context stores into one 8-byte store, which the verifier rejects.
    unsafe {
        core::ptr::write_volatile(&raw mut (*so).optlen, len as i32);
        core::ptr::write_volatile(&raw mut (*so).retval, 0);
    }
}

fn answer_v4(so: *mut bpf_sockopt, dst: &OrigDst) -> bool {
    if dst.family != AF_INET {
        return false; // an IPv6 destination has no sockaddr_in
    }
    let (optval, end) = buffer(so);
    let len = core::mem::size_of::<SockaddrIn>();
    // SAFETY: pointer arithmetic only; checked against `end` before writing.
    if unsafe { optval.add(len) } > end {
        return false;
    }
    let answer = SockaddrIn {
        family: AF_INET,
        port: dst.port.raw(),
        addr: dst.addr[0],
        zero: [0; 8],
    };
    // SAFETY: bounds checked above. The kernel's buffer may sit at any offset (a small
    // getsockopt uses an on-stack byte buffer), so the write makes no alignment assumption.
    unsafe { core::ptr::write_unaligned(optval as *mut SockaddrIn, answer) };
    set_answer(so, len);
    true
}

fn answer_v6(so: *mut bpf_sockopt, dst: &OrigDst) -> bool {
    let (optval, end) = buffer(so);
    let len = core::mem::size_of::<SockaddrIn6>();
    // SAFETY: pointer arithmetic only; checked against `end` before writing.
    if unsafe { optval.add(len) } > end {
        return false;
    }
    let addr = if dst.family == AF_INET {
        [0, 0, V4_MAPPED_WORD, dst.addr[0]]
    } else {
        dst.addr
    };
    let answer = SockaddrIn6 {
        family: AF_INET6,
        port: dst.port.raw(),
        flowinfo: 0,
        addr,
        scope_id: 0,
    };
    // SAFETY: bounds checked above; no alignment assumed (as for IPv4).
    unsafe { core::ptr::write_unaligned(optval as *mut SockaddrIn6, answer) };
    set_answer(so, len);
    true
}
