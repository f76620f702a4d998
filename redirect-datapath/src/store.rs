//! Typed access to the datapath's maps, whether owned by a loaded object or opened from pins.
use std::collections::HashMap as StdHashMap;

use aya::{
    maps::{lpm_trie::LpmTrie, HashMap, Map, MapData},
    Ebpf, Pod,
};

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
pub struct PinnedMaps(pub StdHashMap<&'static str, Map>);

impl MapStore for PinnedMaps {
    fn map(&mut self, name: &'static str) -> Result<&mut Map> {
        self.0
            .get_mut(name)
            .ok_or(Error::Missing { kind: "map", name })
    }
}

/// Wraps an aya map error with the operation and map name.
pub fn map_error(
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
pub fn hash<'a, K: Pod, V: Pod>(
    store: &'a mut dyn MapStore,
    name: &'static str,
) -> Result<HashMap<&'a mut MapData, K, V>> {
    HashMap::try_from(store.map(name)?).map_err(map_error("opening", name))
}

/// The LPM trie `name` with key data `K` and value `V`.
pub fn lpm<'a, K: Pod, V: Pod>(
    store: &'a mut dyn MapStore,
    name: &'static str,
) -> Result<LpmTrie<&'a mut MapData, K, V>> {
    LpmTrie::try_from(store.map(name)?).map_err(map_error("opening", name))
}

/// Keys of hash map `name` (key `K`, value `V`) that `pred` selects.
pub fn keys_where<K: Pod, V: Pod>(
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
pub fn remove_where<K: Pod, V: Pod>(
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
