//! The proxy uid/gid bypass of a pod enrolled by the daemon, bound to its running istio-proxy
//! container's cgroup (a child of the pod's directory named by the container's id in the pod's
//! status, holding a process of the enrolled namespace), and closed (bound to no cgroup) the
//! moment that cgroup is gone, until the next proxy container runs (issue 31, finding 3).
use redirect_common::NetnsCookie;
use std::path::PathBuf;

use redirect_k8s::Pod;

use super::Daemon;
use crate::{
    files::write_enrollment,
    pod_cgroups::{bare_container_id, runs_in, PodDir},
};

/// The runtime id of the pod's running istio-proxy container (a sidecar in `containers`, or a
/// native sidecar in `initContainers`).
fn running_proxy_id(pod: &Pod) -> Option<&str> {
    let status = pod.status.as_ref()?;
    let proxy = [&status.container_statuses, &status.init_container_statuses]
        .into_iter()
        .flatten()
        .flatten()
        .find(|c| c.name == "istio-proxy")?;
    let runs = proxy.state.as_ref().is_some_and(|s| s.running.is_some());
    runs.then(|| proxy.container_id.as_deref().map(bare_container_id))
        .flatten()
}

/// The running istio-proxy container's cgroup: a child of the pod's directory named by the
/// container's id in the pod's status, holding a process of the enrolled namespace (nsfs
/// inode `netns`).
pub(super) fn proxy_cgroup(pod: &Pod, dir: &PodDir, netns: u64) -> Option<PathBuf> {
    let cgroup = dir.containers.get(running_proxy_id(pod)?)?;
    runs_in(cgroup, netns).then(|| cgroup.clone())
}

/// Whether the binding `current` may not be the running proxy's (so the cgroup tree is read):
/// a proxy runs and the binding does not name its container, or a binding names a cgroup that
/// is gone.
pub(super) fn binding_stale(pod: &Pod, current: Option<&PathBuf>) -> bool {
    match (running_proxy_id(pod), current) {
        (_, Some(dir)) if !dir.exists() => true,
        (Some(id), Some(dir)) => !dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.contains(id)),
        (Some(_), None) => true,
        (None, _) => false,
    }
}

impl Daemon {
    /// Binds enrollment `cookie`'s uid/gid bypass to `target` (its running proxy container's
    /// cgroup); closes it when the bound cgroup is gone (the proxy exited) and no new one runs
    /// yet: bound to no cgroup, the proxy uid/gid is then captured anywhere in the pod (fail
    /// closed: any container can stop its proxy, and an app running as 1337 would otherwise
    /// go out uncaptured for each restart back-off) until the next proxy container is bound.
    pub(super) fn bind_proxy(&mut self, cookie: NetnsCookie, target: Option<PathBuf>) {
        let Some(f) = self.enrollments.get(&cookie) else {
            return;
        };
        let current = f.record.policy.proxy_cgroup.clone();
        let next = match (&current, target) {
            (_, Some(t)) if t.is_dir() => Some(t),
            (Some(c), _) if c.exists() => return,
            _ => None,
        };
        let closed = next.is_none() || f.record.policy.proxy_bypass_closed;
        if next == current && closed == f.record.policy.proxy_bypass_closed {
            return;
        }
        let Some(f) = self.enrollments.get_mut(&cookie) else {
            return;
        };
        let Some(ns) = &f.ns else { return };
        let mut policy = f.record.policy.clone();
        policy.proxy_cgroup.clone_from(&next);
        policy.proxy_bypass_closed = closed;
        let name = f
            .record
            .pod
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        // Applied over the namespace's current policy in place: no capture gap.
        match self.dp.apply(ns, &policy) {
            Ok(applied) => {
                f.record.policy = policy;
                f.record.addrs = applied.addrs;
                if let Err(error) = write_enrollment(&self.opts.dir, &f.record) {
                    tracing::warn!(pod = name, %error, "recording the enrollment");
                }
                match &next {
                    Some(cgroup) => {
                        tracing::info!(pod = name, %cookie, proxy_cgroup = %cgroup.display(), "the proxy uid/gid bypass follows the istio-proxy container's cgroup")
                    }
                    None => {
                        tracing::warn!(pod = name, %cookie, "the proxy uid/gid bypass is closed: its istio-proxy container is gone, so the proxy uid/gid is captured anywhere in the pod until the next one runs")
                    }
                }
            }
            Err(error) => {
                tracing::error!(pod = name, %cookie, %error, "binding the proxy bypass to its container's cgroup: kept as it was");
            }
        }
    }
}
