//! The CNI error result: `{"cniVersion","code","msg","details"}` on stdout, non-zero exit.
use serde::Serialize;

/// The error codes this plugin returns: the spec's, and ours from 100 up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    /// 1: the configuration's cniVersion is not one this plugin speaks.
    IncompatibleVersion,
    /// 4: a variable the runtime must set is absent or unknown.
    InvalidEnvironment,
    /// 6: the configuration on stdin does not decode.
    Decoding,
    /// 7: the configuration decodes but is not valid here.
    InvalidConfig,
    /// 11: try again later (the daemon is unreachable: fail closed, the runtime retries).
    TryAgainLater,
    /// 50: STATUS: the plugin is not available (the daemon does not answer).
    NotAvailable,
    /// 100 (ours): the daemon refused or failed to capture a meshed pod.
    CaptureFailed,
}

impl Code {
    /// The number on the wire.
    pub(crate) fn number(self) -> u32 {
        match self {
            Code::IncompatibleVersion => 1,
            Code::InvalidEnvironment => 4,
            Code::Decoding => 6,
            Code::InvalidConfig => 7,
            Code::TryAgainLater => 11,
            Code::NotAvailable => 50,
            Code::CaptureFailed => 100,
        }
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.number())
    }
}

/// A CNI error.
#[derive(Debug, Clone, Serialize, thiserror::Error)]
#[error("{msg}: {details}")]
pub(crate) struct CniError {
    /// The code.
    pub code: Code,
    /// What failed, naming the pod.
    pub msg: String,
    /// Why.
    pub details: String,
}

impl CniError {
    /// An error with `code`.
    pub(crate) fn new(code: Code, msg: impl Into<String>, details: impl std::fmt::Display) -> Self {
        Self {
            code,
            msg: msg.into(),
            details: details.to_string(),
        }
    }

    /// The JSON the runtime reads, in `version`.
    pub(crate) fn to_json(&self, version: &str) -> String {
        serde_json::json!({
            "cniVersion": version,
            "code": self.code.number(),
            "msg": self.msg,
            "details": self.details,
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_specs_numbers() {
        let e = CniError::new(Code::TryAgainLater, "pod a/b not captured", "unreachable");
        let v: serde_json::Value = serde_json::from_str(&e.to_json("1.0.0")).expect("json");
        assert_eq!(v["code"], 11);
        assert_eq!(Code::CaptureFailed.number(), 100);
        assert_eq!(Code::IncompatibleVersion.number(), 1);
    }
}
