//! cgroup v2: where it is mounted (found in `/proc/self/mountinfo`, never assumed, with the
//! octal escapes of mount paths decoded) and cgroup directories of our own, removed on drop.
use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;

use crate::{env::unique_name, wait};

/// One mount of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted (escapes decoded).
    pub mount_point: PathBuf,
    /// Filesystem type (`cgroup2`, `cgroup`, `tmpfs`, ...).
    pub fstype: String,
}

/// Decodes the octal escapes mountinfo writes for space, tab, newline and backslash
/// (`\040`, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if let Some(&[b'\\', a, b, c]) = bytes.get(i..i + 4) {
            let digits = [a, b, c];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(v) = u8::try_from(value) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses the text of `/proc/self/mountinfo`; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mount_point = left.split_whitespace().nth(4)?;
            let fstype = right.split_whitespace().next()?;
            Some(Mount {
                mount_point: PathBuf::from(unescape(mount_point)),
                fstype: fstype.to_owned(),
            })
        })
        .collect()
}

/// The first cgroup v2 mount point in a mountinfo text.
pub fn cgroup2_mount_in(mountinfo: &str) -> Option<PathBuf> {
    parse_mountinfo(mountinfo)
        .into_iter()
        .find(|m| m.fstype == "cgroup2")
        .map(|m| m.mount_point)
}

/// Where cgroup v2 is mounted on this host (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a
/// hybrid host, ...), from `/proc/self/mountinfo`.
pub fn cgroup2_root() -> anyhow::Result<PathBuf> {
    let path = "/proc/self/mountinfo";
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    cgroup2_mount_in(&text).with_context(|| format!("no cgroup v2 filesystem is mounted ({path})"))
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

    /// A hybrid host: cgroup v1 hierarchies at /sys/fs/cgroup/*, v2 at .../unified; and a
    /// cgroup2 mounted at a path with a space, a tab and a backslash, escaped as the kernel does.
    const HYBRID: &str = "\
22 27 0:20 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 22 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
35 31 0:32 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct
";

    #[test]
    fn the_v2_mount_of_a_hybrid_host_is_found() {
        assert_eq!(
            cgroup2_mount_in(HYBRID),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let mounts = parse_mountinfo(HYBRID);
        assert_eq!(mounts.len(), 4);
        assert_eq!(mounts[3].fstype, "cgroup");
    }

    #[test]
    fn escaped_mount_points_are_decoded() {
        let text = "40 25 0:35 / /mnt/my\\040cgroups\\011v2\\134x rw,relatime shared:20 - cgroup2 none rw\n";
        assert_eq!(
            cgroup2_mount_in(text),
            Some(PathBuf::from("/mnt/my cgroups\tv2\\x"))
        );
    }

    #[test]
    fn unescape_leaves_everything_else_alone() {
        assert_eq!(unescape("/a\\0"), "/a\\0", "too short for an escape");
        assert_eq!(unescape("/a\\089"), "/a\\089", "not octal");
        assert_eq!(unescape("/a\\777"), "/a\\777", "above a byte");
        assert_eq!(unescape("/plain"), "/plain");
    }

    #[test]
    fn no_cgroup2_and_garbage_give_nothing() {
        assert_eq!(
            cgroup2_mount_in("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"),
            None
        );
        assert!(parse_mountinfo("garbage\n\n1 2 3\n").is_empty());
    }

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
