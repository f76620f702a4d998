//! `#[repr(C)]` types shared by the BPF programs and the user-space loader: map keys, values, config.
#![no_std]

mod counter;
pub mod inbound;
pub mod outbound;
pub mod sock;
pub mod tracking;
pub mod types;

pub use counter::Counter;
pub use inbound::{
    InboundPolicy, INBOUND_ALL_PORTS, INBOUND_NO_LISTENER_PASSTHROUGH, INBOUND_TPROXY,
    PORT_EXCLUDED, PORT_INCLUDED,
};
pub use types::{NetnsCookie, PortBe};
#[cfg(test)]
mod inbound_tests;
#[cfg(test)]
mod outbound_fake;
#[cfg(test)]
mod outbound_owner_tests;
#[cfg(test)]
mod outbound_tests;
#[cfg(test)]
mod outbound_tproxy_tests;

/// Names of the maps in the BPF object, as user space looks them up.
pub mod map_names {
    /// `PerCpuArray<u64>`: one slot per [`crate::Counter`].
    pub const COUNTERS: &str = "COUNTERS";
    /// `HashMap<ConnKey, Tracked>`: a redirected connection's hand-off to the proxy's socket.
    pub const TRACKED: &str = "TRACKED";
    /// `HashMap<u64, u64>`: policy key (netns cookie, 0 = default) -> its `TRACKED` entries.
    pub const HANDOFFS: &str = "HANDOFFS";
    /// `HashMap<ConnKey, u64>`: a connect made inside a pod to one of its own addresses, while
    /// in handshake -> the socket's cookie (sk_lookup exempts only these from capture).
    pub const LOCAL_CONNECTS: &str = "LOCAL_CONNECTS";
    /// `HashMap<u64, u64>`: netns cookie -> its `LOCAL_CONNECTS` entries.
    pub const LOCAL_COUNTS: &str = "LOCAL_COUNTS";
    /// `LruHashMap<ConnKey, Tracked>`: inbound connections steered by sk_lookup -> original destination.
    pub const INBOUND: &str = "INBOUND";
    /// `HashMap<u64, InboundPolicy>`: netns cookie -> inbound capture policy of an enrolled namespace.
    pub const NETNS_INBOUND: &str = "NETNS_INBOUND";
    /// `LpmTrie<PortKey, u8>` (full-length keys): (netns cookie, port) -> [`crate::PORT_EXCLUDED`]
    /// or [`crate::PORT_INCLUDED`].
    pub const INBOUND_PORTS: &str = "INBOUND_PORTS";
    /// `HashMap<AddrKey, u64>`: an enrolled namespace's own address -> its netns cookie.
    pub const POD_ADDRS: &str = "POD_ADDRS";
    /// `SockHash<ListenerKey>`: (netns cookie, family) -> the proxy's inbound listener.
    pub const LISTENERS: &str = "LISTENERS";
    /// `HashMap<u64, OutboundPolicy>`: netns cookie (0 = default) -> outbound policy.
    pub const NETNS_OUTBOUND: &str = "NETNS_OUTBOUND";
    /// `LpmTrie<CidrKey, u8>`: outbound destinations never captured (istio-iptables -x).
    pub const OUT_EXCLUDE: &str = "OUT_EXCLUDE";
    /// `LpmTrie<CidrKey, u8>`: outbound destinations captured (istio-iptables -i list).
    pub const OUT_INCLUDE: &str = "OUT_INCLUDE";
    /// `LpmTrie<CidrKey, u8>`: the namespace's routes, 1 when through an excluded interface.
    pub const OUT_ROUTES: &str = "OUT_ROUTES";
    /// `LpmTrie<PortKey, u8>` (full-length keys): outbound port rules (-o / -q).
    pub const OUT_PORTS: &str = "OUT_PORTS";
    /// `HashMap<IfKey, u8>`: interfaces whose arriving traffic is never inbound-captured (-c, -k).
    pub const IFACES: &str = "IFACES";
    /// `PerCpuHashMap<NsCounterKey, u64>`: decision counters per namespace.
    pub const NETNS_COUNTERS: &str = "NETNS_COUNTERS";
    /// `HashMap<u64, u32>`: netns cookie -> how many sockets listen on its outbound port.
    pub const PROXY_LISTENERS: &str = "PROXY_LISTENERS";
    /// `RingBuf`: [`crate::TraceEvent`]s while tracing is on.
    pub const TRACE: &str = "TRACE";
    /// `Array<u32>`, one entry: non-zero while a `redirect trace` runs.
    pub const TRACE_ON: &str = "TRACE_ON";
    /// Socket storage of [`crate::sock::SockState`]: per-socket marks and original destinations.
    pub const SOCK_STATE: &str = "SOCK_STATE";
    /// Every map a datapath pins, in no particular order.
    pub const ALL: [&str; 22] = [
        SOCK_STATE,
        LOCAL_CONNECTS,
        LOCAL_COUNTS,
        PROXY_LISTENERS,
        NETNS_COUNTERS,
        TRACE,
        TRACE_ON,
        IFACES,
        COUNTERS,
        HANDOFFS,
        TRACKED,
        INBOUND,
        NETNS_INBOUND,
        INBOUND_PORTS,
        POD_ADDRS,
        LISTENERS,
        NETNS_OUTBOUND,
        OUT_EXCLUDE,
        OUT_INCLUDE,
        OUT_ROUTES,
        OUT_PORTS,
        "AYA_LOGS",
    ];
}

/// Maximum entries of each CIDR trie (all namespaces together).
pub const CIDR_MAX_ENTRIES: u32 = 65_536;

/// Maximum entries of [`map_names::INBOUND`].
pub const INBOUND_MAX_ENTRIES: u32 = 65_536;
/// Maximum enrolled namespaces (and listeners) per datapath.
pub const MAX_NAMESPACES: u32 = 4096;

/// Key data of the port tries [`map_names::OUT_PORTS`] and [`map_names::INBOUND_PORTS`], each
/// entry at the full length [`PortKey::BITS`]: LPM tries used as exact-match maps, because a
/// trie allocates on insert (its memory is the rules written, not its capacity), while a hash
/// pays a bucket for every entry it could hold.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PortKey {
    /// Network namespace cookie.
    pub netns: NetnsCookie,
    /// Destination port, host order.
    pub port: u16,
    /// Explicit padding; always zero.
    pub _pad: [u8; 6],
}
const _: () = assert!(core::mem::size_of::<PortKey>() == 16);

impl PortKey {
    /// The prefix length of every entry and lookup: the whole key (an exact match).
    pub const BITS: u32 = 8 * core::mem::size_of::<Self>() as u32;

    /// The key of `port` (host order) of namespace `netns`.
    #[inline(always)]
    pub const fn new(netns: u64, port: u16) -> Self {
        Self {
            netns: NetnsCookie(netns),
            port,
            _pad: [0; 6],
        }
    }
}

/// Key of [`map_names::NETNS_COUNTERS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NsCounterKey {
    /// Network namespace cookie.
    pub netns: NetnsCookie,
    /// [`Counter`] slot.
    pub slot: u32,
    /// Explicit padding; always zero.
    pub _pad: u32,
}

/// One decision, streamed through [`map_names::TRACE`] while a `redirect trace` runs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// Network namespace cookie.
    pub netns: NetnsCookie,
    /// Original destination, network order (IPv4 in word 0).
    pub dst: [u32; 4],
    /// Thread group id of the caller.
    pub pid: u32,
    /// Caller's uid.
    pub uid: u32,
    /// Caller's gid.
    pub gid: u32,
    /// Original destination port, host order.
    pub dport: u16,
    /// Port on loopback it was sent to, 0 when untouched.
    pub redirect_port: u16,
    /// [`AF_INET`] or [`AF_INET6`].
    pub family: u16,
    /// 6 TCP, 17 UDP.
    pub proto: u8,
    /// The deciding [`Counter`] slot.
    pub counter: u8,
    /// The caller's command name (zero for an inbound decision: no caller).
    pub comm: [u8; 16],
    /// Inbound only: the peer's address, network order (IPv4 in word 0).
    pub src: [u32; 4],
    /// Inbound only: the peer's port, host order.
    pub sport: u16,
    /// [`TRACE_OUTBOUND`] (a connect or send from the namespace: pid, uid, gid and comm are
    /// the caller's) or [`TRACE_INBOUND`] (a connection arriving, decided by sk_lookup: `src`
    /// is the peer, and there is no caller).
    pub direction: u8,
    /// Explicit padding; always zero.
    pub _pad0: u8,
    /// Explicit padding; always zero.
    pub _pad: [u32; 2],
}

/// [`TraceEvent::direction`] of a connect or send from an enrolled namespace.
pub const TRACE_OUTBOUND: u8 = 0;
/// [`TraceEvent::direction`] of a connection arriving at an enrolled namespace.
pub const TRACE_INBOUND: u8 = 1;

/// Key of [`map_names::IFACES`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IfKey {
    /// Network namespace cookie.
    pub netns: NetnsCookie,
    /// Interface index inside that namespace.
    pub ifindex: u32,
    /// Explicit padding; always zero.
    pub _pad: u32,
}

/// [`map_names::IFACES`] value bit: an excluded interface (`-c`).
pub const IFACE_EXCLUDED: u8 = 1;
/// [`map_names::IFACES`] value bit: a KubeVirt interface (`-k`).
pub const IFACE_KUBEVIRT: u8 = 2;

/// Key of [`map_names::POD_ADDRS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AddrKey {
    /// Address, network order (IPv4 in word 0).
    pub addr: [u32; 4],
    /// [`AF_INET`] or [`AF_INET6`].
    pub family: u16,
    /// Explicit padding; always zero.
    pub _pad: [u8; 6],
}

/// Key of [`map_names::LISTENERS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ListenerKey {
    /// Network namespace cookie.
    pub netns: NetnsCookie,
    /// The listener's family ([`AF_INET6`] listeners also take IPv4 unless v6-only).
    pub family: u32,
    /// Explicit padding; always zero.
    pub _pad: u32,
}

/// Names of the programs in the BPF object.
pub mod prog_names {
    /// `cgroup/connect4`: rewrites captured outbound connects.
    pub const CONNECT4: &str = "redirect_connect4";
    /// `cgroup/connect6`: the same for v4-mapped destinations of dual-stack sockets.
    pub const CONNECT6: &str = "redirect_connect6";
    /// `sock_ops`: moves the original destination to the 4-tuple map and cleans it up on close.
    pub const SOCK_OPS: &str = "redirect_sock_ops";
    /// `cgroup/getsockopt`: answers `SO_ORIGINAL_DST`.
    pub const GETSOCKOPT: &str = "redirect_getsockopt";
    /// `sk_lookup`: steers inbound connections of an enrolled namespace to the proxy.
    pub const SK_LOOKUP: &str = "redirect_sk_lookup";
    /// The same for kernels without sk_lookup's `ingress_ifindex` (before 5.17): the arrival
    /// interface is unknown, so policies with inbound `-c`/`-k` interfaces are refused.
    pub const SK_LOOKUP_NO_IFINDEX: &str = "redirect_sk_lookup_no_ifindex";
    /// `cgroup/sendmsg4`: unconnected UDP DNS to the DNS capture port.
    pub const SENDMSG4: &str = "redirect_sendmsg4";
    /// `cgroup/sendmsg6`: the same for IPv6 sockets.
    pub const SENDMSG6: &str = "redirect_sendmsg6";
    /// `cgroup/recvmsg4`: replies from the DNS capture port appear to come from the server.
    pub const RECVMSG4: &str = "redirect_recvmsg4";
    /// `cgroup/recvmsg6`: the same for IPv6 sockets.
    pub const RECVMSG6: &str = "redirect_recvmsg6";
    /// `cgroup/getpeername4`: a redirected socket's peer is its original destination.
    pub const GETPEERNAME4: &str = "redirect_getpeername4";
    /// `cgroup/getpeername6`: the same for IPv6 sockets.
    pub const GETPEERNAME6: &str = "redirect_getpeername6";
    /// `cgroup/bind4`: marks the proxy's outbound listener (socket storage).
    pub const BIND4: &str = "redirect_bind4";
    /// `cgroup/bind6`: the same for IPv6 sockets.
    pub const BIND6: &str = "redirect_bind6";
}

/// Maximum entries of [`map_names::TRACKED`] in the object; every loader sets its own from the
/// node sizing (`--max-connections`).
pub const TRACKED_MAX_ENTRIES: u32 = 262_144;
/// Name of the BPF global (read-only data) holding the per-policy hand-off quota.
pub const HANDOFF_QUOTA_GLOBAL: &str = "HANDOFF_QUOTA";

/// `AF_INET` as the kernel numbers it.
pub const AF_INET: u16 = 2;
/// `AF_INET6` as the kernel numbers it.
pub const AF_INET6: u16 = 10;

/// The destination an application asked for before the redirect.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrigDst {
    /// Address in network byte order; IPv4 uses `addr[0]` and leaves the rest zero.
    pub addr: [u32; 4],
    /// Port in network byte order.
    pub port: PortBe,
    /// [`AF_INET`] or [`AF_INET6`].
    pub family: u16,
    /// Explicit padding; always zero.
    pub _pad: u32,
}

/// A redirected connection, keyed the way both of its ends can compute it.
///
/// `client` is the application's socket (local end of the connecting socket, remote end of the
/// proxy's accepted socket); `server` is the proxy's listener address (127.0.0.1:15001).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnKey {
    /// Network namespace cookie: the same 4-tuple can exist in many namespaces.
    pub netns: NetnsCookie,
    /// Client address, network byte order (IPv4 in word 0).
    pub client_addr: [u32; 4],
    /// Server address, network byte order (IPv4 in word 0).
    pub server_addr: [u32; 4],
    /// Client port, host byte order.
    pub client_port: u16,
    /// Server port, host byte order.
    pub server_port: u16,
    /// [`AF_INET`] or [`AF_INET6`].
    pub family: u16,
    /// Explicit padding; always zero.
    pub _pad: u16,
}

/// Value of [`map_names::TRACKED`] and [`map_names::INBOUND`]: a hand-off to the proxy's
/// accepted socket, which claims (copies and deletes) it when its handshake completes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tracked {
    /// What `SO_ORIGINAL_DST` answers.
    pub dst: OrigDst,
    /// Socket cookie of the application's connecting socket (0 for `INBOUND`): only that
    /// socket's close removes an unclaimed entry.
    pub client_cookie: u64,
    /// `TRACKED`: the policy key whose `HANDOFFS` count includes this entry (0 for `INBOUND`).
    pub quota_key: u64,
}

const _: () = assert!(core::mem::size_of::<OrigDst>() == 24);
const _: () = assert!(core::mem::size_of::<ConnKey>() == 48);
const _: () = assert!(core::mem::size_of::<Tracked>() == 40);
const _: () = assert!(core::mem::size_of::<PortKey>() == 16);
const _: () = assert!(core::mem::size_of::<AddrKey>() == 24);
const _: () = assert!(core::mem::size_of::<ListenerKey>() == 16);
const _: () = assert!(core::mem::size_of::<IfKey>() == 16);
const _: () = assert!(core::mem::size_of::<NsCounterKey>() == 16);
const _: () = assert!(core::mem::size_of::<TraceEvent>() == 88);

/// Folds an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, network-order words) to IPv4 form:
/// returns (family, address) with IPv4 in word 0, so both ends of a connection key alike.
#[inline(always)]
pub fn normalise_addr(family: u16, addr: [u32; 4]) -> (u16, [u32; 4]) {
    // Word 2 of ::ffff:0:0 is 0x0000ffff in network order, i.e. 0xffff0000 read little-endian.
    if family == AF_INET6 && addr[0] == 0 && addr[1] == 0 && addr[2] == types::V4_MAPPED_WORD {
        (AF_INET, [addr[3], 0, 0, 0])
    } else {
        (family, addr)
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all four types are #[repr(C)], contain only integers, and have explicit padding
    // fields, so every bit pattern is valid and no byte is uninitialised.
    unsafe impl aya::Pod for super::OrigDst {}
    // SAFETY: a #[repr(transparent)] u64.
    unsafe impl aya::Pod for super::NetnsCookie {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ConnKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Tracked {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::InboundPolicy {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PortKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::AddrKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ListenerKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::IfKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::NsCounterKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::outbound::OutboundPolicy {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::outbound::CidrKey {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_mapped_addresses_fold_to_ipv4() {
        let mapped = [
            0,
            0,
            u32::from_ne_bytes([0, 0, 0xff, 0xff]),
            u32::from_ne_bytes([198, 18, 0, 1]),
        ];
        assert_eq!(
            normalise_addr(AF_INET6, mapped),
            (AF_INET, [u32::from_ne_bytes([198, 18, 0, 1]), 0, 0, 0])
        );
        let v6 = [u32::from_ne_bytes([0x20, 0x01, 0x0d, 0xb8]), 0, 0, 1];
        assert_eq!(normalise_addr(AF_INET6, v6), (AF_INET6, v6));
        let v4 = [7, 0, 0, 0];
        assert_eq!(normalise_addr(AF_INET, v4), (AF_INET, v4));
    }

    #[test]
    fn counter_names_are_unique_and_slots_dense() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            assert!(Counter::ALL[..i].iter().all(|o| o.name() != c.name()));
        }
    }
}
