//! Names of network namespaces by inode, found the way an operator would look: a name under
//! `/run/netns` (or `/var/run/netns`), else `/proc/PID/ns/net` of a process inside. For
//! labelling a policy the kernel holds when no record names its namespace.
use std::{
    collections::HashMap,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

/// The directories runtimes and `ip netns` name namespaces in, in the order looked at.
const NAMED: [&str; 2] = ["/run/netns", "/var/run/netns"];

/// Namespace inode -> one path naming it: a name under [`NAMED`] first, else the lowest pid's
/// `/proc/PID/ns/net` (this process's own pid excepted: its path dies with it).
pub fn by_inode() -> HashMap<u64, PathBuf> {
    let mut out = HashMap::new();
    for dir in NAMED {
        for path in entries(Path::new(dir)) {
            if let Ok(meta) = std::fs::metadata(&path) {
                out.entry(meta.ino()).or_insert(path);
            }
        }
    }
    let me = std::process::id().to_string();
    let mut pids: Vec<u32> = entries(Path::new("/proc"))
        .filter_map(|p| p.file_name()?.to_str()?.parse().ok())
        .filter(|pid: &u32| pid.to_string() != me)
        .collect();
    pids.sort_unstable();
    for pid in pids {
        let path = PathBuf::from(format!("/proc/{pid}/ns/net"));
        if let Ok(meta) = std::fs::metadata(&path) {
            out.entry(meta.ino()).or_insert(path);
        }
    }
    out
}

fn entries(dir: &Path) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_processs_namespace_is_named_by_another_process_or_a_name() {
        let own = std::fs::metadata("/proc/self/ns/net")
            .expect("own netns")
            .ino();
        let names = by_inode();
        // pid 1 (or the test runner's parent) shares it on any machine that runs tests.
        let path = names
            .get(&own)
            .expect("the test's own namespace has a name");
        assert!(
            !path.starts_with(format!("/proc/{}/", std::process::id())),
            "{path:?}"
        );
    }
}
