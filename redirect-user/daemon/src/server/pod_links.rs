//! The per-pod attach scope on the daemon's side (issue 48): a pod's cgroup linked at its ADD,
//! before the answer (no cgroup, no link: the ADD fails, so the pod never runs uncaptured),
//! and unlinked when the pod's last enrollment goes. Pod cgroups the kubelet removed first are
//! swept on the tick. In the root scope all of this is nothing.
use redirect_daemon_api::PodRef;
use redirect_datapath::AttachScope;

use super::Daemon;
use crate::error::{Error, Result};

impl Daemon {
    /// Links the capture programs at `pod`'s cgroup (per-pod scope); returns its cgroup id,
    /// or `None` in the root scope. `phases`: the lookup (`pod_cgroup`) and the links'.
    pub(super) fn link_pod_cgroup(
        &mut self,
        pod: &PodRef,
        phases: &mut redirect_datapath::Phases,
    ) -> Result<Option<u64>> {
        if self.dp.scope() != AttachScope::PerPod {
            return Ok(None);
        }
        let fail = |why: String| Error::PodCgroup {
            pod: pod.to_string(),
            why,
        };
        let roots = &self.opts.pod_cgroup_roots;
        let dir = match crate::pod_cgroups::pod_dir_of(roots, &pod.uid) {
            Ok(dir) => dir,
            Err(why) => match crate::pod_cgroup_twin::make(roots, &pod.uid) {
                Ok(twin) => {
                    self.pods.twins.insert(twin.clone());
                    twin
                }
                Err(also) => return Err(fail(format!("{why}; {also}"))),
            },
        };
        phases.mark("pod_cgroup");
        let (id, linked) = self
            .dp
            .attach_pod_cgroup(&dir)
            .map_err(|e| fail(e.to_string()))?;
        phases.extend(linked);
        tracing::debug!(%pod, cgroup = %dir.display(), cgroup_id = id, "pod cgroup linked");
        Ok(Some(id))
    }

    /// The link step of an enrollment: `pod`'s cgroup linked, or an enrollment of no pod
    /// refused (per-pod scope); nothing in the root scope. Returns the linked cgroup's id.
    pub(super) fn link_for(
        &mut self,
        pod: Option<&PodRef>,
        netns: &std::path::Path,
        phases: &mut redirect_datapath::Phases,
    ) -> Result<Option<u64>> {
        match pod {
            Some(p) => self.link_pod_cgroup(p, phases),
            None => self.refuse_without_pod(netns).map(|()| None),
        }
    }

    /// The apply after [`Daemon::link_for`] failed: a cgroup it linked is unlinked again
    /// (nothing half-applied), unless another enrollment of the pod holds it.
    pub(super) fn unlink_failed(&mut self, linked: Option<u64>, pod: Option<&PodRef>) {
        if let (Some(_), Some(p)) = (linked, pod) {
            self.unlink_pod_cgroup(p);
        }
    }

    /// Per-pod scope: an enrollment with no pod (`redirect enroll`, `istio-iptables` or `vm`
    /// through the daemon) has no cgroup to link at, so its policy would capture nothing:
    /// refused, naming the scope.
    pub(super) fn refuse_without_pod(&self, netns: &std::path::Path) -> Result<()> {
        if self.dp.scope() != AttachScope::PerPod {
            return Ok(());
        }
        tracing::warn!(netns = %netns.display(), "refused an enrollment with no pod (attach scope per-pod)");
        Err(redirect_datapath::Error::Scope {
            dir: self.dp.dir().to_path_buf(),
            scope: AttachScope::PerPod,
            why:
                "only pods (CNI ADD, or running pods enrolled in place) are enrolled: a namespace \
                with no pod cgroup would have a policy and no program",
        }
        .into())
    }

    /// Unlinks `pod`'s cgroup when no enrollment of the same pod (by uid) is left; the
    /// cgroup already gone: the tick's sweep unpins its links.
    pub(super) fn unlink_pod_cgroup(&mut self, pod: &PodRef) {
        if self.dp.scope() != AttachScope::PerPod || pod.uid.is_empty() {
            return;
        }
        let same_pod =
            |f: &super::followed::Followed| f.record.pod.as_ref().is_some_and(|p| p.uid == pod.uid);
        if self.enrollments.values().any(same_pod) {
            return;
        }
        let Ok(dir) = crate::pod_cgroups::pod_dir_of(&self.opts.pod_cgroup_roots, &pod.uid) else {
            return;
        };
        match self.dp.detach_pod_cgroup_at(&dir) {
            Ok(()) => tracing::debug!(%pod, cgroup = %dir.display(), "pod cgroup unlinked"),
            Err(e) => tracing::warn!(%pod, cgroup = %dir.display(), error = %e,
                "cannot unlink the pod's cgroup (the tick sweeps it once the cgroup is gone)"),
        }
        // A directory this daemon made: removed when empty (runc's own are gone by the DEL).
        if self.pods.twins.remove(&dir) {
            if let Err(e) = std::fs::remove_dir(&dir) {
                tracing::debug!(cgroup = %dir.display(), error = %e, "the pod's v2 directory stays");
            }
        }
    }

    /// Unpins the links of pod cgroups that are gone (per-pod scope).
    pub(super) fn sweep_pod_cgroups(&self) {
        if self.dp.scope() != AttachScope::PerPod {
            return;
        }
        let gone = self.dp.sweep_pod_cgroups();
        if !gone.is_empty() {
            tracing::info!(cgroup_ids = %redirect_policy::Comma(&gone),
                "unpinned the links of pod cgroups that are gone");
        }
    }
}
