//! Outbound policy in the maps: resolves the one input the pure compile cannot read (the proxy
//! cgroup's id), compiles with `redirect_policy::compile_outbound`, and writes or removes one
//! namespace's `NETNS_OUTBOUND` value, CIDR trie entries and port rules.
use redirect_common::NetnsCookie;
use std::collections::HashSet;

use aya::maps::lpm_trie::Key;
use ipnet::IpNet;
use redirect_common::{
    map_names,
    outbound::{CidrKey, OutboundPolicy},
    PortKey, AF_INET, AF_INET6,
};

use redirect_policy::Policy;

use crate::{
    error::Result,
    maps::store::{hash, lpm, map_error, port_keys_where, ports, remove_ports_where, MapStore},
};

pub(crate) use redirect_common::types::{addr_of as ip_of, addr_words as words};
pub(crate) use redirect_policy::{CgroupRef, Compiled};

/// Compiles `p` for a namespace ([`redirect_policy::compile_outbound`]), its proxy
/// cgroup resolved to the kernel's id first: the one input the pure half cannot read.
pub(crate) fn compile(p: &Policy, ipv6: bool, routes: Vec<(IpNet, bool)>) -> Result<Compiled> {
    let proxy_cgroup = p.proxy_cgroup.as_deref().map(cgroup_id_level).transpose()?;
    Ok(redirect_policy::compile_outbound(
        p,
        ipv6,
        routes,
        proxy_cgroup,
    )?)
}

/// A cgroup v2 directory's id (its inode number, as `bpf_get_current_cgroup_id` reports it) and
/// depth below the cgroup v2 root.
pub(crate) fn cgroup_id_level(path: &std::path::Path) -> Result<CgroupRef> {
    let dir = crate::cgroup::validate(path)?;
    let root = crate::cgroup::cgroup2_root()?;
    let id = crate::cgroup::id(&dir)?;
    let level = dir
        .strip_prefix(&root)
        .map_or(0, |rel| rel.components().count());
    Ok(CgroupRef {
        id,
        level: u16::try_from(level).unwrap_or(u16::MAX),
    })
}

fn cidr_key(netns: NetnsCookie, net: &IpNet) -> Key<CidrKey> {
    let (family, bits) = match net {
        IpNet::V4(n) => (AF_INET, n.prefix_len()),
        IpNet::V6(n) => (AF_INET6, n.prefix_len()),
    };
    Key::new(
        CidrKey::prefix_len(bits),
        CidrKey::new(netns.get(), family, words(net.network())),
    )
}

/// The CIDR tries of a namespace's outbound rules.
pub(crate) const TRIES: [&str; 3] = [
    map_names::OUT_EXCLUDE,
    map_names::OUT_INCLUDE,
    map_names::OUT_ROUTES,
];

/// Trie entries currently stored for `netns`.
fn trie_keys(
    store: &mut dyn MapStore,
    name: &'static str,
    netns: NetnsCookie,
) -> Result<Vec<Key<CidrKey>>> {
    let trie = lpm::<CidrKey, u8>(store, name)?;
    let want = netns.get().to_be_bytes();
    Ok(trie
        .keys()
        .filter_map(|k| k.ok())
        .filter(|k| k.data().netns == want)
        .collect())
}

/// The `OUT_ROUTES` entries stored for `netns` (prefix, via an excluded interface), sorted as
/// [`crate::netns::routes::table::Resolved::entries`] are: what a refresh compares the namespace's routes to.
pub(crate) fn stored_routes(
    store: &mut dyn MapStore,
    netns: NetnsCookie,
) -> Result<Vec<(IpNet, bool)>> {
    let trie = lpm::<CidrKey, u8>(store, map_names::OUT_ROUTES)?;
    let want = netns.get().to_be_bytes();
    let mut out: Vec<(IpNet, bool)> = trie
        .iter()
        .filter_map(|e| e.ok())
        .filter(|(k, _)| k.data().netns == want)
        .filter_map(|(k, via)| {
            let d = k.data();
            let family = u16::try_from(u32::from_be_bytes(d.family)).ok()?;
            let bits = u8::try_from(k.prefix_len().checked_sub(CidrKey::prefix_len(0))?).ok()?;
            let net = IpNet::new(ip_of(family, d.addr), bits).ok()?;
            Some((net, via != 0))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// The keys of one namespace's outbound rules: `OUT_PORTS`, and each trie of [`TRIES`].
#[derive(Clone, Default)]
pub(crate) struct OutKeys {
    /// `OUT_PORTS` keys.
    pub(crate) ports: Vec<PortKey>,
    /// Keys of `OUT_EXCLUDE`, `OUT_INCLUDE` and `OUT_ROUTES`, in [`TRIES`]' order.
    pub(crate) tries: [Vec<Key<CidrKey>>; 3],
}

impl std::fmt::Debug for OutKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tries: Vec<usize> = self.tries.iter().map(Vec::len).collect();
        f.debug_struct("OutKeys")
            .field("ports", &self.ports.len())
            .field("tries", &tries)
            .finish()
    }
}

/// The outbound rule keys stored for `netns`, found by iterating the maps.
pub(crate) fn out_keys(store: &mut dyn MapStore, netns: NetnsCookie) -> Result<OutKeys> {
    Ok(OutKeys {
        ports: port_keys_where(store, map_names::OUT_PORTS, |k| k.netns == netns)?,
        tries: [
            trie_keys(store, TRIES[0], netns)?,
            trie_keys(store, TRIES[1], netns)?,
            trie_keys(store, TRIES[2], netns)?,
        ],
    })
}

/// Writes `c` under `netns` (the cookie, or 0 for the default policy): rules first, the policy
/// value last (it is what turns them on), then drops rules of a previous policy that `c` lacks.
pub(crate) fn write(store: &mut dyn MapStore, netns: NetnsCookie, c: &Compiled) -> Result<()> {
    let old = out_keys(store, netns)?;
    write_over(store, netns, c, &old).map(|_| ())
}

/// [`write`] over a previous policy whose rule keys are `old` (none are looked for in the
/// maps). Returns the rule keys now stored.
pub(crate) fn write_over(
    store: &mut dyn MapStore,
    netns: NetnsCookie,
    c: &Compiled,
    old: &OutKeys,
) -> Result<OutKeys> {
    let sets: [Vec<(IpNet, u8)>; 3] = [
        c.exclude.iter().map(|n| (*n, 1)).collect(),
        c.include.iter().map(|n| (*n, 1)).collect(),
        c.routes
            .iter()
            .map(|(n, via)| (*n, u8::from(*via)))
            .collect(),
    ];
    let mut now = OutKeys::default();
    let mut keep: Vec<HashSet<Vec<u8>>> = Vec::new();
    for ((name, set), keys) in TRIES.iter().zip(&sets).zip(&mut now.tries) {
        let mut trie = lpm::<CidrKey, u8>(store, name)?;
        let mut kept = HashSet::new();
        for (net, value) in set {
            let key = cidr_key(netns, net);
            if kept.insert(key_bytes(&key)) {
                keys.push(key);
            }
            trie.insert(&key, *value, 0)
                .map_err(map_error("writing", name))?;
        }
        keep.push(kept);
    }
    {
        let mut ports = ports(store, map_names::OUT_PORTS)?;
        for (port, bits) in &c.ports {
            let key = PortKey::new(netns.get(), *port);
            ports.insert(key, *bits)?;
            if !now.ports.iter().any(|k| k.port == key.port) {
                now.ports.push(key);
            }
        }
    }
    hash::<NetnsCookie, OutboundPolicy>(store, map_names::NETNS_OUTBOUND)?
        .insert(netns, c.policy, 0)
        .map_err(map_error("writing", map_names::NETNS_OUTBOUND))?;
    for ((name, old), kept) in TRIES.iter().zip(&old.tries).zip(&keep) {
        let mut trie = lpm::<CidrKey, u8>(store, name)?;
        for key in old.iter().filter(|k| !kept.contains(&key_bytes(k))) {
            let _ = trie.remove(key);
        }
    }
    let mut ports = ports(store, map_names::OUT_PORTS)?;
    for key in &old.ports {
        if !c.ports.iter().any(|(p, _)| *p == key.port) {
            ports.remove(key);
        }
    }
    Ok(now)
}

/// Removes `netns`'s outbound policy (first: capture stops) and then its rules.
pub(crate) fn remove(store: &mut dyn MapStore, netns: NetnsCookie) -> Result<()> {
    {
        let mut policies = hash::<NetnsCookie, OutboundPolicy>(store, map_names::NETNS_OUTBOUND)?;
        let _ = policies.remove(&netns);
    }
    for name in TRIES {
        let keys = trie_keys(store, name, netns)?;
        let mut trie = lpm::<CidrKey, u8>(store, name)?;
        for key in keys {
            let _ = trie.remove(&key);
        }
    }
    remove_ports_where(store, map_names::OUT_PORTS, |k| k.netns == netns)
}

fn key_bytes(k: &Key<CidrKey>) -> Vec<u8> {
    let d = k.data();
    let mut v = k.prefix_len().to_ne_bytes().to_vec();
    v.extend_from_slice(&d.netns);
    v.extend_from_slice(&d.family);
    for w in d.addr {
        v.extend_from_slice(&w.to_ne_bytes());
    }
    v
}

/// Number of policies stored (the default one included).
pub(crate) fn count(store: &mut dyn MapStore) -> Result<usize> {
    let policies = hash::<NetnsCookie, OutboundPolicy>(store, map_names::NETNS_OUTBOUND)?;
    Ok(policies.keys().filter(|k| k.is_ok()).count())
}
