//! This node's pods against the enrollments, at start and on the tick (every
//! `--reconcile-interval`, and whenever the watch changed something): a meshed pod that runs but
//! is not enrolled (created while the daemon was down, or before the plugin was installed) is
//! enrolled in place, through its processes' network namespace; an enrolled pod the apiserver
//! no longer has is unenrolled; a pod's uid/gid bypass is bound to its running istio-proxy
//! container's cgroup, and closed (bound to no cgroup) the moment that cgroup is gone.
use redirect_common::NetnsCookie;
use std::{
    collections::{HashMap, HashSet},
    net::IpAddr,
    path::PathBuf,
    time::{Duration, Instant},
};

use redirect_datapath::{netns::NetnsHandle, phases::Phases};
use redirect_k8s::{decide, Decision, Pod};

use super::Daemon;
use redirect_daemon_api::PodRef;

use crate::{
    exclusions::ConfExclusions,
    files::write_enrollment,
    pod_cgroups::{
        bare_container_id, in_initial_userns, netns_of, pids_in, pod_dirs, runs_in, PodDir,
    },
};

/// When the reconcile last ran and what it saw.
#[derive(Debug, Default)]
pub(crate) struct Reconcile {
    last: Option<Instant>,
    generation: u64,
    /// The GETs confirming that unlisted pods are gone, running off the request thread.
    pub(super) gone: Option<std::thread::JoinHandle<Vec<super::gone::Confirmed>>>,
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

/// The runtime id of the pod's running istio-proxy container (a sidecar in `containers`, or a
/// native sidecar in `initContainers`).
fn running_proxy_id(pod: &Pod) -> Option<&str> {
    let status = pod.status.as_ref()?;
    let proxy = [&status.container_statuses, &status.init_container_statuses]
        .into_iter()
        .flatten()
        .flatten()
        .find(|c| c.name == "istio-proxy")?;
    let runs = proxy.state.as_ref().is_some_and(|s| s.running.is_some());
    runs.then(|| proxy.container_id.as_deref().map(bare_container_id))
        .flatten()
}

/// The running istio-proxy container's cgroup: a child of the pod's directory named by the
/// container's id in the pod's status, holding a process of the enrolled namespace (nsfs
/// inode `netns`).
fn proxy_cgroup(pod: &Pod, dir: &PodDir, netns: u64) -> Option<PathBuf> {
    let cgroup = dir.containers.get(running_proxy_id(pod)?)?;
    runs_in(cgroup, netns).then(|| cgroup.clone())
}

/// The sandbox's network namespaces holding every address of `ips`: those of the processes
/// of the pod's container directories its status does not name (the sandbox; a container
/// the kubelet has not reported yet), running in the host's user namespace unless the pod
/// asks for its own (`hostUsers: false`). An app process that makes a namespace of its own
/// holding the pod's address is never among them.
fn sandbox_netns(pod: &Pod, dir: &PodDir, ips: &[IpAddr]) -> Vec<NetnsHandle> {
    let statuses = status_ids(pod);
    let host_users = pod.spec.as_ref().and_then(|s| s.host_users) != Some(false);
    let pids: Vec<u32> = dir
        .containers
        .iter()
        .filter(|(id, _)| !statuses.contains(&id.as_str()))
        .flat_map(|(_, cgroup)| pids_in(cgroup))
        .filter(|pid| !host_users || in_initial_userns(*pid))
        .collect();
    netns_of(&pids)
        .into_iter()
        .filter_map(|path| {
            let ns = NetnsHandle::open(&path).ok()?;
            let held = ns.addresses().ok()?;
            ips.iter().all(|ip| held.contains(ip)).then_some(ns)
        })
        .collect()
}

/// Whether the binding `current` may not be the running proxy's (so the cgroup tree is read):
/// a proxy runs and the binding does not name its container, or a binding names a cgroup that
/// is gone.
fn binding_stale(pod: &Pod, current: Option<&PathBuf>) -> bool {
    match (running_proxy_id(pod), current) {
        (_, Some(dir)) if !dir.exists() => true,
        (Some(id), Some(dir)) => !dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.contains(id)),
        (Some(_), None) => true,
        (None, _) => false,
    }
}

impl Daemon {
    /// Reconciles when due: the watch changed something (its first listing too, which makes
    /// the daemon's start one), a bound proxy cgroup is gone, or the interval passed.
    pub(super) fn reconcile_pods(&mut self) {
        self.apply_gone_checks();
        let Some(kube) = &self.kube else { return };
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
            || generation != self.reconcile.generation
            || self
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
        self.reconcile.last = Some(Instant::now());
        self.reconcile.generation = generation;
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
        if !missing.is_empty() {
            let rec = &mut self.reconcile;
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
                    tracing::info!(pod = %pod_ref(p, String::new()), reason = why, "a running meshed pod the plugin excludes: not enrolled in place");
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
                tracing::warn!(pod = %named, ?ips, cgroup = %dir.dir.display(), "a running meshed pod is not enrolled, but no process of its sandbox runs in a namespace holding its addresses: left for its CNI ADD");
                return;
            }
            Err(found) => {
                let paths: Vec<String> = found
                    .iter()
                    .map(|n| n.path().display().to_string())
                    .collect();
                tracing::error!(pod = %named, ?ips, cgroup = %dir.dir.display(), ?paths, "ALARM: more than one namespace of the pod's sandbox holds its addresses, so none is enrolled in place: left for its CNI ADD");
                return;
            }
        };
        let kube = self.kube.as_ref().map(|k| k.options().cluster_dns);
        let policy = match redirect_k8s::policy(pod, kube.flatten()) {
            Ok(p) => self.node_binding(p),
            Err(error) => {
                tracing::error!(pod = %named, %error, "a running meshed pod cannot be captured: not enrolled");
                return;
            }
        };
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
            source,
            Some(pod_ref.clone()),
            None,
            &mut Phases::start(),
        ) {
            Ok(e) => {
                tracing::info!(pod = %pod_ref, netns = %netns.display(), cookie = %e.cookie, "enrolled a running pod in place");
                if let Some(target) = proxy_cgroup(pod, dir, netns_inode) {
                    self.bind_proxy(e.cookie, Some(target));
                }
            }
            Err(error) => {
                tracing::error!(pod = %pod_ref, netns = %netns.display(), %error, "enrolling a running pod in place")
            }
        }
    }

    /// Binds enrollment `cookie`'s uid/gid bypass to `target` (its running proxy container's
    /// cgroup); closes it when the bound cgroup is gone (the proxy exited) and no new one runs
    /// yet: bound to no cgroup, the proxy uid/gid is then captured anywhere in the pod (fail
    /// closed: any container can stop its proxy, and an app running as 1337 would otherwise
    /// go out uncaptured for each restart back-off) until the next proxy container is bound.
    fn bind_proxy(&mut self, cookie: NetnsCookie, target: Option<PathBuf>) {
        let Some(f) = self.enrollments.get(&cookie) else {
            return;
        };
        let current = f.record.policy.proxy_cgroup.clone();
        let next = match (&current, target) {
            (_, Some(t)) if t.is_dir() => Some(t),
            (Some(c), _) if c.exists() => return,
            _ => None,
        };
        let closed = next.is_none() || f.record.policy.proxy_bypass_closed;
        if next == current && closed == f.record.policy.proxy_bypass_closed {
            return;
        }
        let Some(f) = self.enrollments.get_mut(&cookie) else {
            return;
        };
        let Some(ns) = &f.ns else { return };
        let mut policy = f.record.policy.clone();
        policy.proxy_cgroup.clone_from(&next);
        policy.proxy_bypass_closed = closed;
        let name = f
            .record
            .pod
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        // Applied over the namespace's current policy in place: no capture gap.
        match self.dp.apply(ns, &policy) {
            Ok(applied) => {
                f.record.policy = policy;
                f.record.addrs = applied.addrs;
                if let Err(error) = write_enrollment(&self.opts.dir, &f.record) {
                    tracing::warn!(pod = name, %error, "recording the enrollment");
                }
                match &next {
                    Some(cgroup) => {
                        tracing::info!(pod = name, %cookie, proxy_cgroup = %cgroup.display(), "the proxy uid/gid bypass follows the istio-proxy container's cgroup")
                    }
                    None => {
                        tracing::warn!(pod = name, %cookie, "the proxy uid/gid bypass is closed: its istio-proxy container is gone, so the proxy uid/gid is captured anywhere in the pod until the next one runs")
                    }
                }
            }
            Err(error) => {
                tracing::error!(pod = name, %cookie, %error, "binding the proxy bypass to its container's cgroup: kept as it was");
            }
        }
    }
}
