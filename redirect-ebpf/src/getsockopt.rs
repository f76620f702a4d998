//! `cgroup/getsockopt`: answers `getsockopt(SOL_IP, SO_ORIGINAL_DST)` for redirected connections.
//!
//! Every other (level, optname) pair, and every miss, leaves the kernel's answer untouched.
use aya_ebpf::{
    helpers::generated::bpf_get_netns_cookie, macros::cgroup_sockopt, programs::SockoptContext,
    EbpfContext,
};
use redirect_common::{ConnKey, Counter, AF_INET};

use crate::maps::{count, TRACKED};

const SOL_IP: i32 = 0;
const SO_ORIGINAL_DST: i32 = 80;
const PAGE_SIZE: i32 = 4096;

/// `struct sockaddr_in` as the kernel writes it.
#[repr(C)]
struct SockaddrIn {
    family: u16,
    port: u16,
    addr: u32,
    zero: [u8; 8],
}
const SOCKADDR_IN_LEN: usize = core::mem::size_of::<SockaddrIn>();
const _: () = assert!(SOCKADDR_IN_LEN == 16);

#[cgroup_sockopt(getsockopt)]
pub fn redirect_getsockopt(ctx: SockoptContext) -> i32 {
    try_getsockopt(&ctx);
    1
}

fn try_getsockopt(ctx: &SockoptContext) {
    let so = ctx.sockopt;
    // SAFETY: `so` is the kernel-provided context; level/optname/optlen are readable.
    let (level, optname, optlen) = unsafe { ((*so).level, (*so).optname, (*so).optlen) };
    if level != SOL_IP || optname != SO_ORIGINAL_DST {
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
    // SAFETY: `sk` is a valid bpf_sock for the duration of the program.
    let (family, src_ip, src_port, dst_ip, dst_port) = unsafe {
        (
            (*sk).family,
            (*sk).src_ip4,
            (*sk).src_port,
            (*sk).dst_ip4,
            (*sk).dst_port,
        )
    };
    if family != u32::from(AF_INET) {
        return;
    }
    let key = ConnKey {
        // SAFETY: bpf_get_netns_cookie accepts a sockopt context.
        netns: unsafe { bpf_get_netns_cookie(ctx.as_ptr()) },
        client_addr: [dst_ip, 0, 0, 0],
        server_addr: [src_ip, 0, 0, 0],
        client_port: u16::from_be(dst_port),
        server_port: src_port as u16,
        family: AF_INET,
        _pad: 0,
    };
    let Some(entry) = TRACKED.get_ptr(key) else {
        count(Counter::OrigDstMiss);
        return;
    };
    // SAFETY: map value pointer valid for this run; copied out at once.
    let dst = unsafe { (*entry).dst };

    // SAFETY: optval/optval_end are the kernel's buffer bounds for this call.
    let (optval, optval_end) = unsafe {
        (
            (*so).__bindgen_anon_2.optval as *mut u8,
            (*so).__bindgen_anon_3.optval_end as *mut u8,
        )
    };
    // SAFETY: pointer arithmetic only; checked against optval_end before any write.
    if unsafe { optval.add(SOCKADDR_IN_LEN) } > optval_end {
        // Caller's buffer is smaller than a sockaddr_in: leave the kernel's answer.
        count(Counter::OrigDstMiss);
        return;
    }
    let answer = SockaddrIn {
        family: AF_INET,
        port: dst.port,
        addr: dst.addr[0],
        zero: [0; 8],
    };
    // SAFETY: bounds checked above; the buffer is at least 16 bytes and kmalloc-aligned.
    // Volatile stores keep LLVM from merging optlen and retval into one 8-byte context
    // store, which the verifier rejects.
    unsafe {
        core::ptr::write(optval as *mut SockaddrIn, answer);
        core::ptr::write_volatile(&raw mut (*so).optlen, SOCKADDR_IN_LEN as i32);
        core::ptr::write_volatile(&raw mut (*so).retval, 0);
    }
    count(Counter::OrigDstHit);
}
