//! The daemon's Kubernetes flags (`--kubeconfig`, `--node-name`, `--cluster-dns`,
//! `--pod-get-*`): how it reads the pods the CNI plugin names.
use std::{net::IpAddr, path::PathBuf, time::Duration};

use clap::Args;
use redirect_daemon::apiserver::KubeOptions;

/// How the daemon reaches the apiserver (in-cluster config wins when KUBERNETES_SERVICE_HOST
/// is set).
#[derive(Debug, Clone, Args)]
pub struct KubeArgs {
    /// A kubeconfig, used outside a cluster (no KUBERNETES_SERVICE_HOST). Without either, pod
    /// requests of the CNI plugin fail (closed).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// This node's name: a pod the apiserver schedules elsewhere is refused.
    #[arg(long, value_name = "NAME", env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// The cluster DNS service address (kube-dns), for pods that capture DNS with
    /// dnsPolicy ClusterFirst (never the node's resolv.conf).
    #[arg(long, value_name = "IP")]
    pub cluster_dns: Option<IpAddr>,
    /// GETs of a pod before its CNI ADD fails (istio-cni: 30).
    #[arg(long, value_name = "N", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub pod_get_attempts: u32,
    /// Milliseconds between two GETs of a pod (istio-cni: 1000).
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub pod_get_interval_ms: u64,
}

impl KubeArgs {
    /// The daemon's options.
    pub fn options(&self) -> KubeOptions {
        KubeOptions {
            kubeconfig: self.kubeconfig.clone(),
            node_name: self.node_name.clone(),
            cluster_dns: self.cluster_dns,
            get_attempts: self.pod_get_attempts,
            get_interval: Duration::from_millis(self.pod_get_interval_ms),
        }
    }
}
