//! The bpf(2) commands of an upgrade in place that aya 0.14's public API does not cover for
//! descriptors opened from pins. A syscall edge. What stays, and the aya API looked at:
//! - A link's program (`BPF_OBJ_GET_INFO_BY_FD`, [`link_prog_id`]) on the link descriptor the
//!   upgrade keeps for `BPF_LINK_UPDATE`: aya's `LinkInfo::program_id` is read only through
//!   `FdLink::info`, and an `FdLink` (from `PinnedLink::from_pin`) cannot give its descriptor
//!   back (no `AsFd`, no `Into<OwnedFd>`).
//! - `BPF_PROG_GET_FD_BY_ID` ([`prog_by_id`]): `ProgramInfo::fd` issues it, but 0.14 has no
//!   `ProgramInfo::from_id`; a `ProgramInfo` comes only from a pin, an aya `Program` or
//!   `loaded_programs()`.
//! - `BPF_LINK_UPDATE` with `BPF_F_REPLACE` ([`link_update`]): aya's `FdLink` has no update; aya
//!   issues `BPF_LINK_UPDATE` only inside `Xdp::attach_to_link` and
//!   `SchedClassifier::attach_to_link`, with flags 0 (no old program to check).
//! - A map's definition (`BPF_OBJ_GET_INFO_BY_FD`, [`map_def`]) of a descriptor kept for the
//!   copy: `MapInfo` has no public constructor from a descriptor (`new_from_fd` is
//!   crate-private), and `MapData::from_fd` keeps what it read in a private `aya_obj::Map`
//!   (`MapData::info` would read it again). `MapInfo::from_pin` would do for a pin's definition
//!   alone (`upgrade.rs`'s `def_at`), but its `map_type()` is aya's `MapType`, an error for a
//!   type aya does not name, where [`MapDef`] keeps and prints the kernel's number.
//! - The raw copy of entries (`BPF_MAP_GET_NEXT_KEY`, `BPF_MAP_LOOKUP_ELEM`,
//!   `BPF_MAP_UPDATE_ELEM`): aya's maps are typed by `Pod` keys and values of compile-time size;
//!   ours are sized at run time from the map's definition (and a hash's keys become a trie's).
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use aya_obj::generated::{
    bpf_attr, bpf_cmd, bpf_link_info, bpf_map_info, bpf_map_type, BPF_F_REPLACE,
};

use crate::sys::bpfsys::{bpf, fd_u32, obj_info, owned, ptr_u64, zeroed};

/// The id of the program a bpf_link runs (`struct bpf_link_info.prog_id`).
pub(crate) fn link_prog_id(link: BorrowedFd<'_>) -> io::Result<u32> {
    Ok(obj_info::<bpf_link_info>(link)?.prog_id)
}

/// Opens the loaded program with kernel id `id`.
pub(crate) fn prog_by_id(id: u32) -> io::Result<OwnedFd> {
    let mut attr: bpf_attr = zeroed();
    attr.__bindgen_anon_6.__bindgen_anon_1.prog_id = id;
    owned(bpf(bpf_cmd::BPF_PROG_GET_FD_BY_ID, &mut attr)?)
}

/// Replaces the program of `link` with `new` atomically, only if it still runs `old`
/// (`BPF_F_REPLACE`): a connection sees either program, never none.
pub(crate) fn link_update(
    link: BorrowedFd<'_>,
    new: BorrowedFd<'_>,
    old: BorrowedFd<'_>,
) -> io::Result<()> {
    let mut attr: bpf_attr = zeroed();
    attr.link_update.link_fd = fd_u32(link);
    attr.link_update.__bindgen_anon_1.new_prog_fd = fd_u32(new);
    attr.link_update.flags = BPF_F_REPLACE;
    attr.link_update.__bindgen_anon_2.old_prog_fd = fd_u32(old);
    bpf(bpf_cmd::BPF_LINK_UPDATE, &mut attr).map(|_| ())
}

/// What defines a map: two maps with the same definition can stand for each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub struct MapDef {
    /// `enum bpf_map_type`.
    pub map_type: u32,
    /// Key bytes.
    pub key_size: u32,
    /// Value bytes (per CPU for per-CPU maps).
    pub value_size: u32,
    /// Capacity.
    pub max_entries: u32,
    /// `map_flags` at creation.
    pub flags: u32,
}

impl std::fmt::Display for MapDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "type {}, key {} B, value {} B, {} entries, flags {:#x}",
            self.map_type, self.key_size, self.value_size, self.max_entries, self.flags
        )
    }
}

/// The definition of map `fd` as the kernel reports it (`struct bpf_map_info`).
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub fn map_def(fd: BorrowedFd<'_>) -> io::Result<MapDef> {
    let info: bpf_map_info = obj_info(fd)?;
    Ok(MapDef {
        map_type: info.type_,
        key_size: info.key_size,
        value_size: info.value_size,
        max_entries: info.max_entries,
        flags: info.map_flags,
    })
}

const HASH: u32 = bpf_map_type::BPF_MAP_TYPE_HASH as u32;
const ARRAY: u32 = bpf_map_type::BPF_MAP_TYPE_ARRAY as u32;
const PERCPU_HASH: u32 = bpf_map_type::BPF_MAP_TYPE_PERCPU_HASH as u32;
const PERCPU_ARRAY: u32 = bpf_map_type::BPF_MAP_TYPE_PERCPU_ARRAY as u32;
const LRU_HASH: u32 = bpf_map_type::BPF_MAP_TYPE_LRU_HASH as u32;
const LRU_PERCPU_HASH: u32 = bpf_map_type::BPF_MAP_TYPE_LRU_PERCPU_HASH as u32;
const LPM_TRIE: u32 = bpf_map_type::BPF_MAP_TYPE_LPM_TRIE as u32;

/// Whether the entries of hash `old` can be carried into trie `new` ([`copy_hash_into_trie`]):
/// the trie's key is the hash's key behind a 4-byte prefix length, the value the same.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub fn hash_becomes_trie(old: &MapDef, new: &MapDef) -> bool {
    old.map_type == HASH
        && new.map_type == LPM_TRIE
        && new.key_size == old.key_size + 4
        && new.value_size == old.value_size
}

/// Copies every entry of hash `from` into LPM trie `to` at the full key length (the trie used
/// as an exact-match map, see [`hash_becomes_trie`]). Returns the number of entries copied.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub fn copy_hash_into_trie(
    from: BorrowedFd<'_>,
    to: BorrowedFd<'_>,
    def: MapDef,
) -> io::Result<usize> {
    let mut value = vec![0u8; def.value_size as usize];
    let mut trie_key = (def.key_size * 8).to_ne_bytes().to_vec();
    trie_key.resize(4 + def.key_size as usize, 0);
    for_each_key(from, def.key_size, &mut value, |key, value| {
        trie_key[4..].copy_from_slice(key);
        elem(
            bpf_cmd::BPF_MAP_UPDATE_ELEM,
            to,
            trie_key.as_ptr(),
            value.as_mut_ptr(),
        )
    })
}

/// Calls `put` with every key of hash or trie `from` (keys of `key_size` bytes) and its value
/// (read into `value`); an entry deleted between the two reads is skipped. Returns how many
/// `put` took.
fn for_each_key(
    from: BorrowedFd<'_>,
    key_size: u32,
    value: &mut [u8],
    mut put: impl FnMut(&[u8], &mut [u8]) -> io::Result<()>,
) -> io::Result<usize> {
    let mut key = vec![0u8; key_size as usize];
    let mut next = vec![0u8; key_size as usize];
    let mut first = true;
    let mut copied = 0;
    loop {
        let start = if first {
            std::ptr::null()
        } else {
            key.as_ptr()
        };
        match elem(
            bpf_cmd::BPF_MAP_GET_NEXT_KEY,
            from,
            start,
            next.as_mut_ptr(),
        ) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(copied),
            Err(e) => return Err(e),
        }
        first = false;
        std::mem::swap(&mut key, &mut next);
        match elem(
            bpf_cmd::BPF_MAP_LOOKUP_ELEM,
            from,
            key.as_ptr(),
            value.as_mut_ptr(),
        ) {
            Ok(()) => {}
            // Deleted by a program between the two calls: nothing to carry over.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(e),
        }
        put(&key, value)?;
        copied += 1;
    }
}

/// Whether user space can copy the entries of a map of this type ([`copy_entries`]).
pub(crate) fn copyable(map_type: u32) -> bool {
    matches!(
        map_type,
        HASH | ARRAY | PERCPU_HASH | PERCPU_ARRAY | LRU_HASH | LRU_PERCPU_HASH | LPM_TRIE
    )
}

fn elem(cmd: bpf_cmd, fd: BorrowedFd<'_>, key: *const u8, val: *mut u8) -> io::Result<()> {
    let mut attr: bpf_attr = zeroed();
    attr.__bindgen_anon_2.map_fd = fd_u32(fd);
    attr.__bindgen_anon_2.key = ptr_u64(key);
    attr.__bindgen_anon_2.__bindgen_anon_1.value = ptr_u64(val);
    bpf(cmd, &mut attr).map(|_| ())
}

/// Copies every entry of `from` into `to` (same type, key and value sizes; any capacity):
/// arrays index by index up to the smaller size, hashes and tries key by key. Returns the
/// number of entries copied. An entry `to` cannot take is an error.
pub(crate) fn copy_entries(
    from: BorrowedFd<'_>,
    to: BorrowedFd<'_>,
    def: MapDef,
    to_max: u32,
) -> io::Result<usize> {
    let per_cpu = matches!(def.map_type, PERCPU_HASH | PERCPU_ARRAY | LRU_PERCPU_HASH);
    let cpus = if per_cpu {
        aya::util::nr_cpus().map_err(|(_, e)| e)?
    } else {
        1
    };
    let value_len = if per_cpu {
        (def.value_size as usize).div_ceil(8) * 8 * cpus
    } else {
        def.value_size as usize
    };
    let mut value = vec![0u8; value_len];
    if matches!(def.map_type, ARRAY | PERCPU_ARRAY) {
        let n = def.max_entries.min(to_max);
        for i in 0..n {
            let key = i.to_ne_bytes();
            elem(
                bpf_cmd::BPF_MAP_LOOKUP_ELEM,
                from,
                key.as_ptr(),
                value.as_mut_ptr(),
            )?;
            elem(
                bpf_cmd::BPF_MAP_UPDATE_ELEM,
                to,
                key.as_ptr(),
                value.as_mut_ptr(),
            )?;
        }
        return Ok(n as usize);
    }
    for_each_key(from, def.key_size, &mut value, |key, value| {
        elem(
            bpf_cmd::BPF_MAP_UPDATE_ELEM,
            to,
            key.as_ptr(),
            value.as_mut_ptr(),
        )
    })
}
