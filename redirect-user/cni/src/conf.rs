//! What a CNI runtime hands the plugin: the network configuration on stdin (our conflist
//! entry, `prevResult`, GC's `cni.dev/valid-attachments`) and the `CNI_*` environment.
use std::{collections::BTreeMap, net::IpAddr, path::PathBuf};

use serde::Deserialize;
use serde_json::Value;

use redirect_daemon_api::{cni_allows, cni_introduced, cni_supported, Exclusions};

use crate::error::{CniError, Code};

pub(crate) use redirect_daemon_api::SUPPORTED_CNI_VERSIONS as SUPPORTED_VERSIONS;

/// Our conflist entry, with what the runtime adds to it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NetConf {
    /// The config's CNI version.
    pub cni_version: String,
    /// The daemon's socket.
    #[serde(default = "default_socket", rename = "daemon_socket")]
    pub daemon_socket: PathBuf,
    /// Pods never handed to the daemon (`exclude_namespaces`, `daemon_pods`).
    #[serde(flatten)]
    pub exclusions: Exclusions,
    /// `error`, `warn`, `info`, `debug` or `trace`.
    #[serde(default = "default_level", rename = "log_level")]
    pub log_level: String,
    /// Seconds to wait for the daemon's answer (it GETs the pod with retries first).
    #[serde(default = "default_timeout", rename = "timeout_seconds")]
    pub timeout_seconds: u64,
    /// The previous plugin's result (ADD, CHECK).
    #[serde(default)]
    pub prev_result: Option<Value>,
    /// GC: the attachments still valid (CNI 1.1). `None` when the key is absent, which is not
    /// "nothing is valid".
    #[serde(default, rename = "cni.dev/valid-attachments")]
    pub valid_attachments: Option<Vec<Attachment>>,
    /// GC: the same list under the key of the spec's drafts, which some runtimes send.
    #[serde(default, rename = "cni.dev/attachments")]
    pub attachments: Option<Vec<Attachment>>,
}

/// One entry of `cni.dev/valid-attachments`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Attachment {
    /// The container id.
    #[serde(rename = "containerID")]
    pub container_id: String,
}

/// The socket of the daemon in the DaemonSet (its default directory).
pub(crate) fn default_socket() -> PathBuf {
    redirect_daemon_api::DaemonDir::new(redirect_daemon_api::DEFAULT_DIR).socket()
}

fn default_level() -> String {
    "info".into()
}

fn default_timeout() -> u64 {
    60
}

impl NetConf {
    /// Parses stdin (for an ADD); a version we do not speak is CNI error 1.
    #[cfg(test)]
    pub(crate) fn parse(bytes: &[u8]) -> Result<Self, CniError> {
        Self::parse_for(bytes, "ADD")
    }

    /// Parses stdin for `command`; a version we do not speak, or one without `command`
    /// (CHECK before 0.4.0, STATUS and GC before 1.1.0), is CNI error 1.
    pub(crate) fn parse_for(bytes: &[u8], command: &str) -> Result<Self, CniError> {
        let conf: NetConf = serde_json::from_slice(bytes).map_err(|e| {
            CniError::new(
                Code::Decoding,
                "decoding the network configuration on stdin",
                e,
            )
        })?;
        if !cni_supported(&conf.cni_version) {
            return Err(CniError::new(
                Code::IncompatibleVersion,
                format!("unsupported cniVersion {:?}", conf.cni_version),
                format!("this plugin speaks {}", SUPPORTED_VERSIONS.join(", ")),
            ));
        }
        if !cni_allows(&conf.cni_version, command) {
            return Err(CniError::new(
                Code::IncompatibleVersion,
                format!("{command} is not part of cniVersion {:?}", conf.cni_version),
                format!(
                    "{command} came with CNI {}",
                    cni_introduced(command).unwrap_or_default()
                ),
            ));
        }
        Ok(conf)
    }

    /// The addresses prevResult gives the pod (`ips[].address`, CIDR form).
    pub(crate) fn prev_ips(&self) -> Result<Vec<IpAddr>, CniError> {
        let Some(prev) = &self.prev_result else {
            return Err(CniError::new(
                Code::InvalidConfig,
                "no prevResult: redirect-cni is a chained plugin and must come after the plugin \
                    that gives the pod its addresses",
                "",
            ));
        };
        let ips = prev
            .get("ips")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        ips.iter()
            .map(|ip| {
                let text = ip
                    .get("address")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let addr = text.split('/').next().unwrap_or_default();
                addr.parse().map_err(|e| {
                    CniError::new(
                        Code::InvalidConfig,
                        format!("prevResult ips[].address {text:?} is not an address"),
                        e,
                    )
                })
            })
            .collect()
    }
}

/// `CNI_ARGS`: `K=V;K=V`.
pub(crate) fn cni_args(text: &str) -> BTreeMap<String, String> {
    text.split(';')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}
