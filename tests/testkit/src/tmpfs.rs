//! A tmpfs mounted at a new directory of the caller's own, unmounted and removed on drop.
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use nix::mount::{mount, umount2, MntFlags, MsFlags};

/// A tmpfs at a directory of its own (`nosuid,nodev,noexec`, mode 0700). A daemon's directory
/// on a node is `/run/redirect/daemon` and `/run` is a tmpfs there, while a scratch directory
/// (and even this machine's `/run`) may be a disk whose journal makes a write wait for I/O
/// now and then.
#[derive(Debug)]
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Creates `path` and mounts a tmpfs of `size` (such as `16m`) there.
    pub fn mount(path: PathBuf, size: &str) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&path)
            .with_context(|| format!("creating {} for a tmpfs", path.display()))?;
        let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        let options = format!("size={size},mode=0700");
        mount(
            Some("tmpfs"),
            &path,
            Some("tmpfs"),
            flags,
            Some(options.as_str()),
        )
        .with_context(|| format!("mounting a tmpfs ({options}) at {}", path.display()))?;
        Ok(Self(path))
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = umount2(&self.0, MntFlags::MNT_DETACH);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
