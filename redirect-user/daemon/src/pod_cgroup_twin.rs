//! A pod's cgroup v2 directory on a hybrid host (cgroup v1 controllers, cgroup v2 mounted
//! beside them, as on this project's test machines): the kubelet makes the pod's cgroup in
//! the v1 hierarchies before its sandbox, and runc makes the v2 one only when the sandbox's
//! first container starts, after the CNI ADD. The per-pod attach scope needs it at the ADD, so
//! when the v2 directory is missing and a v1 hierarchy holds the pod's (root's, at the
//! kubelet's names), its twin is made in the v2 tree at the same relative path: where runc
//! then puts every container of the pod (`cgroup_parent` is one relative path in every
//! hierarchy). Found by the real kubelet 1.20 of `cluster_per_pod.rs` (issue 48).
use std::path::{Path, PathBuf};

use redirect_sys::{cgroup2_mount_in, parse_mountinfo};

/// The v2 twin of pod `uid`'s v1 cgroup below the v2 `roots`, made now; `Err` says why none.
pub(crate) fn make(roots: &[PathBuf], uid: &str) -> Result<PathBuf, String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    let mounts = parse_mountinfo(&text);
    let v2 = cgroup2_mount_in(&mounts).ok_or("no cgroup v2 mount")?;
    let v1: Vec<&Path> = mounts
        .iter()
        .filter(|m| m.fstype == "cgroup")
        .map(|m| m.mount_point.as_path())
        .collect();
    if v1.is_empty() {
        return Err("no cgroup v1 hierarchy either (not a hybrid host)".into());
    }
    for hierarchy in v1 {
        let in_v1: Vec<PathBuf> = roots
            .iter()
            .filter_map(|r| r.strip_prefix(v2).ok())
            .map(|rel| hierarchy.join(rel))
            .collect();
        let Ok(found) = crate::pod_cgroups::pod_dir_of(&in_v1, uid) else {
            continue;
        };
        let Ok(rel) = found.strip_prefix(hierarchy) else {
            continue;
        };
        let twin = v2.join(rel);
        std::fs::create_dir_all(&twin).map_err(|e| {
            format!(
                "making {} (the v2 twin of {}): {e}",
                twin.display(),
                found.display()
            )
        })?;
        tracing::info!(pod_uid = uid, v1 = %found.display(), v2 = %twin.display(),
            "made the pod's cgroup v2 directory before runc does (hybrid host)");
        return Ok(twin);
    }
    Err(format!(
        "no cgroup v1 hierarchy holds it either (looked below the same paths in {})",
        mounts
            .iter()
            .filter(|m| m.fstype == "cgroup")
            .map(|m| m.mount_point.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}
