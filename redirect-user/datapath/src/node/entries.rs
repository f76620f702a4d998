//! One namespace's entries outside the policy value: its addresses, its interfaces (`-c`,
//! `-k`) and the count of listeners on its outbound port.
use redirect_common::NetnsCookie;
use redirect_common::{map_names, IfKey};

use redirect_policy::Policy;

use crate::{
    error::Result,
    maps::inbound,
    maps::store::{hash, remove_where, MapStore},
    netns::NetnsHandle,
};

pub(super) fn owned_addresses(
    store: &mut dyn MapStore,
    cookie: NetnsCookie,
) -> Result<Vec<std::net::IpAddr>> {
    let map = hash::<redirect_common::AddrKey, u64>(store, map_names::POD_ADDRS)?;
    Ok(map
        .iter()
        .filter_map(|e| e.ok())
        .filter(|(_, owner)| *owner == cookie)
        .map(|(k, _)| inbound::addr_of_key(&k))
        .collect())
}

/// Interfaces whose arriving traffic istio-iptables RETURNs in PREROUTING (`-c`, `-k`), by
/// index in the namespace, replacing the namespace's previous keys `old`; names that do not
/// exist (yet) are skipped with a warning. Returns the keys written.
pub(super) fn write_ifaces(
    store: &mut dyn MapStore,
    ns: &NetnsHandle,
    policy: &Policy,
    old: &[IfKey],
) -> Result<Vec<IfKey>> {
    let cookie = ns.cookie();
    let mut wanted: Vec<(String, u8)> = Vec::new();
    for (names, bit) in [
        (&policy.exclude_interfaces, redirect_common::IFACE_EXCLUDED),
        (
            &policy.kube_virt_interfaces,
            redirect_common::IFACE_KUBEVIRT,
        ),
    ] {
        for n in names {
            match wanted.iter_mut().find(|(w, _)| w == n) {
                Some((_, b)) => *b |= bit,
                None => wanted.push((n.clone(), bit)),
            }
        }
    }
    let names: Vec<String> = wanted.iter().map(|(n, _)| n.clone()).collect();
    let indexes = ns.ifindexes(&names)?;
    let mut map = hash::<IfKey, u8>(store, map_names::IFACES)?;
    for key in old {
        let _ = map.remove(key);
    }
    let mut written = Vec::new();
    for ((name, bits), index) in wanted.iter().zip(indexes) {
        let Some(ifindex) = index else {
            tracing::warn!(interface = %name, netns = %ns.path().display(),
                "interface not found; its inbound traffic is not exempted");
            continue;
        };
        let key = IfKey {
            netns: cookie,
            ifindex,
            _pad: 0,
        };
        map.insert(key, *bits, 0)
            .map_err(crate::maps::store::map_error("writing", map_names::IFACES))?;
        written.push(key);
    }
    Ok(written)
}

pub(super) fn remove_ifaces(store: &mut dyn MapStore, cookie: NetnsCookie) -> Result<()> {
    remove_where::<IfKey, u8>(store, map_names::IFACES, |k| k.netns == cookie)
}

/// Counts the sockets already listening on the outbound port (sock_ops only sees listen()
/// calls made after the policy exists), so a proxy that started first is known to be up.
pub(super) fn seed_proxy_listeners(
    store: &mut dyn MapStore,
    ns: &NetnsHandle,
    port: u16,
) -> Result<()> {
    let cookie = ns.cookie();
    let found = crate::netns::adopt::listeners(ns, port)?.len() as u64;
    let mut map = hash::<NetnsCookie, u64>(store, map_names::PROXY_LISTENERS)?;
    // BPF_NOEXIST: once the namespace has a count, sock_ops keeps it (a re-apply must not
    // overwrite it, or the close of a listener counted since would count below zero).
    match map.insert(cookie, found, 1) {
        Ok(()) => Ok(()),
        Err(aya::maps::MapError::SyscallError(e))
            if e.io_error.kind() == std::io::ErrorKind::AlreadyExists =>
        {
            Ok(())
        }
        Err(e) => Err(crate::maps::store::map_error(
            "writing",
            map_names::PROXY_LISTENERS,
        )(e)),
    }
}

/// Drops namespace `cookie`'s per-namespace decision counters.
pub(super) fn remove_ns_counters(store: &mut dyn MapStore, cookie: NetnsCookie) -> Result<()> {
    let mut map: aya::maps::PerCpuHashMap<
        &mut aya::maps::MapData,
        redirect_common::NsCounterKey,
        u64,
    > = aya::maps::PerCpuHashMap::try_from(store.map(map_names::NETNS_COUNTERS)?).map_err(
        crate::maps::store::map_error("opening", map_names::NETNS_COUNTERS),
    )?;
    let keys: Vec<redirect_common::NsCounterKey> = map
        .keys()
        .filter_map(|k| k.ok())
        .filter(|k| k.netns == cookie)
        .collect();
    for k in keys {
        let _ = map.remove(&k);
    }
    Ok(())
}
