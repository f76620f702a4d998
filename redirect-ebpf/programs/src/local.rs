//! sock_ops' record of the connects a pod makes to its own addresses (`LOCAL_CONNECTS`): the
//! proof sk_lookup needs before it exempts a passthrough (`127.0.0.6` / `::6`), loopback or
//! own-address source, which a SYN from the wire could claim too. An entry lives from
//! `TCP_CONNECT_CB` (before the SYN leaves) until the socket leaves `SYN_SENT`, so SYN
//! retransmits find it, and counts against its namespace's quota (`LOCAL_COUNTS`,
//! `--quota-handshakes`). A connect that cannot be recorded is captured (fail closed).
use aya_ebpf::{bindings::BPF_SOCK_OPS_STATE_CB_FLAG, programs::SockOpsContext};
use redirect_common::{tracking, Counter};

use crate::{
    inbound::{inbound_policy_of, netns_of},
    maps::{count, count_ns, LOCAL_CONNECTS, LOCAL_COUNTS},
    quota::{quota_add, quota_sub},
    sock_ops_ctx::{key_as_client, ops_addrs, ops_cookie},
};

/// `TCP_CONNECT_CB` of a socket the capture hooks did not redirect: records a connect to one
/// of its own namespace's addresses (of a namespace with inbound capture). True when the
/// connect was one (recorded or not).
#[inline(always)]
pub(crate) fn record_local_connect(ctx: &SockOpsContext) -> bool {
    let key = key_as_client(ctx);
    let ns = key.netns.0;
    if netns_of(key.family, key.server_addr) != Some(ns) || inbound_policy_of(ns).is_none() {
        return false;
    }
    // SAFETY: value read at once.
    if unsafe { LOCAL_CONNECTS.get(key) }.is_some_and(|c| *c == ops_cookie(ctx)) {
        // Recorded by the pod cgroup's run of an attach scope switch.
        return true;
    }
    if !quota_add(&LOCAL_COUNTS, ns) {
        refused(ns);
        return true;
    }
    if LOCAL_CONNECTS.insert(key, ops_cookie(ctx), 0).is_err() {
        quota_sub(&LOCAL_COUNTS, ns);
        refused(ns);
        return true;
    }
    // Without the state callback the entry would never go: take it back at once.
    if ctx
        .set_cb_flags((ctx.cb_flags() | BPF_SOCK_OPS_STATE_CB_FLAG) as i32)
        .is_err()
    {
        if LOCAL_CONNECTS.remove(key).is_ok() {
            quota_sub(&LOCAL_COUNTS, ns);
        }
        refused(ns);
    }
    true
}

/// `STATE_CB` out of `SYN_SENT`: the handshake is over (or failed), no SYN of this connection
/// will reach sk_lookup again; its record goes. Only the delete that wins counts back. A
/// connect to loopback (every redirected one) was never recorded: no lookup at all.
#[inline(always)]
pub(crate) fn forget_local_connect(ctx: &SockOpsContext) {
    let (family, _, remote) = ops_addrs(ctx);
    if !tracking::may_hold_local_record(family, &remote) {
        return;
    }
    let key = key_as_client(ctx);
    if LOCAL_CONNECTS.remove(key).is_ok() {
        quota_sub(&LOCAL_COUNTS, key.netns.0);
    }
}

#[inline(always)]
fn refused(ns: u64) {
    count(Counter::LocalQuota);
    count_ns(ns, Counter::LocalQuota);
}
