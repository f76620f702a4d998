//! A pod's capture decision and policy, computed once per version of the pod: by the watch
//! thread when the pod arrives (or by the ADD that had to GET it), so a CNI ADD only looks
//! them up instead of parsing the pod's annotations on the pod-start path. The pod is kept
//! trimmed to the fields the daemon reads ([`redirect_k8s::trimmed`]): the watch's cache holds
//! every pod of the node, and whole that was their managedFields, env and messages too.
use std::{
    hash::{DefaultHasher, Hash as _, Hasher as _},
    net::IpAddr,
    sync::Arc,
};

use k8s_openapi::api::core::v1::Pod;
use redirect_k8s::{decide, Decision};
use redirect_policy::Policy;

/// What istio-cni would decide for one version of a pod, and the policy it would apply.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resolution {
    /// Captured or skipped, and why.
    pub decision: Decision,
    /// When meshed: the policy, or why the pod cannot be captured (the annotation or field
    /// and its value).
    pub policy: Option<Result<Policy, String>>,
    /// The pod has Istio's istio-validation init container (a strict binding fails it).
    pub validation: bool,
}

impl Resolution {
    /// Decides for `pod`; `cluster_dns` as [`redirect_k8s::policy`] takes it.
    #[must_use]
    pub(crate) fn of(pod: &Pod, cluster_dns: Option<IpAddr>) -> Self {
        let decision = decide(pod);
        let policy = match decision {
            Decision::Meshed => {
                Some(redirect_k8s::policy(pod, cluster_dns).map_err(|e| e.to_string()))
            }
            Decision::Skipped { .. } => None,
        };
        Self {
            decision,
            policy,
            validation: redirect_k8s::has_istio_validation(pod),
        }
    }
}

/// What the unknown-annotation check reads of `pod`, as one number: its uid and its annotation
/// keys under Istio's sidecar prefixes. The check (a did-you-mean against every key Istio
/// defines) runs again only when this changes, not at every watch event of the pod.
fn checked_keys(pod: &Pod) -> u64 {
    let mut h = DefaultHasher::new();
    pod.metadata.uid.hash(&mut h);
    for key in redirect_k8s::checked_keys(pod) {
        key.hash(&mut h);
    }
    h.finish()
}

#[cfg(test)]
thread_local! {
    /// How many times this thread ran the unknown-key check (the tests count them).
    pub(crate) static UNKNOWN_CHECKS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Warns of `pod`'s annotations under Istio's sidecar prefixes (and ours) that nothing defines.
fn warn_unknown(pod: &Pod) {
    #[cfg(test)]
    UNKNOWN_CHECKS.with(|c| c.set(c.get() + 1));
    for unknown in redirect_k8s::unknown_keys(pod) {
        let m = &pod.metadata;
        if !first_time(m.uid.as_deref().unwrap_or(""), &unknown.key) {
            continue;
        }
        tracing::warn!(
            pod = %format!("{}/{}", m.namespace.as_deref().unwrap_or(""), m.name.as_deref().unwrap_or("")),
            key = %unknown.key,
            did_you_mean = unknown.did_you_mean.unwrap_or("-"),
            "an annotation under Istio's sidecar prefixes or ours (redirect.dev/) that neither \
                defines: nothing reads it"
        );
    }
}

/// Whether pod `uid`'s unknown annotation `key` is seen for the first time: each is logged once
/// per daemon, not at every watch event or relist (the memory is cleared past 10,000 entries).
fn first_time(uid: &str, key: &str) -> bool {
    static SEEN: std::sync::Mutex<Option<std::collections::HashSet<String>>> =
        std::sync::Mutex::new(None);
    let Ok(mut seen) = SEEN.lock() else {
        return true;
    };
    let seen = seen.get_or_insert_with(Default::default);
    if seen.len() > 10_000 {
        seen.clear();
    }
    seen.insert(format!("{uid}/{key}"))
}

/// A pod as the watch (or a GET) gave it, trimmed, with its resolution; both shared, never
/// copied.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    /// The pod, with only the fields the daemon reads ([`redirect_k8s::trimmed`]).
    pub pod: Arc<Pod>,
    /// Its decision and policy (of the whole pod, which decides as the trimmed one does).
    pub resolution: Arc<Resolution>,
    /// [`checked_keys`] of the whole pod.
    checked: u64,
}

impl Resolved {
    /// Resolves `pod` now, checks its annotations for unknown keys, and trims it.
    #[must_use]
    pub(crate) fn new(pod: Pod, cluster_dns: Option<IpAddr>) -> Self {
        Self::arrived(pod, cluster_dns, None)
    }

    /// [`Resolved::new`] for a new version of a pod of which `before` is the version the cache
    /// holds: the unknown-key check runs only when the keys it reads (or the uid) changed.
    #[must_use]
    pub(crate) fn arrived(
        pod: Pod,
        cluster_dns: Option<IpAddr>,
        before: Option<&Resolved>,
    ) -> Self {
        let checked = checked_keys(&pod);
        if before.is_none_or(|b| b.checked != checked) {
            warn_unknown(&pod);
        }
        let resolution = Arc::new(Resolution::of(&pod, cluster_dns));
        Self {
            pod: Arc::new(redirect_k8s::trimmed(pod)),
            resolution,
            checked,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(annotations: &[(&str, &str)]) -> Pod {
        let mut value = serde_json::json!({
            "metadata": {"namespace": "shop", "name": "web", "uid": "u1", "annotations": {}},
            "spec": {"containers": [{"name": "app"}, {"name": "istio-proxy"}]},
        });
        for (k, v) in annotations {
            value["metadata"]["annotations"][*k] = serde_json::Value::from(*v);
        }
        serde_json::from_value(value).expect("a pod")
    }

    #[test]
    fn a_resolution_is_what_deciding_and_parsing_at_add_time_gave() {
        let injected = ("sidecar.istio.io/status", "{}");
        for (annotations, meshed) in [
            (vec![injected], true),
            (
                vec![
                    injected,
                    ("traffic.sidecar.istio.io/excludeOutboundPorts", "5432"),
                ],
                true,
            ),
            (
                vec![
                    injected,
                    (
                        "traffic.sidecar.istio.io/excludeOutboundIPRanges",
                        "not-a-cidr",
                    ),
                ],
                true,
            ),
            (vec![], false),
        ] {
            let p = pod(&annotations);
            let r = Resolved::new(p.clone(), None);
            assert_eq!(r.resolution.decision, decide(&p), "{annotations:?}");
            assert_eq!(
                r.resolution.decision == Decision::Meshed,
                meshed,
                "{annotations:?}"
            );
            let direct = meshed.then(|| redirect_k8s::policy(&p, None).map_err(|e| e.to_string()));
            assert_eq!(r.resolution.policy, direct, "{annotations:?}");
        }
    }

    #[test]
    fn an_invalid_annotation_is_kept_as_the_error_naming_it() {
        let p = pod(&[
            ("sidecar.istio.io/status", "{}"),
            (
                "traffic.sidecar.istio.io/excludeOutboundIPRanges",
                "not-a-cidr",
            ),
        ]);
        let r = Resolution::of(&p, None);
        assert_eq!(r.decision, Decision::Meshed);
        let err = r.policy.expect("meshed").expect_err("refused");
        assert!(err.contains("excludeOutboundIPRanges"), "{err}");
        assert!(err.contains("not-a-cidr"), "{err}");
    }
}
