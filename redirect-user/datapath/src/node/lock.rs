//! The lock that serialises changes to one pinned datapath, and the ownership its directory
//! and the pin directory must have: root's own, writable by nobody else, so that no other
//! user can hold the lock (and stall every writer) or plant the pin directory where a bpffs
//! of mode 1777 (the kernel's default for `mount -t bpf bpf /sys/fs/bpf`) would let them.
use std::{
    fs::{DirBuilder, OpenOptions},
    os::unix::fs::{
        DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
    },
    path::{Path, PathBuf},
};

use rustix::fs::FlockOperation;

use super::{flock::Flocked, pins::ensure_bpffs};
use crate::{
    error::{Error, Result},
    load::preflight,
};

/// Serialises changes to one pinned datapath (`redirect istio-iptables` runs, `vm`, the
/// daemon): an exclusive flock on a lock directory of its own beside the pin directory, in the
/// bpf filesystem every writer shares whatever its mount namespace (`NAME_lock`: bpffs refuses
/// dots in names), so two datapaths on one host never wait on each other. The lock directory is
/// made mode 0700 (no other user can open it, so none can flock it) and removed when the lock
/// is released; a waiter that finds it replaced takes the new one: nothing is left behind.
/// A lock directory or pin directory that is not root's own (another user made it first) is
/// refused at once, naming the fix, never waited on. Refuses when the pin directory's parent
/// is not a bpffs (see `ensure_bpffs`).
pub fn lock(dir: &Path) -> Result<NodeLock> {
    preflight::require_root()?;
    ensure_bpffs(dir)?;
    let mount = dir.parent().unwrap_or(Path::new("/"));
    match std::fs::symlink_metadata(dir) {
        Ok(m) => roots_own(dir, &m, mount)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("reading", dir, e)),
    }
    let name = dir
        .file_name()
        .map_or_else(|| "redirect".into(), |n| n.to_string_lossy().into_owned());
    let path = mount.join(format!("{name}_lock"));
    loop {
        match DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io("creating the lock directory", &path, e)),
        }
        // Never through a symlink another user put at the path.
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(f) => f,
            // Released and removed between the two calls: take the next one.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                let m =
                    std::fs::symlink_metadata(&path).map_err(|e| Error::io("reading", &path, e))?;
                return Err(Error::NotRootsOwn {
                    path,
                    uid: m.uid(),
                    mode: m.mode() & 0o7777,
                    mount: mount.to_path_buf(),
                });
            }
            Err(e) => return Err(Error::io("opening", &path, e)),
        };
        let m = file
            .metadata()
            .map_err(|e| Error::io("reading", &path, e))?;
        roots_own(&path, &m, mount)?;
        if m.mode() & 0o077 != 0 {
            // Made by an earlier version with the umask's mode: nobody else opens it from now.
            file.set_permissions(std::fs::Permissions::from_mode(0o700))
                .map_err(|e| Error::io("restricting", &path, e))?;
        }
        let held = Flocked::lock(file, FlockOperation::LockExclusive)
            .map_err(|e| Error::io("locking", &path, e.into()))?;
        // Still the directory at the path (not one its last holder removed)?
        let same = match (held.file().metadata(), std::fs::symlink_metadata(&path)) {
            (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
            _ => false,
        };
        if same {
            return Ok(NodeLock { held, path });
        }
    }
}

/// `Ok` when `m` (of `path`) is a directory of this process's user (root) that no group or
/// other user may write; else the refusal naming the owner, the mode and the fix.
fn roots_own(path: &Path, m: &std::fs::Metadata, mount: &Path) -> Result<()> {
    let me = rustix::process::geteuid().as_raw();
    if m.is_dir() && m.uid() == me && m.mode() & 0o022 == 0 {
        return Ok(());
    }
    Err(Error::NotRootsOwn {
        path: path.to_path_buf(),
        uid: m.uid(),
        mode: m.mode() & 0o7777,
        mount: mount.to_path_buf(),
    })
}

/// The bpffs holding `dir` and its mode when any user may create entries in it (mode 1777,
/// the kernel's default): the daemon warns at start, as another user could then make the pin
/// directory or the lock first (refused, naming the fix, but capture cannot start).
#[must_use]
pub fn open_to_all(dir: &Path) -> Option<(PathBuf, u32)> {
    let mount = dir.parent().unwrap_or(Path::new("/"));
    let m = std::fs::metadata(mount).ok()?;
    (m.mode() & 0o002 != 0).then(|| (mount.to_path_buf(), m.mode() & 0o7777))
}

/// The lock of one pinned datapath, released (and its directory removed) on drop.
#[derive(Debug)]
pub struct NodeLock {
    held: Flocked,
    path: PathBuf,
}

impl Drop for NodeLock {
    fn drop(&mut self) {
        // Removed while still held: a waiter then sees another inode at the path and retries.
        let _ = std::fs::remove_dir(&self.path);
        let _ = &self.held;
    }
}
