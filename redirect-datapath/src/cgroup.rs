//! Finds the cgroup v2 mount from mountinfo and validates cgroup directories given by users.
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// One mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Filesystem type (`cgroup2`, `cgroup`, `tmpfs`, ...).
    pub fstype: String,
}

/// Decodes the octal escapes (`\040` for space, ...) mountinfo uses in paths.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|b| (b'0'..=b'7').contains(b)) {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
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

/// The first cgroup v2 mount point among `mounts`.
pub fn cgroup2_mount_in(mounts: &[Mount]) -> Option<&Path> {
    mounts
        .iter()
        .find(|m| m.fstype == "cgroup2")
        .map(|m| m.mount_point.as_path())
}

/// The mount that contains `path` (longest mount-point prefix).
pub fn mount_of<'a>(mounts: &'a [Mount], path: &Path) -> Option<&'a Mount> {
    mounts
        .iter()
        .filter(|m| path.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.as_os_str().len())
}

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
    let is_cgroup2 = nix::sys::statfs::statfs(&canonical)
        .map(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
        .unwrap_or(false);
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

/// True when `ancestor` is `path` or one of its parents (both canonical).
pub fn contains(ancestor: &Path, path: &Path) -> bool {
    path.starts_with(ancestor)
}

/// A cgroup v2 directory's id: its inode number, as `bpf_get_current_cgroup_id` reports it.
pub fn id(path: &Path) -> Result<u64> {
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

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 23 0:40 / /mnt/with\\040space rw shared:5 - ext4 /dev/vda rw
";

    #[test]
    fn finds_unified_mount_on_hybrid_hosts() {
        let mounts = parse_mountinfo(HYBRID);
        assert_eq!(
            cgroup2_mount_in(&mounts),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
    }

    #[test]
    fn finds_root_mount_on_pure_v2_hosts() {
        let text =
            "25 1 0:22 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        let mounts = parse_mountinfo(text);
        assert_eq!(cgroup2_mount_in(&mounts), Some(Path::new("/sys/fs/cgroup")));
    }

    #[test]
    fn no_cgroup2_is_none() {
        let mounts = parse_mountinfo("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n");
        assert_eq!(cgroup2_mount_in(&mounts), None);
    }

    #[test]
    fn optional_fields_and_escapes() {
        let mounts = parse_mountinfo(HYBRID);
        let m = mount_of(&mounts, Path::new("/mnt/with space/x")).expect("mount");
        assert_eq!(m.fstype, "ext4");
    }

    #[test]
    fn longest_prefix_wins() {
        let mounts = parse_mountinfo(HYBRID);
        let m = mount_of(&mounts, Path::new("/sys/fs/cgroup/cpu/test")).expect("mount");
        assert_eq!(m.fstype, "cgroup");
        let m = mount_of(&mounts, Path::new("/sys/fs/cgroup/unified/a/b")).expect("mount");
        assert_eq!(m.fstype, "cgroup2");
        let m = mount_of(&mounts, Path::new("/sys/fs/cgroup/other")).expect("mount");
        assert_eq!(m.fstype, "tmpfs");
    }

    #[test]
    fn malformed_lines_are_skipped() {
        assert!(parse_mountinfo("garbage\n\n1 2 3\n").is_empty());
    }

    #[test]
    fn ancestry() {
        assert!(contains(Path::new("/a"), Path::new("/a/b")));
        assert!(contains(Path::new("/a"), Path::new("/a")));
        assert!(!contains(Path::new("/a/b"), Path::new("/a")));
        assert!(!contains(Path::new("/a/b"), Path::new("/a/bc")));
    }
}
