//! Typed access to the datapath's maps, whether owned by a loaded object or opened from pins.
use std::collections::HashMap as StdHashMap;

use aya::{
    maps::{
        lpm_trie::{Key, LpmTrie},
        HashMap, Map, MapData,
    },
    Ebpf, Pod,
};
use redirect_common::PortKey;

use crate::error::{Error, Result};

/// Somewhere maps can be found by name.
pub trait MapStore {
    /// The map called `name`.
    fn map(&mut self, name: &'static str) -> Result<&mut Map>;
}

impl MapStore for Ebpf {
    fn map(&mut self, name: &'static str) -> Result<&mut Map> {
        self.map_mut(name)
            .ok_or(Error::Missing { kind: "map", name })
    }
}

/// Maps opened from their pins.
#[derive(Debug, Default)]
pub(crate) struct PinnedMaps(pub StdHashMap<&'static str, Map>);

impl MapStore for PinnedMaps {
    fn map(&mut self, name: &'static str) -> Result<&mut Map> {
        self.0
            .get_mut(name)
            .ok_or(Error::Missing { kind: "map", name })
    }
}

/// Wraps an aya map error with the operation and map name.
pub(crate) fn map_error(
    op: &'static str,
    name: &'static str,
) -> impl FnOnce(aya::maps::MapError) -> Error {
    move |source| Error::Map {
        op,
        name: name.to_owned(),
        source: Box::new(source),
    }
}

/// The hash map `name` with key `K` and value `V`.
pub(crate) fn hash<'a, K: Pod, V: Pod>(
    store: &'a mut dyn MapStore,
    name: &'static str,
) -> Result<HashMap<&'a mut MapData, K, V>> {
    HashMap::try_from(store.map(name)?).map_err(map_error("opening", name))
}

/// The LPM trie `name` with key data `K` and value `V`.
pub(crate) fn lpm<'a, K: Pod, V: Pod>(
    store: &'a mut dyn MapStore,
    name: &'static str,
) -> Result<LpmTrie<&'a mut MapData, K, V>> {
    LpmTrie::try_from(store.map(name)?).map_err(map_error("opening", name))
}

/// Keys of hash map `name` (key `K`, value `V`) that `pred` selects.
pub(crate) fn keys_where<K: Pod, V: Pod>(
    store: &mut dyn MapStore,
    name: &'static str,
    pred: impl Fn(&K) -> bool,
) -> Result<Vec<K>> {
    let map = hash::<K, V>(store, name)?;
    Ok(map
        .keys()
        .filter_map(|k| k.ok())
        .filter(|k| pred(k))
        .collect())
}

/// Removes the keys of hash map `name` that `pred` selects (a namespace's entries).
pub(crate) fn remove_where<K: Pod, V: Pod>(
    store: &mut dyn MapStore,
    name: &'static str,
    pred: impl Fn(&K) -> bool,
) -> Result<()> {
    let keys = keys_where::<K, V>(store, name, pred)?;
    let mut map = hash::<K, V>(store, name)?;
    for k in keys {
        let _ = map.remove(&k);
    }
    Ok(())
}

/// A port trie (`OUT_PORTS`, `INBOUND_PORTS`): an LPM trie whose every key is a whole
/// [`PortKey`] ([`PortKey::BITS`]), used as an exact-match map.
pub(crate) struct PortTrie<'a> {
    name: &'static str,
    trie: LpmTrie<&'a mut MapData, PortKey, u8>,
}

impl std::fmt::Debug for PortTrie<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortTrie")
            .field("name", &self.name)
            .finish()
    }
}

impl PortTrie<'_> {
    /// The rule of `key`, if there is one.
    pub(crate) fn get(&self, key: &PortKey) -> Option<u8> {
        self.trie.get(&Key::new(PortKey::BITS, *key), 0).ok()
    }

    /// Writes the rule of `key`.
    pub(crate) fn insert(&mut self, key: PortKey, value: u8) -> Result<()> {
        self.trie
            .insert(&Key::new(PortKey::BITS, key), value, 0)
            .map_err(map_error("writing", self.name))
    }

    /// Removes the rule of `key` (absent is not an error).
    pub(crate) fn remove(&mut self, key: &PortKey) {
        let _ = self.trie.remove(&Key::new(PortKey::BITS, *key));
    }

    /// Every key stored.
    pub(crate) fn keys(&self) -> Vec<PortKey> {
        self.trie
            .keys()
            .filter_map(|k| k.ok())
            .map(|k| k.data())
            .collect()
    }
}

/// The port trie `name`.
pub(crate) fn ports<'a>(store: &'a mut dyn MapStore, name: &'static str) -> Result<PortTrie<'a>> {
    Ok(PortTrie {
        name,
        trie: lpm::<PortKey, u8>(store, name)?,
    })
}

/// The keys of port trie `name` that `pred` selects.
pub(crate) fn port_keys_where(
    store: &mut dyn MapStore,
    name: &'static str,
    pred: impl Fn(&PortKey) -> bool,
) -> Result<Vec<PortKey>> {
    Ok(ports(store, name)?
        .keys()
        .into_iter()
        .filter(|k| pred(k))
        .collect())
}

/// Removes the keys of port trie `name` that `pred` selects (a namespace's rules).
pub(crate) fn remove_ports_where(
    store: &mut dyn MapStore,
    name: &'static str,
    pred: impl Fn(&PortKey) -> bool,
) -> Result<()> {
    let mut trie = ports(store, name)?;
    for k in trie.keys().into_iter().filter(|k| pred(k)) {
        trie.remove(&k);
    }
    Ok(())
}
