//! What the daemon answers: one type per request, in a frame that carries the protocol version
//! and either the answer (`{"v", "ok": true, "answer": {...}}`) or the failure naming the value
//! (`{"v", "ok": false, "error": "..."}`).
use std::{net::IpAddr, path::PathBuf};

use serde::{Deserialize, Serialize};

use redirect_common::NetnsCookie;
use redirect_policy::Policy;

use crate::{request::PodRef, writer::Writer};

/// What one enrollment is: the namespace, its cookie, the policy and where it came from, and
/// what was applied. The daemon's enrollment file holds exactly this (what a restart re-adopts).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnrollmentRecord {
    /// Namespace file.
    pub netns: PathBuf,
    /// Its netns cookie (the key of every map entry it owns; a number on the wire).
    #[cfg_attr(feature = "schema", schemars(with = "u64"))]
    pub cookie: NetnsCookie,
    /// Where the policy came from.
    pub source: String,
    /// The policy.
    pub policy: Policy,
    /// Its addresses, as last synchronised.
    pub addrs: Vec<IpAddr>,
    /// Whether its IPv6 traffic follows the policy.
    pub ipv6: bool,
    /// Whether inbound capture is on.
    pub inbound: bool,
    /// The Kubernetes pod this namespace belongs to, when the CNI plugin enrolled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "PodRef"))]
    pub pod: Option<PodRef>,
    /// Which command wrote the policy (an older file without it: `enroll`).
    #[serde(default)]
    pub writer: Writer,
}

impl EnrollmentRecord {
    /// The wire form, with whether the proxy listens on its outbound port now.
    pub fn to_wire(&self, proxy_listening: bool) -> Enrollment {
        Enrollment {
            record: self.clone(),
            proxy_listening,
            outside_capture: 0,
        }
    }
}

/// One enrolled namespace as the daemon lists it: its record, and what only the kernel knows
/// now (one flat JSON object).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enrollment {
    /// What was enrolled.
    #[serde(flatten)]
    pub record: EnrollmentRecord,
    /// Whether the proxy listens on the outbound port, read from the kernel when answering.
    pub proxy_listening: bool,
    /// Established connections its policy would capture now that bypass the proxy (opened
    /// before it was enrolled in place, or before its policy captured them), as last counted.
    #[serde(default)]
    pub outside_capture: usize,
}

/// What the daemon decided for a pod.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodOutcome {
    /// Enrolled (capture active) or not meshed.
    pub meshed: bool,
    /// `meshed`, or istio-cni's reason to skip it.
    pub decision: String,
}

/// `enroll`: the namespace's enrollment as now applied.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Enrolled {
    /// A one-line summary.
    pub message: String,
    /// The enrollment.
    pub enrollment: Enrollment,
}

/// `unenroll`: removed, or nothing was enrolled (success too, like CNI DEL).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Unenrolled {
    /// A one-line summary.
    pub message: String,
    /// Whether an enrollment was removed.
    pub removed: bool,
}

/// `list`: every enrollment.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Listed {
    /// The enrollments.
    pub enrollments: Vec<Enrollment>,
}

/// `uninstall`: everything removed; the daemon stops.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Uninstalled {
    /// A one-line summary.
    pub message: String,
}

/// `pod_add`, `pod_del`, `pod_check`: what was decided for the pod.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PodAnswer {
    /// A one-line summary.
    pub message: String,
    /// The decision (`pod_del`: meshed when an enrollment was removed).
    pub pod: PodOutcome,
    /// The enrollment, when the pod is enrolled (`pod_add`, `pod_check`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Enrollment"))]
    pub enrollment: Option<Enrollment>,
}

/// `pod_gc`: what the collection removed.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GcDone {
    /// A one-line summary.
    pub message: String,
    /// The container ids whose enrollments were removed.
    pub removed: Vec<String>,
}

/// `status`: the daemon answers.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    /// A one-line summary.
    pub message: String,
    /// The daemon's pid.
    pub pid: u32,
    /// How many namespaces are enrolled.
    pub enrolled: usize,
    /// Repairs of its datapath since it started (recreated, policies re-applied).
    #[serde(default)]
    pub repairs: u64,
    /// The last problem it found, repaired or not.
    #[serde(default)]
    pub last_problem: Option<String>,
    /// A problem it cannot repair (another owner in the record).
    #[serde(default)]
    pub alarm: Option<String>,
    /// CNI ADDs that found it unreachable (and failed closed), from the plugin's counter file.
    #[serde(default)]
    pub cni_add_unreachable: u64,
}

/// Any answer, as the daemon sends it (each serialises as its own object).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Answer {
    /// `enroll`.
    Enrolled(Enrolled),
    /// `unenroll`.
    Unenrolled(Unenrolled),
    /// `list`.
    Listed(Listed),
    /// `uninstall`.
    Uninstalled(Uninstalled),
    /// `pod_add`, `pod_del`, `pod_check`.
    Pod(PodAnswer),
    /// `pod_gc`.
    Gc(GcDone),
    /// `status`.
    Status(Status),
}
