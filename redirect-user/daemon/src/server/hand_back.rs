//! At the daemon's stop: capture handed back to istio-cni. When the DaemonSet running the daemon
//! (`--daemonset`) is being removed (the apiserver says it is gone, being deleted or no longer
//! selects this node) and the runtime's conflist chains istio-cni (install-cni stood by for it,
//! so istio-cni captures every new pod), the datapath is uninstalled: nothing of ours stays on
//! the node. In every other case capture stays pinned (fail closed): an upgrade, an apiserver
//! that cannot say, or a removal with nothing else capturing (`redirect uninstall` on the node
//! removes it then).
use super::Daemon;
use crate::still_wanted::{ask, Exit};

impl Daemon {
    /// Run once the serving loop has stopped, before the daemon's files are tidied.
    pub(super) fn hand_back_at_stop(&mut self) {
        let Some(kube) = self.pods.kube.clone() else {
            return;
        };
        let opts = kube.options();
        let (Some(ds), Some(node)) = (&opts.daemonset, &opts.node_name) else {
            return;
        };
        let reason = match ask(opts.kubeconfig.as_deref(), ds, node) {
            Exit::Keep(reason) => {
                tracing::info!(%reason, "capture stays pinned (an upgrade or a restart)");
                return;
            }
            Exit::Remove(reason) => reason,
        };
        let istio = redirect_install::find_config(&opts.cni_conf_dir)
            .ok()
            .filter(|found| redirect_install::istio_cni_chained(&found.json));
        let Some(found) = istio else {
            tracing::warn!(%reason, conf_dir = %opts.cni_conf_dir.display(),
                "the DaemonSet is being removed but no istio-cni is chained to capture this \
                node's pods: capture stays pinned (fail closed); `redirect uninstall` on the \
                node removes it");
            return;
        };
        match self.uninstall() {
            Ok(done) => tracing::info!(%reason, config = %found.path.display(),
                message = %done.message,
                "the DaemonSet is being removed and istio-cni is chained: capture handed back \
                to istio-cni, the datapath uninstalled"),
            Err(error) => tracing::error!(%reason, %error,
                "handing capture back to istio-cni: the datapath could not be uninstalled \
                (`redirect uninstall` on the node)"),
        }
    }
}
