//! The plugin binary in the CNI bin directory: copied atomically with mode 0755 when its
//! content differs, identified by its SHA-256 (what uninstall-cni may remove is only the file
//! it wrote, not one someone put there since).
use std::{
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
};

use sha2::{Digest as _, Sha256};

use crate::error::{io, Result};

/// The binary's name in the bin directory (the conflist entry's `type`).
pub const NAME: &str = crate::conflist::TYPE;

/// The hex SHA-256 of `bytes`.
pub(crate) fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The hex SHA-256 of the file `path`, `None` when it does not exist.
pub(crate) fn file_digest(path: &Path) -> Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(digest(&bytes))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("reading", path)(e)),
    }
}

/// What [`install`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    /// The binary in the bin directory.
    pub path: PathBuf,
    /// Its SHA-256.
    pub sha256: String,
    /// Whether it was written now (false: it was already this content, with mode 0755).
    pub written: bool,
    /// [`stamp`] of the source and the copy after this call.
    pub stamp: String,
}

/// Inode, size, mtime and mode of `source` and `copy`: while it is unchanged, neither file
/// needs reading again (a watcher's pass reads no binary).
pub(crate) fn stamp(source: &Path, copy: &Path) -> String {
    use std::os::unix::fs::MetadataExt as _;
    [source, copy]
        .iter()
        .map(|p| {
            std::fs::metadata(p).map_or_else(
                |_| "-".to_owned(),
                |m| {
                    format!(
                        "{}:{}:{}.{}:{:o}",
                        m.ino(),
                        m.size(),
                        m.mtime(),
                        m.mtime_nsec(),
                        m.mode()
                    )
                },
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Copies `source` to `bin_dir/redirect-cni` unless it is there already, mode 0755. `known`:
/// the copy recorded last time; when neither file changed since ([`stamp`]), nothing is read.
pub(crate) fn install(
    source: &Path,
    bin_dir: &Path,
    known: Option<&crate::state::Plugin>,
) -> Result<Copied> {
    let path = bin_dir.join(NAME);
    if let Some(k) =
        known.filter(|k| k.path == path && k.stamp.as_deref() == Some(&stamp(source, &path)))
    {
        return Ok(Copied {
            path,
            sha256: k.sha256.clone(),
            written: false,
            stamp: k.stamp.clone().unwrap_or_default(),
        });
    }
    let bytes = std::fs::read(source).map_err(io("reading the plugin", source))?;
    let mode_ok = std::fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o777 == 0o755);
    let same = mode_ok
        && match std::fs::read(&path) {
            Ok(there) => there == bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(io("reading", &path)(e)),
        };
    let sha256 = match known.filter(|k| same && k.path == path) {
        Some(k) => k.sha256.clone(),
        None => digest(&bytes),
    };
    if !same {
        crate::atomic::write(&path, &bytes, 0o755)?;
        tracing::info!(from = %source.display(), to = %path.display(), sha256, "plugin binary installed");
    }
    Ok(Copied {
        stamp: stamp(source, &path),
        path,
        sha256,
        written: !same,
    })
}
