//! Reads the per-CPU decision counters and the tracking-map fill levels.
use aya::maps::{HashMap, Map, MapData, PerCpuArray};
use redirect_common::{ConnKey, Counter, Tracked};
use serde::Serialize;

use crate::error::{Error, Result};

/// One decision counter summed over CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CounterValue {
    /// Stable snake_case name.
    pub name: &'static str,
    /// Sum over all CPUs.
    pub value: u64,
}

fn map_err(op: &'static str, id: u32) -> impl FnOnce(aya::maps::MapError) -> Error {
    move |source| Error::Map {
        op,
        name: format!("id {id}"),
        source: Box::new(source),
    }
}

/// Sums a `COUNTERS` map.
pub(crate) fn read_counters<T: std::borrow::Borrow<MapData>>(
    map: &PerCpuArray<T, u64>,
) -> Result<Vec<CounterValue>> {
    Counter::ALL
        .iter()
        .map(|c| {
            let values = map.get(&(*c as u32), 0).map_err(|source| Error::Map {
                op: "reading counter",
                name: c.name().into(),
                source: Box::new(source),
            })?;
            Ok(CounterValue {
                name: c.name(),
                value: values.iter().sum(),
            })
        })
        .collect()
}

/// Sums a `COUNTERS` map found by kernel id (used by `redirect status` from another process).
pub fn read_counters_by_id(id: u32) -> Result<Vec<CounterValue>> {
    let data = MapData::from_id(id).map_err(map_err("opening", id))?;
    let map = Map::from_map_data(data).map_err(map_err("opening", id))?;
    let array: PerCpuArray<MapData, u64> =
        PerCpuArray::try_from(map).map_err(map_err("opening", id))?;
    read_counters(&array)
}

fn hash_len_by_id<K: aya::Pod, V: aya::Pod>(id: u32) -> Result<usize> {
    let data = MapData::from_id(id).map_err(map_err("opening", id))?;
    let map = Map::from_map_data(data).map_err(map_err("opening", id))?;
    let hash: HashMap<MapData, K, V> = HashMap::try_from(map).map_err(map_err("opening", id))?;
    Ok(hash.keys().filter(Result::is_ok).count())
}

/// Number of entries in the `TRACKED` map with this id.
pub fn tracked_len_by_id(id: u32) -> Result<usize> {
    hash_len_by_id::<ConnKey, Tracked>(id)
}
