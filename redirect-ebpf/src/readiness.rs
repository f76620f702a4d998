//! Whether each namespace's proxy listens on its outbound port, from sock_ops: a listener
//! counts up at `TCP_LISTEN_CB` and down when it closes. The capture hooks read it to treat
//! applications that start before their proxy (refuse or pass through, per policy).
use aya_ebpf::{bindings::BPF_SOCK_OPS_STATE_CB_FLAG, programs::SockOpsContext};

use crate::maps::{NETNS_OUTBOUND, PROXY_LISTENERS};

/// `TCP_LISTEN` in the kernel's state numbering.
pub const TCP_LISTEN: u32 = 10;

#[inline(always)]
fn is_outbound_port(netns: u64, port: u16) -> bool {
    // SAFETY: value read at once.
    unsafe { NETNS_OUTBOUND.get(netns) }.is_some_and(|p| p.proxy_port == port)
}

#[inline(always)]
fn add(netns: u64, delta: i32) {
    if let Some(n) = PROXY_LISTENERS.get_ptr_mut(netns) {
        // SAFETY: a map value valid for the program run. Not atomic (the BPF target has no
        // atomics in core): listen() and close of a proxy's listeners are rare and, in one
        // namespace, practically never concurrent on two CPUs.
        unsafe {
            if delta > 0 {
                *n += 1;
            } else if *n > 0 {
                *n -= 1;
            }
        }
    } else if delta > 0 {
        let _ = PROXY_LISTENERS.insert(netns, 1, 0);
    }
}

/// `TCP_LISTEN_CB`: a listener on the namespace's outbound port counts, and is watched.
#[inline(always)]
pub fn on_listen(ctx: &SockOpsContext, netns: u64) {
    if is_outbound_port(netns, ctx.local_port() as u16) {
        add(netns, 1);
        let _ = ctx.set_cb_flags((ctx.cb_flags() | BPF_SOCK_OPS_STATE_CB_FLAG) as i32);
    }
}

/// `STATE_CB` LISTEN -> CLOSE of a watched listener.
#[inline(always)]
pub fn on_listener_close(ctx: &SockOpsContext, netns: u64) {
    if is_outbound_port(netns, ctx.local_port() as u16) {
        add(netns, -1);
    }
}

/// True when something listens on the namespace's outbound port.
#[inline(always)]
pub fn proxy_listens(netns: u64) -> bool {
    // SAFETY: value read at once.
    unsafe { PROXY_LISTENERS.get(netns) }.is_some_and(|n| *n > 0)
}
