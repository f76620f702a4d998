//! Pod requests of the CNI plugin: ADD resolves the pod, decides as istio-cni does and enrolls
//! its netns (all or nothing); DEL, CHECK and GC key enrollments by the sandbox's container id.
use redirect_common::NetnsCookie;
use std::{net::IpAddr, os::fd::OwnedFd, path::Path};

use redirect_datapath::{NetnsHandle, Phases, ThreadCpu};
use redirect_k8s::Decision;
use redirect_policy::Policy;

use redirect_daemon_api::{GcDone, PodAnswer, PodOutcome, PodRef};

use super::Daemon;
use crate::{
    apiserver::Kube,
    error::{Error, Result},
};

/// A pod read from the apiserver (or the watch's cache), or why it could not be.
pub(super) type Found =
    std::result::Result<crate::resolution::Resolved, crate::kube_error::KubeError>;

fn answer(meshed: bool, decision: &Decision, message: String) -> PodAnswer {
    PodAnswer {
        message,
        pod: PodOutcome {
            meshed,
            decision: decision.to_string(),
        },
        enrollment: None,
    }
}

impl Daemon {
    /// Gives the daemon its Kubernetes client (pod requests fail without one).
    #[must_use]
    pub fn with_kube(mut self, kube: Kube) -> Self {
        self.pods.kube = Some(std::sync::Arc::new(kube));
        self
    }

    /// The pod's decision, and its policy when meshed: both resolved when the watch
    /// delivered the pod (or when it had to be read with a GET), only looked up here.
    /// `found` when the request's task read it already.
    fn resolve(
        &self,
        pod: &PodRef,
        found: Option<Found>,
    ) -> Result<(Decision, Option<Policy>, bool)> {
        let found = match found {
            Some(found) => found?,
            None => self
                .pods
                .kube
                .as_ref()
                .ok_or_else(|| Error::NoKube {
                    pod: pod.to_string(),
                })?
                .pod(pod)?,
        };
        let resolution = &found.resolution;
        let policy = match &resolution.policy {
            None => None,
            Some(Ok(policy)) => Some(policy.clone()),
            Some(Err(e)) => {
                return Err(Error::NotCapturable {
                    pod: pod.to_string(),
                    reason: e.clone(),
                })
            }
        };
        Ok((resolution.decision.clone(), policy, resolution.validation))
    }

    /// A pod's policy with the node's `--strict-proxy-binding`: its bypass starts closed.
    pub(super) fn node_binding(&self, mut policy: Policy) -> Policy {
        if self
            .pods
            .kube
            .as_ref()
            .is_some_and(|k| k.options().strict_proxy_binding)
        {
            policy.proxy_bypass_closed = true;
        }
        policy
    }

    /// CNI ADD.
    pub(super) fn pod_add(
        &mut self,
        pod: PodRef,
        netns: &Path,
        fd: Option<OwnedFd>,
        ips: &[IpAddr],
        found: Option<Found>,
    ) -> Result<PodAnswer> {
        let mut phases = Phases::start();
        let cpu = ThreadCpu::now();
        let resolved = self.resolve(&pod, found);
        phases.mark("resolve");
        let (decision, policy, validation) = resolved?;
        let Some(policy) = policy.map(|p| self.node_binding(p)) else {
            tracing::info!(%pod, %decision, "pod not meshed: left alone");
            return Ok(answer(
                false,
                &decision,
                format!("{pod} is not meshed: {decision}"),
            ));
        };
        if validation {
            tracing::debug!(%pod, strict = policy.proxy_bypass_closed,
                "istio-validation {}", redirect_k8s::validation_under(policy.proxy_bypass_closed));
        }
        let cookie = self
            .enroll_pod(&pod, (netns, fd), ips, policy, &mut phases, cpu)
            .inspect_err(|e| {
                tracing::error!(%pod, netns = %netns.display(), error = %e, "pod not enrolled");
            })?;
        let mut a = answer(
            true,
            &decision,
            format!(
                "enrolled {pod} at {} (netns cookie {cookie})",
                netns.display()
            ),
        );
        let listening = self.dp.proxy_listening(cookie);
        a.enrollment = self
            .enrollments
            .get(&cookie)
            .map(|f| f.record.to_wire(listening));
        Ok(a)
    }

    /// Opens the netns once, checks it holds the runtime's addresses, applies the policy;
    /// each step marked in `phases`, and the thread's CPU time since `cpu` logged beside them.
    fn enroll_pod(
        &mut self,
        pod: &PodRef,
        (netns, fd): (&Path, Option<OwnedFd>),
        ips: &[IpAddr],
        mut policy: Policy,
        phases: &mut Phases,
        cpu: ThreadCpu,
    ) -> Result<NetnsCookie> {
        // The pod claims the runtime's addresses for it only (and link-local ones).
        if !ips.is_empty() {
            policy.own_addresses = Some(ips.to_vec());
        }
        if !netns.is_absolute() {
            return Err(Error::RelativeNetns {
                pod: pod.to_string(),
                netns: netns.to_owned(),
            });
        }
        let in_pod = |source: Error| Error::PodNetns {
            pod: pod.to_string(),
            source: Box::new(source),
        };
        let ns = super::netns_in::open(netns, fd).map_err(in_pod)?;
        if super::netns_in::is_host(ns.cookie()) {
            return Err(Error::HostNetns {
                pod: pod.to_string(),
                netns: netns.to_owned(),
            });
        }
        phases.mark("open");
        let held = ns.addresses().map_err(|e| in_pod(e.into()))?;
        phases.mark("prev_result");
        if let Some(missing) = ips.iter().find(|ip| !held.contains(ip)) {
            return Err(Error::MissingAddress {
                pod: pod.to_string(),
                netns: netns.to_owned(),
                missing: *missing,
                held,
            });
        }
        let source = pod.to_string();
        let e = self
            .enroll_ns(
                ns,
                policy,
                super::followed::Origin {
                    source,
                    writer: redirect_daemon_api::Writer::Cni,
                },
                Some(pod.clone()),
                Some(held),
                phases,
            )
            .map_err(|e| Error::Enroll {
                pod: pod.to_string(),
                source: Box::new(e),
            })?;
        // `cpu_us`: how much of `us` this thread ran (the rest it waited: for a CPU, a lock,
        // I/O). `phases` stays the line's last field (the bench reads it to the end).
        let cpu_us = cpu.used_us();
        tracing::info!(%pod, netns = %netns.display(), cookie = %e.cookie, us = phases.total_us(),
            cpu_us, %phases, "pod enrolled");
        Ok(e.cookie)
    }

    /// The cookie of the enrollment of `pod`: by its sandbox's container id, else (a pod
    /// enrolled in place by the reconcile, whose sandbox id may be unknown) by its uid, else by
    /// `netns`, as a path or as the namespace it names, for an enrollment of no other pod.
    fn pod_enrollment(&self, pod: &PodRef, netns: Option<&Path>) -> Option<NetnsCookie> {
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
                // By path only what no other pod owns: an enrollment without a pod (by hand,
                // istio-init's), or this pod's by name. A path may name another pod's namespace
                // now (a reused /proc/PID, a recycled name); that pod is never taken.
                let netns = netns.filter(|n| !n.as_os_str().is_empty())?;
                let mine = |f: &super::followed::Followed| {
                    f.record.pod.as_ref().is_none_or(|p| {
                        (p.namespace.as_str(), p.name.as_str())
                            == (pod.namespace.as_str(), pod.name.as_str())
                            && (p.uid.is_empty() || pod.uid.is_empty() || p.uid == pod.uid)
                    })
                };
                self.enrollments
                    .values()
                    .find(|f| f.record.netns == netns && mine(f))
                    .map(|f| f.record.cookie)
                    .or_else(|| {
                        let cookie = redirect_datapath::netns_cookie(netns).ok()?;
                        self.enrollments
                            .get(&cookie)
                            .filter(|f| mine(f))
                            .map(|f| f.record.cookie)
                    })
            })
    }

    /// CNI DEL: idempotent.
    pub(super) fn pod_del(&mut self, pod: &PodRef, netns: Option<&Path>) -> Result<PodAnswer> {
        let (meshed, message) = match self.pod_enrollment(pod, netns) {
            Some(cookie) => {
                let u = self.unenroll_cookie(cookie)?;
                (u.removed, u.message)
            }
            None => (false, format!("nothing to do: {pod} is not enrolled")),
        };
        Ok(PodAnswer {
            message,
            pod: PodOutcome {
                meshed,
                decision: if meshed { "unenrolled" } else { "not enrolled" }.to_owned(),
            },
            enrollment: None,
        })
    }

    /// CNI CHECK: enrolled exactly when meshed, with the policy the pod asks for now, in the
    /// same netns, and that policy in the kernel's maps.
    pub(super) fn pod_check(
        &mut self,
        pod: &PodRef,
        netns: &Path,
        fd: Option<OwnedFd>,
        ips: &[IpAddr],
        found: Option<Found>,
    ) -> Result<PodAnswer> {
        let (decision, policy, _) = self.resolve(pod, found)?;
        // The namespace the runtime means (its descriptor), at the path the daemon sees it.
        let opened = super::netns_in::open(netns, fd);
        let here = opened
            .as_ref()
            .map(NetnsHandle::cookie)
            .map_err(ToString::to_string);
        let netns = opened
            .as_ref()
            .map_or_else(|_| netns.to_owned(), |ns| ns.path().to_owned());
        let netns = netns.as_path();
        let enrolled = self
            .pod_enrollment(pod, Some(netns))
            .and_then(|c| self.enrollments.get(&c))
            .map(|f| f.record.clone());
        let problem = match (policy, &enrolled) {
            (None, None) => {
                return Ok(answer(
                    false,
                    &decision,
                    format!("{pod} is not meshed: {decision}"),
                ))
            }
            (None, Some(e)) => Some(format!(
                "{pod} is enrolled (netns cookie {}) but not meshed: {decision}",
                e.cookie
            )),
            (Some(_), None) => Some(format!("{pod} is meshed but not enrolled")),
            (Some(mut policy), Some(e)) => {
                // The bypass bound to the running proxy container, or closed, is the
                // daemon's own doing.
                policy.proxy_cgroup.clone_from(&e.policy.proxy_cgroup);
                policy.proxy_bypass_closed = e.policy.proxy_bypass_closed;
                policy.own_addresses.clone_from(&e.policy.own_addresses);
                if e.policy != policy {
                    Some(format!(
                        "{pod} is enrolled with another policy than its annotations ask \
                        for now: re-create the pod"
                    ))
                } else if let Err(why) = &here {
                    Some(format!("{pod}: {why}"))
                } else if here.as_ref().ok() != Some(&e.cookie) {
                    Some(format!(
                        "{pod}: {} is not the enrolled netns (cookie {})",
                        netns.display(),
                        e.cookie
                    ))
                } else if !self.dp.kernel_policy(e.cookie).is_ok_and(|k| k.outbound) {
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
        if let Some(p) = problem {
            return Err(Error::Check(p));
        }
        let mut a = answer(true, &decision, format!("{pod} is enrolled as it asks"));
        a.enrollment = enrolled.map(|e| {
            let listening = self.dp.proxy_listening(e.cookie);
            e.to_wire(listening)
        });
        Ok(a)
    }

    /// CNI GC: unenrolls the pod enrollments whose container id is not in `valid` and that
    /// are dead: their namespace is gone, or the watch saw their pod deleted. A live pod stays
    /// whatever the list says (a second runtime sharing the conflist, a hand-run GC, a list
    /// under another key would otherwise empty the node); namespaces enrolled by hand (no pod)
    /// and pods enrolled in place whose sandbox id is unknown stay too (the reconcile
    /// unenrolls those once the apiserver no longer has them).
    pub(super) fn pod_gc(&mut self, valid: &[String]) -> Result<GcDone> {
        let cookies = self.enrollments.cookies();
        for cookie in cookies {
            self.rehome(cookie);
        }
        let mut kept = Vec::new();
        let stale: Vec<(NetnsCookie, String)> = self
            .enrollments
            .values()
            .filter_map(|f| {
                let p = f.record.pod.as_ref()?;
                if p.container_id.is_empty() || valid.contains(&p.container_id) {
                    return None;
                }
                let deleted = self.pods.kube.as_ref().is_some_and(|k| k.seen_deleted(p));
                if deleted || super::followed::gone(&self.dp, f) {
                    Some((f.record.cookie, p.container_id.clone()))
                } else {
                    kept.push(p.to_string());
                    None
                }
            })
            .collect();
        if !kept.is_empty() {
            tracing::warn!(pods = %redirect_policy::Comma(&kept), "GC: not among the valid \
                attachments, but alive (namespace held, pod not deleted): kept");
        }
        let mut errors = Vec::new();
        let mut removed = Vec::new();
        for (cookie, id) in stale {
            match self.unenroll_cookie(cookie) {
                Ok(_) => removed.push(id),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            return Err(Error::Gc(errors));
        }
        Ok(GcDone {
            message: format!(
                "garbage-collected {} pod enrollment(s); {} not listed but alive, kept",
                removed.len(),
                kept.len()
            ),
            removed,
        })
    }
}
