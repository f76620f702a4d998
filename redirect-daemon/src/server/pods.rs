//! Pod requests of the CNI plugin: ADD resolves the pod, decides as istio-cni does and enrolls
//! its netns (all or nothing); DEL, CHECK and GC key enrollments by the sandbox's container id.
use std::{net::IpAddr, path::Path, sync::Arc};

use redirect_datapath::{netns::NetnsHandle, phases::Phases};
use redirect_k8s::{decide, Decision, Pod};
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

    /// The pod as the apiserver has it, its decision, and its policy when meshed.
    fn resolve(&self, pod: &PodRef) -> Result<(Arc<Pod>, Decision, Option<Policy>), String> {
        let kube = self.kube.as_ref().ok_or_else(|| {
            format!("the daemon was started without Kubernetes access, so it cannot read {pod}")
        })?;
        let found = kube.pod(pod).map_err(|e| e.to_string())?;
        let decision = decide(&found);
        let policy = match decision {
            Decision::Meshed => Some(
                redirect_k8s::policy(&found, kube.options().cluster_dns)
                    .map_err(|e| format!("{pod} cannot be captured: {e}"))?,
            ),
            Decision::Skipped { .. } => None,
        };
        Ok((found, decision, policy))
    }

    /// CNI ADD.
    pub(super) fn pod_add(&mut self, pod: PodRef, netns: &Path, ips: &[IpAddr]) -> Response {
        let mut phases = Phases::start();
        let resolved = self.resolve(&pod);
        phases.mark("resolve");
        let (_, decision, policy) = match resolved {
            Ok(r) => r,
            Err(e) => return Response::failed(e),
        };
        let Some(policy) = policy else {
            tracing::info!(%pod, %decision, "pod not meshed: left alone");
            return not_meshed(&decision, format!("{pod} is not meshed: {decision}"));
        };
        match self.enroll_pod(&pod, netns, ips, policy, &mut phases) {
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
    /// each step marked in `phases`.
    fn enroll_pod(
        &mut self,
        pod: &PodRef,
        netns: &Path,
        ips: &[IpAddr],
        policy: Policy,
        phases: &mut Phases,
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
            .enroll_ns(ns, policy, source, Some(pod.clone()), phases)
            .map_err(|e| format!("enrolling {pod}: {e}"))?;
        tracing::info!(%pod, netns = %netns.display(), cookie = e.cookie, us = phases.total_us(), %phases, "pod enrolled");
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
        let (_, decision, policy) = match self.resolve(pod) {
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
