//! Why a pod could not be read from the apiserver (`KubeError`): for the client, the watch
//! and the connections' tasks alike.

/// Why a pod could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// Neither in a cluster nor given a kubeconfig.
    #[error(
        "the daemon has no Kubernetes access (KUBERNETES_SERVICE_HOST is not set and no \
        --kubeconfig was given), so it cannot read {0}"
    )]
    NoAccess(String),
    /// The configuration could not be loaded.
    #[error("loading the Kubernetes client configuration ({from}): {reason}")]
    Config {
        /// `in-cluster` or the kubeconfig's path.
        from: String,
        /// kube-rs's words.
        reason: String,
    },
    /// Every attempt failed.
    #[error("GET {pod} from the apiserver failed {attempts} time(s); last: {last}")]
    Get {
        /// The pod, as `pod NS/NAME (uid UID)`.
        pod: String,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// Nobody waits for the pod any more (the plugin hung up between two attempts).
    #[error("{0}: the CNI plugin hung up while the pod was read; stopped reading it")]
    GaveUp(String),
    /// The watch saw the pod deleted (its sandbox is being made after a force delete).
    #[error("{0} was deleted (the apiserver's watch of this node said so): not enrolled")]
    Deleted(String),
    /// The pod runs on another node.
    #[error("{pod} is scheduled on node {found:?}, not this daemon's node {ours:?}")]
    OtherNode {
        /// The pod, as `pod NS/NAME (uid UID)`.
        pod: String,
        /// Its spec.nodeName.
        found: String,
        /// `--node-name`.
        ours: String,
    },
}
