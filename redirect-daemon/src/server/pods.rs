//! Pod requests of the CNI plugin: ADD resolves the pod, decides as istio-cni does and enrolls
//! its netns (all or nothing); DEL, CHECK and GC key enrollments by the sandbox's container id.
use std::{net::IpAddr, path::Path};

use redirect_datapath::{
    netns::NetnsHandle,
    phases::{Phases, ThreadCpu},
};
use redirect_k8s::Decision;
use redirect_policy::Policy;

use super::Daemon;
use crate::{
    apiserver::Kube,
    proto::{PodOutcome, PodRef, Response},
};

fn not_meshed(decision: &Decision, message: String) -> Response {
    Response {
        ok: true,
        message,
        pod: Some(PodOutcome {
            meshed: false,
            decision: decision.to_string(),
        }),
        ..Response::default()
    }
}

impl Daemon {
    /// Gives the daemon its Kubernetes client (pod requests fail without one).
    #[must_use]
    pub fn with_kube(mut self, kube: Kube) -> Self {
        self.kube = Some(kube);
        self
    }

    /// The pod's decision, and its policy when meshed: both resolved when the watch
    /// delivered the pod (or when it had to be read with a GET), only looked up here.
    fn resolve(&self, pod: &PodRef) -> Result<(Decision, Option<Policy>), String> {
        let kube = self.kube.as_ref().ok_or_else(|| {
            format!("the daemon was started without Kubernetes access, so it cannot read {pod}")
        })?;
        let found = kube.pod(pod).map_err(|e| e.to_string())?;
        let resolution = &found.resolution;
        let policy = match &resolution.policy {
            None => None,
            Some(Ok(policy)) => Some(policy.clone()),
            Some(Err(e)) => return Err(format!("{pod} cannot be captured: {e}")),
        };
        Ok((resolution.decision.clone(), policy))
    }

    /// CNI ADD.
    pub(super) fn pod_add(&mut self, pod: PodRef, netns: &Path, ips: &[IpAddr]) -> Response {
        let mut phases = Phases::start();
        let cpu = ThreadCpu::now();
        let resolved = self.resolve(&pod);
        phases.mark("resolve");
        let (decision, policy) = match resolved {
            Ok(r) => r,
            Err(e) => return Response::failed(e),
        };
        let Some(policy) = policy else {
            tracing::info!(%pod, %decision, "pod not meshed: left alone");
            return not_meshed(&decision, format!("{pod} is not meshed: {decision}"));
        };
        match self.enroll_pod(&pod, netns, ips, policy, &mut phases, cpu) {
            Ok(cookie) => Response {
                ok: true,
                message: format!(
                    "enrolled {pod} at {} (netns cookie {cookie})",
                    netns.display()
                ),
                enrollments: self
                    .enrollments
                    .get(&cookie)
                    .map(|f| vec![f.record.clone()])
                    .unwrap_or_default(),
                pod: Some(PodOutcome {
                    meshed: true,
                    decision: decision.to_string(),
                }),
                ..Response::default()
            },
            Err(e) => {
                tracing::error!(%pod, netns = %netns.display(), error = %e, "pod not enrolled");
                Response::failed(e)
            }
        }
    }

    /// Opens the netns once, checks it holds the runtime's addresses, applies the policy;
    /// each step marked in `phases`, and the thread's CPU time since `cpu` logged beside them.
    fn enroll_pod(
        &mut self,
        pod: &PodRef,
        netns: &Path,
        ips: &[IpAddr],
        policy: Policy,
        phases: &mut Phases,
        cpu: ThreadCpu,
    ) -> Result<u64, String> {
        if !netns.is_absolute() {
            return Err(format!(
                "CNI_NETNS {} of {pod} is not an absolute path",
                netns.display()
            ));
        }
        let ns = NetnsHandle::open(netns).map_err(|e| format!("{pod}: {e}"))?;
        phases.mark("open");
        let held = ns.addresses().map_err(|e| format!("{pod}: {e}"))?;
        phases.mark("prev_result");
        if let Some(missing) = ips.iter().find(|ip| !held.contains(ip)) {
            return Err(format!(
                "{pod}: the netns {} does not hold {missing} from prevResult (it holds {held:?})",
                netns.display()
            ));
        }
        let source = pod.to_string();
        let e = self
            .enroll_ns(ns, policy, source, Some(pod.clone()), Some(held), phases)
            .map_err(|e| format!("enrolling {pod}: {e}"))?;
        // `cpu_us`: how much of `us` this thread ran (the rest it waited: for a CPU, a lock,
        // I/O). `phases` stays the line's last field (the bench reads it to the end).
        let cpu_us = cpu.used_us();
        tracing::info!(%pod, netns = %netns.display(), cookie = e.cookie, us = phases.total_us(), cpu_us, %phases, "pod enrolled");
        Ok(e.cookie)
    }

    /// The cookie of the enrollment of `pod`: by its sandbox's container id, else (a pod
    /// enrolled in place by the reconcile, whose sandbox id may be unknown) by its uid, else by
    /// `netns`, as a path or as the namespace it names.
    fn pod_enrollment(&self, pod: &PodRef, netns: Option<&Path>) -> Option<u64> {
        let by = |same: &dyn Fn(&PodRef) -> bool| {
            self.enrollments
                .values()
                .find(|f| f.record.pod.as_ref().is_some_and(same))
                .map(|f| f.record.cookie)
        };
        by(&|p| !p.container_id.is_empty() && p.container_id == pod.container_id)
            .or_else(|| {
                by(&|p| {
                    !pod.uid.is_empty()
                        && p.uid == pod.uid
                        && (p.container_id.is_empty() || pod.container_id.is_empty())
                })
            })
            .or_else(|| {
                let netns = netns.filter(|n| !n.as_os_str().is_empty())?;
                self.enrollments
                    .values()
                    .find(|f| f.record.netns == netns)
                    .map(|f| f.record.cookie)
                    .or_else(|| {
                        let cookie = redirect_datapath::netns::cookie(netns).ok()?;
                        self.enrollments.contains_key(&cookie).then_some(cookie)
                    })
            })
    }

    /// CNI DEL: idempotent.
    pub(super) fn pod_del(&mut self, pod: &PodRef, netns: Option<&Path>) -> Response {
        match self.pod_enrollment(pod, netns) {
            Some(cookie) => self.unenroll_cookie(cookie),
            None => Response {
                ok: true,
                message: format!("nothing to do: {pod} is not enrolled"),
                ..Response::default()
            },
        }
    }

    /// CNI CHECK: enrolled exactly when meshed, with the policy the pod asks for now, in the
    /// same netns, and that policy in the kernel's maps.
    pub(super) fn pod_check(&mut self, pod: &PodRef, netns: &Path, ips: &[IpAddr]) -> Response {
        let (decision, policy) = match self.resolve(pod) {
            Ok(r) => r,
            Err(e) => return Response::failed(e),
        };
        let enrolled = self
            .pod_enrollment(pod, Some(netns))
            .and_then(|c| self.enrollments.get(&c))
            .map(|f| f.record.clone());
        let problem = match (policy, enrolled) {
            (None, None) => {
                return not_meshed(&decision, format!("{pod} is not meshed: {decision}"))
            }
            (None, Some(e)) => Some(format!(
                "{pod} is enrolled (netns cookie {}) but not meshed: {decision}",
                e.cookie
            )),
            (Some(_), None) => Some(format!("{pod} is meshed but not enrolled")),
            (Some(mut policy), Some(e)) => {
                // The bypass bound to the running proxy container is the daemon's own doing.
                policy.proxy_cgroup.clone_from(&e.policy.proxy_cgroup);
                if e.policy != policy {
                    Some(format!("{pod} is enrolled with another policy than its annotations ask for now: re-create the pod"))
                } else if redirect_datapath::netns::cookie(netns).ok() != Some(e.cookie) {
                    Some(format!(
                        "{pod}: {} is not the enrolled netns (cookie {})",
                        netns.display(),
                        e.cookie
                    ))
                } else if !self.dp.kernel_policy(e.cookie).is_ok_and(|(out, _)| out) {
                    Some(format!(
                        "{pod}: the kernel's maps hold no policy for netns cookie {}",
                        e.cookie
                    ))
                } else {
                    ips.iter().find(|ip| !e.addrs.contains(ip)).map(|ip| {
                        format!("{pod}: the enrolled netns does not hold {ip} from prevResult")
                    })
                }
            }
        };
        match problem {
            Some(p) => Response::failed(p),
            None => Response {
                ok: true,
                message: format!("{pod} is enrolled as it asks"),
                pod: Some(PodOutcome {
                    meshed: true,
                    decision: decision.to_string(),
                }),
                ..Response::default()
            },
        }
    }

    /// CNI GC: unenrolls the pod enrollments whose container id is not in `valid`; namespaces
    /// enrolled by hand (no pod) and pods enrolled in place whose sandbox id is unknown stay
    /// (the reconcile unenrolls those once the apiserver no longer has them).
    pub(super) fn pod_gc(&mut self, valid: &[String]) -> Response {
        let stale: Vec<u64> =
            self.enrollments
                .values()
                .filter(|f| {
                    f.record.pod.as_ref().is_some_and(|p| {
                        !p.container_id.is_empty() && !valid.contains(&p.container_id)
                    })
                })
                .map(|f| f.record.cookie)
                .collect();
        let mut errors = Vec::new();
        for cookie in &stale {
            let r = self.unenroll_cookie(*cookie);
            if !r.ok {
                errors.extend(r.error);
            }
        }
        if errors.is_empty() {
            Response {
                ok: true,
                message: format!("garbage-collected {} pod enrollment(s)", stale.len()),
                ..Response::default()
            }
        } else {
            Response::failed(errors.join("; "))
        }
    }
}
