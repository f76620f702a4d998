//! The map-backed lookups of [`redirect_common::inbound::decide`] for sk_lookup (the inbound
//! counterpart of `capture.rs`).
use aya_ebpf::maps::lpm_trie::Key;
use redirect_common::{
    inbound::{InboundConn, InboundPolicy, Lookups},
    AddrKey, IfKey, NetnsCookie, PortKey,
};

use crate::maps::{IFACES, INBOUND_PORTS, LOCAL_CONNECTS, NETNS_INBOUND, POD_ADDRS};

/// The namespace owning local address `addr` (`POD_ADDRS`), if it is enrolled.
#[inline(always)]
pub(crate) fn netns_of(family: u16, addr: [u32; 4]) -> Option<u64> {
    let key = AddrKey {
        addr,
        family,
        _pad: [0; 6],
    };
    // SAFETY: value copied out at once.
    unsafe { POD_ADDRS.get(key) }.copied()
}

/// The namespace's inbound policy (`NETNS_INBOUND`), if it has one.
#[inline(always)]
pub(crate) fn inbound_policy_of(netns: u64) -> Option<InboundPolicy> {
    // SAFETY: value copied out at once.
    unsafe { NETNS_INBOUND.get(netns) }.copied()
}

/// Map-backed [`Lookups`]: every key carries the connection's netns cookie.
pub(crate) struct Maps;

impl Lookups for Maps {
    #[inline(always)]
    fn remote_is_own(&self, conn: &InboundConn) -> bool {
        netns_of(conn.family, conn.remote) == Some(conn.netns)
    }

    #[inline(always)]
    fn local_connect(&self, conn: &InboundConn) -> bool {
        // SAFETY: only the presence of the value is read.
        unsafe { LOCAL_CONNECTS.get(conn.key()) }.is_some()
    }

    #[inline(always)]
    fn exempt_interface(&self, conn: &InboundConn) -> bool {
        let key = IfKey {
            netns: NetnsCookie(conn.netns),
            ifindex: conn.ifindex,
            _pad: 0,
        };
        // SAFETY: only the presence of the value is read.
        unsafe { IFACES.get(key) }.is_some()
    }

    #[inline(always)]
    fn port_rule(&self, conn: &InboundConn) -> u8 {
        let key = Key::new(PortKey::BITS, PortKey::new(conn.netns, conn.local_port));
        INBOUND_PORTS.get(key).copied().unwrap_or(0)
    }
}
