//! A [`Policy`]'s outbound half in the form the kernel gets it: the `NETNS_OUTBOUND` value,
//! the CIDR trie entries and the port rules, with no map, cgroup or namespace access (the proxy
//! cgroup's id is resolved by the caller before compiling), so it is host-tested like the
//! inbound half beside it.
use ipnet::IpNet;
use redirect_common::{
    outbound::{
        OutboundPolicy, OUT_DNS, OUT_DNS_ALL, OUT_ENABLED, OUT_GROUPS_EXCLUDE, OUT_GROUPS_INCLUDE,
        OUT_HAS_EXCLUDED_NIC, OUT_HAS_PORTS, OUT_INCLUDE_ALL_V4, OUT_INCLUDE_ALL_V6, OUT_IPV6,
        OUT_NO_LO_RETURN_V4, OUT_NO_LO_RETURN_V6, OUT_NO_PROXY_PASSTHROUGH, OUT_PORT_EXCLUDE,
        OUT_PORT_INCLUDE, OUT_PROXY_CGROUP, OUT_TPROXY,
    },
    types::addr_words as words,
};

use crate::{Cidrs, OwnerGroups, Policy};

/// A policy list is longer than the kernel-side policy can hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{count} {what} given, at most {max} are supported per namespace")]
pub struct PolicyLimit {
    /// Which list.
    pub what: &'static str,
    /// How many were given.
    pub count: usize,
    /// The limit.
    pub max: usize,
}

/// The proxy's cgroup as the kernel knows it: its id (`bpf_get_current_cgroup_id`) and depth
/// below the cgroup v2 root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupRef {
    /// The cgroup id (the directory's inode number).
    pub id: u64,
    /// Its depth below the cgroup v2 root.
    pub level: u16,
}

impl CgroupRef {
    /// The bypass bound to no cgroup (`Policy::proxy_bypass_closed`): no task's ancestor at
    /// level 1 has this id (cgroup ids are inode numbers, never all ones), and a task in the
    /// root cgroup reads 0 there.
    pub(crate) const NOWHERE: CgroupRef = CgroupRef {
        id: u64::MAX,
        level: 1,
    };
}

/// The DNS capture port istio-iptables hard-codes.
pub(crate) const DNS_CAPTURE_PORT: u16 = 15053;

/// One namespace's outbound policy, ready for the maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    /// The `NETNS_OUTBOUND` value.
    pub policy: OutboundPolicy,
    /// `OUT_EXCLUDE` entries (`-x`).
    pub exclude: Vec<IpNet>,
    /// `OUT_INCLUDE` entries (`-i` list).
    pub include: Vec<IpNet>,
    /// `OUT_PORTS` entries.
    pub ports: Vec<(u16, u8)>,
    /// `OUT_ROUTES` entries (only when an interface is excluded): prefix, via an excluded nic.
    pub routes: Vec<(IpNet, bool)>,
}

fn fill<T: Copy>(what: &'static str, dst: &mut [T], src: &[T]) -> Result<u8, PolicyLimit> {
    if src.len() > dst.len() {
        return Err(PolicyLimit {
            what,
            count: src.len(),
            max: dst.len(),
        });
    }
    dst[..src.len()].copy_from_slice(src);
    Ok(src.len() as u8)
}

/// Compiles `p` for a namespace; `ipv6` says whether its IPv6 traffic follows the policy (the
/// namespace has an IPv6 address, or dual stack was asked for); `routes` are its routes with
/// whether each leaves through an excluded interface (only used when `-c` is set);
/// `proxy_cgroup` is `p.proxy_cgroup` resolved by the caller (required when it is set); with
/// none set and `p.proxy_bypass_closed`, the bypass is bound to [`CgroupRef::NOWHERE`].
pub fn compile(
    p: &Policy,
    ipv6: bool,
    routes: Vec<(IpNet, bool)>,
    proxy_cgroup: Option<CgroupRef>,
) -> Result<Compiled, PolicyLimit> {
    let mut k = OutboundPolicy::ZERO;
    k.flags = OUT_ENABLED;
    if ipv6 {
        k.flags |= OUT_IPV6;
    }
    k.n_uids = fill("proxy uids (-u)", &mut k.uids, &p.proxy_uids)?;
    k.n_gids = fill("proxy gids (-g)", &mut k.gids, &p.proxy_gids)?;
    match &p.owner_groups {
        OwnerGroups::All => {}
        OwnerGroups::Include(g) | OwnerGroups::Exclude(g) => {
            let gids: Vec<u32> = g.iter().map(|g| g.gid).collect();
            k.n_groups = fill("owner groups", &mut k.groups, &gids)?;
            k.flags |= if matches!(p.owner_groups, OwnerGroups::Include(_)) {
                OUT_GROUPS_INCLUDE
            } else {
                OUT_GROUPS_EXCLUDE
            };
        }
    }
    if p.dns_enabled() {
        k.flags |= OUT_DNS;
        if p.capture_all_dns {
            k.flags |= OUT_DNS_ALL;
        }
        let v4: Vec<u32> = p
            .dns_servers
            .iter()
            .filter(|ip| ip.is_ipv4())
            .map(|ip| words(*ip)[0])
            .collect();
        let v6: Vec<[u32; 4]> = p
            .dns_servers
            .iter()
            .filter(|ip| ip.is_ipv6())
            .map(|ip| words(*ip))
            .collect();
        k.n_dns_v4 = fill("IPv4 DNS servers", &mut k.dns_v4, &v4)?;
        k.n_dns_v6 = fill("IPv6 DNS servers", &mut k.dns_v6, &v6)?;
    }
    let lb = p.ipv4_loopback_cidr;
    k.loopback_v4 = u32::from_ne_bytes(lb.addr().octets());
    k.loopback_v4_mask = u32::from_ne_bytes(lb.netmask().octets());
    if p.include_has_loopback() {
        k.flags |= OUT_NO_LO_RETURN_V4 | OUT_NO_LO_RETURN_V6;
    }
    let include = match &p.include_cidrs {
        Cidrs::All => {
            k.flags |= OUT_INCLUDE_ALL_V4 | OUT_INCLUDE_ALL_V6;
            Vec::new()
        }
        Cidrs::List(l) => l.iter().map(IpNet::trunc).collect(),
    };
    let mut ports = Vec::new();
    for port in &p.exclude_ports {
        ports.push((*port, OUT_PORT_EXCLUDE));
    }
    for port in &p.include_ports {
        match ports.iter_mut().find(|(q, _)| q == port) {
            Some((_, bits)) => *bits |= OUT_PORT_INCLUDE,
            None => ports.push((*port, OUT_PORT_INCLUDE)),
        }
    }
    if !ports.is_empty() {
        k.flags |= OUT_HAS_PORTS;
    }
    let routes = if p.exclude_interfaces.is_empty() {
        Vec::new()
    } else {
        k.flags |= OUT_HAS_EXCLUDED_NIC;
        routes
    };
    if p.no_proxy == crate::NoProxy::Passthrough {
        k.flags |= OUT_NO_PROXY_PASSTHROUGH;
    }
    if p.mode == crate::Mode::Tproxy {
        k.flags |= OUT_TPROXY;
    }
    let bound = match (&p.proxy_cgroup, proxy_cgroup) {
        (Some(_), Some(cg)) => Some(cg),
        (None, _) if p.proxy_bypass_closed => Some(CgroupRef::NOWHERE),
        _ => None,
    };
    if let Some(cg) = bound {
        k.flags |= OUT_PROXY_CGROUP;
        k.proxy_cgroup = cg.id;
        k.proxy_cgroup_level = cg.level;
    }
    k.proxy_port = p.proxy_port;
    k.inbound_port = p.inbound_capture_port;
    k.tunnel_port = p.tunnel_port;
    k.dns_port = DNS_CAPTURE_PORT;
    Ok(Compiled {
        policy: k,
        exclude: p.exclude_cidrs.iter().map(IpNet::trunc).collect(),
        include,
        ports,
        routes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_cgroup_is_bound_only_when_the_policy_names_one() {
        let mut p = Policy::default();
        let cg = CgroupRef { id: 42, level: 3 };
        let c = compile(&p, false, Vec::new(), Some(cg)).expect("compile");
        assert_eq!(
            c.policy.flags & OUT_PROXY_CGROUP,
            0,
            "no proxy cgroup in the policy"
        );
        p.proxy_cgroup = Some("/sys/fs/cgroup/pod/proxy".into());
        let c = compile(&p, false, Vec::new(), Some(cg)).expect("compile");
        assert_ne!(c.policy.flags & OUT_PROXY_CGROUP, 0);
        assert_eq!(
            (c.policy.proxy_cgroup, c.policy.proxy_cgroup_level),
            (42, 3)
        );
        assert_eq!(c.policy.dns_port, DNS_CAPTURE_PORT);
        // Closed: bound to no cgroup while none is named; a named one wins.
        p.proxy_bypass_closed = true;
        let c = compile(&p, false, Vec::new(), Some(cg)).expect("compile");
        assert_eq!(c.policy.proxy_cgroup, 42);
        p.proxy_cgroup = None;
        let c = compile(&p, false, Vec::new(), None).expect("compile");
        assert_ne!(c.policy.flags & OUT_PROXY_CGROUP, 0);
        assert_eq!(
            (c.policy.proxy_cgroup, c.policy.proxy_cgroup_level),
            (u64::MAX, 1)
        );
    }

    #[test]
    fn a_list_longer_than_the_kernel_holds_names_it() {
        let p = Policy {
            proxy_uids: (0..1000).collect(),
            ..Policy::default()
        };
        let e = compile(&p, false, Vec::new(), None).expect_err("too many uids");
        assert_eq!(e.what, "proxy uids (-u)");
        assert!(e.to_string().contains("1000 proxy uids (-u) given"), "{e}");
    }
}
