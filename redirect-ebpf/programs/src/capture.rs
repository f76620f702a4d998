//! The outbound decision for sock_addr hooks (connect4/6, sendmsg4/6): reads the caller and
//! the namespace's policy, evaluates [`redirect_common::outbound::decide`] with map-backed
//! lookups, and records the original destination in the socket's storage.
use aya_ebpf::{
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_uid_gid,
        generated::{bpf_get_current_ancestor_cgroup_id, bpf_get_netns_cookie},
    },
    maps::lpm_trie::Key,
    programs::SockAddrContext,
    EbpfContext,
};
use aya_log_ebpf::debug;
use redirect_common::{
    inbound::tproxy_takes,
    outbound::{
        decide, proxy_id_elsewhere, target, when_proxy_down, CidrKey, Conn, Lookups,
        OutboundPolicy, Target, Verdict, OUT_PROXY_CGROUP, OUT_TPROXY,
    },
    sock,
    types::PASSTHROUGH_V4,
    AddrKey, Counter, NetnsCookie, OrigDst, PortBe, PortKey, TraceEvent, AF_INET,
};

use crate::maps::{
    count, count_ns, tracing_on, INBOUND_PORTS, NETNS_OUTBOUND, OUT_EXCLUDE, OUT_INCLUDE,
    OUT_PORTS, OUT_ROUTES, POD_ADDRS, SOCK_STATE, TRACE,
};
use crate::readiness::proxy_listens;

/// The namespace's policy and the key its entries are stored under (the netns cookie, or 0
/// for the default policy of `redirect attach`).
#[inline(always)]
pub(crate) fn outbound_policy_of(netns: u64) -> Option<(&'static OutboundPolicy, u64)> {
    // SAFETY: map values live as long as the program run; they are only read.
    unsafe {
        if let Some(p) = NETNS_OUTBOUND.get(netns) {
            return Some((p, netns));
        }
        NETNS_OUTBOUND.get(0).map(|p| (p, 0))
    }
}

/// Map-backed [`Lookups`] for one namespace.
struct Maps {
    /// Real netns cookie (own addresses are stored under it).
    netns: u64,
    /// Where the policy's tries and ports live (the cookie, or 0 for the default policy).
    key: u64,
}

impl Maps {
    #[inline(always)]
    fn cidr(&self, conn: &Conn) -> Key<CidrKey> {
        Key::new(
            CidrKey::LOOKUP_LEN,
            CidrKey::new(self.key, conn.family, conn.dst),
        )
    }
}

impl Lookups for Maps {
    #[inline(always)]
    fn is_own_addr(&self, conn: &Conn) -> bool {
        let key = AddrKey {
            addr: conn.dst,
            family: conn.family,
            _pad: [0; 6],
        };
        // SAFETY: value copied out at once.
        unsafe { POD_ADDRS.get(key) }.is_some_and(|ns| *ns == self.netns)
    }

    #[inline(always)]
    fn via_excluded_nic(&self, conn: &Conn) -> bool {
        OUT_ROUTES.get(self.cidr(conn)).is_some_and(|v| *v != 0)
    }

    #[inline(always)]
    fn excluded_cidr(&self, conn: &Conn) -> bool {
        OUT_EXCLUDE.get(self.cidr(conn)).is_some()
    }

    #[inline(always)]
    fn included_cidr(&self, conn: &Conn) -> bool {
        OUT_INCLUDE.get(self.cidr(conn)).is_some()
    }

    #[inline(always)]
    fn port_rule(&self, conn: &Conn) -> u8 {
        let key = Key::new(PortKey::BITS, PortKey::new(self.key, conn.dport));
        OUT_PORTS.get(key).copied().unwrap_or(0)
    }

    #[inline(always)]
    fn tproxy_takes(&self, conn: &Conn) -> bool {
        let Some(inbound) = crate::inbound::inbound_policy_of(self.netns) else {
            return false;
        };
        let key = Key::new(PortKey::BITS, PortKey::new(self.netns, conn.dport));
        let rule = INBOUND_PORTS.get(key).copied().unwrap_or(0);
        tproxy_takes(&inbound, conn.dport, rule)
    }
}

/// The calling task's uid, gid and whether it runs in the policy's proxy cgroup (false when
/// the policy binds none).
#[inline(always)]
pub(crate) fn caller(policy: &OutboundPolicy) -> (u32, u32, bool) {
    let uid_gid = bpf_get_current_uid_gid();
    let in_proxy_cgroup = policy.flags & OUT_PROXY_CGROUP != 0 && {
        // SAFETY: the helper only reads the current task's cgroup.
        let id =
            unsafe { bpf_get_current_ancestor_cgroup_id(i32::from(policy.proxy_cgroup_level)) };
        id == policy.proxy_cgroup
    };
    (uid_gid as u32, (uid_gid >> 32) as u32, in_proxy_cgroup)
}

/// A destination as the sock_addr hook saw it.
pub(crate) struct Dest {
    /// [`AF_INET`] for IPv4 and v4-mapped, else `AF_INET6`.
    pub family: u16,
    /// TCP (else UDP).
    pub tcp: bool,
    /// Network-order address (IPv4 in word 0).
    pub addr: [u32; 4],
    /// Network-order port.
    pub port: u16,
    /// The socket is bound to 127.0.0.6 / ::6.
    pub passthrough_src: bool,
    /// The socket has a source address already (bound to one, or to 127.0.0.6 / ::6).
    pub bound: bool,
    /// The socket carries the TPROXY mark (read for TCP only).
    pub tproxy_marked: bool,
}

/// Decides for `dst`; when redirecting, records the original destination in the socket's own
/// storage (read by sock_ops, getpeername and recvmsg). Returns the counter and, when
/// redirecting, where to rewrite to ([`target`]).
#[inline(always)]
pub(crate) fn decide_for(ctx: &SockAddrContext, dst: &Dest) -> (Counter, Option<Target>) {
    // SAFETY: bpf_get_netns_cookie accepts a sock_addr context.
    let netns = unsafe { bpf_get_netns_cookie(ctx.as_ptr()) };
    let Some((policy, key)) = outbound_policy_of(netns) else {
        return (Counter::NoPolicy, None);
    };
    // TCP only (a constant in sendmsg4/6, where this folds away).
    if dst.tcp && policy.flags & OUT_TPROXY != 0 && u16::from_be(dst.port) == policy.inbound_port {
        // SAFETY: the socket's own storage (lookup only), copied out at once.
        let state = unsafe { SOCK_STATE.get_ptr_mut(ctx) };
        // SAFETY: as above; null checked first.
        if !state.is_null()
            && sock::sent_to_inbound(
                unsafe { &*state },
                dst.family,
                &dst.addr,
                policy.inbound_port,
                policy.inbound_port,
            )
        {
            // The pod cgroup's run already sent it (an attach scope switch in progress).
            return (Counter::Loopback, None);
        }
    }
    let (uid, gid, in_proxy_cgroup) = caller(policy);
    let conn = Conn {
        family: dst.family,
        tcp: dst.tcp,
        dst: dst.addr,
        dport: u16::from_be(dst.port),
        uid,
        gid,
        passthrough_src: dst.passthrough_src,
        bound: dst.bound,
        in_proxy_cgroup,
        tproxy_marked: dst.tproxy_marked,
    };
    if proxy_id_elsewhere(policy, &conn) {
        count(Counter::ProxyIdElsewhere);
        count_ns(netns, Counter::ProxyIdElsewhere);
    }
    let verdict = decided(redirect_decide(policy, &conn, netns, key));
    // Only a redirect to the outbound port needs the readiness lookup.
    let up = !matches!(verdict, Verdict::Redirect(p, _) if p == policy.proxy_port)
        || proxy_listens(netns);
    let verdict = when_proxy_down(policy, verdict, key != 0, up);
    let to = target(policy, verdict, &conn);
    let (counter, port) = match verdict {
        Verdict::Pass(c) => (c, None),
        Verdict::Redirect(port, c) => {
            let orig = OrigDst {
                addr: dst.addr,
                port: PortBe::from_raw(dst.port),
                family: dst.family,
                _pad: 0,
            };
            debug!(
                ctx,
                "capture: port {} -> loopback:{} uid={}", conn.dport, port, conn.uid
            );
            // Capture even when the state cannot be kept: the proxy then refuses the
            // connection, which is safer than letting it leave the mesh unseen.
            // SAFETY: the socket's own storage, created zeroed when absent; valid for the
            // program run, and the socket is locked while it connects or sends.
            let state = unsafe { SOCK_STATE.get_or_insert_ptr_mut(ctx, None) };
            if state.is_null() {
                (Counter::StateError, Some(port))
            } else {
                // SAFETY: as above.
                sock::redirected(unsafe { &mut *state }, orig, key);
                (c, Some(port))
            }
        }
    };
    count_ns(netns, counter);
    if tracing_on() {
        trace_outbound(netns, &conn, counter, port);
    }
    (counter, to)
}

/// [`decide`] as a BPF global function: the verifier checks it once per program for any
/// arguments, instead of once for every path of each caller that reaches it (the load time).
/// A global function returns only a scalar: the verdict as [`Verdict::to_word`].
#[no_mangle]
#[inline(never)]
pub(crate) extern "C" fn redirect_decide(
    policy: *const OutboundPolicy,
    conn: *const Conn,
    netns: u64,
    key: u64,
) -> u32 {
    // SAFETY: the verifier checks a global function for NULL and valid pointers alike; both
    // are the caller's map value and stack, read only.
    let (Some(policy), Some(conn)) = (unsafe { policy.as_ref() }, unsafe { conn.as_ref() }) else {
        return Verdict::Pass(Counter::NoPolicy).to_word();
    };
    decide(policy, conn, &Maps { netns, key }).to_word()
}

/// The verdict of a [`redirect_decide`] word.
#[inline(always)]
fn decided(word: u32) -> Verdict {
    let (redirect, port, slot) = Verdict::word_parts(word);
    let counter = if slot < Counter::COUNT {
        // SAFETY: slots 0..COUNT are exactly the counters, in order (asserted at compile time
        // in redirect-common), and `Counter` is `repr(u32)`.
        unsafe { core::mem::transmute::<u32, Counter>(slot) }
    } else {
        Counter::NoPolicy
    };
    if redirect {
        Verdict::Redirect(port, counter)
    } else {
        Verdict::Pass(counter)
    }
}

/// Streams one decision to `redirect trace`; dropped silently when the ring is full.
#[inline(never)]
fn trace_outbound(netns: u64, conn: &Conn, counter: Counter, port: Option<u16>) {
    let Some(mut entry) = TRACE.reserve::<TraceEvent>(0) else {
        return;
    };
    let event = TraceEvent {
        netns: NetnsCookie(netns),
        dst: conn.dst,
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        uid: conn.uid,
        gid: conn.gid,
        dport: conn.dport,
        redirect_port: port.unwrap_or(0),
        family: conn.family,
        proto: if conn.tcp { 6 } else { 17 },
        counter: counter as u8,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
        src: [0; 4],
        sport: 0,
        direction: redirect_common::TRACE_OUTBOUND,
        _pad0: 0,
        _pad: [0; 2],
    };
    entry.write(event);
    entry.submit(0);
}

/// True when a network-order IPv4 source is the passthrough address.
#[inline(always)]
pub(crate) fn is_passthrough_v4(src: u32) -> bool {
    src == PASSTHROUGH_V4
}

/// Family constant re-exported for the hooks.
pub(crate) const FAMILY_V4: u16 = AF_INET;
