//! What each namespace owns in the shared maps (its addresses, port rules, interfaces and
//! CIDR entries), read from the maps once and then kept up to date by this process's own
//! writes, so replacing a policy writes and deletes the keys that change without iterating
//! maps sized for every pod of the node (`BPF_MAP_GET_NEXT_KEY` walks every bucket, an LPM
//! trie from its root for each key).
//!
//! Only user space writes these maps (no BPF program inserts or deletes in them), and writers
//! hold the node lock. Another process may write between two of a long-lived process's locks
//! (`redirect istio-iptables` writes a namespace the daemon cannot open directly): a namespace
//! the index does not know but the kernel has a policy for is looked for in the maps
//! ([`Owned::scan`]), removals always iterate the maps, and the daemon reads the whole index
//! again every few seconds ([`Index::build`]).
use redirect_common::NetnsCookie;
use std::{
    collections::{HashMap, HashSet},
    net::IpAddr,
};

use aya::maps::lpm_trie::Key;
use redirect_common::{map_names, outbound::CidrKey, AddrKey, IfKey, PortKey};

use crate::{
    error::Result,
    maps::inbound,
    maps::outbound::{OutKeys, TRIES},
    maps::store::{hash, keys_where, lpm, MapStore},
};

/// One namespace's entries outside its policy values.
#[derive(Clone, Default)]
pub(super) struct Owned {
    /// `POD_ADDRS` entries it owns.
    pub(super) addrs: Vec<IpAddr>,
    /// `INBOUND_PORTS` keys.
    pub(super) inbound_ports: Vec<PortKey>,
    /// `IFACES` keys.
    pub(super) ifaces: Vec<IfKey>,
    /// `OUT_PORTS` keys and the keys of each CIDR trie.
    pub(super) out: OutKeys,
}

/// Every namespace's [`Owned`], and which have an outbound policy.
#[derive(Default)]
pub(super) struct Index {
    owned: HashMap<NetnsCookie, Owned>,
    policies: HashSet<NetnsCookie>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("namespaces", &self.owned.len())
            .field("policies", &self.policies.len())
            .finish()
    }
}

impl Index {
    /// Reads every namespace's entries from the maps: one iteration of each.
    pub(super) fn build(store: &mut dyn MapStore) -> Result<Self> {
        let mut index = Self::default();
        for (key, owner) in hash::<AddrKey, u64>(store, map_names::POD_ADDRS)?
            .iter()
            .filter_map(|e| e.ok())
        {
            index
                .entry(NetnsCookie(owner))
                .addrs
                .push(inbound::addr_of_key(&key));
        }
        for key in ports(store, map_names::INBOUND_PORTS)? {
            index.entry(key.netns).inbound_ports.push(key);
        }
        for key in ports(store, map_names::OUT_PORTS)? {
            index.entry(key.netns).out.ports.push(key);
        }
        for key in hash::<IfKey, u8>(store, map_names::IFACES)?
            .keys()
            .filter_map(|k| k.ok())
        {
            index.entry(key.netns).ifaces.push(key);
        }
        for (i, name) in TRIES.iter().enumerate() {
            let keys: Vec<Key<CidrKey>> = lpm::<CidrKey, u8>(store, name)?
                .keys()
                .filter_map(|k| k.ok())
                .collect();
            for key in keys {
                let netns = u64::from_be_bytes(key.data().netns);
                index.entry(NetnsCookie(netns)).out.tries[i].push(key);
            }
        }
        index.policies = hash::<NetnsCookie, redirect_common::outbound::OutboundPolicy>(
            store,
            map_names::NETNS_OUTBOUND,
        )?
        .keys()
        .filter_map(|k| k.ok())
        .collect();
        Ok(index)
    }

    fn entry(&mut self, cookie: NetnsCookie) -> &mut Owned {
        self.owned.entry(cookie).or_default()
    }

    /// What namespace `cookie` owns (nothing when it has no entries).
    pub(super) fn owned(&self, cookie: NetnsCookie) -> Owned {
        self.owned.get(&cookie).cloned().unwrap_or_default()
    }

    /// What namespace `cookie` owns, `None` when the index has no entry of it.
    pub(super) fn get(&self, cookie: NetnsCookie) -> Option<Owned> {
        self.owned.get(&cookie).cloned()
    }

    /// Records what namespace `cookie` owns after a write, and that it has a policy.
    pub(super) fn set(&mut self, cookie: NetnsCookie, owned: Owned) {
        self.owned.insert(cookie, owned);
        self.policies.insert(cookie);
    }

    /// Records the addresses namespace `cookie` owns now.
    pub(super) fn set_addrs(&mut self, cookie: NetnsCookie, addrs: &[IpAddr]) {
        self.entry(cookie).addrs = addrs.to_vec();
    }

    /// Records the outbound keys namespace `cookie` owns now.
    pub(super) fn set_out(&mut self, cookie: NetnsCookie, out: OutKeys) {
        self.entry(cookie).out = out;
    }

    /// Forgets namespace `cookie` (its entries were removed).
    pub(super) fn forget(&mut self, cookie: NetnsCookie) {
        self.owned.remove(&cookie);
        self.policies.remove(&cookie);
    }

    /// How many namespaces have an outbound policy (the default entry included).
    pub(super) fn policies(&self) -> usize {
        self.policies.len()
    }
}

impl Owned {
    /// What namespace `cookie` owns, found by iterating the maps (for a namespace whose
    /// entries another process may have written).
    pub(super) fn scan(store: &mut dyn MapStore, cookie: NetnsCookie) -> Result<Self> {
        Ok(Self {
            addrs: super::entries::owned_addresses(store, cookie)?,
            inbound_ports: inbound::inbound_port_keys(store, cookie)?,
            ifaces: keys_where::<IfKey, u8>(store, map_names::IFACES, |k| k.netns == cookie)?,
            out: crate::maps::outbound::out_keys(store, cookie)?,
        })
    }
}

fn ports(store: &mut dyn MapStore, name: &'static str) -> Result<Vec<PortKey>> {
    Ok(crate::maps::store::ports(store, name)?.keys())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_and_forget_track_policies() {
        let mut index = Index::default();
        assert_eq!(index.policies(), 0);
        index.set(
            NetnsCookie(7),
            Owned {
                addrs: vec!["198.18.0.1".parse().expect("ip")],
                ..Owned::default()
            },
        );
        assert_eq!(index.policies(), 1);
        assert_eq!(index.owned(NetnsCookie(7)).addrs.len(), 1);
        assert!(index.owned(NetnsCookie(8)).addrs.is_empty());
        index.set_addrs(NetnsCookie(7), &[]);
        assert!(index.owned(NetnsCookie(7)).addrs.is_empty());
        index.forget(NetnsCookie(7));
        assert_eq!(index.policies(), 0);
    }
}
