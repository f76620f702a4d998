//! Pod enrollments whose pod the watch no longer lists are unenrolled once a GET confirms the
//! pod is gone (not found, or another pod under its name). The GETs run as a task of the
//! daemon's runtime, never on the datapath's owner (each may take the client's 5 s connect and 5 s read
//! bounds, and a watch change starts them): their answers are applied at a later tick, to
//! enrollments that still hold the same pod. A completed pod is not listed either (the watch
//! leaves completed pods out): its GET still finds it, so its enrollment, which its sandbox's
//! DEL normally ends, is kept (capture held, not dropped on a guess) until the apiserver
//! deletes the pod.
use redirect_common::NetnsCookie;
use std::sync::Arc;

use redirect_daemon_api::PodRef;
use redirect_k8s::Pod;

use super::Daemon;

/// What a confirmation found: the enrollment, its pod, whether the pod is gone.
pub(crate) type Confirmed = (NetnsCookie, PodRef, bool);

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

impl Daemon {
    /// Starts the confirmations of the pod enrollments whose pod is not among `pods` (the
    /// watch's listing), unless some are still running.
    pub(super) fn unenroll_gone_pods(&mut self, pods: &[&Pod]) {
        if self.pods.reconcile.gone.is_some() {
            return;
        }
        let Some(kube) = &self.pods.kube else { return };
        let listed: Vec<&str> = pods.iter().map(|p| uid(p)).collect();
        let candidates: Vec<(NetnsCookie, PodRef)> = self
            .enrollments
            .values()
            .filter_map(|f| Some((f.record.cookie, f.record.pod.clone()?)))
            .filter(|(_, p)| !p.uid.is_empty() && !listed.contains(&p.uid.as_str()))
            .collect();
        if candidates.is_empty() {
            return;
        }
        let kube = Arc::clone(kube);
        let confirming = kube.runtime().clone().spawn(async move {
            let mut confirmed = Vec::with_capacity(candidates.len());
            for (cookie, pod) in candidates {
                let gone = match kube.get_once(&pod.namespace, &pod.name).await {
                    Ok(None) => true,
                    Ok(Some(found)) => uid(&found) != pod.uid,
                    Err(error) => {
                        tracing::warn!(%pod, %error, "cannot confirm that an unlisted pod is gone: kept");
                        false
                    }
                };
                confirmed.push((cookie, pod, gone));
            }
            confirmed
        });
        self.pods.reconcile.gone = Some(confirming);
    }

    /// Unenrolls what finished confirmations found gone (every tick).
    pub(super) fn apply_gone_checks(&mut self) {
        if !self
            .pods
            .reconcile
            .gone
            .as_ref()
            .is_some_and(|h| h.is_finished())
        {
            return;
        }
        let Some(handle) = self.pods.reconcile.gone.take() else {
            return;
        };
        let confirmed = futures::FutureExt::now_or_never(handle).and_then(|done| done.ok());
        for (cookie, pod, gone) in confirmed.unwrap_or_default() {
            let same = self
                .enrollments
                .get(&cookie)
                .and_then(|f| f.record.pod.as_ref())
                .is_some_and(|p| p.uid == pod.uid);
            if !gone || !same {
                continue;
            }
            match self.unenroll_cookie(cookie) {
                Ok(_) => {
                    tracing::info!(%pod, %cookie, "the pod is gone from the apiserver: unenrolled")
                }
                Err(error) => {
                    tracing::warn!(%pod, %cookie, %error, "the pod is gone from the apiserver; unenrolling it failed")
                }
            }
        }
    }
}
