//! The pinned layout's version and owner record (`DIR/layout`, a one-entry array map): which
//! layout of pins and maps a datapath has, who owns it (the daemon, by pid and start time, or
//! the CLI) and the cgroups it is attached at. A datapath pinned before records existed has
//! none: layout v0.
use std::{
    ffi::OsStr,
    os::{fd::AsFd as _, unix::ffi::OsStrExt as _},
    path::{Path, PathBuf},
};

use aya::maps::{Array, Map, MapData};
use rustix::{fs::FlockOperation, io::Errno};

use super::flock::{Flocked, PinsHeld};
use crate::{
    error::{record_err, Error, Result},
    sys::bpfsys,
};

/// The layout this build reads and writes. v0: no record (before versions); v1: this record;
/// v2: `SOCK_STATE` socket storage, the bind4/bind6 links that mark the proxy's listeners,
/// `PROXY_LISTENERS` counting in u64 (updated atomically) and `DIR/sizing`; v3: original
/// destinations in `SOCK_STATE` (no `PENDING`), `TRACKED` hand-offs claimed and deleted by the
/// proxy's socket, counted per policy in `HANDOFFS` against the `--quota-handshakes` quota;
/// v4: `LOCAL_CONNECTS` / `LOCAL_COUNTS` (the pod's own connects sk_lookup may exempt), `::6`
/// never in `POD_ADDRS`, `COUNTERS` one slot wider (`local_quota`); v5: `OUT_PORTS` and
/// `INBOUND_PORTS` are LPM tries of full-length keys (memory for the rules written, not for
/// every pod's full quota), the connection maps sized from `--max-connections` (a longer
/// `DIR/sizing` record; an older one keeps its sizes); v6: `COUNTERS` one slot wider
/// (`tproxy_local`).
#[cfg(not(feature = "layout-next"))]
pub const LAYOUT_VERSION: u32 = 6;
/// The layouts this build upgrades in place (`redirect upgrade`, a daemon starting): v5, whose
/// `COUNTERS` is widened and copied; v4, whose
/// port hashes are carried into the new tries key by key, and v3, which v4 already upgraded
/// (two new maps, `COUNTERS` widened and copied); the new sock_ops, which records a pod's own
/// connects, is in place before the sk_lookup that needs the records. Not v2, whose
/// per-socket state (`SOCK_STATE`) had another format, so a connection caught between two
/// link updates would lose its original destination.
#[cfg(not(feature = "layout-next"))]
pub const UPGRADES_FROM: &[u32] = &[3, 4, 5];
/// The next layout, built only for the upgrade test (`cargo xtask test` builds it from this
/// tree): v7 = v6 with a wider `COUNTERS` map, a changed map definition to carry over.
#[cfg(feature = "layout-next")]
pub const LAYOUT_VERSION: u32 = 7;
/// See the v6 build: v7 upgrades v6 in place.
#[cfg(feature = "layout-next")]
pub const UPGRADES_FROM: &[u32] = &[6];
/// Name of the record's pin and of the map in the kernel.
pub(crate) const PIN: &str = "layout";
const MAGIC: u64 = 0x7265_6469_7265_6374; // "redirect"
/// The record as stored: [magic, layout, mode, owner pid, owner start time, app cgroup id,
/// proxy cgroup id, build id of the programs (0 before it was recorded)], then the owning daemon's
/// directory (NUL-padded bytes).
type Raw = [u64; 8 + DIR_WORDS];
const DIR_WORDS: usize = 32;

/// Who owns a pinned datapath.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Created by a command (`redirect istio-iptables`, `vm`), no process keeps it.
    Cli,
    /// A daemon: its pid and start time (clock ticks after boot, `/proc/PID/stat` field 22).
    Daemon {
        /// The daemon's pid.
        pid: u32,
        /// Its start time, so a reused pid is not taken for it.
        start: u64,
    },
}

impl Owner {
    /// A daemon owner that is this process.
    pub fn this_daemon() -> Result<Self> {
        let pid = std::process::id();
        Ok(Self::Daemon {
            pid,
            start: start_time(pid).ok_or_else(|| {
                Error::io(
                    "reading the start time in",
                    format!("/proc/{pid}/stat"),
                    std::io::Error::other("unreadable"),
                )
            })?,
        })
    }

    /// Whether the owner is a daemon that is still running (same pid, same start time), as
    /// this process's PID namespace sees it (see [`daemon_up`] for an answer from the kernel).
    pub fn is_live_daemon(&self) -> bool {
        match *self {
            Self::Cli => false,
            Self::Daemon { pid, start } => start_time(pid) == Some(start),
        }
    }
}

/// The lock a running daemon holds on its pin directory (shared, for its lifetime): a kernel
/// object, so any process that sees the pins can tell, whatever its PID namespace.
pub fn hold_as_daemon(dir: &Path) -> Result<PinsHeld> {
    let file = std::fs::File::open(dir).map_err(|e| Error::io("opening", dir, e))?;
    // Blocking: a process asking `daemon_up` holds the exclusive lock only for an instant.
    Flocked::lock(file, FlockOperation::LockShared)
        .map(|lock| PinsHeld { _lock: lock })
        .map_err(|e| Error::io("locking (shared)", dir, e.into()))
}

/// Whether the daemon recorded as the owner of the datapath at `dir` runs: its pid is alive
/// with the recorded start time, or (seen from a container, where pids mean nothing) its
/// lock on the pin directory is held.
pub fn daemon_up(dir: &Path, record: &Layout) -> bool {
    if !matches!(record.owner, Owner::Daemon { .. }) {
        return false;
    }
    record.owner.is_live_daemon()
        || std::fs::File::open(dir).is_ok_and(|f| {
            matches!(
                Flocked::lock(f, FlockOperation::NonBlockingLockExclusive),
                Err(Errno::WOULDBLOCK)
            )
        })
}

/// The record of a pinned datapath.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Layout version.
    pub version: u32,
    /// Who owns it.
    pub owner: Owner,
    /// Cgroup id (inode) of the capture attach point.
    pub app_cgroup: u64,
    /// Cgroup id of the proxy attach point (getsockopt, sock_ops).
    pub(crate) proxy_cgroup: u64,
    /// The owning daemon's directory (its socket is `daemon.sock` there), when a daemon owns it.
    pub daemon_dir: Option<PathBuf>,
    /// Build id of the BPF object whose programs run ([`crate::load::object::build_id`]; 0: not
    /// recorded).
    pub build: u64,
}

impl Layout {
    fn encode(&self) -> Raw {
        let (mode, pid, start) = match self.owner {
            Owner::Cli => (1, 0, 0),
            Owner::Daemon { pid, start } => (2, u64::from(pid), start),
        };
        let mut raw = [0u64; 8 + DIR_WORDS];
        raw[..8].copy_from_slice(&[
            MAGIC,
            u64::from(self.version),
            mode,
            pid,
            start,
            self.app_cgroup,
            self.proxy_cgroup,
            self.build,
        ]);
        if let Some(dir) = &self.daemon_dir {
            let bytes = dir.as_os_str().as_bytes();
            let mut buf = [0u8; DIR_WORDS * 8];
            let n = bytes.len().min(buf.len() - 1);
            buf[..n].copy_from_slice(&bytes[..n]);
            for (i, chunk) in buf.chunks_exact(8).enumerate() {
                let mut w = [0u8; 8];
                w.copy_from_slice(chunk);
                raw[8 + i] = u64::from_ne_bytes(w);
            }
        }
        raw
    }

    fn decode(raw: &Raw) -> Option<Self> {
        if raw[0] != MAGIC {
            return None;
        }
        let owner = match raw[2] {
            2 => Owner::Daemon {
                pid: u32::try_from(raw[3]).ok()?,
                start: raw[4],
            },
            _ => Owner::Cli,
        };
        let bytes: Vec<u8> = raw[8..].iter().flat_map(|w| w.to_ne_bytes()).collect();
        let len = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
        let daemon_dir = (len > 0).then(|| PathBuf::from(OsStr::from_bytes(&bytes[..len])));
        Some(Self {
            version: u32::try_from(raw[1]).ok()?,
            owner,
            app_cgroup: raw[5],
            proxy_cgroup: raw[6],
            daemon_dir,
            build: raw[7],
        })
    }
}

fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm may contain spaces and parentheses: the fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn map_err(op: &'static str, dir: &Path) -> impl FnOnce(aya::maps::MapError) -> Error {
    record_err(op, dir, PIN)
}

fn open(dir: &Path) -> Result<Option<Array<MapData, Raw>>> {
    let path = dir.join(PIN);
    if !path.exists() {
        return Ok(None);
    }
    let data = MapData::from_pin(&path).map_err(map_err("opening the layout record", dir))?;
    let array =
        Array::try_from(Map::Array(data)).map_err(map_err("reading the layout record", dir))?;
    Ok(Some(array))
}

/// Creates and pins the record of a new datapath.
pub(crate) fn create(dir: &Path, layout: &Layout) -> Result<()> {
    let path = dir.join(PIN);
    let fd = bpfsys::array_map_create(
        "redirect_layout",
        u32::try_from(std::mem::size_of::<Raw>()).unwrap_or(u32::MAX),
    )
    .map_err(|e| Error::Pin {
        op: "creating the layout record for",
        path: path.clone(),
        source: e,
    })?;
    bpfsys::obj_pin(fd.as_fd(), &path).map_err(|e| Error::Pin {
        op: "pinning the layout record at",
        path: path.clone(),
        source: e,
    })?;
    write(dir, layout)
}

/// Rewrites the record (e.g. a daemon taking ownership).
pub fn write(dir: &Path, layout: &Layout) -> Result<()> {
    let mut array = open(dir)?.ok_or_else(|| Error::Layout {
        dir: dir.to_path_buf(),
        found: 0,
        expected: LAYOUT_VERSION,
    })?;
    array
        .set(0, layout.encode(), 0)
        .map_err(map_err("writing the layout record", dir))
}

/// The record of the datapath at `dir`: `None` for a layout v0 datapath (no record).
pub fn read(dir: &Path) -> Result<Option<Layout>> {
    let Some(array) = open(dir)? else {
        return Ok(None);
    };
    let raw = array
        .get(&0, 0)
        .map_err(map_err("reading the layout record", dir))?;
    Ok(Layout::decode(&raw))
}

/// The record, checked: a datapath of another layout is an error naming both versions.
pub fn check(dir: &Path) -> Result<Layout> {
    match read(dir)? {
        Some(l) if l.version == LAYOUT_VERSION => Ok(l),
        other => Err(Error::Layout {
            dir: dir.to_path_buf(),
            found: other.map_or(0, |l| l.version),
            expected: LAYOUT_VERSION,
        }),
    }
}

/// Every pinned datapath with a layout record directly under `bpffs` (e.g. `/sys/fs/bpf`).
pub(crate) fn all_under(bpffs: &Path) -> Vec<(PathBuf, Layout)> {
    let Ok(entries) = std::fs::read_dir(bpffs) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|dir| dir.join(PIN).exists())
        .filter_map(|dir| read(&dir).ok().flatten().map(|l| (dir, l)))
        .collect()
}

/// A pinned datapath attached at `cgroup`, above it or below it (a second datapath there
/// would capture the same processes twice), as (pin directory, record, its attach cgroup).
pub fn attached_near(bpffs: &Path, cgroup: &Path) -> Option<(PathBuf, Layout, PathBuf)> {
    all_under(bpffs).into_iter().find_map(|(dir, layout)| {
        let at = crate::cgroup::path_of_id(layout.app_cgroup)?;
        (cgroup.starts_with(&at) || at.starts_with(cgroup)).then_some((dir, layout, at))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips() {
        for (owner, dir) in [
            (Owner::Cli, None),
            (
                Owner::Daemon { pid: 42, start: 7 },
                Some(PathBuf::from("/run/redirect/daemon")),
            ),
        ] {
            let l = Layout {
                version: LAYOUT_VERSION,
                owner,
                app_cgroup: 1,
                proxy_cgroup: 2,
                daemon_dir: dir,
                build: 9,
            };
            assert_eq!(Layout::decode(&l.encode()), Some(l));
        }
        assert_eq!(Layout::decode(&[0; 8 + DIR_WORDS]), None);
    }

    #[test]
    fn this_process_is_a_live_owner() {
        let me = Owner::this_daemon().unwrap();
        assert!(me.is_live_daemon());
        let Owner::Daemon { pid, start } = me else {
            panic!("{me:?}")
        };
        let reborn = Owner::Daemon {
            pid,
            start: start + 1,
        };
        assert!(!reborn.is_live_daemon(), "a reused pid is not the owner");
        assert!(!Owner::Cli.is_live_daemon());
    }
}
