//! `/proc/self/mountinfo` parsed: mount points (octal escapes such as `\040` decoded) and
//! filesystem types, and where cgroup v2 is mounted. The one reader, for the datapath and the
//! tests alike: never assume `/sys/fs/cgroup` (hybrid hosts mount v2 at `.../unified`).
use std::path::{Path, PathBuf};

/// One mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Filesystem type (`cgroup2`, `cgroup`, `tmpfs`, ...).
    pub fstype: String,
}

/// Decodes the octal escapes (`\040` for space, ...) mountinfo uses in paths.
pub fn unescape(field: &str) -> String {
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

/// Parses the text of `/proc/self/mountinfo`; malformed lines are skipped. Fields are split
/// on single spaces, as the kernel writes them: it escapes only space, tab, newline and
/// backslash, so a path may hold other whitespace.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mount_point = left.split(' ').nth(4).filter(|p| !p.is_empty())?;
            let fstype = right.split(' ').next().filter(|t| !t.is_empty())?;
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

/// Where cgroup v2 is mounted, read from `/proc/self/mountinfo`; `None` when it is not.
pub fn cgroup2_root() -> std::io::Result<Option<PathBuf>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(cgroup2_mount_in(&parse_mountinfo(&text)).map(Path::to_path_buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hybrid host, and a mount point with a space escaped as the kernel does.
    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw
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
    fn escapes_are_decoded_and_only_they() {
        let text = "40 25 0:35 / /mnt/my\\040cgroups\\011v2\\134x rw shared:20 - cgroup2 none rw\n";
        assert_eq!(
            cgroup2_mount_in(&parse_mountinfo(text)),
            Some(Path::new("/mnt/my cgroups\tv2\\x"))
        );
        assert_eq!(unescape("/a\\0"), "/a\\0", "too short for an escape");
        assert_eq!(unescape("/a\\089"), "/a\\089", "not octal");
        assert_eq!(unescape("/a\\777"), "/a\\777", "above a byte");
    }

    /// Found by redirect-datapath/tests/fuzz_proc.rs: the kernel escapes only space, tab,
    /// newline and backslash, so a mount point may hold other whitespace (vertical tab, a
    /// no-break space), which splitting on any whitespace cut short.
    #[test]
    fn fields_are_split_on_spaces_only() {
        let text = "40 25 0:35 / /mnt/a\u{b}b\u{a0}c rw shared:20 - cgroup2 none rw\n";
        assert_eq!(
            cgroup2_mount_in(&parse_mountinfo(text)),
            Some(Path::new("/mnt/a\u{b}b\u{a0}c"))
        );
    }

    #[test]
    fn longest_prefix_wins() {
        let mounts = parse_mountinfo(HYBRID);
        let m = mount_of(&mounts, Path::new("/mnt/with space/x")).expect("mount");
        assert_eq!(m.fstype, "ext4");
        let m = mount_of(&mounts, Path::new("/sys/fs/cgroup/cpu/test")).expect("mount");
        assert_eq!(m.fstype, "cgroup");
        let m = mount_of(&mounts, Path::new("/sys/fs/cgroup/other")).expect("mount");
        assert_eq!(m.fstype, "tmpfs");
    }

    #[test]
    fn no_cgroup2_and_garbage_give_nothing() {
        let mounts = parse_mountinfo("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n");
        assert_eq!(cgroup2_mount_in(&mounts), None);
        assert!(parse_mountinfo("garbage\n\n1 2 3\n").is_empty());
    }
}
