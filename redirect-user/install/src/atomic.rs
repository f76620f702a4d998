//! Atomic file replacement: a temporary file in the same directory (a name no CNI runtime
//! reads: it ends in `.tmp`), written, fsynced, given its mode, renamed over the target, and
//! the directory fsynced, so a reader sees the old file or the new one, never a part. A target
//! that is a symlink is written through (the link stays) when it leads into the same directory
//! tree (a ConfigMap's `..data/NAME`), and refused when it leads out of it.
use std::{
    fs::{File, OpenOptions},
    io::Write as _,
    os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
};

use crate::error::{io, Result};

/// The temporary name for `path`: `.NAME.redirect-PID.tmp` beside it.
fn temp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.redirect-{}.tmp", std::process::id()))
}

/// Where a write of `path` lands: `path`, or the target of the symlink `path` when that is
/// inside `path`'s directory.
fn through_link(path: &Path) -> Result<PathBuf> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            let dir = path.parent().unwrap_or(Path::new("."));
            let home = std::fs::canonicalize(dir).map_err(io("resolving", dir))?;
            let target = std::fs::canonicalize(path).map_err(io("resolving the symlink", path))?;
            if target.starts_with(&home) && target != home {
                Ok(target)
            } else {
                Err(crate::error::Error::LinkOutside {
                    path: path.to_owned(),
                    target,
                })
            }
        }
        _ => Ok(path.to_owned()),
    }
}

/// Replaces `path` (through a link into its own directory) with `bytes`, mode `mode`.
pub(crate) fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    write_checked(path, bytes, mode, None)
}

/// [`write`], unless `path` no longer holds `read` (the text the new one was made from) just
/// before the rename: another writer (the primary plugin's installer) wrote it meanwhile, and
/// the rename would lose its write. Then nothing is replaced and the error says so; the caller
/// reads the file again.
pub(crate) fn replace(path: &Path, read: &str, bytes: &[u8], mode: u32) -> Result<()> {
    write_checked(path, bytes, mode, Some(read))
}

fn write_checked(path: &Path, bytes: &[u8], mode: u32, read: Option<&str>) -> Result<()> {
    let path = &through_link(path)?;
    let tmp = temp_name(path);
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .map_err(io("creating", &tmp))?;
        file.write_all(bytes).map_err(io("writing", &tmp))?;
        // The mode again: the umask applies at creation.
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(io("setting the mode of", &tmp))?;
        file.sync_all().map_err(io("fsyncing", &tmp))?;
        if let Some(read) = read {
            let now = std::fs::read_to_string(path).map_err(io("reading again", path))?;
            if now != read {
                return Err(crate::error::Error::ChangedMeanwhile { path: path.clone() });
            }
        }
        std::fs::rename(&tmp, path).map_err(io("renaming a temporary file over", path))?;
        sync_dir(path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Removes `path` (absent is fine) and fsyncs its directory.
pub(crate) fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => sync_dir(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io("removing", path)(e)),
    }
}

fn sync_dir(path: &Path) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsyncing the directory", dir))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    #[test]
    fn writes_replace_whole_files_with_their_mode() {
        let dir = std::env::temp_dir().join(redirect_testkit::unique_name("atomic"));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("x.conflist");
        write(&file, b"one", 0o644).expect("write");
        write(&file, b"two", 0o755).expect("rewrite");
        assert_eq!(std::fs::read(&file).expect("read"), b"two");
        assert_eq!(
            std::fs::metadata(&file).expect("meta").mode() & 0o777,
            0o755
        );
        let left: Vec<_> = std::fs::read_dir(&dir).expect("ls").collect();
        assert_eq!(left.len(), 1, "a temporary file was left: {left:?}");
        remove(&file).expect("remove");
        remove(&file).expect("remove twice");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn a_replace_loses_no_write_made_since_the_file_was_read() {
        let dir = std::env::temp_dir().join(redirect_testkit::unique_name("atomic"));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("10-k8s.conflist");
        std::fs::write(&path, "read").expect("write");
        // Another writer since the read: refused, its write kept, no temporary file left.
        std::fs::write(&path, "theirs").expect("write");
        let err = replace(&path, "read", b"ours", 0o644).expect_err("refused");
        assert!(err.to_string().contains("changed between"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "theirs");
        // Unchanged since the read: replaced.
        replace(&path, "theirs", b"ours", 0o644).expect("replaced");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "ours");
        let left: Vec<_> = std::fs::read_dir(&dir).expect("ls").collect();
        assert_eq!(left.len(), 1, "a temporary file was left: {left:?}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
