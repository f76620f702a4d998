//! Socket-local state (`SOCK_STATE`, socket storage: it lives and dies with the socket) and the
//! rules for counting a namespace's proxy listeners in `PROXY_LISTENERS`: only a socket the
//! proxy itself bound to the outbound port counts, once when it listens and once back when it
//! closes, so an application looping listen/close on that port changes nothing.
use crate::outbound::{is_proxy, OutboundPolicy};

/// Bound to the namespace's outbound port by the proxy (uid/gid, and cgroup when bound).
pub const SOCK_PROXY_OUTBOUND: u32 = 1;
/// Counted in `PROXY_LISTENERS` (its close counts back).
pub const SOCK_COUNTED: u32 = 2;

/// `SOCK_STATE` value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockState {
    /// `SOCK_*` bits.
    pub flags: u32,
    /// Explicit padding (zero).
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<SockState>() == 8);

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
