//! A request as handlers see it (method, path, query, a body within the limit) and their answer.
use bytes::Bytes;
use hyper::{Method, StatusCode};

/// One request, its body already read (within [`crate::Limits::max_body_bytes`]). `HEAD`
/// reaches handlers as `GET`; the server drops the body of the answer.
#[derive(Debug, Clone)]
pub struct Request {
    /// The method (`HEAD` shown as `GET`).
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    /// The query, when there is one.
    pub query: Option<String>,
    /// The body.
    pub body: Bytes,
}

/// A handler's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: StatusCode,
    /// `content-type`.
    pub content_type: &'static str,
    /// Methods allowed, sent as `allow` (with 405).
    pub allow: Option<&'static str>,
    /// The body.
    pub body: String,
}

/// Prometheus' text exposition format.
pub(crate) const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

impl Response {
    /// `status` with a plain-text body.
    pub fn text(status: StatusCode, body: impl Into<String>) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            allow: None,
            body: body.into(),
        }
    }

    /// 200 with Prometheus text.
    pub fn prometheus(body: String) -> Self {
        Self {
            content_type: PROMETHEUS,
            ..Self::text(StatusCode::OK, body)
        }
    }

    /// 404 naming what was asked.
    pub fn not_found(req: &Request) -> Self {
        Self::text(
            StatusCode::NOT_FOUND,
            format!("no {} {} here\n", req.method, req.path),
        )
    }

    /// 405 with the methods `path` takes.
    pub fn method_not_allowed(req: &Request, allow: &'static str) -> Self {
        Self {
            allow: Some(allow),
            ..Self::text(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{} takes {allow}, not {}\n", req.path, req.method),
            )
        }
    }
}
