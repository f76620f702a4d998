//! The daemon directory made private before anything is put in it: the socket and the
//! enrollment files live there, so whoever else controls it steers the node's capture.
use std::{
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::Path,
};

use crate::error::{Error, Result};

/// Creates `dir` if missing, then makes it private (mode 0700) and checks that it is: owned by
/// the daemon's user, not reached through someone else's symlink, and mode 0700 once changed.
/// Anything else is refused before the lock, the socket or a file is made.
pub(crate) fn make_private(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io("creating", dir, e))?;
    let me = rustix::process::geteuid().as_raw();
    let refused = |why: String| Error::DirNotPrivate {
        dir: dir.to_owned(),
        why,
    };
    let link = std::fs::symlink_metadata(dir).map_err(|e| Error::io("lstat", dir, e))?;
    if link.file_type().is_symlink() && link.uid() != me {
        return Err(refused(format!(
            "it is a symlink owned by uid {} (not {me}), who can point it anywhere",
            link.uid()
        )));
    }
    let meta = std::fs::metadata(dir).map_err(|e| Error::io("stat", dir, e))?;
    if !meta.is_dir() {
        return Err(refused("it is not a directory".into()));
    }
    if meta.uid() != me {
        return Err(refused(format!(
            "it is owned by uid {} (not {me}), who can change its mode back or replace what is in it",
            meta.uid()
        )));
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| refused(format!("chmod 0700 failed: {e}")))?;
    let mode = std::fs::metadata(dir)
        .map_err(|e| Error::io("stat", dir, e))?
        .permissions()
        .mode()
        & 0o7777;
    if mode != 0o700 {
        return Err(refused(format!(
            "its mode is {mode:o} after chmod 0700 (the filesystem keeps its own)"
        )));
    }
    Ok(())
}
