//! What a client asks the daemon: one JSON object per line, `{"v": PROTOCOL_VERSION, "call":
//! ..., fields}`. The daemon refuses a frame of another version (or none) with an answer naming
//! both. The request's name is `call`, not version 1's `op`, so a daemon of version 1 refuses a
//! version 2 frame (its `op` is missing) instead of carrying it out unversioned.
use std::{net::IpAddr, path::PathBuf};

use serde::{Deserialize, Serialize};

use redirect_policy::Policy;

/// The protocol both sides speak. 2: typed answers (`{"v", "ok", "answer"}` or `{"v", "ok",
/// "error"}`), the version in every frame. 1 (never numbered on the wire): one `Response`.
pub const PROTOCOL_VERSION: u32 = 2;

/// What a client asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum Request {
    /// Apply `policy` to the namespace (replacing its previous one).
    Enroll {
        /// Namespace file.
        netns: PathBuf,
        /// The resolved policy.
        policy: Box<Policy>,
        /// Where it came from (`--istio-args ...`, `--cluster-env FILE`, `--policy FILE`).
        source: String,
        /// The command asking (`enroll`, `istio-iptables`, `vm`); a client without it: `enroll`.
        #[serde(default)]
        writer: crate::writer::Writer,
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
    /// Its `call` on the wire.
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
