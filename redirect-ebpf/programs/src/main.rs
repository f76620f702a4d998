//! BPF object for redirect: one module per hook, shared maps in `maps`.
#![no_std]
#![no_main]
// `atomic_xadd`: the BPF target has no atomic read-modify-write in core::sync::atomic.
#![allow(internal_features)]
#![feature(core_intrinsics)]

mod bind;
mod capture;
mod connect4;
mod connect6;
mod getsockopt;
mod inbound;
mod local;
mod maps;
mod peer;
mod quota;
mod readiness;
mod sendmsg;
mod sk_lookup;
mod sock_ops;
mod sock_ops_ctx;
mod sockaddr;
mod sockaddr_in;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any reachable panic path, so this is never executed.
    loop {}
}

/// The kernel refuses helpers such as bpf_get_netns_cookie for programs that are not GPL.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
