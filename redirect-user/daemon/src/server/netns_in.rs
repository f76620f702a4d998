//! The namespace a request names: the descriptor the client opened and sent beside the line
//! (`SCM_RIGHTS`), known from then on by the path at which the daemon itself sees the same
//! namespace (same device and inode): the path named, or else a runtime's name for it in the
//! netns directories the daemon sees (a client inside the pod names its own
//! `/proc/self/ns/net`); without a descriptor, the path opened in the daemon's own view. A
//! runtime's path is never opened here for an enrollment it handed over. And whether a
//! namespace is the host's, which no enrollment of a pod may be.
use std::{
    fs::File,
    os::{
        fd::{AsFd as _, OwnedFd},
        unix::fs::MetadataExt as _,
    },
    path::{Path, PathBuf},
};

use redirect_common::NetnsCookie;
use redirect_datapath::NetnsHandle;

use crate::error::{Error, Result};

/// Where the daemon may see a namespace the caller named `named`: that path, and under `/run`
/// for a path under `/var/run` (containerd and CRI-O name `/var/run/netns/cni-...`; on every
/// host `/var/run` is `/run`, and the daemon's image has no `/var`). None for the caller's own
/// view (`/proc/self/...`), which would name the daemon's own namespace here.
pub(super) fn candidates(named: &Path) -> Vec<PathBuf> {
    // The caller's own view names the daemon's own namespace here: never a match.
    if named.starts_with("/proc/self") || named.starts_with("/proc/thread-self") {
        return Vec::new();
    }
    let mut out = vec![named.to_owned()];
    if let Ok(rest) = named.strip_prefix("/var/run") {
        out.push(Path::new("/run").join(rest));
    }
    out
}

/// The first of [`candidates`] that exists in the daemon's view (DEL and unenroll: no
/// descriptor, the path only looked up); `named` itself when none does.
pub(super) fn seen_path(named: &Path) -> PathBuf {
    candidates(named)
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| named.to_owned())
}

/// The directories where runtimes name the namespaces they create (`ip netns`, containerd,
/// CRI-O: `/var/run/netns`, which is `/run/netns`), searched for a namespace handed over by
/// descriptor under a name the daemon does not share.
pub(super) const RUNTIME_DIRS: [&str; 1] = ["/run/netns"];

/// Whether `path` names the namespace `(dev, ino)` in the daemon's view.
fn names(path: &Path, id: (u64, u64)) -> bool {
    std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == id)
}

/// The first of [`candidates`] at which the daemon sees the namespace of `file`, else its
/// name in one of `dirs` (sorted, so the same namespace gets the same name every time).
fn seen_at(named: &Path, file: &File, dirs: &[&str]) -> Result<PathBuf> {
    let meta = file
        .metadata()
        .map_err(|e| Error::io("reading the namespace descriptor for", named, e))?;
    let id = (meta.dev(), meta.ino());
    let looked = candidates(named);
    if let Some(p) = looked.iter().find(|p| names(p, id)) {
        return Ok(p.clone());
    }
    for dir in dirs {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        if let Some(p) = entries.into_iter().find(|p| names(p, id)) {
            tracing::debug!(named = %named.display(), seen = %p.display(),
                "a namespace handed over by descriptor, found by its runtime's name");
            return Ok(p);
        }
    }
    Err(Error::NetnsNotVisible {
        named: named.to_owned(),
        looked: looked
            .iter()
            .map(|p| p.display().to_string())
            .chain(dirs.iter().map(|d| format!("{d}/*")))
            .collect(),
    })
}

/// Another name under which the daemon sees the namespace behind `ns`, whose recorded path
/// no longer names it (a `/proc/PID/ns/net` whose process exited, as a runtime that names a
/// sandbox by its pause process's pid leaves it): a runtime's name in [`RUNTIME_DIRS`], else
/// `/proc/PID/ns/net` of a process still in it. `None` when nothing names it any more (the
/// pod's sandbox is gone: its held descriptor alone keeps it).
pub(super) fn renamed(ns: &NetnsHandle) -> Option<NetnsHandle> {
    let file = File::from(ns.as_fd().try_clone_to_owned().ok()?);
    let meta = file.metadata().ok()?;
    let id = (meta.dev(), meta.ino());
    let mut found = RUNTIME_DIRS
        .iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .map(|e| e.path())
        .find(|p| names(p, id));
    if found.is_none() {
        found = std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            })
            .map(|e| e.path().join("ns/net"))
            .find(|p| names(p, id));
    }
    NetnsHandle::from_file(file, &found?).ok()
}

/// The namespace of a request that names `named` and carried `fd` (or none).
pub(super) fn open(named: &Path, fd: Option<OwnedFd>) -> Result<NetnsHandle> {
    match fd {
        Some(fd) => {
            let file = File::from(fd);
            let seen = seen_at(named, &file, &RUNTIME_DIRS)?;
            Ok(NetnsHandle::from_file(file, &seen)?)
        }
        None => Ok(NetnsHandle::open(named)?),
    }
}

/// Whether `cookie` is the host's network namespace: the daemon's own (it runs on the host
/// network) or init's (seen with hostPID). Neither is ever a pod's.
pub(super) fn is_host(cookie: NetnsCookie) -> bool {
    ["/proc/self/ns/net", "/proc/1/ns/net"].iter().any(|p| {
        redirect_datapath::netns_cookie(std::path::Path::new(p)).is_ok_and(|c| c == cookie)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn var_run_is_also_looked_for_under_run() {
        assert_eq!(
            candidates(Path::new("/var/run/netns/cni-1")),
            [
                PathBuf::from("/var/run/netns/cni-1"),
                PathBuf::from("/run/netns/cni-1")
            ]
        );
        assert_eq!(
            candidates(Path::new("/proc/42/ns/net")),
            [PathBuf::from("/proc/42/ns/net")]
        );
        assert!(candidates(Path::new("/proc/self/ns/net")).is_empty());
        assert!(candidates(Path::new("/proc/thread-self/ns/net")).is_empty());
    }

    /// Files stand in for namespaces: `seen_at` compares device and inode only.
    #[test]
    fn a_descriptor_under_a_name_not_shared_is_found_by_its_runtimes_name() {
        let dir = std::env::temp_dir().join(redirect_testkit::unique_name("netns-in"));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["cni-a", "cni-b"] {
            std::fs::write(dir.join(name), name).unwrap();
        }
        let dirs = [dir.to_str().unwrap()];
        let own = Path::new("/proc/self/ns/net");
        let b = File::open(dir.join("cni-b")).unwrap();
        assert_eq!(seen_at(own, &b, &dirs).unwrap(), dir.join("cni-b"));
        // The name given wins when it is the same namespace.
        assert_eq!(
            seen_at(&dir.join("cni-b"), &b, &[]).unwrap(),
            dir.join("cni-b")
        );
        let elsewhere = File::open("/proc/self/exe").unwrap();
        let err = seen_at(own, &elsewhere, &dirs).unwrap_err().to_string();
        assert!(err.contains("/proc/self/ns/net"), "{err}");
        assert!(err.contains(&format!("{}/*", dir.display())), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
