//! Finds the cgroup v2 mount from mountinfo and validates cgroup directories given by users.
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub(crate) use redirect_sys::{cgroup2_mount_in, mount_of, parse_mountinfo, Mount};

fn read_mounts() -> Result<Vec<Mount>> {
    let path = "/proc/self/mountinfo";
    let text = std::fs::read_to_string(path).map_err(|e| Error::io("reading", path, e))?;
    Ok(parse_mountinfo(&text))
}

/// Where cgroup v2 is mounted on this host (from `/proc/self/mountinfo`, never assumed).
pub fn cgroup2_root() -> Result<PathBuf> {
    let mounts = read_mounts()?;
    cgroup2_mount_in(&mounts)
        .map(Path::to_path_buf)
        .ok_or(Error::NoCgroup2Mount)
}

/// Checks that `path` is an existing cgroup v2 directory and returns its canonical form.
pub fn validate(path: &Path) -> Result<PathBuf> {
    let mounts = read_mounts()?;
    let root = cgroup2_mount_in(&mounts)
        .map(Path::to_path_buf)
        .ok_or(Error::NoCgroup2Mount)?;
    let canonical = match path.canonicalize() {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let suggest = if path.starts_with(&root) {
                path.to_path_buf()
            } else {
                root.join(path.file_name().unwrap_or_else(|| "app".as_ref()))
            };
            return Err(Error::CgroupMissing {
                path: path.to_path_buf(),
                suggest,
                mount: root,
            });
        }
        Err(e) => return Err(Error::io("resolving", path, e)),
    };
    // `CGROUP2_SUPER_MAGIC` (linux/magic.h; rustix has no constant for it).
    const CGROUP2_SUPER_MAGIC: rustix::fs::FsWord = 0x6367_7270;
    let is_cgroup2 = rustix::fs::statfs(&canonical).is_ok_and(|s| s.f_type == CGROUP2_SUPER_MAGIC);
    if !is_cgroup2 || !canonical.is_dir() {
        let fstype = mount_of(&mounts, &canonical)
            .map_or_else(|| "unknown".to_owned(), |m| m.fstype.clone());
        return Err(Error::NotCgroup2 {
            path: path.to_path_buf(),
            fstype,
            mount: root,
        });
    }
    Ok(canonical)
}

/// [`validate`] on a hot path (a pod's ADD): a directory on a cgroup v2 file system is taken
/// as it is named, without the mount table (reading it costs about 0.1 ms on a node); anything
/// else goes to [`validate`], whose error names what is wrong.
pub(crate) fn validate_quick(path: &Path) -> Result<PathBuf> {
    const CGROUP2_SUPER_MAGIC: rustix::fs::FsWord = 0x6367_7270;
    let is_cgroup2 = rustix::fs::statfs(path).is_ok_and(|s| s.f_type == CGROUP2_SUPER_MAGIC);
    if is_cgroup2 && path.is_absolute() && path.is_dir() {
        return Ok(path.to_path_buf());
    }
    validate(path)
}

/// True when `ancestor` is `path` or one of its parents (both canonical).
pub fn contains(ancestor: &Path, path: &Path) -> bool {
    path.starts_with(ancestor)
}

/// A cgroup v2 directory's id: its inode number, as `bpf_get_current_cgroup_id` reports it.
pub(crate) fn id(path: &Path) -> Result<u64> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io("reading", path, e))?;
    Ok(std::os::unix::fs::MetadataExt::ino(&meta))
}

/// The directory of cgroup `id` under the cgroup v2 mount, if it still exists (a bounded walk).
pub fn path_of_id(id: u64) -> Option<PathBuf> {
    let root = cgroup2_root().ok()?;
    let mut todo = vec![root];
    let mut seen = 0;
    while let Some(dir) = todo.pop() {
        if std::fs::metadata(&dir).is_ok_and(|m| std::os::unix::fs::MetadataExt::ino(&m) == id) {
            return Some(dir);
        }
        seen += 1;
        if seen > 100_000 {
            return None;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        todo.extend(
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path()),
        );
    }
    None
}

/// Moves the calling process into `cgroup` (canonical cgroup v2 directory).
pub fn enter(cgroup: &Path) -> Result<()> {
    let procs = cgroup.join("cgroup.procs");
    std::fs::write(&procs, b"0").map_err(|e| Error::io("writing", procs, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestry() {
        assert!(contains(Path::new("/a"), Path::new("/a/b")));
        assert!(contains(Path::new("/a"), Path::new("/a")));
        assert!(!contains(Path::new("/a/b"), Path::new("/a")));
        assert!(!contains(Path::new("/a/b"), Path::new("/a/bc")));
    }
}
