//! Kubernetes pods as istio-cni sees them: whether a pod is meshed ([`decide`]) and the capture
//! [`Policy`](redirect_policy::Policy) its annotations and istio-proxy container ask for
//! ([`policy`]).
//!
//! The rules are istio-cni's (its plugin's pod checks and its annotation-to-istio-iptables
//! mapping): [`istio_iptables_args`] builds the arguments istio-cni would hand istio-iptables
//! for a pod, and [`policy`] parses them with redirect-policy's own istio-iptables parser, so
//! a pod's policy means exactly what the same `redirect istio-iptables` arguments mean.
//! [`documents`] reads Pod and workload manifests, finds their istio-init arguments and
//! rewrites them as Istio's injector emits them with istio-cni enabled ([`migrate`]);
//! [`compare`] names where two policies differ. [`trimmed`] cuts a pod down to the fields read
//! here and by the node daemon, which caches every pod of its node. Nothing here talks to a
//! cluster.
//!
//! Every module is the crate's own: other crates come in only through the doors below.
// Every dependency of the product build is used (the test build has dev-dependencies too).
#![cfg_attr(test, allow(unused_crate_dependencies))]

mod annotations;
mod binding;
mod compare;
mod containers;
mod decide;
mod dns;
mod error;
mod manifest;
mod migrate_text;
mod pod;
mod policy;
mod trim;
mod unknown_keys;
mod validation;

#[cfg(test)]
mod args_tests;
#[cfg(test)]
mod decide_tests;
#[cfg(test)]
mod manifest_tests;
#[cfg(test)]
mod test_pods;
#[cfg(test)]
mod trim_tests;

// The annotations read, and the pod fields kept (a pod trimmed to what is read).
pub use annotations::{
    EXCLUDE_INBOUND_PORTS, EXCLUDE_INTERFACES, EXCLUDE_OUTBOUND_IP_RANGES, EXCLUDE_OUTBOUND_PORTS,
    INCLUDE_INBOUND_PORTS, INCLUDE_OUTBOUND_IP_RANGES, INCLUDE_OUTBOUND_PORTS, INTERCEPTION_MODE,
    KUBEVIRT_INTERFACES, REROUTE_VIRTUAL_INTERFACES, STATUS_PORT,
};
pub use k8s_openapi::api::core::v1::Pod;
pub use trim::{trimmed, READ_ANNOTATIONS, READ_ENV, READ_LABELS};
pub use unknown_keys::{checked_keys, unknown_keys, UnknownKey};
pub use validation::{has_istio_validation, validation_under, ISTIO_VALIDATION};

// A pod decided (meshed or skipped), its policy, its proxy binding; what went wrong.
pub use binding::{reset_uncaptured, PROXY_BINDING, RESET_UNCAPTURED};
pub use decide::{decide, Decision, Skip, DATAPLANE_MODE, INJECT, SIDECAR_STATUS};
pub use error::Error;
pub use policy::{istio_iptables_args, policy};

// Manifests: read, istio-init's arguments and policy found, migrated to istio-cni's form (as
// objects or as text); our policy compared with istio-init's.
pub use compare::{compare, Comparison, Difference};
pub use manifest::{documents, istio_init_args, istio_init_policy, migrate, Document, Migration};
pub use migrate_text::migrate_text;
