//! The sizing record's pin (`DIR/sizing`): created with a new datapath, read by every apply
//! (the current record and the shorter one of layout v4 and older).
use std::{os::fd::AsFd as _, path::Path};

use aya::maps::{Array, Map, MapData};

use super::{Quotas, Raw, RawV1, PIN};
use crate::{
    error::{Error, Result},
    sys::bpfsys,
};

fn map_err(op: &'static str, dir: &Path) -> impl FnOnce(aya::maps::MapError) -> Error {
    crate::error::record_err(op, dir, PIN)
}

/// Creates and pins the sizing record of a new datapath.
pub(crate) fn create(dir: &Path, quotas: &Quotas) -> Result<()> {
    let path = dir.join(PIN);
    let pin_err = |op: &'static str| {
        let path = path.clone();
        move |source| Error::Pin { op, path, source }
    };
    let size = u32::try_from(std::mem::size_of::<Raw>()).unwrap_or(u32::MAX);
    let fd = bpfsys::array_map_create("redirect_sizing", size)
        .map_err(pin_err("creating the sizing record for"))?;
    bpfsys::obj_pin(fd.as_fd(), &path).map_err(pin_err("pinning the sizing record at"))?;
    let data = MapData::from_pin(&path).map_err(map_err("opening the sizing record", dir))?;
    let mut array: Array<MapData, Raw> =
        Array::try_from(Map::Array(data)).map_err(map_err("reading the sizing record", dir))?;
    array
        .set(0, quotas.encode(), 0)
        .map_err(map_err("writing the sizing record", dir))
}

/// The quotas of the datapath at `dir`; the defaults for one pinned before sizing existed.
pub(crate) fn read(dir: &Path) -> Result<Quotas> {
    let path = dir.join(PIN);
    if !path.exists() {
        return Ok(Quotas::default());
    }
    let open = || MapData::from_pin(&path).map_err(map_err("opening the sizing record", dir));
    if let Ok(array) = Array::<MapData, Raw>::try_from(Map::Array(open()?)) {
        let raw = array
            .get(&0, 0)
            .map_err(map_err("reading the sizing record", dir))?;
        return Ok(Quotas::decode(&raw).unwrap_or_default());
    }
    // An older record (its value is shorter).
    let array: Array<MapData, RawV1> =
        Array::try_from(Map::Array(open()?)).map_err(map_err("reading the sizing record", dir))?;
    let raw = array
        .get(&0, 0)
        .map_err(map_err("reading the sizing record", dir))?;
    Ok(Quotas::decode_v1(&raw).unwrap_or_default())
}
