//! This node's pods against the enrollments, at start and on the tick (every
//! `--reconcile-interval`, and whenever the watch changed something): a meshed pod that runs but
//! is not enrolled (created while the daemon was down, or before the plugin was installed) is
//! enrolled in place, through its sandbox's network namespace; an enrolled pod the apiserver
//! no longer has is unenrolled; a pod's uid/gid bypass follows its istio-proxy container
//! (`proxy_binding`).
use redirect_common::NetnsCookie;
use std::{
    collections::{HashMap, HashSet},
    net::IpAddr,
    time::{Duration, Instant},
};

use redirect_datapath::{NetnsHandle, Phases};
use redirect_k8s::{decide, Decision, Pod};

use super::{
    proxy_binding::{binding_stale, proxy_cgroup},
    Daemon,
};
use redirect_daemon_api::PodRef;

use crate::{
    exclusions::ConfExclusions,
    pod_cgroups::{bare_container_id, in_initial_userns, netns_of, pids_in, pod_dirs, PodDir},
};

/// When the reconcile last ran and what it saw.
#[derive(Debug, Default)]
pub(crate) struct Reconcile {
    last: Option<Instant>,
    generation: u64,
    /// The GETs confirming that unlisted pods are gone, a task of the daemon's runtime.
    pub(super) gone: Option<tokio::task::JoinHandle<Vec<super::gone::Confirmed>>>,
    /// The plugin's exclusions (our conflist entry), read when a pod is to be enrolled.
    exclusions: Option<ConfExclusions>,
    /// The uids of pods the exclusions kept from being enrolled in place, said once each.
    excluded: HashSet<String>,
}

/// The pod's reference as the enrollments keep it.
fn pod_ref(pod: &Pod, container_id: String) -> PodRef {
    PodRef {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        container_id,
    }
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// The pod's addresses (status.podIPs, else status.podIP).
fn pod_ips(pod: &Pod) -> Vec<IpAddr> {
    let Some(status) = &pod.status else {
        return Vec::new();
    };
    let mut ips: Vec<IpAddr> = status
        .pod_ips
        .iter()
        .flatten()
        .filter_map(|i| i.ip.parse().ok())
        .collect();
    if ips.is_empty() {
        ips.extend(
            status
                .pod_ip
                .as_deref()
                .and_then(|i| i.parse::<IpAddr>().ok()),
        );
    }
    ips
}

/// A pod that runs on this node now: addressed, not finished, not being deleted.
fn running(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Running" | "Pending"))
        && pod.metadata.deletion_timestamp.is_none()
        && !pod_ips(pod).is_empty()
}

/// Every container id the pod's statuses name (its sandbox is the one they do not).
fn status_ids(pod: &Pod) -> Vec<&str> {
    let Some(status) = &pod.status else {
        return Vec::new();
    };
    [
        &status.container_statuses,
        &status.init_container_statuses,
        &status.ephemeral_container_statuses,
    ]
    .into_iter()
    .flatten()
    .flatten()
    .filter_map(|c| c.container_id.as_deref().map(bare_container_id))
    .collect()
}

impl Daemon {
    /// Whether `pod`'s connections outside capture are to be reset: the node's
    /// `--reset-uncaptured`, or the pod's annotation.
    fn reset_wanted(&self, pod: &Pod) -> bool {
        self.pods
            .kube
            .as_ref()
            .is_some_and(|k| k.options().reset_uncaptured)
            || redirect_k8s::reset_uncaptured(pod)
    }
}

/// The sandbox's network namespaces holding every address of `ips`. First those a runtime
/// named (a bind mount under `/run/netns`, which only the node's mount namespace can make:
/// containerd, CRI-O, also where CRI-O runs no infra process) among the namespaces of any of
/// the pod's processes; without one, those of the processes of the pod's container
/// directories its status does not name (the sandbox; a container the kubelet has not reported
/// yet), running in the host's user namespace unless the pod asks for its own (`hostUsers:
/// false`). An app process that makes a namespace of its own holding the pod's address is
/// never among them.
fn sandbox_netns(pod: &Pod, dir: &PodDir, ips: &[IpAddr]) -> Vec<NetnsHandle> {
    let holding = |paths: Vec<std::path::PathBuf>| -> Vec<NetnsHandle> {
        paths
            .into_iter()
            .filter_map(|path| {
                let ns = NetnsHandle::open(&path).ok()?;
                let held = ns.addresses().ok()?;
                ips.iter().all(|ip| held.contains(ip)).then_some(ns)
            })
            .collect()
    };
    let every: Vec<u32> = dir.containers.values().flat_map(|c| pids_in(c)).collect();
    let named: Vec<std::path::PathBuf> = netns_of(&every)
        .into_iter()
        .filter(|p| p.starts_with("/run/netns") || p.starts_with("/var/run/netns"))
        .collect();
    let named = holding(named);
    if !named.is_empty() {
        return named;
    }
    let statuses = status_ids(pod);
    let host_users = pod.spec.as_ref().and_then(|s| s.host_users) != Some(false);
    let pids: Vec<u32> = dir
        .containers
        .iter()
        .filter(|(id, _)| !statuses.contains(&id.as_str()))
        .flat_map(|(_, cgroup)| pids_in(cgroup))
        .filter(|pid| !host_users || in_initial_userns(*pid))
        .collect();
    holding(netns_of(&pids))
}

impl Daemon {
    /// Reconciles when due: the watch changed something (its first listing too, which makes
    /// the daemon's start one), a bound proxy cgroup is gone, or the interval passed.
    pub(super) fn reconcile_pods(&mut self) {
        self.apply_gone_checks();
        let Some(kube) = &self.pods.kube else { return };
        // Whether one is due is decided before any pod is copied: copying a node's pods
        // every tick cost a 400-pod node 11 ms of CPU a second, during which no request
        // was served.
        let Some(generation) = kube.node_generation() else {
            return;
        };
        let interval = kube.options().reconcile_interval;
        let roots = kube.options().pod_cgroup_roots.clone();
        let binding_gone = self.enrollments.values().any(|f| {
            f.record.pod.is_some()
                && f.record
                    .policy
                    .proxy_cgroup
                    .as_ref()
                    .is_some_and(|d| !d.exists())
        });
        let due = binding_gone
            || generation != self.pods.reconcile.generation
            || self
                .pods
                .reconcile
                .last
                .is_none_or(|t| t.elapsed() >= interval.max(Duration::from_secs(1)));
        if !due {
            return;
        }
        let Some((generation, pods)) = kube.node_pods() else {
            return;
        };
        let conf_dir = kube.options().cni_conf_dir.clone();
        let pods: Vec<&Pod> = pods.iter().map(|p| &**p).collect();
        self.pods.reconcile.last = Some(Instant::now());
        self.pods.reconcile.generation = generation;
        self.unenroll_gone_pods(&pods);
        let enrolled: HashMap<String, NetnsCookie> = self
            .enrollments
            .values()
            .filter_map(|f| Some((f.record.pod.as_ref()?.uid.clone(), f.record.cookie)))
            .filter(|(uid, _)| !uid.is_empty())
            .collect();
        let mut missing: Vec<&Pod> = pods
            .iter()
            .copied()
            .filter(|p| !enrolled.contains_key(uid(p)) && running(p))
            .filter(|p| decide(p) == Decision::Meshed)
            .collect();
        let listed: HashSet<&str> = pods.iter().map(|p| uid(p)).collect();
        self.pods
            .reconcile
            .excluded
            .retain(|u| listed.contains(u.as_str()));
        if !missing.is_empty() {
            let rec = &mut self.pods.reconcile;
            let exclusions = rec
                .exclusions
                .get_or_insert_with(|| ConfExclusions::new(conf_dir))
                .read();
            missing.retain(|p| {
                let (ns, name) = (
                    p.metadata.namespace.as_deref().unwrap_or_default(),
                    p.metadata.name.as_deref().unwrap_or_default(),
                );
                let Some(why) = exclusions.skips(ns, name) else {
                    return true;
                };
                if rec.excluded.insert(uid(p).to_owned()) {
                    tracing::info!(pod = %pod_ref(p, String::new()), reason = why,
                        "a running meshed pod the plugin excludes: not enrolled in place");
                }
                false
            });
        }
        let bound: Vec<(&Pod, NetnsCookie)> = pods
            .iter()
            .copied()
            .filter_map(|p| Some((p, *enrolled.get(uid(p))?)))
            .filter(|(p, cookie)| {
                let current = self
                    .enrollments
                    .get(cookie)
                    .and_then(|f| f.record.policy.proxy_cgroup.as_ref());
                binding_stale(p, current)
            })
            .collect();
        // Pods asking that their connections outside capture be reset (an annotation added
        // since, or the node's flag), while some are left.
        for cookie in self.with_outside() {
            let asks = self
                .enrollments
                .get(&cookie)
                .and_then(|f| f.record.pod.as_ref())
                .and_then(|p| pods.iter().find(|pod| uid(pod) == p.uid))
                .is_some_and(|pod| self.reset_wanted(pod));
            if asks {
                self.check_outside(cookie, true);
            }
        }
        // An enrolled pod the watch no longer lists (completed, or deleted and being confirmed
        // gone) whose bound container's cgroup is gone: its bypass closes as a listed pod's
        // would, and the reconcile is not due again at every tick for it.
        let unlisted: Vec<NetnsCookie> = self
            .enrollments
            .values()
            .filter(|f| {
                f.record
                    .pod
                    .as_ref()
                    .is_some_and(|p| !listed.contains(p.uid.as_str()))
                    && f.record
                        .policy
                        .proxy_cgroup
                        .as_ref()
                        .is_some_and(|d| !d.exists())
            })
            .map(|f| f.record.cookie)
            .collect();
        for cookie in unlisted {
            self.bind_proxy(cookie, None);
        }
        if missing.is_empty() && bound.is_empty() {
            return;
        }
        let dirs = pod_dirs(&roots);
        for pod in missing {
            if let Some(dir) = dirs.get(uid(pod)) {
                self.enroll_running(pod, dir);
            }
        }
        for (pod, cookie) in bound {
            let netns = self
                .enrollments
                .get(&cookie)
                .and_then(|f| f.ns.as_ref())
                .map(NetnsHandle::inode);
            let target = dirs
                .get(uid(pod))
                .zip(netns)
                .and_then(|(d, netns)| proxy_cgroup(pod, d, netns));
            self.bind_proxy(cookie, target);
        }
    }

    /// Enrolls a running meshed pod in place: its sandbox's namespace, which holds its
    /// addresses ([`sandbox_netns`]; two such namespaces are an alarm and neither is taken),
    /// the policy its annotations ask for, its sandbox's id from its cgroups.
    fn enroll_running(&mut self, pod: &Pod, dir: &PodDir) {
        let ips = pod_ips(pod);
        let named = pod_ref(pod, String::new());
        let ns = match <[NetnsHandle; 1]>::try_from(sandbox_netns(pod, dir, &ips)) {
            Ok([ns]) => ns,
            Err(found) if found.is_empty() => {
                tracing::warn!(pod = %named, ips = %redirect_policy::Comma(&ips),
                    cgroup = %dir.dir.display(),
                    "a running meshed pod is not enrolled, but no process of its sandbox runs in a \
                    namespace holding its addresses: left for its CNI ADD");
                return;
            }
            Err(found) => {
                let paths: Vec<String> = found
                    .iter()
                    .map(|n| n.path().display().to_string())
                    .collect();
                tracing::error!(pod = %named, ips = %redirect_policy::Comma(&ips),
                    cgroup = %dir.dir.display(), paths = %redirect_policy::Comma(&paths),
                    "ALARM: more than one namespace of the pod's sandbox holds its addresses, so \
                    none is enrolled in place: left for its CNI ADD");
                return;
            }
        };
        let kube = self.pods.kube.as_ref().map(|k| k.options().cluster_dns);
        let mut policy = match redirect_k8s::policy(pod, kube.flatten()) {
            Ok(p) => self.node_binding(p),
            Err(error) => {
                tracing::error!(pod = %named, %error, "a running meshed pod cannot be captured: not enrolled");
                return;
            }
        };
        // The pod claims its status.podIPs only (and link-local addresses).
        policy.own_addresses = Some(ips.clone());
        let statuses = status_ids(pod);
        let sandboxes: Vec<&String> = dir
            .containers
            .keys()
            .filter(|id| !statuses.contains(&id.as_str()))
            .collect();
        let sandbox = match sandboxes.as_slice() {
            [one] => (*one).clone(),
            _ => String::new(),
        };
        let pod_ref = pod_ref(pod, sandbox);
        let netns = ns.path().to_path_buf();
        let netns_inode = ns.inode();
        let source =
            format!("{pod_ref}, enrolled in place (running before its CNI ADD reached the daemon)");
        match self.enroll_ns(
            ns,
            policy,
            super::followed::Origin {
                source,
                writer: redirect_daemon_api::Writer::Reconcile,
            },
            Some(pod_ref.clone()),
            None,
            &mut Phases::start(),
        ) {
            Ok(e) => {
                tracing::info!(pod = %pod_ref, netns = %netns.display(), cookie = %e.cookie,
                    "enrolled a running pod in place");
                self.check_outside(e.cookie, self.reset_wanted(pod));
                if let Some(target) = proxy_cgroup(pod, dir, netns_inode) {
                    self.bind_proxy(e.cookie, Some(target));
                }
            }
            Err(error) => {
                tracing::error!(pod = %pod_ref, netns = %netns.display(), %error, "enrolling a running pod in place")
            }
        }
    }
}
