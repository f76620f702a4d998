//! Annotation keys under Istio's sidecar prefixes that Istio does not define: a typo there
//! (`traffic.sidecar.istio.io/excludeOutboundPort`) is ignored by the injector and istio-cni
//! alike, so the pod silently keeps the capture the operator meant to change. Named with the
//! closest key Istio defines, as `istioctl analyze` (IST0108) would. Ours under `redirect.dev/`
//! likewise (`redirect.dev/proxybinding` names `redirect.dev/proxy-binding`).
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

/// The prefixes checked.
const PREFIXES: [&str; 3] = ["sidecar.istio.io/", "traffic.sidecar.istio.io/", OUR_PREFIX];

/// Our own annotations' prefix.
const OUR_PREFIX: &str = "redirect.dev/";

/// The keys Istio defines under [`PREFIXES`] (its annotation list), and ours read beside them.
pub(crate) const KNOWN: &[&str] = &[
    "sidecar.istio.io/inject",
    "sidecar.istio.io/status",
    "sidecar.istio.io/rewriteAppHTTPProbers",
    "sidecar.istio.io/controlPlaneAuthPolicy",
    "sidecar.istio.io/discoveryAddress",
    "sidecar.istio.io/proxyImage",
    "sidecar.istio.io/proxyImageType",
    "sidecar.istio.io/proxyCPU",
    "sidecar.istio.io/proxyCPULimit",
    "sidecar.istio.io/proxyMemory",
    "sidecar.istio.io/proxyMemoryLimit",
    "sidecar.istio.io/interceptionMode",
    "sidecar.istio.io/bootstrapOverride",
    "sidecar.istio.io/statsInclusionPrefixes",
    "sidecar.istio.io/statsInclusionSuffixes",
    "sidecar.istio.io/statsInclusionRegexps",
    "sidecar.istio.io/statsHistogramBuckets",
    "sidecar.istio.io/statsCompression",
    "sidecar.istio.io/statsFlushInterval",
    "sidecar.istio.io/statsEvictionInterval",
    "sidecar.istio.io/userVolume",
    "sidecar.istio.io/userVolumeMount",
    "sidecar.istio.io/enableCoreDump",
    "sidecar.istio.io/logLevel",
    "sidecar.istio.io/componentLogLevel",
    "sidecar.istio.io/agentLogLevel",
    "sidecar.istio.io/extraStatTags",
    "sidecar.istio.io/nativeSidecar",
    "traffic.sidecar.istio.io/includeOutboundIPRanges",
    "traffic.sidecar.istio.io/excludeOutboundIPRanges",
    "traffic.sidecar.istio.io/includeInboundPorts",
    "traffic.sidecar.istio.io/excludeInboundPorts",
    "traffic.sidecar.istio.io/includeOutboundPorts",
    "traffic.sidecar.istio.io/excludeOutboundPorts",
    "traffic.sidecar.istio.io/excludeInterfaces",
    "traffic.sidecar.istio.io/kubevirtInterfaces",
    crate::binding::PROXY_BINDING,
    crate::binding::RESET_UNCAPTURED,
];

/// One annotation key Istio does not define.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UnknownKey {
    /// The key as written.
    pub key: String,
    /// The closest key Istio defines, if one is close.
    pub did_you_mean: Option<&'static str>,
}

impl std::fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let whose = if self.key.starts_with(OUR_PREFIX) {
            "redirect"
        } else {
            "Istio"
        };
        write!(
            f,
            "annotation {} is not one {whose} defines, so nothing reads it",
            self.key
        )?;
        match self.did_you_mean {
            Some(k) => write!(f, "; did you mean {k}?"),
            None => Ok(()),
        }
    }
}

/// The pod's annotation keys under Istio's sidecar prefixes, in order: all that
/// [`unknown_keys`] reads, so a caller can tell whether its answer can have changed.
pub fn checked_keys(pod: &Pod) -> impl Iterator<Item = &str> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    let annotations = pod.metadata.annotations.as_ref().unwrap_or(&EMPTY);
    annotations
        .keys()
        .map(String::as_str)
        .filter(|k| PREFIXES.iter().any(|p| k.starts_with(p)))
}

/// The pod's annotation keys under Istio's sidecar prefixes that Istio does not define.
pub fn unknown_keys(pod: &Pod) -> Vec<UnknownKey> {
    checked_keys(pod)
        .filter(|k| !KNOWN.contains(k))
        .map(|k| UnknownKey {
            key: k.to_owned(),
            did_you_mean: closest(k),
        })
        .collect()
}

/// The known key closest to `key`, compared by the name after its prefix (the prefix is right,
/// or the key would not be checked).
fn closest(key: &str) -> Option<&'static str> {
    let prefix = PREFIXES.iter().find(|p| key.starts_with(*p))?;
    let names = KNOWN
        .iter()
        .filter_map(|k| k.strip_prefix(prefix).filter(|n| !n.contains('/')));
    let name = redirect_policy::closest(&key[prefix.len()..], names)?;
    KNOWN
        .iter()
        .copied()
        .find(|k| k.strip_prefix(prefix) == Some(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotated(keys: &[&str]) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.annotations = Some(
            keys.iter()
                .map(|k| ((*k).to_owned(), "x".to_owned()))
                .collect(),
        );
        pod
    }

    #[test]
    fn a_typo_of_ours_is_named_with_our_key_meant() {
        let pod = annotated(&[
            "redirect.dev/proxybinding",
            "redirect.dev/proxy-binding",
            "redirect.dev/reset-uncaptured",
        ]);
        let found = unknown_keys(&pod);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].did_you_mean, Some("redirect.dev/proxy-binding"));
        let shown = found[0].to_string();
        assert!(
            shown.contains("redirect.dev/proxybinding is not one redirect defines")
                && shown.ends_with("did you mean redirect.dev/proxy-binding?"),
            "{shown}"
        );
    }

    #[test]
    fn a_typo_is_named_with_the_key_meant_and_known_or_foreign_keys_pass() {
        let pod = annotated(&[
            "traffic.sidecar.istio.io/excludeOutboundPort",
            "traffic.sidecar.istio.io/excludeOutboundPorts",
            "sidecar.istio.io/inject",
            "example.com/anything",
            "sidecar.istio.io/frobnicate",
        ]);
        let found = unknown_keys(&pod);
        assert_eq!(found.len(), 2, "{found:?}");
        let typo = found
            .iter()
            .find(|u| u.key.ends_with("excludeOutboundPort"))
            .expect("the typo");
        assert_eq!(
            typo.did_you_mean,
            Some("traffic.sidecar.istio.io/excludeOutboundPorts")
        );
        assert!(typo.to_string().contains("did you mean"), "{typo}");
        let other = found
            .iter()
            .find(|u| u.key.ends_with("frobnicate"))
            .expect("other");
        assert_eq!(other.did_you_mean, None);
    }
}
