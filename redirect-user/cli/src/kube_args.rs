//! The daemon's Kubernetes flags (`--kubeconfig`, `--node-name`, `--cluster-dns`,
//! `--pod-get-*`): how it reads the pods the CNI plugin names.
use std::{net::IpAddr, path::PathBuf, time::Duration};

use clap::Args;
use redirect_daemon::KubeOptions;

/// How the daemon reaches the apiserver (in-cluster config wins when KUBERNETES_SERVICE_HOST
/// is set).
#[derive(Debug, Clone, Args)]
pub(crate) struct KubeArgs {
    /// A kubeconfig, used outside a cluster (no KUBERNETES_SERVICE_HOST). Without either, pod
    /// requests of the CNI plugin fail (closed).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// This node's name: a pod the apiserver schedules elsewhere is refused.
    #[arg(long, value_name = "NAME", env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// The cluster DNS address (the kubelet's clusterDNS), for pods that capture DNS with
    /// dnsPolicy ClusterFirst (never the node's resolv.conf) [default: the cluster IP of
    /// --cluster-dns-service, read at start]. Give it where the kubelets point elsewhere
    /// (NodeLocal DNSCache's 169.254.20.10).
    #[arg(long, value_name = "IP")]
    pub cluster_dns: Option<IpAddr>,
    /// Without --cluster-dns: the Service whose cluster IP the cluster DNS address is (RBAC:
    /// get on it, rbac.yaml).
    #[arg(long, value_name = "NAMESPACE/NAME", default_value = "kube-system/kube-dns",
        value_parser = redirect_daemon::parse_dns_service)]
    pub cluster_dns_service: (String, String),
    /// GETs of a pod before its CNI ADD fails (istio-cni: 30).
    #[arg(long, value_name = "N", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub pod_get_attempts: u32,
    /// Milliseconds between two GETs of a pod (istio-cni: 1000).
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub pod_get_interval_ms: u64,
    /// Where the kubelet's pod cgroups are (default: the cgroup v2 mount). The reconcile finds
    /// a running pod's processes under it (its `pod<UID>` directory, cgroupfs or systemd
    /// driver) to enroll a pod in place, and its istio-proxy container's cgroup to bind the
    /// uid/gid bypass to.
    #[arg(long, value_name = "DIR")]
    pub pod_cgroup_root: Option<PathBuf>,
    /// Remove this taint (KEY:EFFECT, e.g. redirect.dev/not-ready:NoSchedule) from this node
    /// once the plugin entry is in --cni-conf-dir's conflist and the daemon serves ADDs
    /// (with --node-name; RBAC: nodes get and patch, which the shipped rbac.yaml does not
    /// grant: with it a compromised node could taint or relabel every Node). The shipped way
    /// is `redirect untaint-controller`, one Deployment holding the only nodes patch; this
    /// flag is for operators who grant the daemon nodes patch themselves.
    #[arg(long, value_name = "KEY:EFFECT", value_parser = redirect_daemon::parse_taint, requires = "node_name")]
    pub untaint: Option<redirect_daemon::Taint>,
    /// At SIGTERM, hand capture back to istio-cni when this DaemonSet is being removed: when
    /// the apiserver says it is gone, being deleted or no longer selects --node-name, and
    /// --cni-conf-dir's conflist chains istio-cni (install-cni stands by for it), the daemon
    /// uninstalls the datapath (every program detached, every pin and file removed) before
    /// it exits. Otherwise (an upgrade, an apiserver that cannot say, no istio-cni) capture
    /// stays pinned, fail closed. The decision is logged with its reason (deploy/README.md,
    /// the rollback).
    #[arg(long, value_name = "NAMESPACE/NAME", requires = "node_name",
        value_parser = redirect_daemon::parse_dns_service)]
    pub daemonset: Option<(String, String)>,
    /// Where the runtime's conflists are, as the daemon sees them (for --untaint, the
    /// reconcile's exclusions and --daemonset).
    #[arg(long, value_name = "DIR", default_value = "/etc/cni/net.d")]
    pub cni_conf_dir: PathBuf,
    /// Longest seconds between two reconciles of this node's pods with the enrollments (a
    /// change seen by the pod watch starts one within a second).
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub reconcile_interval_secs: u64,
    /// Start every pod's proxy bypass closed: until the pod's istio-proxy container runs and
    /// its cgroup is bound, the proxy uid/gid (1337) is captured anywhere in the pod like an
    /// application (a pod opts in alone with the annotation redirect.dev/proxy-binding:
    /// strict). Without it the bypass is istio-iptables' owner match until the first binding,
    /// so init containers running as 1337 (Istio's workaround for init-time network access)
    /// go out uncaptured; with it they are captured and fail while no proxy listens. Either
    /// way the bypass closes when a bound proxy container exits.
    #[arg(long)]
    pub strict_proxy_binding: bool,
    /// Reset (SOCK_DESTROY) the connections a pod enrolled in place opened before its capture
    /// and that its policy would capture now, so that its applications reconnect through the
    /// proxy (a pod asks alone with the annotation redirect.dev/reset-uncaptured: "true").
    /// Off by default: the application sees its connection aborted. Without it they are only
    /// counted (`redirect list`: outside capture) and logged.
    #[arg(long)]
    pub reset_uncaptured: bool,
}

impl KubeArgs {
    /// The daemon's options.
    pub(crate) fn options(&self) -> anyhow::Result<KubeOptions> {
        let pod_cgroup_roots = match &self.pod_cgroup_root {
            Some(dir) => vec![redirect_datapath::validate_cgroup(dir)
                .map_err(|e| anyhow::anyhow!("--pod-cgroup-root {}: {e}", dir.display()))?],
            None => {
                let mount = redirect_datapath::cgroup2_root()?;
                vec![mount.join("kubepods.slice"), mount.join("kubepods")]
            }
        };
        Ok(KubeOptions {
            kubeconfig: self.kubeconfig.clone(),
            node_name: self.node_name.clone(),
            cluster_dns: self.cluster_dns,
            cluster_dns_service: self.cluster_dns_service.clone(),
            get_attempts: self.pod_get_attempts,
            get_interval: Duration::from_millis(self.pod_get_interval_ms),
            pod_cgroup_roots,
            reconcile_interval: Duration::from_secs(self.reconcile_interval_secs),
            untaint: self.untaint.clone(),
            cni_conf_dir: self.cni_conf_dir.clone(),
            daemonset: self.daemonset.clone(),
            strict_proxy_binding: self.strict_proxy_binding,
            reset_uncaptured: self.reset_uncaptured,
        })
    }
}
