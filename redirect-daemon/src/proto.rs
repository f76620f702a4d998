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
