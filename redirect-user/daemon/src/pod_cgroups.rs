//! Where a running pod is on this node, read from the cgroup v2 tree the kubelet makes: its
//! pod directory (named by its uid under the cgroupfs and the systemd drivers), its
//! containers' directories (named by their runtime ids), the network namespace its processes
//! run in. The reconcile of running pods and the proxy-cgroup binding read it. Only what root
//! owns below the kubelet's pod roots counts (issue 31, finding 1).
use std::{
    collections::HashMap,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

/// Directories walked at most (a node's whole tree is a few thousand).
const MAX_DIRS: usize = 50_000;
/// Depth of the walk below the root (kubepods.slice/kubepods-burstable.slice/pod... is 3;
/// a kubelet `--cgroup-root` or a nested node adds levels).
const MAX_DEPTH: usize = 8;

/// The pod uid a kubelet cgroup directory name carries: `pod<uid>` (cgroupfs driver) or
/// `...-pod<uid with _ for ->.slice` (systemd driver).
pub(crate) fn pod_uid_of(name: &str) -> Option<String> {
    let uid = if let Some(slice) = name.strip_suffix(".slice") {
        let at = slice.rfind("pod")?;
        let before = &slice[..at];
        if !(before.is_empty() || before.ends_with('-')) {
            return None;
        }
        slice[at + 3..].replace('_', "-")
    } else {
        name.strip_prefix("pod")?.to_owned()
    };
    let looks_like_uid = uid.len() >= 8
        && uid.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
        && uid.chars().any(|c| c == '-');
    looks_like_uid.then_some(uid)
}

/// The runtime's container id a container cgroup directory name carries: `<id>` (cgroupfs),
/// `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope` (systemd).
pub(crate) fn container_id_of(name: &str) -> Option<&str> {
    if name.contains("conmon") {
        // CRI-O's monitor of a container, not the container.
        return None;
    }
    let id = match name.strip_suffix(".scope") {
        Some(scope) => &scope[scope.rfind('-')? + 1..],
        None => name,
    };
    (id.len() >= 12 && id.chars().all(|c| c.is_ascii_alphanumeric())).then_some(id)
}

/// The bare id of a container status's `containerID` (`containerd://ID`, `cri-o://ID`).
pub(crate) fn bare_container_id(status_id: &str) -> &str {
    status_id.split_once("://").map_or(status_id, |(_, id)| id)
}

/// One pod's directory and its containers' directories by runtime id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PodDir {
    /// The pod's cgroup directory.
    pub dir: PathBuf,
    /// Its containers' directories (the sandbox's among them), by runtime id.
    pub containers: HashMap<String, PathBuf>,
}

/// Every pod directory under `roots` (the kubelet's pod roots), by pod uid, in one bounded
/// walk. Only directories root owns are walked or taken: a subtree delegated to a user
/// (systemd's `user@N.service`) can never name a pod. A uid found at two places names
/// neither: someone mirrors the pod's directory, so the pod is skipped and the alarm logged.
pub(crate) fn pod_dirs(roots: &[PathBuf]) -> HashMap<String, PodDir> {
    let mut found: HashMap<String, PodDir> = HashMap::new();
    let mut twice: Vec<(String, PathBuf)> = Vec::new();
    let mut todo: Vec<(PathBuf, usize)> = roots
        .iter()
        .filter(|r| root_owned(r))
        .map(|r| (r.clone(), 0))
        .collect();
    if todo.is_empty() {
        tracing::warn!(roots = %redirect_policy::Paths(roots), "no kubelet pod cgroup root exists \
            (a root-owned directory): no pod can be enrolled in place nor its proxy bypass bound; \
            pass --pod-cgroup-root (the directory below a kubelet --cgroup-root)");
    }
    let mut seen = 0;
    while let Some((dir, depth)) = todo.pop() {
        seen += 1;
        if seen > MAX_DIRS {
            tracing::warn!(root = %dir.display(), "cgroup walk stopped after {MAX_DIRS} directories");
            break;
        }
        for sub in subdirs(&dir) {
            let name = sub.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if let Some(uid) = pod_uid_of(name) {
                let containers = subdirs(&sub)
                    .into_iter()
                    .filter_map(|c| {
                        let id = container_id_of(c.file_name()?.to_str()?)?.to_owned();
                        Some((id, c))
                    })
                    .collect();
                let pod = PodDir {
                    dir: sub,
                    containers,
                };
                if let Some(first) = found.insert(uid.clone(), pod) {
                    twice.push((uid, first.dir));
                }
            } else if depth < MAX_DEPTH {
                todo.push((sub, depth + 1));
            }
        }
    }
    for (uid, first) in twice {
        if let Some(again) = found.remove(&uid) {
            tracing::error!(pod_uid = uid, first = %first.display(), again = %again.dir.display(),
                "ALARM: two cgroup directories name the same pod, so neither is trusted: the pod is \
                neither enrolled in place nor has its proxy bypass bound until one is removed");
        }
    }
    found
}

/// The cgroup directory of the pod with uid `uid` below `roots`, at the names the kubelet
/// gives it (cgroupfs: `[besteffort/|burstable/]pod<uid>`; systemd:
/// `[kubepods-<qos>.slice/]kubepods[-<qos>]-pod<uid with _>.slice`, either also below a
/// `kubepods` or `kubepods.slice` directory of the root): looked up by name, not
/// walked, on the ADD's path. Every directory from the root down must be root's; a uid found
/// twice names neither (as in [`pod_dirs`]). The error says why none is taken.
pub(crate) fn pod_dir_of(roots: &[PathBuf], uid: &str) -> Result<PathBuf, String> {
    if uid.is_empty() {
        return Err("the runtime gave no K8S_POD_UID, so its cgroup cannot be found".into());
    }
    if !uid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(format!(
            "pod uid {uid:?} is not a uid (letters, digits and '-' only)"
        ));
    }
    let systemd = uid.replace('-', "_");
    let names: Vec<Vec<String>> = vec![
        vec![format!("pod{uid}")],
        vec!["besteffort".into(), format!("pod{uid}")],
        vec!["burstable".into(), format!("pod{uid}")],
        vec![format!("kubepods-pod{systemd}.slice")],
        vec![
            "kubepods-besteffort.slice".into(),
            format!("kubepods-besteffort-pod{systemd}.slice"),
        ],
        vec![
            "kubepods-burstable.slice".into(),
            format!("kubepods-burstable-pod{systemd}.slice"),
        ],
    ];
    let mut found: Vec<PathBuf> = Vec::new();
    for root in roots.iter().filter(|r| root_owned(r)) {
        // A root above the kubelet's own (its `--cgroup-root`) has it one level down.
        let bases = [None, Some("kubepods"), Some("kubepods.slice")];
        for base in bases {
            let base = base.map_or_else(|| root.clone(), |b| root.join(b));
            if !root_owned(&base) {
                continue;
            }
            for parts in &names {
                let mut dir = base.clone();
                let all_root_owned = parts.iter().all(|p| {
                    dir.push(p);
                    root_owned(&dir)
                });
                if all_root_owned && !found.contains(&dir) {
                    found.push(dir);
                }
            }
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(format!(
            "no directory root owns names pod uid {uid} below {} (the kubelet makes it before \
            the sandbox; pass --pod-cgroup-root where its pods are)",
            redirect_policy::Paths(roots)
        )),
        [first, again, ..] => Err(format!(
            "ALARM: two cgroup directories name pod uid {uid} ({} and {}), so neither is trusted",
            first.display(),
            again.display()
        )),
    }
}

/// Whether `dir` is a directory root owns.
fn root_owned(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == 0)
}

/// The directories root owns in `dir`.
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir).map_or_else(
        |_| Vec::new(),
        |entries| {
            entries
                .flatten()
                .filter(|e| {
                    e.metadata()
                        .is_ok_and(|m| m.file_type().is_dir() && m.uid() == 0)
                })
                .map(|e| e.path())
                .collect()
        },
    )
}

/// The processes of one cgroup directory (not its children).
pub(crate) fn pids_in(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Whether a process of `dir` runs in the network namespace whose nsfs inode is `netns`.
pub(crate) fn runs_in(dir: &Path, netns: u64) -> bool {
    pids_in(dir)
        .iter()
        .any(|pid| std::fs::metadata(format!("/proc/{pid}/ns/net")).is_ok_and(|m| m.ino() == netns))
}

/// Whether process `pid` runs in the daemon's own user namespace: the host's (a daemon in
/// another cannot load BPF programs; pid 1's own may not be readable, as on this VM).
pub(crate) fn in_initial_userns(pid: u32) -> bool {
    let ino = |p: &str| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
    ino(&format!("/proc/{pid}/ns/user")).is_some_and(|own| Some(own) == ino("/proc/self/ns/user"))
}

/// The distinct network namespaces the processes `pids` run in, each as a path that names
/// it: a runtime's bind mount (`/run/netns/NAME`, `/var/run/netns/NAME`) when there is one,
/// which outlives any one process, else `/proc/PID/ns/net`. The host's namespace (pid 1's,
/// and the daemon's own: it runs with the host network) is never returned: a pod with the
/// host network is never enrolled.
pub(crate) fn netns_of(pids: &[u32]) -> Vec<PathBuf> {
    let host: Vec<(u64, u64)> = ["/proc/1/ns/net", "/proc/self/ns/net"]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| (m.dev(), m.ino()))
        .collect();
    let mut seen = Vec::new();
    let mut paths = Vec::new();
    for pid in pids {
        let path = PathBuf::from(format!("/proc/{pid}/ns/net"));
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        let key = (meta.dev(), meta.ino());
        if host.contains(&key) || seen.contains(&key) {
            continue;
        }
        seen.push(key);
        paths.push(bind_mount_of(key).unwrap_or(path));
    }
    paths
}

fn bind_mount_of(key: (u64, u64)) -> Option<PathBuf> {
    ["/run/netns", "/var/run/netns"]
        .iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .map(|e| e.path())
        .find(|p| std::fs::metadata(p).is_ok_and(|m| (m.dev(), m.ino()) == key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_pod_directory_names_give_the_uid() {
        let uid = "6e1f3a2c-5b4d-4c3e-9f8a-0123456789ab";
        let under = uid.replace('-', "_");
        assert_eq!(pod_uid_of(&format!("pod{uid}")).as_deref(), Some(uid));
        for name in [
            format!("kubepods-burstable-pod{under}.slice"),
            format!("kubepods-besteffort-pod{under}.slice"),
            format!("kubepods-pod{under}.slice"),
            format!("pod{under}.slice"),
        ] {
            assert_eq!(pod_uid_of(&name).as_deref(), Some(uid), "{name}");
        }
        for name in [
            "kubepods.slice",
            "kubepods-burstable.slice",
            "podman-1234.scope",
            "pod",
            "system.slice",
            "kubepods-xpod1234_5678.slice",
        ] {
            assert_eq!(pod_uid_of(name), None, "{name}");
        }
    }

    #[test]
    fn container_directory_names_give_the_runtime_id() {
        let id = "3f0c9d1e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e";
        for name in [
            id.to_owned(),
            format!("cri-containerd-{id}.scope"),
            format!("crio-{id}.scope"),
            format!("docker-{id}.scope"),
        ] {
            assert_eq!(container_id_of(&name), Some(id), "{name}");
        }
        assert_eq!(container_id_of("init.scope"), None);
        assert_eq!(container_id_of(&format!("crio-conmon-{id}.scope")), None);
        assert_eq!(bare_container_id(&format!("containerd://{id}")), id);
        assert_eq!(bare_container_id(id), id);
    }
}

#[cfg(test)]
mod pod_dir_tests {
    use super::pod_dir_of;
    use std::path::PathBuf;

    /// A fresh directory under the target's tmp (owned by whoever runs the test).
    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("redirect-pod-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_pod_dir_is_found_by_its_uid_at_the_kubelet_names_only() {
        let uid = "6e1f3a2c-5b4d-4c3e-9f8a-0123456789ab";
        let root = scratch("names");
        let roots = [root.clone()];
        assert!(pod_dir_of(&roots, "").unwrap_err().contains("K8S_POD_UID"));
        assert!(pod_dir_of(&roots, "../x")
            .unwrap_err()
            .contains("not a uid"));
        assert!(pod_dir_of(&roots, uid)
            .unwrap_err()
            .contains("no directory"));
        let root_runs = rustix::process::geteuid().is_root();
        let cgroupfs = root.join("burstable").join(format!("pod{uid}"));
        std::fs::create_dir_all(&cgroupfs).unwrap();
        // Only directories root owns count (issue 31): as another user, nothing is taken.
        match pod_dir_of(&roots, uid) {
            Ok(dir) => assert!(root_runs && dir == cgroupfs, "{}", dir.display()),
            Err(why) => assert!(!root_runs, "{why}"),
        }
        let systemd = root.join("kubepods-besteffort.slice").join(format!(
            "kubepods-besteffort-pod{}.slice",
            uid.replace('-', "_")
        ));
        std::fs::create_dir_all(&systemd).unwrap();
        if root_runs {
            let twice = pod_dir_of(&roots, uid).unwrap_err();
            assert!(
                twice.contains("ALARM") && twice.contains("neither"),
                "{twice}"
            );
            std::fs::remove_dir_all(root.join("burstable")).unwrap();
            assert_eq!(pod_dir_of(&roots, uid).unwrap(), systemd);
        }
        std::fs::remove_dir_all(&root).unwrap();
    }
}
