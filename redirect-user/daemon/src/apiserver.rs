//! The daemon's Kubernetes client: one GET of the pod a CNI call names, with bounded retries
//! (istio-cni: 30 x 1 s), over kube-rs (in-cluster config, else `--kubeconfig FILE`).
use std::{net::IpAddr, path::PathBuf, sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::Pod;
use kube::{config::KubeConfigOptions, Api, Client, Config};

use redirect_daemon_api::PodRef;

use crate::kube_error::KubeError;
use crate::{pod_cache::PodCache, resolution::Resolved};

/// How the daemon reaches the apiserver and which pods are its node's.
#[derive(Debug, Clone)]
pub struct KubeOptions {
    /// A kubeconfig, used when `KUBERNETES_SERVICE_HOST` is not set (outside a cluster).
    pub kubeconfig: Option<PathBuf>,
    /// This node's name: a pod scheduled elsewhere is refused.
    pub node_name: Option<String>,
    /// The cluster DNS address, for pods that capture DNS with `dnsPolicy: ClusterFirst`.
    pub cluster_dns: Option<IpAddr>,
    /// Without `cluster_dns`: the Service (namespace, name) whose cluster IP it is, read at start.
    pub cluster_dns_service: (String, String),
    /// GET attempts before a pod that cannot be read fails ADD.
    pub get_attempts: u32,
    /// Pause between two attempts.
    pub get_interval: Duration,
    /// The kubelet's pod cgroup roots (`kubepods.slice`, `kubepods` under the cgroup v2 mount
    /// on a node): the reconcile finds running pods' sandboxes and containers there, in
    /// directories root owns only.
    pub pod_cgroup_roots: Vec<PathBuf>,
    /// Longest time between two reconciles of this node's pods (a watch change starts one at
    /// the next tick).
    pub reconcile_interval: Duration,
    /// The node readiness taint to remove from this node once the plugin entry is in place.
    pub untaint: Option<crate::untaint::Taint>,
    /// Where the runtime's conflists are (for the untaint's check and the hand-back).
    pub cni_conf_dir: PathBuf,
    /// The DaemonSet running this daemon (`--daemonset`): asked about at the stop, to hand
    /// capture back to istio-cni when it is being removed (`server/hand_back.rs`).
    pub daemonset: Option<(String, String)>,
    /// Every pod's proxy bypass starts closed (`Policy::proxy_bypass_closed`) until its
    /// istio-proxy container's cgroup is bound (`--strict-proxy-binding`).
    pub strict_proxy_binding: bool,
    /// Reset the connections outside capture of every pod enrolled in place
    /// (`--reset-uncaptured`; a pod asks alone with `redirect.dev/reset-uncaptured`).
    pub reset_uncaptured: bool,
}

impl Default for KubeOptions {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            node_name: None,
            cluster_dns: None,
            cluster_dns_service: ("kube-system".into(), "kube-dns".into()),
            get_attempts: 30,
            get_interval: Duration::from_secs(1),
            pod_cgroup_roots: vec![
                PathBuf::from("/sys/fs/cgroup/kubepods.slice"),
                PathBuf::from("/sys/fs/cgroup/kubepods"),
            ],
            reconcile_interval: Duration::from_secs(10),
            untaint: None,
            cni_conf_dir: PathBuf::from("/etc/cni/net.d"),
            daemonset: None,
            strict_proxy_binding: false,
            reset_uncaptured: false,
        }
    }
}

/// The apiserver client (absent without access), on the daemon's runtime.
pub struct Kube {
    opts: KubeOptions,
    client: Option<Client>,
    /// This node's pods as the watch tells them (with `--node-name` only).
    cache: Option<PodCache>,
    untaint: std::sync::Mutex<Option<crate::untaint::Untaint>>,
    /// The daemon's one runtime ([`crate::runtime`]): the client's connections, the watch.
    rt: tokio::runtime::Handle,
}

impl std::fmt::Debug for Kube {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kube")
            .field("opts", &self.opts)
            .field("client", &self.client.is_some())
            .field("cached", &self.cache.as_ref().map(PodCache::len))
            .finish_non_exhaustive()
    }
}

impl Kube {
    /// Builds the client on `rt` (the daemon's runtime, [`crate::runtime`]): in-cluster when
    /// `KUBERNETES_SERVICE_HOST` is set, else from `--kubeconfig`, else none (pod requests then
    /// fail, naming why). Called outside the runtime (it waits for the kubeconfig's reading).
    pub fn new(mut opts: KubeOptions, rt: tokio::runtime::Handle) -> Result<Self, KubeError> {
        let config = load_config(&rt, opts.kubeconfig.as_deref())?;
        let Some(mut config) = config else {
            return Ok(Self {
                opts,
                client: None,
                cache: None,
                untaint: std::sync::Mutex::new(None),
                rt,
            });
        };
        // One attempt must not outlast the plugin's patience: retries are ours.
        config.connect_timeout = Some(Duration::from_secs(5));
        config.read_timeout = Some(Duration::from_secs(5));
        if opts.cluster_dns.is_none() {
            let (ns, name) = &opts.cluster_dns_service;
            match crate::cluster_dns::read(&rt, &config, &opts.cluster_dns_service) {
                Ok(ip) => {
                    tracing::info!(%ip, service = %format!("{ns}/{name}"),
                        "cluster DNS address from the Service's cluster IP");
                    opts.cluster_dns = Some(ip);
                }
                Err(error) => tracing::warn!(
                    %error,
                    "no cluster DNS address: pods that capture DNS with dnsPolicy ClusterFirst fail \
                        ADD; pass --cluster-dns (the kubelet's clusterDNS) or let the daemon read \
                        the Service (rbac.yaml)"
                ),
            }
        }
        let cache = match &opts.node_name {
            Some(node) => Some(crate::pod_watch::watch(
                &rt,
                config.clone(),
                node.clone(),
                opts.cluster_dns,
            )),
            None => None,
        };
        let client = {
            let _entered = rt.enter();
            crate::credentials::client(config).map_err(|e| KubeError::Config {
                from: "the client".into(),
                reason: e.to_string(),
            })?
        };
        let untaint = match (&opts.untaint, &opts.node_name) {
            (Some(taint), Some(node)) => Some(crate::untaint::Untaint::new(
                taint.clone(),
                opts.cni_conf_dir.clone(),
                node.clone(),
            )),
            _ => None,
        };
        Ok(Self {
            opts,
            client: Some(client),
            cache,
            untaint: std::sync::Mutex::new(untaint),
            rt,
        })
    }

    /// Whether `pod` must be read from the apiserver (the watch's cache neither holds it nor
    /// saw it deleted).
    pub(crate) fn needs_get(&self, pod: &PodRef) -> bool {
        self.client.is_some() && self.cached(pod).is_none() && !self.seen_deleted(pod)
    }

    /// Whether the watch saw `pod` deleted.
    pub(crate) fn seen_deleted(&self, pod: &PodRef) -> bool {
        !pod.uid.is_empty() && self.cache.as_ref().is_some_and(|c| c.deleted(&pod.uid))
    }

    /// The cached pod, when it is the one the runtime named.
    fn cached(&self, pod: &PodRef) -> Option<Resolved> {
        let found = self.cache.as_ref()?.get(&pod.namespace, &pod.name)?;
        let uid = found.pod.metadata.uid.as_deref().unwrap_or_default();
        (pod.uid.is_empty() || uid == pod.uid).then_some(found)
    }

    /// The generation of the watch's cache (it changes with every change the watch saw);
    /// `None` as for [`Kube::node_pods`]. Copies no pod.
    pub(crate) fn node_generation(&self) -> Option<u64> {
        self.cache.as_ref()?.generation()
    }

    /// This node's pods as the watch last listed them, with the cache's generation; `None`
    /// without a watch (no `--node-name`) or before its first listing completed.
    pub(crate) fn node_pods(&self) -> Option<(u64, Vec<Arc<Pod>>)> {
        self.cache.as_ref()?.synced()
    }

    /// One GET of `namespace/name` (no retries): `Ok(None)` when the apiserver has no such
    /// pod. The reconcile confirms with it that a pod the watch lost is really gone.
    pub(crate) async fn get_once(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Pod>, String> {
        let client = self.client.clone().ok_or("no Kubernetes access")?;
        let api: Api<Pod> = Api::namespaced(client, namespace);
        api.get_opt(name).await.map_err(|e| e.to_string())
    }

    /// The daemon's runtime, which the client runs on.
    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.rt
    }

    /// Moves the node readiness taint's removal on (every tick; see [`crate::untaint`]).
    pub(crate) fn tick_untaint(&self) {
        let mut untaint = self
            .untaint
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(u) = untaint.as_mut() {
            u.tick(&self.rt, self.client.as_ref());
        }
    }

    /// The options in force.
    pub(crate) fn options(&self) -> &KubeOptions {
        &self.opts
    }

    /// `pod` with its decision and policy: from the watch's cache, else GETs it until it
    /// exists with the uid the runtime named (a pod recreated under the same name is another
    /// pod), at most `get_attempts` times, and resolves it; checks it is on this node. Waits
    /// on the calling thread: for the datapath's owner only, never a task of the runtime.
    pub(crate) fn pod(&self, pod: &PodRef) -> Result<Resolved, KubeError> {
        self.rt.block_on(self.pod_when(pod, || true))
    }

    /// [`Kube::pod`] as a task of the runtime does it, giving up between two attempts once
    /// `wanted` says nobody waits for the answer any more (the plugin hung up: its runtime has
    /// timed out).
    pub(crate) async fn pod_when(
        &self,
        pod: &PodRef,
        wanted: impl Fn() -> bool,
    ) -> Result<Resolved, KubeError> {
        let client = self
            .client
            .clone()
            .ok_or_else(|| KubeError::NoAccess(pod.to_string()))?;
        let api: Api<Pod> = Api::namespaced(client, &pod.namespace);
        let attempts = self.opts.get_attempts.max(1);
        let mut last = String::new();
        for attempt in 1..=attempts {
            if attempt > 1 && !wanted() {
                return Err(KubeError::GaveUp(pod.to_string()));
            }
            // Deleted: no GET will bring it back (a new pod of the name has another uid).
            if self.seen_deleted(pod) {
                return Err(KubeError::Deleted(pod.to_string()));
            }
            // The watch may have told it meanwhile.
            if let Some(found) = self.cached(pod) {
                tracing::debug!(%pod, attempt, "pod read from the watch's cache");
                return self.on_this_node(pod, found);
            }
            match api.get_opt(&pod.name).await {
                Ok(Some(found)) => {
                    let uid = found.metadata.uid.as_deref().unwrap_or_default();
                    if pod.uid.is_empty() || uid == pod.uid {
                        let found = Resolved::new(found, self.opts.cluster_dns);
                        return self.on_this_node(pod, found);
                    }
                    last = format!(
                        "the apiserver holds uid {uid}, the runtime named {}",
                        pod.uid
                    );
                }
                Ok(None) => last = "not found".into(),
                Err(e) => last = e.to_string(),
            }
            tracing::warn!(%pod, attempt, attempts, error = %last, "reading the pod");
            if attempt < attempts {
                tokio::time::sleep(self.opts.get_interval).await;
            }
        }
        Err(KubeError::Get {
            pod: pod.to_string(),
            attempts,
            last,
        })
    }

    fn on_this_node(&self, pod: &PodRef, found: Resolved) -> Result<Resolved, KubeError> {
        let node = found.pod.spec.as_ref().and_then(|s| s.node_name.clone());
        match (&self.opts.node_name, node) {
            (Some(ours), Some(node)) if *ours != node => Err(KubeError::OtherNode {
                pod: pod.to_string(),
                found: node,
                ours: ours.clone(),
            }),
            _ => Ok(found),
        }
    }
}

/// The client configuration: in-cluster when `KUBERNETES_SERVICE_HOST` is set, else from
/// `kubeconfig`, else none.
pub(crate) fn load_config(
    rt: &tokio::runtime::Handle,
    kubeconfig: Option<&std::path::Path>,
) -> Result<Option<Config>, KubeError> {
    Ok(if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        Some(Config::incluster().map_err(|e| KubeError::Config {
            from: "in-cluster".into(),
            reason: e.to_string(),
        })?)
    } else if let Some(path) = kubeconfig {
        let from = path.display().to_string();
        let file = kube::config::Kubeconfig::read_from(path).map_err(|e| KubeError::Config {
            from: from.clone(),
            reason: e.to_string(),
        })?;
        Some(
            rt.block_on(Config::from_custom_kubeconfig(
                file,
                &KubeConfigOptions::default(),
            ))
            .map_err(|e| KubeError::Config {
                from,
                reason: e.to_string(),
            })?,
        )
    } else {
        None
    })
}
