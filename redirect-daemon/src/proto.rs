//! Requests and responses between the CLI and the daemon: one JSON object per line.
use std::{net::IpAddr, path::PathBuf};

use serde::{Deserialize, Serialize};

use redirect_policy::Policy;

/// What the CLI asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Apply `policy` to the namespace (replacing its previous one).
    Enroll {
        /// Namespace file.
        netns: PathBuf,
        /// The resolved policy.
        policy: Box<Policy>,
        /// Where it came from (`--istio-args ...`, `--cluster-env FILE`, `--policy FILE`).
        source: String,
    },
    /// Remove the namespace's policy.
    Unenroll {
        /// Namespace file.
        netns: PathBuf,
    },
    /// List enrollments.
    List,
    /// Remove every enrollment, pin and attachment, then exit.
    Uninstall,
    /// CNI ADD: resolve the pod, decide as istio-cni does, enroll its netns when meshed.
    PodAdd {
        /// The pod (CNI_ARGS).
        pod: PodRef,
        /// CNI_NETNS.
        netns: PathBuf,
        /// The pod's addresses from the primary plugin's prevResult: the netns must hold them.
        ips: Vec<IpAddr>,
    },
    /// CNI DEL: unenroll the pod's netns; success when nothing is enrolled for it.
    PodDel {
        /// The pod (CNI_ARGS; the container id is the key).
        pod: PodRef,
        /// CNI_NETNS, when the runtime still gives one.
        #[serde(default)]
        netns: Option<PathBuf>,
    },
    /// CNI CHECK: the enrollment matches what the pod asks for now.
    PodCheck {
        /// The pod.
        pod: PodRef,
        /// CNI_NETNS.
        netns: PathBuf,
        /// prevResult's addresses.
        ips: Vec<IpAddr>,
    },
    /// CNI GC: unenroll every pod enrollment whose container id is not listed.
    PodGc {
        /// The container ids of `cni.dev/valid-attachments`.
        valid: Vec<String>,
    },
    /// CNI STATUS: whether the daemon answers.
    Status,
}

impl Request {
    /// Its `op` on the wire.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Enroll { .. } => "enroll",
            Request::Unenroll { .. } => "unenroll",
            Request::List => "list",
            Request::Uninstall => "uninstall",
            Request::PodAdd { .. } => "pod_add",
            Request::PodDel { .. } => "pod_del",
            Request::PodCheck { .. } => "pod_check",
            Request::PodGc { .. } => "pod_gc",
            Request::Status => "status",
        }
    }
}

/// The pod a CNI call names (from `CNI_ARGS` and `CNI_CONTAINERID`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    /// K8S_POD_NAMESPACE.
    pub namespace: String,
    /// K8S_POD_NAME.
    pub name: String,
    /// K8S_POD_UID (empty when the runtime gives none).
    #[serde(default)]
    pub uid: String,
    /// The sandbox's container id (CNI_CONTAINERID, else K8S_POD_INFRA_CONTAINER_ID).
    pub container_id: String,
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pod {}/{}", self.namespace, self.name)?;
        if !self.uid.is_empty() {
            write!(f, " (uid {})", self.uid)?;
        }
        Ok(())
    }
}

/// What the daemon decided for a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodOutcome {
    /// Enrolled (capture active) or not meshed.
    pub meshed: bool,
    /// `meshed`, or istio-cni's reason to skip it.
    pub decision: String,
}

/// One enrolled namespace, as stored in its state file and listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enrollment {
    /// Namespace file.
    pub netns: PathBuf,
    /// Its netns cookie (the key of every map entry it owns).
    pub cookie: u64,
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
    /// Whether the proxy listens on the outbound port (filled in by `list`).
    #[serde(default)]
    pub proxy_listening: bool,
    /// The Kubernetes pod this namespace belongs to, when the CNI plugin enrolled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodRef>,
}

/// The daemon's answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Response {
    /// Whether the request was carried out.
    pub ok: bool,
    /// What went wrong, naming the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A one-line summary.
    #[serde(default)]
    pub message: String,
    /// Enrollments (for `list`, and the one enrolled).
    #[serde(default)]
    pub enrollments: Vec<Enrollment>,
    /// A pod request's decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodOutcome>,
}

impl Response {
    /// A failure carrying `error`.
    pub fn failed(error: impl std::fmt::Display) -> Self {
        Self {
            ok: false,
            error: Some(format!("{error:#}")),
            ..Self::default()
        }
    }
}
