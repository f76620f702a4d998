//! Whether each namespace's proxy listens on its outbound port, from sock_ops: a listener the
//! proxy itself bound (marked in `SOCK_STATE` by the bind hooks) counts up at `TCP_LISTEN_CB`
//! and back down when it closes, atomically (a u64: the BPF target's atomic width); anyone else's
//! listener on that port counts
//! nothing. The capture hooks read it to treat applications that start before their proxy
//! (refuse or pass through, per policy).
use core::intrinsics::{atomic_xadd, AtomicOrdering};

use aya_ebpf::{
    bindings::{BPF_NOEXIST, BPF_SOCK_OPS_STATE_CB_FLAG},
    programs::SockOpsContext,
};
use redirect_common::sock;

use crate::maps::{sock_state, PROXY_LISTENERS};

/// `TCP_LISTEN` in the kernel's state numbering.
pub(crate) const TCP_LISTEN: u32 = 10;

#[inline(always)]
fn add(netns: u64, up: bool) {
    let slot = match PROXY_LISTENERS.get_ptr_mut(netns) {
        Some(n) => n,
        None if up => {
            // The first listener of the namespace; a concurrent first insert makes this one
            // fail, and it then counts into the winner's entry.
            if PROXY_LISTENERS
                .insert(netns, 1, u64::from(BPF_NOEXIST))
                .is_ok()
            {
                return;
            }
            match PROXY_LISTENERS.get_ptr_mut(netns) {
                Some(n) => n,
                None => return,
            }
        }
        None => return,
    };
    // SAFETY: a map value valid for the program run, updated only atomically (a BPF atomic
    // add; core's atomic types offer no read-modify-write on this target, the intrinsic does).
    // The result is unused, so it compiles to the plain `lock +=` every kernel here accepts.
    unsafe {
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(slot, if up { 1 } else { u64::MAX });
    }
}

/// `TCP_LISTEN_CB`: the proxy's marked listener counts once, and is watched until it closes.
#[inline(always)]
pub(crate) fn count_proxy_listener(ctx: &SockOpsContext, netns: u64) {
    let Some(state) = sock_state(ctx, false) else {
        return;
    };
    // SAFETY: the socket's own storage, valid for the program run; a socket's callbacks run
    // under its lock, one at a time.
    let state = unsafe { &mut *state };
    if let Some(flags) = sock::on_listen(state.flags) {
        state.flags = flags;
        add(netns, true);
        let _ = ctx.set_cb_flags((ctx.cb_flags() | BPF_SOCK_OPS_STATE_CB_FLAG) as i32);
    }
}

/// `STATE_CB` LISTEN -> CLOSE: a counted listener counts back.
#[inline(always)]
pub(crate) fn uncount_proxy_listener(ctx: &SockOpsContext, netns: u64) {
    let Some(state) = sock_state(ctx, false) else {
        return;
    };
    // SAFETY: as in `count_proxy_listener`.
    let state = unsafe { &mut *state };
    if let Some(flags) = sock::on_close(state.flags) {
        state.flags = flags;
        add(netns, false);
    }
}

/// True when the proxy listens on the namespace's outbound port.
#[inline(always)]
pub(crate) fn proxy_listens(netns: u64) -> bool {
    // SAFETY: value read at once.
    unsafe { PROXY_LISTENERS.get(netns) }.is_some_and(|n| *n > 0)
}
