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
pub fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The hex SHA-256 of the file `path`, `None` when it does not exist.
pub fn file_digest(path: &Path) -> Result<Option<String>> {
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
}

/// Copies `source` to `bin_dir/redirect-cni` unless it is there already, mode 0755.
pub fn install(source: &Path, bin_dir: &Path) -> Result<Copied> {
    let bytes = std::fs::read(source).map_err(io("reading the plugin", source))?;
    let sha256 = digest(&bytes);
    let path = bin_dir.join(NAME);
    let mode_ok = std::fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o777 == 0o755);
    let same = mode_ok && file_digest(&path)?.as_deref() == Some(sha256.as_str());
    if !same {
        crate::atomic::write(&path, &bytes, 0o755)?;
        tracing::info!(from = %source.display(), to = %path.display(), sha256, "plugin binary installed");
    }
    Ok(Copied {
        path,
        sha256,
        written: !same,
    })
}
