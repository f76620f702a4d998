//! The daemon's own removal of its node's readiness taint (`--untaint KEY:EFFECT`), for
//! operators who grant the daemon nodes patch themselves: the shipped manifests do not (a
//! compromised node could then taint or relabel every Node), and run the untaint controller
//! instead (`redirect untaint-controller`, [`crate::untaint_controller`], the one nodes patch
//! grant). Once the daemon serves ADDs and the runtime's conflist holds our entry, it removes
//! that taint from its own Node, so pods are scheduled on a new node only once they can be
//! captured there. The GET and PATCH ([`crate::node_taint::remove`]) run as a task of the
//! daemon's runtime.
use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use kube::Client;

pub(crate) use crate::node_taint::Taint;

/// What to untaint, and how far it got.
#[derive(Debug)]
pub(crate) struct Untaint {
    /// The taint.
    pub taint: Taint,
    /// Where the runtime's conflists are, as the daemon sees them.
    pub cni_conf_dir: PathBuf,
    node: String,
    done: Arc<AtomicBool>,
    running: Arc<AtomicBool>,
    next_try: Instant,
    /// The wait for the entry was logged (once at info).
    said_waiting: bool,
}

/// Pause after a failed attempt.
const RETRY: Duration = Duration::from_secs(5);

impl Untaint {
    /// Removes `taint` from Node `node` once the entry is in `cni_conf_dir`.
    pub(crate) fn new(taint: Taint, cni_conf_dir: PathBuf, node: String) -> Self {
        Self {
            taint,
            cni_conf_dir,
            node,
            done: Arc::default(),
            running: Arc::default(),
            next_try: Instant::now(),
            said_waiting: false,
        }
    }

    /// Whether the taint is gone (removed here, or never there).
    pub(crate) fn done(&self) -> bool {
        self.done.load(Ordering::Relaxed)
    }

    /// Every tick: when not done, not running and the entry is in place, starts an attempt.
    pub(crate) fn tick(&mut self, rt: &tokio::runtime::Handle, client: Option<&Client>) {
        if self.done() || self.running.load(Ordering::Relaxed) || Instant::now() < self.next_try {
            return;
        }
        self.next_try = Instant::now() + RETRY;
        // Ours, or istio-cni's while install-cni stands by for it: either captures new pods.
        let in_place = redirect_install::find_config(&self.cni_conf_dir).is_ok_and(|found| {
            redirect_install::has_our_entry(&found.json)
                || redirect_install::istio_cni_chained(&found.json)
        });
        if !in_place {
            let dir = self.cni_conf_dir.display();
            if self.said_waiting {
                tracing::debug!(%dir, "the node's conflist holds no redirect-cni entry yet: the taint stays");
            } else {
                tracing::info!(%dir, key = %self.taint.key, "the node's conflist holds no \
                    redirect-cni entry yet: the taint stays until install-cni puts it in");
                self.said_waiting = true;
            }
            return;
        }
        let Some(client) = client.cloned() else {
            return;
        };
        let (taint, node, done, running) = (
            self.taint.clone(),
            self.node.clone(),
            Arc::clone(&self.done),
            Arc::clone(&self.running),
        );
        running.store(true, Ordering::Relaxed);
        rt.spawn(async move {
            match crate::node_taint::remove(client, &node, &taint).await {
                Ok(true) => {
                    tracing::info!(node = %node, key = %taint.key, effect = %taint.effect,
                        "the plugin entry is in place and ADDs are served: removed the readiness \
                        taint");
                    done.store(true, Ordering::Relaxed);
                }
                Ok(false) => {
                    tracing::info!(node = %node, key = %taint.key,
                        "the node has no readiness taint: nothing to remove");
                    done.store(true, Ordering::Relaxed);
                }
                Err(error) => tracing::warn!(node = %node, %error, "removing the readiness taint failed: tried again"),
            }
            running.store(false, Ordering::Relaxed);
        });
    }
}
