//! `redirect untaint-controller`: one central component removes each node's readiness taint
//! once that node's DaemonSet pod is Ready (the daemon's readiness probe answers and
//! install-cni's says the plugin and our entry are in place), as Istio's istiod does for
//! istio-cni, so that no node's daemon needs nodes patch (a compromised node could taint or
//! relabel every other Node with it). It watches only the DaemonSet's pods (`--selector`, in
//! `--namespace`: RBAC pods get, list, watch there) and GETs and PATCHes only the Nodes they
//! run on ([`crate::node_taint::remove`]: RBAC nodes get, patch). A removal that fails is tried
//! again every 5 s while the pod stays Ready. It runs until SIGTERM or SIGINT.
use std::{path::PathBuf, time::Duration};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    runtime::{watcher, WatchStreamExt as _},
    Api, Client,
};
use tokio::signal::unix::{signal, SignalKind};

use crate::{
    kube_error::KubeError,
    node_taint::{remove, Taint},
    ready_nodes::ReadyNodes,
};

/// What the controller watches and removes.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// The readiness taint.
    pub taint: Taint,
    /// The DaemonSet's namespace.
    pub namespace: String,
    /// The label selector of the DaemonSet's pods.
    pub selector: String,
    /// A kubeconfig, used outside a cluster.
    pub kubeconfig: Option<PathBuf>,
}

/// Why the controller could not run.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The client configuration could not be loaded.
    #[error(transparent)]
    Config(#[from] KubeError),
    /// Neither in a cluster nor given a kubeconfig.
    #[error(
        "the untaint controller has no Kubernetes access (KUBERNETES_SERVICE_HOST is not set \
        and no --kubeconfig was given)"
    )]
    NoAccess,
    /// The client could not be built.
    #[error("the Kubernetes client: {0}")]
    Client(#[from] crate::credentials::ClientError),
    /// The runtime or a signal handler could not be set up.
    #[error("{what}: {source}")]
    Setup {
        /// What was being set up.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Pause before a failed removal is tried again.
const RETRY: Duration = Duration::from_secs(5);

/// Runs the controller until SIGTERM or SIGINT.
pub fn run(opts: &ControllerOptions) -> Result<(), ControllerError> {
    let setup = |what| move |source| ControllerError::Setup { what, source };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(setup("a runtime for the client"))?;
    let mut config = crate::apiserver::load_config(rt.handle(), opts.kubeconfig.as_deref())?
        .ok_or(ControllerError::NoAccess)?;
    config.connect_timeout = Some(Duration::from_secs(5));
    let (client, mut term, mut int) = {
        let _entered = rt.enter();
        (
            crate::credentials::client(config)?,
            signal(SignalKind::terminate()).map_err(setup("the SIGTERM handler"))?,
            signal(SignalKind::interrupt()).map_err(setup("the SIGINT handler"))?,
        )
    };
    rt.block_on(async {
        tokio::select! {
            () = serve(client, opts) => {}
            _ = term.recv() => tracing::info!("SIGTERM: the untaint controller stops"),
            _ = int.recv() => tracing::info!("SIGINT: the untaint controller stops"),
        }
    });
    Ok(())
}

/// Watches the pods and removes the taint from each Ready pod's node (never returns while the
/// watch runs: the watcher retries with its backoff).
async fn serve(client: Client, opts: &ControllerOptions) {
    let Taint { key, effect } = &opts.taint;
    tracing::info!(namespace = %opts.namespace, selector = %opts.selector, %key, %effect,
        "untaint controller: watching the DaemonSet's pods");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &opts.namespace);
    let events = watcher(pods, watcher::Config::default().labels(&opts.selector)).default_backoff();
    let mut events = std::pin::pin!(events);
    let mut nodes = ReadyNodes::default();
    let mut retry = tokio::time::interval(RETRY);
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(e)) => nodes.apply(e),
                Some(Err(error)) => tracing::warn!(%error, namespace = %opts.namespace,
                    "watching the DaemonSet's pods"),
                None => return,
            },
            _ = retry.tick() => {}
        }
        for node in nodes.due() {
            match remove(client.clone(), &node, &opts.taint).await {
                Ok(true) => {
                    tracing::info!(%node, %key, %effect, "the node's DaemonSet pod is Ready: \
                        removed the readiness taint");
                    nodes.done(&node);
                }
                Ok(false) => {
                    tracing::debug!(%node, %key, "the node has no readiness taint: nothing to remove");
                    nodes.done(&node);
                }
                Err(error) => {
                    tracing::warn!(%node, %error, "removing the readiness taint failed: tried again in 5 s");
                }
            }
        }
    }
}
