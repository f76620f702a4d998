//! The CNI error result: `{"cniVersion","code","msg","details"}` on stdout, non-zero exit.
use serde::Serialize;

/// A CNI error (spec codes: 1 incompatible version, 4 invalid environment, 6 decoding, 7
/// invalid configuration, 11 try again later, 50 plugin not available; 100 and up ours).
#[derive(Debug, Clone, Serialize, thiserror::Error)]
#[error("{msg}: {details}")]
pub struct CniError {
    /// The code.
    pub code: u32,
    /// What failed, naming the pod.
    pub msg: String,
    /// Why.
    pub details: String,
}

/// The daemon refused or failed to capture a meshed pod (ours).
pub const CAPTURE_FAILED: u32 = 100;

impl CniError {
    /// An error with `code`.
    pub fn new(code: u32, msg: impl Into<String>, details: impl std::fmt::Display) -> Self {
        Self {
            code,
            msg: msg.into(),
            details: details.to_string(),
        }
    }

    /// The JSON the runtime reads, in `version`.
    pub fn to_json(&self, version: &str) -> String {
        serde_json::json!({
            "cniVersion": version,
            "code": self.code,
            "msg": self.msg,
            "details": self.details,
        })
        .to_string()
    }
}
