//! What the daemon reads from outside, decoded: a request line and its enrollment files. Each
//! refusal names the field and the bad value.
use redirect_policy::PolicyError;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::MAX_REQUEST_BYTES;
use crate::{EnrollmentRecord as Enrollment, Request, Writer, PROTOCOL_VERSION};

/// Why a request or an enrollment file was refused.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// More than [`MAX_REQUEST_BYTES`] without a newline.
    #[error("the request is longer than {MAX_REQUEST_BYTES} bytes")]
    TooLong,
    /// The socket failed or timed out.
    #[error("reading the request: {0}")]
    Read(#[source] std::io::Error),
    /// More than one descriptor came with the request (all closed unused).
    #[error("the request carried more than one descriptor: a request names one network namespace at most")]
    Descriptors,
    /// Not JSON at all (serde names the line and column).
    #[error("{what} is not JSON: {source}")]
    Json {
        /// `request` or `enrollment file`.
        what: &'static str,
        /// The syntax error.
        #[source]
        source: serde_json::Error,
    },
    /// JSON, but not an object.
    #[error("{what} is {found}, not an object")]
    NotAnObject {
        /// `request` or `enrollment file`.
        what: &'static str,
        /// The JSON type found.
        found: &'static str,
    },
    /// JSON of the wrong shape as a whole (serde names what it found).
    #[error("{what}: {reason}")]
    Document {
        /// `enrollment file`.
        what: &'static str,
        /// serde's words.
        reason: String,
    },
    /// A frame without this daemon's protocol version.
    #[error(
        "request of protocol version {found}, this daemon speaks {PROTOCOL_VERSION}: run the \
        same release of redirect, redirect-cni and the daemon"
    )]
    Version {
        /// The frame's `v` (1: none given, as clients before versioning sent).
        found: u64,
    },
    /// A `call` this daemon does not know.
    #[error(
        "unknown call {0:?} (calls: enroll, unenroll, list, uninstall, status, pod_add, pod_del, \
        pod_check, pod_gc)"
    )]
    UnknownOp(String),
    /// A required field is absent.
    #[error("{what}: missing field {field:?}")]
    Missing {
        /// `request`, `enroll request`, `enrollment file`...
        what: String,
        /// The field.
        field: &'static str,
    },
    /// A field of the wrong type or value.
    #[error("{what}: field {field}: {reason}")]
    Field {
        /// `request`, `enroll request`, `enrollment file`...
        what: String,
        /// The field's path, e.g. `netns` or `addrs[2]`.
        field: String,
        /// serde's words, naming the value.
        reason: String,
    },
    /// The policy does not parse or does not validate (names `policy.FIELD`).
    #[error("{what}: {source}")]
    Policy {
        /// `enroll request` or `enrollment file`.
        what: String,
        /// Which field and why.
        #[source]
        source: PolicyError,
    },
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn object(what: &'static str, bytes: &[u8]) -> Result<Map<String, Value>, DecodeError> {
    match serde_json::from_slice(bytes).map_err(|source| DecodeError::Json { what, source })? {
        Value::Object(obj) => Ok(obj),
        other => Err(DecodeError::NotAnObject {
            what,
            found: kind(&other),
        }),
    }
}

fn field<T: DeserializeOwned>(
    obj: &Map<String, Value>,
    what: &str,
    name: &'static str,
) -> Result<T, DecodeError> {
    let value = obj.get(name).ok_or_else(|| DecodeError::Missing {
        what: what.to_owned(),
        field: name,
    })?;
    serde_path_to_error::deserialize(value).map_err(|e| DecodeError::Field {
        what: what.to_owned(),
        field: match e.path().to_string().as_str() {
            "." => name.to_owned(),
            path => format!("{name}.{path}"),
        },
        reason: e.inner().to_string(),
    })
}

fn policy(obj: &Map<String, Value>, what: &str) -> Result<redirect_policy::Policy, DecodeError> {
    let value = obj.get("policy").ok_or_else(|| DecodeError::Missing {
        what: what.to_owned(),
        field: "policy",
    })?;
    redirect_policy::policy_from_value(value).map_err(|source| DecodeError::Policy {
        what: what.to_owned(),
        source,
    })
}

/// The `writer` of an enroll request: absent is `enroll` (an older client); only the commands
/// that enroll over the socket may be named (`cni` and `reconcile` are the daemon's own).
fn enroll_writer(obj: &Map<String, Value>) -> Result<Writer, DecodeError> {
    const WHAT: &str = "enroll request";
    if obj.get("writer").is_none_or(Value::is_null) {
        return Ok(Writer::Enroll);
    }
    match field::<Writer>(obj, WHAT, "writer")? {
        w @ (Writer::Enroll | Writer::IstioIptables | Writer::Vm) => Ok(w),
        other => Err(DecodeError::Field {
            what: WHAT.to_owned(),
            field: "writer".to_owned(),
            reason: format!(
                "{:?} is the daemon's own; a client names enroll, istio_iptables or vm",
                other.name()
            ),
        }),
    }
}

/// One request line, as [`super::encode_request`] writes it: `{"v": 2, "call": "enroll", "netns": ...,
/// "policy": ..., "source": ...}`, `{"v": 2, "call": "unenroll", "netns": ...}`, `{"v": 2, "call":
/// "list"}`... The version is checked first; the policy is held to
/// [`redirect_policy::Policy::validate`].
pub fn decode_request(bytes: &[u8]) -> Result<Request, DecodeError> {
    let obj = object("request", bytes)?;
    let found = match obj.get("v") {
        None => 1,
        Some(_) => field::<u64>(&obj, "request", "v")?,
    };
    if found != u64::from(PROTOCOL_VERSION) {
        return Err(DecodeError::Version { found });
    }
    let op: String = field(&obj, "request", "call")?;
    Ok(match op.as_str() {
        "enroll" => Request::Enroll {
            netns: field(&obj, "enroll request", "netns")?,
            policy: Box::new(policy(&obj, "enroll request")?),
            source: field(&obj, "enroll request", "source")?,
            writer: enroll_writer(&obj)?,
        },
        "unenroll" => Request::Unenroll {
            netns: field(&obj, "unenroll request", "netns")?,
        },
        "list" => Request::List,
        "uninstall" => Request::Uninstall,
        "status" => Request::Status,
        "pod_add" => Request::PodAdd {
            pod: field(&obj, "pod_add request", "pod")?,
            netns: field(&obj, "pod_add request", "netns")?,
            ips: field(&obj, "pod_add request", "ips")?,
        },
        "pod_check" => Request::PodCheck {
            pod: field(&obj, "pod_check request", "pod")?,
            netns: field(&obj, "pod_check request", "netns")?,
            ips: field(&obj, "pod_check request", "ips")?,
        },
        "pod_del" => Request::PodDel {
            pod: field(&obj, "pod_del request", "pod")?,
            netns: match obj.get("netns") {
                None | Some(Value::Null) => None,
                Some(_) => Some(field(&obj, "pod_del request", "netns")?),
            },
        },
        "pod_gc" => Request::PodGc {
            valid: field(&obj, "pod_gc request", "valid")?,
        },
        _ => return Err(DecodeError::UnknownOp(op)),
    })
}

/// An enrollment file the daemon wrote (or someone edited), its policy validated.
pub fn decode_enrollment(bytes: &[u8]) -> Result<Enrollment, DecodeError> {
    const WHAT: &str = "enrollment file";
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let e: Enrollment = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let field = e.path().to_string();
        let source = e.into_inner();
        match field.as_str() {
            "." if source.is_syntax() || source.is_eof() => {
                DecodeError::Json { what: WHAT, source }
            }
            "." => DecodeError::Document {
                what: WHAT,
                reason: source.to_string(),
            },
            _ => DecodeError::Field {
                what: WHAT.to_owned(),
                field,
                reason: source.to_string(),
            },
        }
    })?;
    e.policy.validate().map_err(|source| DecodeError::Policy {
        what: WHAT.to_owned(),
        source,
    })?;
    Ok(e)
}
