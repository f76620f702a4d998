//! cgroup v2: where it is mounted (found in `/proc/self/mountinfo`, never assumed, with the
//! octal escapes of mount paths decoded) and cgroup directories of our own, removed on drop.
use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;

use crate::{env::unique_name, wait};

pub use redirect_sys::{cgroup2_mount_in, parse_mountinfo, Mount};

/// Where cgroup v2 is mounted on this host (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a
/// hybrid host, ...), from `/proc/self/mountinfo`.
pub fn cgroup2_root() -> anyhow::Result<PathBuf> {
    redirect_sys::cgroup2_root()
        .context("reading /proc/self/mountinfo")?
        .context("no cgroup v2 filesystem is mounted (/proc/self/mountinfo)")
}

/// Removes `rel` (a cgroup path relative to a hierarchy's root) and the directories below it,
/// deepest first, in every cgroup v1 hierarchy, and in cgroup v2 too with `v2` (only empty
/// directories go: what runc and podman make for a cgroup parent on a hybrid host).
pub fn remove_trees(rel: &Path, v2: bool) {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for mount in parse_mountinfo(&mounts)
        .iter()
        .filter(|m| m.fstype == "cgroup" || (v2 && m.fstype == "cgroup2"))
    {
        remove_tree(&mount.mount_point.join(rel));
    }
}

/// Makes a pod's cgroup `rel` (relative to a hierarchy's root) where the kubelet's cgroupfs
/// manager makes it before the pod's sandbox: in every cgroup v1 hierarchy on a hybrid host
/// (its v2 directory is runc's to make, with the first container), in the v2 tree on a host
/// with cgroup v2 alone. [`remove_trees`] removes them.
pub fn make_pod_cgroup(rel: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").context("mountinfo")?;
    let mounts = parse_mountinfo(&text);
    let v1: Vec<&Mount> = mounts.iter().filter(|m| m.fstype == "cgroup").collect();
    let dirs: Vec<PathBuf> = if v1.is_empty() {
        vec![cgroup2_root()?.join(rel)]
    } else {
        v1.iter().map(|m| m.mount_point.join(rel)).collect()
    };
    for dir in dirs {
        std::fs::create_dir_all(&dir).with_context(|| format!("making {}", dir.display()))?;
    }
    Ok(())
}

fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// A cgroup v2 directory of our own, removed on drop after its processes are killed.
#[derive(Debug)]
pub struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// Creates `<cgroup2 root>/<PREFIX><unique suffix>`.
    pub fn new(prefix: &str) -> anyhow::Result<Self> {
        Self::create(cgroup2_root()?.join(unique_name(prefix)))
    }

    /// Creates the cgroup `name` below this one, removed on drop (declare it after its parent
    /// so that it drops first).
    pub fn child(&self, name: &str) -> anyhow::Result<Self> {
        Self::create(self.path.join(name))
    }

    fn create(path: PathBuf) -> anyhow::Result<Self> {
        std::fs::create_dir(&path).with_context(|| format!("mkdir {}", path.display()))?;
        Ok(Self { path })
    }

    /// Its directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Pids of the processes in it (not in its children).
    pub fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.path.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Whatever still runs here was started by us; it must not keep the directory alive.
        for pid in self.pids() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        // rmdir fails with EBUSY until the killed processes have left.
        let removed = wait::until(
            format!("cgroup {} to be removable", self.path.display()),
            Duration::from_secs(2),
            || std::fs::remove_dir(&self.path).is_ok() || !self.path.exists(),
        );
        if let Err(e) = removed {
            eprintln!("warning: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_kills_what_runs_in_it_and_is_gone_on_drop() {
        if !crate::env::privileged_or_skip("a_cgroup_kills_what_runs_in_it") {
            return;
        }
        let cg = Cgroup::new("rkc").expect("cgroup");
        let child = cg.child("leaf").expect("child cgroup");
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        std::fs::write(child.path().join("cgroup.procs"), sleeper.id().to_string())
            .expect("move into the cgroup");
        assert_eq!(child.pids(), [i32::try_from(sleeper.id()).expect("pid")]);
        let (parent, leaf) = (cg.path().to_owned(), child.path().to_owned());
        drop(child);
        assert!(!leaf.exists(), "child cgroup left");
        assert!(sleeper.wait().is_ok_and(|s| !s.success()), "killed");
        drop(cg);
        assert!(!parent.exists(), "cgroup left");
    }
}
