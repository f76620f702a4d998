//! [`decide`]: whether istio-cni sets capture up for a pod, or why not, rule by rule in its order.

use std::fmt;

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use crate::pod::{self, annotation, go_bool, label};

/// `sidecar.istio.io/inject` (label, or the older annotation; the label wins).
pub const INJECT: &str = "sidecar.istio.io/inject";
/// `sidecar.istio.io/status`: written by the injector; without it the pod was not injected.
pub const SIDECAR_STATUS: &str = "sidecar.istio.io/status";
/// `istio.io/dataplane-mode` (label or annotation): `ambient` pods are ztunnel's, not ours.
pub const DATAPLANE_MODE: &str = "istio.io/dataplane-mode";

/// Whether a pod is meshed.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Capture is set up for it.
    Meshed,
    /// Left alone. JSON: one flat object, `{"decision": "skipped", "reason": "istio_init"}` (and
    /// the reason's own fields beside it).
    Skipped {
        /// Why.
        #[serde(flatten)]
        reason: Skip,
    },
}

/// Why a pod is left alone.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Skip {
    /// `hostNetwork: true`: the node's own namespace is never captured (no CNI call either).
    HostNetwork,
    /// `istio.io/dataplane-mode: ambient`: ambient pods are redirected by ztunnel.
    Ambient {
        /// `label` or `annotation`.
        from: &'static str,
    },
    /// An istio-init container sets up iptables itself.
    IstioInit,
    /// `DISABLE_ENVOY=true` on istio-proxy: the agent runs without Envoy.
    EnvoyDisabled,
    /// No istio-proxy container (nor an istio-proxy native sidecar).
    NoProxy,
    /// istio-proxy runs as something other than a sidecar (`proxy router`, ...).
    NotSidecar {
        /// The proxy type, the argument after `proxy`.
        proxy_type: String,
    },
    /// `sidecar.istio.io/inject` is false.
    InjectDisabled {
        /// `label` or `annotation`.
        from: &'static str,
        /// The value as written.
        value: String,
    },
    /// No `sidecar.istio.io/status` annotation: the injector did not inject it.
    NotInjected,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Meshed => f.write_str("meshed"),
            Decision::Skipped { reason } => write!(f, "skipped: {reason}"),
        }
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::HostNetwork => f.write_str("host network (never captured)"),
            Skip::Ambient { from } => write!(f, "ambient ({from} {DATAPLANE_MODE}=ambient)"),
            Skip::IstioInit => f.write_str("istio-init present"),
            Skip::EnvoyDisabled => f.write_str("DISABLE_ENVOY=true on istio-proxy"),
            Skip::NoProxy => f.write_str("no istio-proxy container"),
            Skip::NotSidecar { proxy_type } => {
                write!(f, "istio-proxy is a {proxy_type:?} proxy, not a sidecar")
            }
            Skip::InjectDisabled { from, value } => write!(f, "{from} {INJECT}={value:?}"),
            Skip::NotInjected => write!(f, "no {SIDECAR_STATUS} annotation (not injected)"),
        }
    }
}

/// Whether istio-cni would set capture up for `pod`: the first rule that skips it, in
/// istio-cni's order (host network and ambient pods never reach its sidecar checks).
pub fn decide(pod: &Pod) -> Decision {
    match skip(pod) {
        None => Decision::Meshed,
        Some(reason) => Decision::Skipped { reason },
    }
}

fn skip(pod: &Pod) -> Option<Skip> {
    if pod.spec.as_ref().and_then(|s| s.host_network) == Some(true) {
        return Some(Skip::HostNetwork);
    }
    for (from, value) in [
        ("label", label(pod, DATAPLANE_MODE)),
        ("annotation", annotation(pod, DATAPLANE_MODE)),
    ] {
        if value == Some("ambient") {
            return Some(Skip::Ambient { from });
        }
    }
    if pod::istio_init(pod).is_some() {
        return Some(Skip::IstioInit);
    }
    let Some(proxy) = pod::proxy(pod) else {
        return Some(Skip::NoProxy);
    };
    if pod::env(proxy, "DISABLE_ENVOY").and_then(go_bool) == Some(true) {
        return Some(Skip::EnvoyDisabled);
    }
    let args = proxy.args.as_deref().unwrap_or_default();
    if let [first, kind, ..] = args {
        if first == "proxy" && kind != "sidecar" {
            return Some(Skip::NotSidecar {
                proxy_type: kind.clone(),
            });
        }
    }
    let (from, value) = match label(pod, INJECT) {
        Some(v) => ("label", Some(v)),
        None => ("annotation", annotation(pod, INJECT)),
    };
    if let Some(value) = value {
        if go_bool(value) == Some(false) {
            return Some(Skip::InjectDisabled {
                from,
                value: value.to_owned(),
            });
        }
    }
    if annotation(pod, SIDECAR_STATUS).is_none() {
        return Some(Skip::NotInjected);
    }
    None
}
