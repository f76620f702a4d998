//! The per-namespace inbound policy and the one decision function that evaluates it, shared by
//! the sk_lookup hook and the host tests so both answer from the same code.
//!
//! The decision walks istio-iptables' nat `PREROUTING` / `ISTIO_INBOUND` chain (REDIRECT mode)
//! for a connection arriving at one of an enrolled namespace's own addresses, with the map
//! lookups it needs (port rules, interfaces, the namespace's addresses) behind [`Lookups`] so
//! the kernel side does them lazily, in rule order.
use crate::{ConnKey, Counter, NetnsCookie};

/// [`InboundPolicy::flags`]: capture every port (`-b '*'`) instead of only the listed ones.
pub const INBOUND_ALL_PORTS: u16 = 1;
/// [`InboundPolicy::flags`]: with no listener, let connections reach the application.
pub const INBOUND_NO_LISTENER_PASSTHROUGH: u16 = 2;

/// [`InboundPolicy::flags`]: TPROXY mode (`-m TPROXY`). Every connection made inside the
/// pod is left alone, whatever its source: the proxy's transparent connection to the
/// application comes from the client's address (Istio's mangle `ISTIO_INBOUND`: `-m mark
/// --mark 1337 -j RETURN`, `-i lo -m mark ! --mark 1338 -j RETURN`).
pub const INBOUND_TPROXY: u16 = 4;

/// [`InboundConn::ifindex`] when the arrival interface is not known: the sk_lookup program
/// for kernels without `ingress_ifindex` (before 5.17). The kernel numbers interfaces from 1,
/// so no interface rule (`-c`, `-k`) ever matches it; policies with such rules are refused by
/// the loader on those kernels.
pub const IFINDEX_UNKNOWN: u32 = 0;

/// `INBOUND_PORTS` value: the port is in the `-d` list (never captured).
pub const PORT_EXCLUDED: u8 = 1;
/// `INBOUND_PORTS` value: the port is in the `-b` list.
pub const PORT_INCLUDED: u8 = 2;

/// Inbound capture policy of one enrolled network namespace (value of `NETNS_INBOUND`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InboundPolicy {
    /// The proxy's inbound listener port (istio-iptables -z, 15006), host order.
    pub inbound_port: u16,
    /// The tunnel port never captured (istio-iptables -e, 15008), host order.
    pub tunnel_port: u16,
    /// `INBOUND_*` flags.
    pub flags: u16,
    /// Explicit padding; always zero.
    pub _pad: u16,
}

const _: () = assert!(core::mem::size_of::<InboundPolicy>() == 8);

impl InboundPolicy {
    #[inline(always)]
    fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// A connection attempt (a TCP SYN, or a UDP datagram) arriving at an enrolled namespace's
/// own address, as sk_lookup sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InboundConn {
    /// The namespace the local address belongs to (`POD_ADDRS[local]`).
    pub netns: u64,
    /// [`crate::AF_INET`] or [`crate::AF_INET6`].
    pub family: u16,
    /// TCP (else another protocol: never captured).
    pub tcp: bool,
    /// Local (destination) address, network order (IPv4 in word 0).
    pub local: [u32; 4],
    /// Local (destination) port, host order.
    pub local_port: u16,
    /// Remote (source) address, network order (IPv4 in word 0).
    pub remote: [u32; 4],
    /// Remote (source) port, host order.
    pub remote_port: u16,
    /// Index of the interface the packet arrived on, in the namespace, or
    /// [`IFINDEX_UNKNOWN`].
    pub ifindex: u32,
}

impl InboundConn {
    /// The connection's key in `INBOUND` and `LOCAL_CONNECTS`, as the connecting side writes
    /// it: client = the remote end, server = the local (original destination) end.
    #[inline(always)]
    pub fn key(&self) -> ConnKey {
        ConnKey {
            netns: NetnsCookie(self.netns),
            client_addr: self.remote,
            server_addr: self.local,
            client_port: self.remote_port,
            server_port: self.local_port,
            family: self.family,
            _pad: 0,
        }
    }
}

/// What the kernel would look up for a connection; lazily, in the order the rules need them.
pub trait Lookups {
    /// The remote address is one of the same namespace's own addresses (`POD_ADDRS`).
    fn remote_is_own(&self, conn: &InboundConn) -> bool;
    /// The connection was made inside the namespace: sock_ops recorded its connect
    /// (`LOCAL_CONNECTS`) before the SYN left. A SYN from the wire has no such record, whatever
    /// source it claims.
    fn local_connect(&self, conn: &InboundConn) -> bool;
    /// The arrival interface is a `-c` or `-k` interface of the namespace (`IFACES`).
    fn exempt_interface(&self, conn: &InboundConn) -> bool;
    /// `INBOUND_PORTS` value of the local port: [`PORT_EXCLUDED`], [`PORT_INCLUDED`] or 0.
    fn port_rule(&self, conn: &InboundConn) -> u8;
}

/// The decision for one inbound connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Captured: steer it to the proxy's inbound listener (see [`without_listener`]).
    Steer,
    /// Left to the normal socket lookup; the counter names the rule that returned.
    Pass(Counter),
    /// Left to the normal socket lookup and not counted: not TCP, or the inbound port itself
    /// (the proxy's own listener, reached directly).
    Ignore,
}

/// What a captured connection gets when the namespace's proxy has no inbound listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoListener {
    /// Dropped in the lookup: the client gets a RST, like a REDIRECT to a closed port.
    Refuse,
    /// The normal lookup: the application answers directly.
    Passthrough,
}

mod decide;
pub use decide::{decide, is_loopback, is_passthrough, tproxy_takes, without_listener};
