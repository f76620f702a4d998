//! What the daemon knows of pods, under one owner: the apiserver client with its watch's cache
//! (`kube`, present with `--kube`), the resolver threads that read a pod the watch has not
//! listed yet off the serving thread, and the reconcile's state (when it last ran, the
//! confirmations of gone pods in flight, the plugin's exclusions).
use std::sync::Arc;

use super::{reconcile::Reconcile, resolver::Resolver};
use crate::{
    apiserver::Kube,
    error::{Error, Result},
};

/// The daemon's pod knowledge (see the module doc).
#[derive(Debug)]
pub(crate) struct Pods {
    /// The apiserver client of pod requests, shared with the resolver threads.
    pub(super) kube: Option<Arc<Kube>>,
    /// Pod requests whose pod is being read from the apiserver, off the serving thread.
    pub(super) resolver: Resolver,
    /// This node's pods against the enrollments.
    pub(super) reconcile: Reconcile,
}

impl Pods {
    /// No apiserver yet (`Daemon::with_kube` gives one); the resolver's wake-up pair made.
    pub(super) fn new() -> Result<Self> {
        let resolver = Resolver::new().map_err(|e| {
            Error::io(
                "creating the resolver's wake-up pair",
                std::path::PathBuf::from("socketpair"),
                e,
            )
        })?;
        Ok(Self {
            kube: None,
            resolver,
            reconcile: Reconcile::default(),
        })
    }
}
