//! Socket-local state (`SOCK_STATE`, socket storage: it lives and dies with the socket, so no
//! pod can flood it across pods): the original destination of a redirected socket (read by
//! getpeername, recvmsg and, on the proxy's accepted socket, `SO_ORIGINAL_DST`), and the rules
//! for counting a namespace's proxy listeners in `PROXY_LISTENERS`: only a socket the proxy
//! itself bound to the outbound port counts, once when it listens and once back when it
//! closes, so an application looping listen/close on that port changes nothing.
use crate::{
    outbound::{is_proxy, OutboundPolicy},
    OrigDst, PortBe,
};

/// Bound to the namespace's outbound port by the proxy (uid/gid, and cgroup when bound).
pub const SOCK_PROXY_OUTBOUND: u32 = 1;
/// Counted in `PROXY_LISTENERS` (its close counts back).
pub const SOCK_COUNTED: u32 = 2;
/// An application's socket the capture hooks redirected: `orig` is where it meant to go
/// (getpeername, recvmsg), `quota_key` whose hand-off quota it uses.
pub const SOCK_REDIRECTED: u32 = 4;
/// Published a `TRACKED` hand-off entry at `tcp_connect()`: its close removes the entry if the
/// proxy has not claimed it yet.
pub const SOCK_HANDOFF: u32 = 8;
/// The proxy's accepted socket holding the original destination it claimed: what
/// `SO_ORIGINAL_DST` answers.
pub const SOCK_ORIG_DST: u32 = 16;

/// `SOCK_STATE` value.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockState {
    /// `SOCK_*` bits.
    pub flags: u32,
    /// Explicit padding (zero).
    pub _pad: u32,
    /// The original destination (valid with [`SOCK_REDIRECTED`] or [`SOCK_ORIG_DST`]).
    pub orig: OrigDst,
    /// Key of the policy that redirected the socket (netns cookie, or 0 for the default
    /// policy): the `HANDOFFS` counter its hand-off counts in.
    pub quota_key: u64,
}
const _: () = assert!(core::mem::size_of::<SockState>() == 40);

impl SockState {
    /// No flags, no destination.
    pub const ZERO: Self = Self {
        flags: 0,
        _pad: 0,
        orig: OrigDst {
            addr: [0; 4],
            port: PortBe::from_raw(0),
            family: 0,
            _pad: 0,
        },
        quota_key: 0,
    };
}

impl Default for SockState {
    fn default() -> Self {
        Self::ZERO
    }
}

/// Whether a bind of `port` (host order) by `(uid, gid)` marks the socket as the proxy's
/// outbound listener.
#[inline(always)]
pub fn marks_proxy_bind(
    p: &OutboundPolicy,
    port: u16,
    uid: u32,
    gid: u32,
    in_proxy_cgroup: bool,
) -> bool {
    port != 0 && port == p.proxy_port && is_proxy(p, uid, gid, in_proxy_cgroup)
}

/// `listen()` of a socket with `flags`: the new flags when it is to be counted (+1).
#[inline(always)]
pub fn on_listen(flags: u32) -> Option<u32> {
    (flags & SOCK_PROXY_OUTBOUND != 0 && flags & SOCK_COUNTED == 0).then_some(flags | SOCK_COUNTED)
}

/// Close of a listener with `flags`: the new flags when it was counted (-1).
#[inline(always)]
pub fn on_close(flags: u32) -> Option<u32> {
    (flags & SOCK_COUNTED != 0).then_some(flags & !SOCK_COUNTED)
}

/// A redirect of this socket to `orig` under policy `quota_key`: the socket's state after it
/// (the last redirect wins, as a UDP socket may send to several servers).
#[inline(always)]
pub fn redirected(state: &mut SockState, orig: OrigDst, quota_key: u64) {
    state.flags |= SOCK_REDIRECTED;
    state.orig = orig;
    state.quota_key = quota_key;
}

/// Where a redirected application socket meant to go (getpeername, recvmsg).
#[inline(always)]
pub fn redirected_to(state: &SockState) -> Option<OrigDst> {
    (state.flags & SOCK_REDIRECTED != 0).then_some(state.orig)
}

/// Whether a connect to `addr`:`port` (host order) is one the capture hooks already sent to
/// TPROXY mode's inbound port `inbound_port`, keeping the address it dialled: the hooks run a
/// second time for the same connect while an attach scope is switched in place (the pod
/// cgroup's links and the node's both run), and must leave it as the first run made it.
#[inline(always)]
pub fn sent_to_inbound(
    state: &SockState,
    family: u16,
    addr: &[u32; 4],
    port: u16,
    inbound_port: u16,
) -> bool {
    port == inbound_port
        && redirected_to(state)
            .is_some_and(|o| o.family == family && o.addr == *addr && o.port.host() != port)
}

/// What `SO_ORIGINAL_DST` answers on this socket: only a proxy socket that claimed a hand-off.
#[inline(always)]
pub fn original_dst(state: &SockState) -> Option<OrigDst> {
    (state.flags & SOCK_ORIG_DST != 0).then_some(state.orig)
}

/// The proxy's accepted socket claims `dst` (from `TRACKED` or `INBOUND`).
#[inline(always)]
pub fn claim(state: &mut SockState, dst: OrigDst) {
    state.flags |= SOCK_ORIG_DST;
    state.orig = dst;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dst(port: u16) -> OrigDst {
        OrigDst {
            addr: [0x0a00_0001, 0, 0, 0],
            port: PortBe::from_host(port),
            family: crate::AF_INET,
            _pad: 0,
        }
    }

    #[test]
    fn only_the_proxys_marked_listener_counts_once_each_way() {
        assert_eq!(on_listen(0), None, "an application's listener");
        let counted = on_listen(SOCK_PROXY_OUTBOUND).expect("the proxy's");
        assert_eq!(on_listen(counted), None, "counted once");
        assert_eq!(on_close(counted), Some(SOCK_PROXY_OUTBOUND));
        assert_eq!(on_close(SOCK_PROXY_OUTBOUND), None, "never counted: no -1");
        assert_eq!(on_close(0), None);
    }

    #[test]
    fn a_bind_marks_only_the_proxy_on_the_outbound_port() {
        let mut p = OutboundPolicy::ZERO;
        p.proxy_port = 15001;
        p.uids[0] = 1337;
        p.n_uids = 1;
        assert!(marks_proxy_bind(&p, 15001, 1337, 0, false));
        assert!(
            !marks_proxy_bind(&p, 15001, 1000, 1000, false),
            "an application"
        );
        assert!(!marks_proxy_bind(&p, 15006, 1337, 0, false), "another port");
        assert!(
            !marks_proxy_bind(&p, 0, 1337, 0, false),
            "an ephemeral bind"
        );
    }

    #[test]
    fn a_redirected_socket_shows_its_destination_but_never_answers_so_original_dst() {
        let mut s = SockState::ZERO;
        assert_eq!(redirected_to(&s), None);
        redirected(&mut s, dst(53), 7);
        redirected(&mut s, dst(5353), 7);
        assert_eq!(redirected_to(&s), Some(dst(5353)), "the last redirect wins");
        assert_eq!(s.quota_key, 7);
        assert_eq!(original_dst(&s), None, "the application's own socket");
    }

    #[test]
    fn a_second_run_finds_the_connect_already_sent_to_the_inbound_port() {
        let mut s = SockState::ZERO;
        let own = [0x0a00_0001, 0, 0, 0];
        let v4 = crate::AF_INET;
        assert!(
            !sent_to_inbound(&s, v4, &own, 15006, 15006),
            "nothing redirected"
        );
        redirected(&mut s, dst(8080), 7);
        assert!(
            sent_to_inbound(&s, v4, &own, 15006, 15006),
            "8080 sent to 15006"
        );
        assert!(
            !sent_to_inbound(&s, v4, &own, 8080, 15006),
            "the first run's own view"
        );
        assert!(
            !sent_to_inbound(&s, v4, &[0x0a00_0002, 0, 0, 0], 15006, 15006),
            "another address"
        );
        assert!(
            !sent_to_inbound(&s, crate::AF_INET6, &own, 15006, 15006),
            "another family"
        );
        redirected(&mut s, dst(15006), 7);
        assert!(
            !sent_to_inbound(&s, v4, &own, 15006, 15006),
            "a connect dialled to the inbound port itself is decided afresh"
        );
    }

    #[test]
    fn a_claiming_proxy_socket_answers_so_original_dst_and_shows_no_peer() {
        let mut s = SockState::ZERO;
        s.flags = SOCK_PROXY_OUTBOUND;
        claim(&mut s, dst(80));
        assert_eq!(original_dst(&s), Some(dst(80)));
        assert_eq!(
            redirected_to(&s),
            None,
            "getpeername of the proxy's socket is real"
        );
        assert_eq!(
            s.flags & SOCK_PROXY_OUTBOUND,
            SOCK_PROXY_OUTBOUND,
            "marks kept"
        );
    }
}
