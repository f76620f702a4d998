//! What the daemon knows of pods, under one owner: the apiserver client with its watch's cache
//! (`kube`, present with `--kube`, shared with the connections' tasks that read a pod the watch
//! has not listed yet) and the reconcile's state (when it last ran, the confirmations of gone
//! pods in flight, the plugin's exclusions), and the pod cgroups it made.
use std::sync::Arc;

use super::reconcile::Reconcile;
use crate::apiserver::Kube;

/// The daemon's pod knowledge (see the module doc).
#[derive(Debug)]
pub(crate) struct Pods {
    /// The apiserver client of pod requests, shared with the connections' tasks.
    pub(super) kube: Option<Arc<Kube>>,
    /// This node's pods against the enrollments.
    pub(super) reconcile: Reconcile,
    /// Pod cgroup v2 directories this daemon made at an ADD (a hybrid host: `pod_cgroup_twin`),
    /// removed again when the pod's last enrollment goes.
    pub(super) twins: std::collections::HashSet<std::path::PathBuf>,
}

impl Pods {
    /// No apiserver yet (`Daemon::with_kube` gives one).
    pub(super) fn new() -> Self {
        Self {
            kube: None,
            reconcile: Reconcile::default(),
            twins: std::collections::HashSet::new(),
        }
    }
}
