//! The daemon socket's wire, both directions in one place: a request line encoded by the
//! clients and decoded by the daemon (bounded by [`MAX_REQUEST_BYTES`], its version checked
//! first), and an answer line encoded by the daemon and decoded by the clients (its version
//! checked first, a refusal typed). The enrollment files the daemon writes are decoded here
//! too, with the same field-naming errors.
mod decode;

use std::io::BufRead;

use serde::{de::DeserializeOwned, Deserialize, Serialize};

pub use decode::{decode_enrollment, decode_request, DecodeError};

use crate::{Answer, Refusal, RefusalKind, Request, PROTOCOL_VERSION};

/// The longest request line the daemon reads (a policy is a few KiB).
pub const MAX_REQUEST_BYTES: usize = 1 << 20;

/// Reads one request line (without its newline) of at most [`MAX_REQUEST_BYTES`].
pub fn read_frame(reader: impl BufRead) -> Result<Vec<u8>, DecodeError> {
    let mut line = Vec::new();
    let limit = u64::try_from(MAX_REQUEST_BYTES).unwrap_or(u64::MAX) + 1;
    reader
        .take(limit)
        .read_until(b'\n', &mut line)
        .map_err(DecodeError::Read)?;
    if line.last() == Some(&b'\n') {
        line.pop();
    } else if line.len() > MAX_REQUEST_BYTES {
        return Err(DecodeError::TooLong);
    }
    Ok(line)
}

/// The request line: `req` with the protocol version (`{"v": 2, "call": ..., fields}`), and
/// the newline.
pub fn encode_request(req: &Request) -> Result<String, serde_json::Error> {
    #[derive(Serialize)]
    struct Frame<'a> {
        v: u32,
        #[serde(flatten)]
        request: &'a Request,
    }
    let mut line = serde_json::to_string(&Frame {
        v: PROTOCOL_VERSION,
        request: req,
    })?;
    line.push('\n');
    Ok(line)
}

/// The daemon socket's answer frame: one JSON line per request, the protocol version in it,
/// the typed answer or the refusal naming the value.
#[derive(Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(extend(
        "if" = { "properties": { "ok": { "const": true } } },
        "then" = { "required": ["answer"], "not": { "required": ["error"] } },
        "else" = { "required": ["error", "kind"], "not": { "required": ["answer"] } }
    ))
)]
struct AnswerFrame<'a> {
    /// The protocol version.
    #[cfg_attr(feature = "schema", schemars(schema_with = "protocol_version"))]
    v: u32,
    /// Whether the daemon did what was asked (then `answer`; else `error` and `kind`).
    ok: bool,
    /// The call's typed answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    answer: Option<&'a Answer>,
    /// The refusal's message, naming the value.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    /// The refusal's kind: `retry` and `busy` may succeed later.
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<RefusalKind>,
    /// A refusal the client may retry (kind `retry` or `busy`; what clients before kinds read).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    retry: bool,
}

/// `v`: this protocol's version, the one value a frame carries.
#[cfg(feature = "schema")]
fn protocol_version(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "const": PROTOCOL_VERSION })
}

/// The JSON Schema of the answer frame (`docs/schema/daemon-answer.schema.json`).
#[cfg(feature = "schema")]
pub fn answer_frame_schema(generator: schemars::SchemaGenerator) -> schemars::Schema {
    generator.into_root_schema_for::<AnswerFrame<'static>>()
}

/// The answer line: this result with the protocol version, and the newline. A refusal carries
/// its kind by name and `retry` (what an older client reads) when a later try may succeed: the
/// CNI plugin then answers code 11, "try again later".
pub fn encode_answer(result: &Result<Answer, Refusal>) -> String {
    let frame = match result {
        Ok(a) => AnswerFrame {
            v: PROTOCOL_VERSION,
            ok: true,
            answer: Some(a),
            error: None,
            kind: None,
            retry: false,
        },
        Err(e) => AnswerFrame {
            v: PROTOCOL_VERSION,
            ok: false,
            answer: None,
            error: Some(&e.message),
            kind: Some(e.kind),
            retry: e.kind.retry(),
        },
    };
    let mut line = serde_json::to_string(&frame).unwrap_or_else(|e| {
        format!(
            r#"{{"v":{PROTOCOL_VERSION},"ok":false,"error":"encoding the answer: {e}","kind":"failed"}}"#
        )
    });
    line.push('\n');
    line
}

/// Why an answer line gave no answer of the call's type.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerError {
    /// Not JSON, or not of the call's type.
    #[error("{0}")]
    Json(#[source] serde_json::Error),
    /// Of another protocol version (1: it named none).
    #[error("protocol version {0}, this client speaks {PROTOCOL_VERSION}")]
    Version(u32),
    /// The daemon refused (or answered `ok` with nothing).
    #[error("{0}")]
    Refused(Refusal),
}

/// The answer of call `op` in `line`: its version checked first, then the answer of type `A`
/// or the typed refusal (a daemon before kinds: the kind from its `retry` flag).
pub(crate) fn decode_answer<A: DeserializeOwned>(op: &str, line: &str) -> Result<A, AnswerError> {
    #[derive(Deserialize)]
    struct Frame<A> {
        ok: bool,
        #[serde(default = "none", bound = "A: DeserializeOwned")]
        answer: Option<A>,
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        kind: Option<String>,
        #[serde(default)]
        retry: bool,
    }
    fn none<A>() -> Option<A> {
        None
    }
    let v: serde_json::Value = serde_json::from_str(line).map_err(AnswerError::Json)?;
    let theirs = v.get("v").and_then(serde_json::Value::as_u64).unwrap_or(1);
    if theirs != u64::from(PROTOCOL_VERSION) {
        return Err(AnswerError::Version(
            u32::try_from(theirs).unwrap_or(u32::MAX),
        ));
    }
    let got: Frame<A> = serde_json::from_value(v).map_err(AnswerError::Json)?;
    match (got.ok, got.answer) {
        (true, Some(a)) => Ok(a),
        (true, None) => Err(AnswerError::Refused(Refusal::new(
            RefusalKind::Failed,
            format!("the daemon's answer to {op} is empty"),
        ))),
        (false, _) => Err(AnswerError::Refused(Refusal::new(
            RefusalKind::received(got.kind.as_deref(), got.retry),
            got.error
                .unwrap_or_else(|| format!("the daemon refused {op} without a reason")),
        ))),
    }
}

#[cfg(test)]
mod answer_roundtrip;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GcDone;

    #[test]
    fn a_request_frame_carries_the_version_and_the_op() {
        let line = encode_request(&Request::PodGc {
            valid: vec!["c1".into()],
        })
        .expect("frame");
        assert!(line.ends_with('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).expect("json");
        assert_eq!(v["v"], PROTOCOL_VERSION);
        assert_eq!(v["call"], "pod_gc");
        // No `op`: a version 1 daemon, which requires one, refuses the frame unexecuted.
        assert!(v.get("op").is_none(), "{line}");
        assert_eq!(v["valid"], serde_json::json!(["c1"]));
    }

    #[test]
    fn answers_and_every_refusal_kind_round_trip() {
        let ok = encode_answer(&Ok(Answer::Gc(GcDone {
            message: "1 removed".into(),
            removed: vec!["c1".into()],
        })));
        assert!(ok.contains(&format!("\"v\":{PROTOCOL_VERSION}")));
        let back: GcDone = decode_answer("pod_gc", &ok).expect("ok frame");
        assert_eq!(back.removed, ["c1"]);
        for kind in RefusalKind::ALL {
            let message = "bad request: unknown op \"x\"";
            let line = encode_answer(&Err(Refusal::new(kind, message)));
            let v: serde_json::Value = serde_json::from_str(&line).expect("json");
            // What a client of the release before kinds reads: the flag.
            assert_eq!(
                v["retry"].as_bool().unwrap_or(false),
                kind.retry(),
                "{line}"
            );
            match decode_answer::<GcDone>("pod_gc", &line) {
                Err(AnswerError::Refused(r)) => assert_eq!(r, Refusal::new(kind, message)),
                other => panic!("{other:?}"),
            }
        }
        let older = r#"{"v":2,"ok":false,"error":"busy","retry":true}"#;
        assert!(matches!(
            decode_answer::<GcDone>("pod_gc", older),
            Err(AnswerError::Refused(Refusal {
                kind: RefusalKind::Retry,
                ..
            }))
        ));
        let v1 = r#"{"ok":true,"answer":{"message":"","removed":[]}}"#;
        assert!(matches!(
            decode_answer::<GcDone>("pod_gc", v1),
            Err(AnswerError::Version(1))
        ));
    }
}
