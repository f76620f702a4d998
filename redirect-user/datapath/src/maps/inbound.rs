//! The shared map writers of a namespace's inbound enrollment, for the per-process datapath and
//! the node's alike: its policy and port rules, its addresses (`POD_ADDRS`) and a proxy that
//! already listens (`LISTENERS`).
use redirect_common::NetnsCookie;
use std::{net::IpAddr, path::Path};

use aya::maps::{MapData, SockHash};
use redirect_common::{map_names, AddrKey, InboundPolicy, ListenerKey, PortKey, AF_INET, AF_INET6};
use redirect_policy::{
    inbound_policy_of as policy_of, inbound_port_entries as port_entries, InboundSpec,
};

use crate::{
    error::{Error, Result},
    maps::store::{hash, map_error, port_keys_where, ports, MapStore},
    netns::adopt,
    netns::NetnsHandle,
};

/// `POD_ADDRS` key of an address.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub fn addr_key(ip: IpAddr) -> AddrKey {
    let family = if ip.is_ipv4() { AF_INET } else { AF_INET6 };
    let addr = redirect_common::types::addr_words(ip);
    AddrKey {
        addr,
        family,
        _pad: [0; 6],
    }
}

/// Writes `spec`'s inbound policy and port rules for namespace `cookie`.
pub(crate) fn write_inbound(
    store: &mut dyn MapStore,
    spec: &InboundSpec,
    cookie: NetnsCookie,
) -> Result<()> {
    {
        let mut ports = ports(store, map_names::INBOUND_PORTS)?;
        for (port, rule) in port_entries(spec) {
            ports.insert(PortKey::new(cookie.get(), port), rule)?;
        }
    }
    // The policy last: it is what makes sk_lookup act on the namespace.
    hash::<NetnsCookie, InboundPolicy>(store, map_names::NETNS_INBOUND)?
        .insert(cookie, policy_of(spec), 0)
        .map_err(map_error("writing", map_names::NETNS_INBOUND))
}

/// Whether namespace `cookie`'s stored inbound policy is TPROXY mode's (a lookup: what an
/// apply reads before it writes, to know whether the pod's TPROXY routing must go).
pub(crate) fn is_tproxy(store: &mut dyn MapStore, cookie: NetnsCookie) -> Result<bool> {
    Ok(
        hash::<NetnsCookie, InboundPolicy>(store, map_names::NETNS_INBOUND)?
            .get(&cookie, 0)
            .is_ok_and(|p| p.flags & redirect_common::INBOUND_TPROXY != 0),
    )
}

/// Removes namespace `cookie`'s inbound policy and port rules (its addresses stay: the
/// outbound rules use them too).
pub(crate) fn remove_inbound(store: &mut dyn MapStore, cookie: NetnsCookie) -> Result<()> {
    let keys = inbound_port_keys(store, cookie)?;
    remove_inbound_keys(store, cookie, &keys)
}

/// [`remove_inbound`] when the namespace's `INBOUND_PORTS` keys are known (`keys`).
pub(crate) fn remove_inbound_keys(
    store: &mut dyn MapStore,
    cookie: NetnsCookie,
    keys: &[PortKey],
) -> Result<()> {
    {
        let mut policies = hash::<NetnsCookie, InboundPolicy>(store, map_names::NETNS_INBOUND)?;
        let _ = policies.remove(&cookie);
    }
    let mut ports = ports(store, map_names::INBOUND_PORTS)?;
    for key in keys {
        ports.remove(key);
    }
    Ok(())
}

/// `INBOUND_PORTS` keys of namespace `cookie`.
pub(crate) fn inbound_port_keys(
    store: &mut dyn MapStore,
    cookie: NetnsCookie,
) -> Result<Vec<PortKey>> {
    port_keys_where(store, map_names::INBOUND_PORTS, |k| k.netns == cookie)
}

/// The `INBOUND_PORTS` keys [`write_inbound`] writes for `spec` under namespace `cookie`.
pub(crate) fn port_keys_of(spec: &InboundSpec, cookie: NetnsCookie) -> Vec<PortKey> {
    port_entries(spec)
        .into_iter()
        .map(|(port, _)| PortKey::new(cookie.get(), port))
        .collect()
}

/// Removes those of `keys` that `spec` no longer lists.
pub(crate) fn remove_port_keys(
    store: &mut dyn MapStore,
    keys: &[PortKey],
    spec: &InboundSpec,
) -> Result<()> {
    let mut ports = ports(store, map_names::INBOUND_PORTS)?;
    let written = port_entries(spec);
    for k in keys
        .iter()
        .filter(|k| !written.iter().any(|(p, _)| *p == k.port))
    {
        ports.remove(k);
    }
    Ok(())
}

/// The address of a `POD_ADDRS` key.
pub(crate) fn addr_of_key(k: &AddrKey) -> IpAddr {
    crate::maps::outbound::ip_of(k.family, k.addr)
}

/// Makes `POD_ADDRS` hold `new` instead of `old` for namespace `cookie`; an address owned by
/// another namespace is refused before anything is changed.
pub(crate) fn sync_addresses(
    store: &mut dyn MapStore,
    netns: &Path,
    cookie: NetnsCookie,
    old: &[IpAddr],
    new: &[IpAddr],
) -> Result<()> {
    let mut map = hash::<AddrKey, u64>(store, map_names::POD_ADDRS)?;
    if let Some(ip) = new.iter().find(|ip| {
        map.get(&addr_key(**ip), 0)
            .is_ok_and(|owner| owner != cookie)
    }) {
        return Err(Error::AddressConflict {
            addr: *ip,
            netns: netns.to_path_buf(),
        });
    }
    for ip in old.iter().filter(|ip| !new.contains(ip)) {
        let key = addr_key(*ip);
        if map.get(&key, 0).is_ok_and(|owner| owner == cookie) {
            let _ = map.remove(&key);
        }
    }
    for ip in new.iter().filter(|ip| !old.contains(ip)) {
        let key = addr_key(*ip);
        if map.get(&key, 0).is_ok_and(|owner| owner != cookie) {
            return Err(Error::AddressConflict {
                addr: *ip,
                netns: netns.to_path_buf(),
            });
        }
        map.insert(key, cookie.get(), 0)
            .map_err(map_error("writing", map_names::POD_ADDRS))?;
    }
    Ok(())
}

/// Hands a proxy that already listens on the inbound port to `LISTENERS` (sock_ops only
/// sees `listen()` calls made after it was attached): only a TCP socket of this namespace,
/// listening on that port ([`adopt::check_listener`]), looked for in `ns` (`spec`'s namespace,
/// opened once for the whole apply).
pub(crate) fn adopt_listeners(
    store: &mut dyn MapStore,
    spec: &InboundSpec,
    ns: &NetnsHandle,
) -> Result<()> {
    let cookie = ns.cookie();
    let found = adopt::listeners(ns, spec.inbound_port)?;
    if found.is_empty() {
        return Ok(());
    }
    let map = store.map(map_names::LISTENERS)?;
    let mut hash: SockHash<&mut MapData, ListenerKey> =
        SockHash::try_from(map).map_err(map_error("opening", map_names::LISTENERS))?;
    for l in found {
        let Some((sock, family)) = adopt::take_listener(&l, ns, spec.inbound_port) else {
            tracing::warn!(
                inode = l.inode,
                netns = %spec.netns.display(),
                "inbound listener found but no socket of this namespace's listener could be taken"
            );
            continue;
        };
        let family = u32::from(family);
        hash.insert(
            ListenerKey {
                netns: cookie,
                family,
                _pad: 0,
            },
            std::os::fd::AsRawFd::as_raw_fd(&sock),
            0,
        )
        .map_err(map_error(
            "adopting the inbound listener into",
            map_names::LISTENERS,
        ))?;
        tracing::info!(netns = %spec.netns.display(), port = spec.inbound_port, family,
            "adopted a running inbound listener");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_keys_are_network_order() {
        let k = addr_key("198.18.0.1".parse().expect("ip"));
        assert_eq!(k.addr[0].to_ne_bytes(), [198, 18, 0, 1]);
        assert_eq!(k.family, AF_INET);
        let k = addr_key("2001:db8::1".parse().expect("ip"));
        assert_eq!(k.addr[0].to_ne_bytes(), [0x20, 0x01, 0x0d, 0xb8]);
        assert_eq!(k.addr[3].to_ne_bytes(), [0, 0, 0, 1]);
        assert_eq!(k.family, AF_INET6);
    }
}
