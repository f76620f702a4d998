//! The per-namespace outbound policy and the one decision function that evaluates it, shared by
//! the BPF hooks and `redirect` (explain, tests) so both answer from the same code.
//!
//! The decision walks istio-iptables' `OUTPUT` / `ISTIO_OUTPUT` chain rule by rule (REDIRECT
//! mode), with the lookups it needs (routes, CIDR tries, port sets) behind [`Lookups`] so the
//! kernel side can do them lazily from maps.
use crate::{Counter, AF_INET};

/// Uids, gids and owner groups per policy.
pub const MAX_OWNERS: usize = 8;
/// DNS servers per family per policy.
pub const MAX_DNS: usize = 4;

/// [`OutboundPolicy::flags`]: the namespace is dual-stack: IPv6 follows the policy (else untouched).
pub const OUT_IPV6: u32 = 1;
/// [`OutboundPolicy::flags`]: DNS capture (`--redirect-dns` with servers, or capture-all).
pub const OUT_DNS: u32 = 1 << 1;
/// [`OutboundPolicy::flags`]: DNS to every server is captured (`--capture-all-dns`).
pub const OUT_DNS_ALL: u32 = 1 << 2;
/// [`OutboundPolicy::flags`]: only processes whose gid is in `groups` are captured.
pub const OUT_GROUPS_INCLUDE: u32 = 1 << 3;
/// [`OutboundPolicy::flags`]: processes whose gid is in `groups` are not captured.
pub const OUT_GROUPS_EXCLUDE: u32 = 1 << 4;
/// [`OutboundPolicy::flags`]: `-i '*'` for IPv4.
pub const OUT_INCLUDE_ALL_V4: u32 = 1 << 5;
/// [`OutboundPolicy::flags`]: `-i '*'` for IPv6.
pub const OUT_INCLUDE_ALL_V6: u32 = 1 << 6;
/// [`OutboundPolicy::flags`]: an IPv4 include CIDR covers loopback, so istio-iptables omits the
/// `-o lo ! --uid-owner/--gid-owner -j RETURN` rules.
pub const OUT_NO_LO_RETURN_V4: u32 = 1 << 7;
/// [`OutboundPolicy::flags`]: the same for IPv6 (istio sets both when either family's include
/// list names a loopback address).
pub const OUT_NO_LO_RETURN_V6: u32 = 1 << 8;
/// [`OutboundPolicy::flags`]: some outbound port rule (`-o`/`-q`) exists; skips the port lookup.
pub const OUT_HAS_PORTS: u32 = 1 << 9;
/// [`OutboundPolicy::flags`]: some interface is excluded (`-c`); skips the route lookup.
pub const OUT_HAS_EXCLUDED_NIC: u32 = 1 << 10;
/// [`OutboundPolicy::flags`]: the policy exists (a zeroed value means "no policy").
pub const OUT_ENABLED: u32 = 1 << 11;
/// [`OutboundPolicy::flags`]: the proxy identity is its uid/gid *and* its cgroup
/// (`proxy_cgroup`): a process with the proxy uid elsewhere is captured like any app.
pub const OUT_PROXY_CGROUP: u32 = 1 << 12;
/// [`OutboundPolicy::flags`]: while nothing listens on the outbound port (the app started
/// before its proxy), leave outbound connects alone instead of sending them to a closed port.
pub const OUT_NO_PROXY_PASSTHROUGH: u32 = 1 << 13;
/// [`OutboundPolicy::flags`]: TPROXY mode (`-m TPROXY`): the mangle chain's rule for the
/// proxy's own connects to its pod ([`Counter::TproxyLocal`]) applies, and keeps its address
/// (only the port changes), as TPROXY keeps it; nat's redirect of the proxy's connects to its
/// pod keeps their source ([`target`]).
pub const OUT_TPROXY: u32 = 1 << 14;
/// The mark of the proxy's transparent connections in TPROXY mode (`--tproxy-mark`, Istio's
/// 1337): the mangle chain returns for them (`-o lo -m mark --mark 1337 -j RETURN`).
pub const TPROXY_MARK: u32 = 1337;

/// Port-rule bits of the outbound port set (`-o` / `-q`).
pub const OUT_PORT_EXCLUDE: u8 = 1;
/// See [`OUT_PORT_EXCLUDE`].
pub const OUT_PORT_INCLUDE: u8 = 2;

/// Capture policy of one network namespace (value of `NETNS_OUTBOUND`, keyed by netns cookie;
/// key 0 is the default for namespaces without their own entry, used by `redirect attach`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutboundPolicy {
    /// Proxy uids (`-u`), in istio-iptables' rule order; `n_uids` are valid.
    pub uids: [u32; MAX_OWNERS],
    /// Proxy gids (`-g`), in order; `n_gids` are valid.
    pub gids: [u32; MAX_OWNERS],
    /// Owner groups (`ISTIO_OUTBOUND_OWNER_GROUPS[_EXCLUDE]`) as gids; `n_groups` are valid.
    pub groups: [u32; MAX_OWNERS],
    /// IPv4 DNS servers, network order; `n_dns_v4` are valid.
    pub dns_v4: [u32; MAX_DNS],
    /// IPv6 DNS servers, network-order words; `n_dns_v6` are valid.
    pub dns_v6: [[u32; 4]; MAX_DNS],
    /// `ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR` network (default 127.0.0.1), network order.
    pub loopback_v4: u32,
    /// Its mask, network order (default /32).
    pub loopback_v4_mask: u32,
    /// `OUT_*` flags.
    pub flags: u32,
    /// Valid entries of `uids`.
    pub n_uids: u8,
    /// Valid entries of `gids`.
    pub n_gids: u8,
    /// Valid entries of `groups`.
    pub n_groups: u8,
    /// Valid entries of `dns_v4`.
    pub n_dns_v4: u8,
    /// Valid entries of `dns_v6`.
    pub n_dns_v6: u8,
    /// Explicit padding; always zero.
    pub _pad0: u8,
    /// Outbound capture port (`-p`, 15001), host order.
    pub proxy_port: u16,
    /// Inbound capture port (`-z`, 15006): the proxy's connections to its own pod land here.
    pub inbound_port: u16,
    /// Tunnel port (`-e`, 15008), host order.
    pub tunnel_port: u16,
    /// DNS capture port (15053), host order.
    pub dns_port: u16,
    /// Depth of `proxy_cgroup` in the cgroup v2 tree (root = 0).
    pub proxy_cgroup_level: u16,
    /// Explicit padding; always zero.
    pub _pad1: u32,
    /// With [`OUT_PROXY_CGROUP`]: the proxy's cgroup id; the uid/gid bypass only applies to
    /// processes inside it.
    pub proxy_cgroup: u64,
    /// Inode of the namespace (user space only: finds policies of namespaces that are gone).
    pub netns_ino: u64,
}

const _: () = assert!(core::mem::size_of::<OutboundPolicy>() == 224);

impl OutboundPolicy {
    /// A policy that captures nothing (all counts zero); callers fill it in.
    pub const ZERO: Self = Self {
        uids: [0; MAX_OWNERS],
        gids: [0; MAX_OWNERS],
        groups: [0; MAX_OWNERS],
        dns_v4: [0; MAX_DNS],
        dns_v6: [[0; 4]; MAX_DNS],
        loopback_v4: 0,
        loopback_v4_mask: 0,
        flags: 0,
        n_uids: 0,
        n_gids: 0,
        n_groups: 0,
        n_dns_v4: 0,
        n_dns_v6: 0,
        _pad0: 0,
        proxy_port: 0,
        inbound_port: 0,
        tunnel_port: 0,
        dns_port: 0,
        proxy_cgroup_level: 0,
        _pad1: 0,
        proxy_cgroup: 0,
        netns_ino: 0,
    };

    #[inline(always)]
    fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }
}

/// Key data of the per-namespace CIDR tries (`OUT_INCLUDE`, `OUT_EXCLUDE`, `OUT_ROUTES`):
/// the netns cookie and the family (both matched exactly), then the address (IPv4 in word 0).
/// The trie's prefix length counts the 96 bits before the address: `96 + n` for a `/n`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CidrKey {
    /// Network namespace cookie, big-endian bytes (compared bit by bit like the address).
    pub netns: [u8; 8],
    /// [`AF_INET`] or [`AF_INET6`], big-endian bytes: an IPv6 `::/0` never covers IPv4.
    pub family: [u8; 4],
    /// Address, network order (IPv4 in word 0, the rest zero).
    pub addr: [u32; 4],
}

const _: () = assert!(core::mem::size_of::<CidrKey>() == 28);

impl CidrKey {
    /// Builds the key for `(family, addr)` in namespace `netns`.
    #[inline(always)]
    pub fn new(netns: u64, family: u16, addr: [u32; 4]) -> Self {
        let addr = if family == AF_INET {
            [addr[0], 0, 0, 0]
        } else {
            addr
        };
        Self {
            netns: netns.to_be_bytes(),
            family: u32::from(family).to_be_bytes(),
            addr,
        }
    }

    /// Prefix length of the trie entry for a `/bits` network.
    pub const fn prefix_len(bits: u8) -> u32 {
        96 + bits as u32
    }

    /// Prefix length of a full-address lookup.
    pub const LOOKUP_LEN: u32 = 96 + 128;
}

/// A connection attempt (or datagram) as the decision sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conn {
    /// Family of the packets: [`AF_INET`] (also v4-mapped destinations) or [`AF_INET6`].
    pub family: u16,
    /// TCP (else UDP).
    pub tcp: bool,
    /// Destination, network order (IPv4 in word 0).
    pub dst: [u32; 4],
    /// Destination port, host order.
    pub dport: u16,
    /// Caller's uid and gid.
    pub uid: u32,
    /// See `uid`.
    pub gid: u32,
    /// The socket is bound to the proxy's passthrough source (127.0.0.6 / ::6).
    pub passthrough_src: bool,
    /// The socket has a source address already (bound); else the kernel picks one by route.
    pub bound: bool,
    /// The caller runs inside the policy's proxy cgroup (only read with [`OUT_PROXY_CGROUP`]).
    pub in_proxy_cgroup: bool,
    /// The socket carries [`TPROXY_MARK`] (only read with [`OUT_TPROXY`]).
    pub tproxy_marked: bool,
}

/// What the kernel would look up for a connection; lazily, in the order the rules need them.
pub trait Lookups {
    /// The destination is one of the namespace's own addresses (routed via `lo`), loopback aside.
    fn is_own_addr(&self, conn: &Conn) -> bool;
    /// The route to the destination leaves through an excluded interface (`-c`).
    fn via_excluded_nic(&self, conn: &Conn) -> bool;
    /// The destination is inside an excluded CIDR (`-x`).
    fn excluded_cidr(&self, conn: &Conn) -> bool;
    /// The destination is inside an included CIDR (`-i` list).
    fn included_cidr(&self, conn: &Conn) -> bool;
    /// `OUT_PORT_*` bits of the destination port.
    fn port_rule(&self, conn: &Conn) -> u8;
    /// TPROXY mode: the namespace's inbound capture takes the destination port
    /// ([`crate::inbound::tproxy_takes`] with its `NETNS_INBOUND` policy and port rules).
    fn tproxy_takes(&self, conn: &Conn) -> bool;
}

/// The decision for one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Untouched; the counter names the rule that returned.
    Pass(Counter),
    /// Rewritten to the loopback address on `port` (TPROXY mode's mangle step keeps the
    /// address: [`target`]); the counter names the rule.
    Redirect(u16, Counter),
}

impl Verdict {
    /// The verdict as one word, for a BPF global function (which may return only a scalar):
    /// the counter's slot in the low byte, the port in bits 8-23, bit 31 for a redirect.
    #[inline(always)]
    pub const fn to_word(self) -> u32 {
        match self {
            Verdict::Pass(c) => c as u32,
            Verdict::Redirect(port, c) => (1 << 31) | ((port as u32) << 8) | c as u32,
        }
    }

    /// [`Verdict::to_word`]'s parts: whether it redirects, the port, the counter's slot.
    #[inline(always)]
    pub const fn word_parts(word: u32) -> (bool, u16, u32) {
        (word >> 31 != 0, (word >> 8) as u16, word & 0xff)
    }
}

mod decide;
mod target;
pub use decide::{decide, is_loopback, is_proxy, proxy_id_elsewhere, when_proxy_down};
pub use target::{target, Target};

#[cfg(test)]
mod word_tests {
    use super::Verdict;
    use crate::Counter;

    #[test]
    fn every_verdict_survives_its_word() {
        for c in Counter::ALL {
            for v in [
                Verdict::Pass(c),
                Verdict::Redirect(15001, c),
                Verdict::Redirect(0, c),
                Verdict::Redirect(u16::MAX, c),
            ] {
                let (redirect, port, slot) = Verdict::word_parts(v.to_word());
                let back = if redirect {
                    Verdict::Redirect(port, Counter::ALL[slot as usize])
                } else {
                    Verdict::Pass(Counter::ALL[slot as usize])
                };
                assert_eq!(back, v);
            }
        }
    }
}
