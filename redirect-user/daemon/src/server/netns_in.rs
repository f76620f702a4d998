//! The namespace a request names: the descriptor the client opened and sent beside the line
//! (`SCM_RIGHTS`), known from then on by the path at which the daemon itself sees the same
//! namespace (same device and inode); without a descriptor, the path opened in the daemon's own
//! view. A runtime's path is never opened here for an enrollment it handed over.
use std::{
    fs::File,
    os::{fd::OwnedFd, unix::fs::MetadataExt as _},
    path::{Path, PathBuf},
};

use redirect_datapath::netns::NetnsHandle;

use crate::error::{Error, Result};

/// Where the daemon may see a namespace the caller named `named`: that path, and under `/run`
/// for a path under `/var/run` (containerd and CRI-O name `/var/run/netns/cni-...`; on every
/// host `/var/run` is `/run`, and the daemon's image has no `/var`).
pub(super) fn candidates(named: &Path) -> Vec<PathBuf> {
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

/// The first of [`candidates`] at which the daemon sees the namespace of `file`.
fn seen_at(named: &Path, file: &File) -> Result<PathBuf> {
    let meta = file
        .metadata()
        .map_err(|e| Error::io("reading the namespace descriptor for", named, e))?;
    let looked = candidates(named);
    looked
        .iter()
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| (m.dev(), m.ino()) == (meta.dev(), meta.ino()))
        })
        .cloned()
        .ok_or_else(|| Error::NetnsNotVisible {
            named: named.to_owned(),
            looked: looked.iter().map(|p| p.display().to_string()).collect(),
        })
}

/// The namespace of a request that names `named` and carried `fd` (or none).
pub(super) fn open(named: &Path, fd: Option<OwnedFd>) -> Result<NetnsHandle> {
    match fd {
        Some(fd) => {
            let file = File::from(fd);
            let seen = seen_at(named, &file)?;
            Ok(NetnsHandle::from_file(file, &seen)?)
        }
        None => Ok(NetnsHandle::open(named)?),
    }
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
    }
}
