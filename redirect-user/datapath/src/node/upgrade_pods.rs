//! The per-pod scope's part of an upgrade in place: every pod cgroup's pinned links
//! (`cgroups/ID/PROG-N`) get the new programs as the root scope's `links/` do, and the unattached
//! cgroup programs in `progs/` (what the next pod's links are made from) are replaced by the
//! new build's once every link runs them.
use std::path::{Path, PathBuf};

use aya::Ebpf;

use super::{
    pins::pin_err,
    pod_links::{cgroup_programs, CGROUPS},
    upgrade_links::{swap, Swap},
};
use crate::{
    attach::plan,
    error::{Error, Result},
};

/// The links of every linked pod cgroup, each with its old program and its new one. Each pod's
/// pins must be exactly this build's attach plan for one cgroup (the pod's, as both the
/// application's and the proxy's). A pod cgroup the kernel already removed still has its pins
/// until the daemon's tick sweeps them: its links report `ENOLINK` at the update and are
/// skipped, as a gone namespace's are.
pub(super) fn pod_swaps(dir: &Path, ebpf: &mut Ebpf) -> Result<Vec<Swap>> {
    let root = dir.join(CGROUPS);
    let steps = plan::cgroup_plan(Path::new("/"), Path::new("/"));
    let mut wanted: Vec<String> = (1..)
        .zip(&steps)
        .map(|(n, s)| format!("{}-{n}", s.program))
        .collect();
    wanted.sort();
    let mut pods: Vec<PathBuf> = std::fs::read_dir(&root)
        .map_err(|e| Error::io("listing", &root, e))?
        .flatten()
        .map(|e| e.path())
        .collect();
    pods.sort();
    let mut swaps = Vec::new();
    for pod in pods {
        let mut pinned: Vec<String> = std::fs::read_dir(&pod)
            .map_err(|e| Error::io("listing", &pod, e))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        pinned.sort();
        if pinned != wanted {
            return Err(Error::NotUpgradable {
                dir: dir.to_path_buf(),
                why: format!(
                    "the links of pod cgroup {} {pinned:?} are not this build's attach plan {wanted:?}",
                    pod.display()
                ),
            });
        }
        for (n, s) in (1..).zip(&steps) {
            let pin = pod.join(format!("{}-{n}", s.program));
            swaps.push(swap(dir, &pin, ebpf, s.program)?);
        }
    }
    Ok(swaps)
}

/// Pins this build's cgroup programs as `progs/NAME` in place of the old build's (each pinned
/// under `staged/` first, then renamed over the old pin, so `progs/` never lacks one).
pub(super) fn commit_programs(dir: &Path, ebpf: &mut Ebpf) -> Result<()> {
    for name in cgroup_programs() {
        let prog = plan::loaded(ebpf, name)?;
        let pin = dir.join("progs").join(name);
        let next = dir.join("staged").join(name);
        prog.pin(&next).map_err(|e| Error::Pin {
            op: "pinning program",
            path: next.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        std::fs::rename(&next, &pin).map_err(pin_err("renaming the new program over", &pin))?;
    }
    Ok(())
}
