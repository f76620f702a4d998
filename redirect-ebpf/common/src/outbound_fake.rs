//! The one pod the outbound unit tests decide for (no kernel): it owns [`POD`], and has no
//! excluded interface, CIDR or port rule; what its inbound capture takes is the test's choice.
use crate::{outbound::*, AF_INET};

/// The pod's own (IPv4) address.
pub(crate) const POD: [u8; 4] = [10, 200, 0, 2];

/// [`Lookups`] of the pod.
pub(crate) struct OnePod {
    /// Inbound capture takes every port but this one (`-b '*' -d PORT`); `None`: it takes none.
    pub(crate) inbound_but: Option<u16>,
}

impl Lookups for OnePod {
    fn is_own_addr(&self, c: &Conn) -> bool {
        c.family == AF_INET && c.dst[0] == u32::from_ne_bytes(POD)
    }
    fn via_excluded_nic(&self, _: &Conn) -> bool {
        false
    }
    fn excluded_cidr(&self, _: &Conn) -> bool {
        false
    }
    fn included_cidr(&self, _: &Conn) -> bool {
        false
    }
    fn port_rule(&self, _: &Conn) -> u8 {
        0
    }
    fn tproxy_takes(&self, c: &Conn) -> bool {
        self.inbound_but.is_some_and(|left| c.dport != left)
    }
}
