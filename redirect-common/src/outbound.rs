//! The per-namespace outbound policy and the one decision function that evaluates it, shared by
//! the BPF hooks and `redirect` (explain, tests) so both answer from the same code.
//!
//! The decision walks istio-iptables' `OUTPUT` / `ISTIO_OUTPUT` chain rule by rule (REDIRECT
//! mode), with the lookups it needs (routes, CIDR tries, port sets) behind [`Lookups`] so the
//! kernel side can do them lazily from maps.
use crate::{Counter, AF_INET, AF_INET6};

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
}

const _: () = assert!(core::mem::size_of::<OutboundPolicy>() == 216);

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
    /// The caller runs inside the policy's proxy cgroup (only read with [`OUT_PROXY_CGROUP`]).
    pub in_proxy_cgroup: bool,
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
}

/// The decision for one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Untouched; the counter names the rule that returned.
    Pass(Counter),
    /// Rewritten to the loopback address on `port`; the counter names the rule.
    Redirect(u16, Counter),
}

#[inline(always)]
fn is_loopback(family: u16, dst: &[u32; 4]) -> bool {
    if family == AF_INET {
        dst[0].to_ne_bytes()[0] == 127
    } else {
        dst[0] == 0 && dst[1] == 0 && dst[2] == 0 && dst[3] == u32::from_be(1)
    }
}

/// `-d 127.0.0.1/32` (or the loopback CIDR) / `-d ::1/128`.
#[inline(always)]
fn is_loopback_dst(p: &OutboundPolicy, family: u16, dst: &[u32; 4]) -> bool {
    if family == AF_INET {
        dst[0] & p.loopback_v4_mask == p.loopback_v4 & p.loopback_v4_mask
    } else {
        is_loopback(family, dst)
    }
}

#[inline(always)]
fn is_dns_server(p: &OutboundPolicy, conn: &Conn) -> bool {
    if p.has(OUT_DNS_ALL) {
        return true;
    }
    let mut i = 0;
    if conn.family == AF_INET {
        while i < MAX_DNS {
            if i >= p.n_dns_v4 as usize {
                break;
            }
            if p.dns_v4[i] == conn.dst[0] {
                return true;
            }
            i += 1;
        }
    } else {
        while i < MAX_DNS {
            if i >= p.n_dns_v6 as usize {
                break;
            }
            if p.dns_v6[i] == conn.dst {
                return true;
            }
            i += 1;
        }
    }
    false
}

/// One owner triplet of `ISTIO_OUTPUT` (`--uid-owner` or `--gid-owner`):
/// `-o lo ! -d LOOP -p tcp ! --dport TUNNEL[,53] -m owner X -j ISTIO_IN_REDIRECT`,
/// `-o lo [-p tcp ! --dport 53] -m owner ! X -j RETURN` (unless omitted),
/// `-m owner X -j RETURN`.
#[inline(always)]
fn owner_rule(
    p: &OutboundPolicy,
    conn: &Conn,
    on_lo: bool,
    matches: bool,
    is_uid: bool,
    no_lo_return: bool,
) -> Option<Verdict> {
    let dns = p.has(OUT_DNS);
    let bypass = if is_uid {
        Counter::BypassUid
    } else {
        Counter::BypassGid
    };
    if on_lo
        && matches
        && conn.tcp
        && !is_loopback_dst(p, conn.family, &conn.dst)
        && conn.dport != p.tunnel_port
        && !(dns && is_uid && conn.dport == 53)
    {
        return Some(Verdict::Redirect(
            p.inbound_port,
            Counter::InboundRedirectLocal,
        ));
    }
    if !no_lo_return && on_lo && !matches && (!dns || (conn.tcp && conn.dport != 53)) {
        return Some(Verdict::Pass(Counter::Loopback));
    }
    if matches {
        return Some(Verdict::Pass(bypass));
    }
    None
}

/// With a proxy cgroup, the owner match also needs the caller to be inside it.
#[inline(always)]
fn proxy_place(p: &OutboundPolicy, conn: &Conn) -> bool {
    !p.has(OUT_PROXY_CGROUP) || conn.in_proxy_cgroup
}

/// True when the caller has a proxy uid or gid but runs outside the proxy's cgroup: it is
/// captured like an application (and worth a warning: seed 1's silent bypass).
#[inline(always)]
pub fn proxy_id_elsewhere(p: &OutboundPolicy, conn: &Conn) -> bool {
    if !p.has(OUT_PROXY_CGROUP) || conn.in_proxy_cgroup {
        return false;
    }
    let mut i = 0;
    while i < MAX_OWNERS {
        if (i < p.n_uids as usize && p.uids[i] == conn.uid)
            || (i < p.n_gids as usize && p.gids[i] == conn.gid)
        {
            return true;
        }
        i += 1;
    }
    false
}

/// Evaluates istio-iptables' `OUTPUT` chain (nat table, REDIRECT mode) for `conn`.
#[inline(always)]
pub fn decide<L: Lookups>(p: &OutboundPolicy, conn: &Conn, lk: &L) -> Verdict {
    let v6 = conn.family == AF_INET6;
    if !p.has(OUT_ENABLED) {
        return Verdict::Pass(Counter::NoPolicy);
    }
    if v6 && !p.has(OUT_IPV6) {
        return Verdict::Pass(Counter::Ipv6Untouched);
    }
    let on_lo = is_loopback(conn.family, &conn.dst) || lk.is_own_addr(conn);
    // OUTPUT -o <excluded nic> -j RETURN
    if !on_lo && p.has(OUT_HAS_EXCLUDED_NIC) && lk.via_excluded_nic(conn) {
        return Verdict::Pass(Counter::ExcludedInterface);
    }
    let ports = if p.has(OUT_HAS_PORTS) {
        lk.port_rule(conn)
    } else {
        0
    };
    // -p tcp|udp --dport P -j RETURN (-o), ahead of everything else in ISTIO_OUTPUT.
    if ports & OUT_PORT_EXCLUDE != 0 {
        return Verdict::Pass(Counter::ExcludedPort);
    }
    // -o lo -s 127.0.0.6/32 -j RETURN
    if on_lo && conn.passthrough_src {
        return Verdict::Pass(Counter::PassthroughSource);
    }
    let no_lo_return = p.has(if v6 {
        OUT_NO_LO_RETURN_V6
    } else {
        OUT_NO_LO_RETURN_V4
    });
    let mut i = 0;
    while i < MAX_OWNERS {
        if i >= p.n_uids as usize {
            break;
        }
        let matches = conn.uid == p.uids[i] && proxy_place(p, conn);
        if let Some(v) = owner_rule(p, conn, on_lo, matches, true, no_lo_return) {
            return v;
        }
        i += 1;
    }
    let mut i = 0;
    while i < MAX_OWNERS {
        if i >= p.n_gids as usize {
            break;
        }
        let matches = conn.gid == p.gids[i] && proxy_place(p, conn);
        if let Some(v) = owner_rule(p, conn, on_lo, matches, false, no_lo_return) {
            return v;
        }
        i += 1;
    }
    if p.has(OUT_GROUPS_INCLUDE | OUT_GROUPS_EXCLUDE) {
        let mut member = false;
        let mut i = 0;
        while i < MAX_OWNERS {
            if i >= p.n_groups as usize {
                break;
            }
            if conn.gid == p.groups[i] {
                member = true;
            }
            i += 1;
        }
        if member == p.has(OUT_GROUPS_EXCLUDE) {
            return Verdict::Pass(Counter::OwnerGroup);
        }
    }
    // -j ISTIO_OUTPUT_DNS: -p tcp|udp --dport 53 [-d server] -j REDIRECT --to-ports 15053
    if p.has(OUT_DNS) && conn.dport == 53 && is_dns_server(p, conn) {
        return Verdict::Redirect(p.dns_port, Counter::DnsRedirected);
    }
    // -d 127.0.0.1/32 -j RETURN
    if is_loopback_dst(p, conn.family, &conn.dst) {
        return Verdict::Pass(Counter::Loopback);
    }
    if !conn.tcp {
        // ISTIO_REDIRECT only rewrites TCP.
        return Verdict::Pass(Counter::NotTcp);
    }
    // -d X -j RETURN (-x)
    if lk.excluded_cidr(conn) {
        return Verdict::Pass(Counter::ExcludedCidr);
    }
    // -p tcp --dport P -j ISTIO_REDIRECT (-q)
    if conn.tcp && ports & OUT_PORT_INCLUDE != 0 {
        return Verdict::Redirect(p.proxy_port, Counter::Redirected);
    }
    // -j ISTIO_REDIRECT (-i '*') or -d X -j ISTIO_REDIRECT (-i list)
    let all = p.has(if v6 {
        OUT_INCLUDE_ALL_V6
    } else {
        OUT_INCLUDE_ALL_V4
    });
    if all || lk.included_cidr(conn) {
        return Verdict::Redirect(p.proxy_port, Counter::Redirected);
    }
    Verdict::Pass(Counter::NotIncluded)
}

/// The app-before-proxy rule on top of [`decide`]: a connect sent to the outbound port of a
/// namespace (with a policy of its own) whose proxy does not listen yet is left alone with
/// [`OUT_NO_PROXY_PASSTHROUGH`], else still sent there (and refused) and counted.
#[inline(always)]
pub fn when_proxy_down(
    p: &OutboundPolicy,
    v: Verdict,
    own_policy: bool,
    proxy_up: bool,
) -> Verdict {
    match v {
        Verdict::Redirect(port, _) if own_policy && port == p.proxy_port && !proxy_up => {
            if p.has(OUT_NO_PROXY_PASSTHROUGH) {
                Verdict::Pass(Counter::NoProxyPassthrough)
            } else {
                Verdict::Redirect(port, Counter::NoProxyRefused)
            }
        }
        v => v,
    }
}
