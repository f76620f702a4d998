//! [`policy`]: a pod's istio-cni arguments parsed by redirect-policy's istio-iptables parser,
//! errors traced back to the annotation.

use std::collections::HashMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Pod;
use redirect_policy::{Id, LookupError, Policy, PolicyError, SystemLookup, View};

use crate::annotations::{plan, Arg};
use crate::Error;

/// The istio-iptables arguments istio-cni would run for `pod` (after `istio-iptables`).
/// `cluster_dns` is the cluster DNS address, needed only when the pod captures DNS with a
/// `ClusterFirst` dnsPolicy.
pub fn istio_iptables_args(pod: &Pod, cluster_dns: Option<IpAddr>) -> Result<Vec<String>, Error> {
    Ok(flatten(&plan(pod, cluster_dns)?))
}

fn flatten(plan: &[Arg]) -> Vec<String> {
    plan.iter()
        .flat_map(|a| std::iter::once(a.flag.to_owned()).chain(a.value.clone()))
        .collect()
}

/// The capture policy istio-cni would apply to `pod`, whether or not [`crate::decide`] meshes
/// it: its [`istio_iptables_args`] parsed as `redirect istio-iptables` parses them. An
/// invalid value is an error naming the annotation (or field) and the value. Ours on top:
/// `redirect.dev/proxy-binding: strict` starts the proxy bypass closed.
pub fn policy(pod: &Pod, cluster_dns: Option<IpAddr>) -> Result<Policy, Error> {
    let plan = plan(pod, cluster_dns)?;
    let args = flatten(&plan);
    let env: HashMap<String, String> = HashMap::new();
    let mut policy = match redirect_policy::parse_invocation(&args, &env, &PodSpecOnly) {
        Ok(inv) => inv.policy,
        Err(e) => return Err(blame(&plan, &args, e)),
    };
    policy.proxy_bypass_closed = crate::binding::strict(pod)?;
    // Read elsewhere (the daemon's reset of uncaptured connections), refused here when it is
    // neither true nor false, as a bad proxy-binding is.
    crate::binding::reset_value(pod)?;
    Ok(policy)
}

/// The annotation behind a flag the parser refused.
fn blame(plan: &[Arg], args: &[String], e: PolicyError) -> Error {
    if let PolicyError::Invalid {
        flag,
        value,
        reason,
    } = &e
    {
        // The parser names flags `-i/--istio-service-cidr`; ours are the short or long form.
        let found = plan.iter().find(|a| {
            flag.split('/').any(|f| f == a.flag) || flag.starts_with(&format!("{}/", a.flag))
        });
        if let Some(arg) = found {
            return Error::invalid(
                &arg.origin,
                arg.value.as_deref().unwrap_or_default(),
                value,
                reason.clone(),
            );
        }
    }
    Error::Policy {
        args: args.join(" "),
        source: e,
    }
}

/// A pod spec has no files: every name is numeric and DNS servers are given, so nothing
/// should ever be looked up; if something is, it says so.
#[derive(Debug)]
pub(crate) struct PodSpecOnly;

impl PodSpecOnly {
    fn none(file: &'static str) -> LookupError {
        LookupError::NoSource {
            file,
            netns: "a Kubernetes pod spec".into(),
            tried: "a pod spec names numeric ids and its DNS servers, and has no files".into(),
        }
    }
}

impl SystemLookup for PodSpecOnly {
    fn group_gid(&self, _name: &str) -> Result<Id, LookupError> {
        Err(Self::none("/etc/group"))
    }

    fn user_uid(&self, _name: &str) -> Result<Id, LookupError> {
        Err(Self::none("/etc/passwd"))
    }

    fn resolv_conf(&self) -> Result<View, LookupError> {
        Err(Self::none("/etc/resolv.conf"))
    }
}
