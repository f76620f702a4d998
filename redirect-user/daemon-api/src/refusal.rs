//! A request the daemon carried out nothing of, typed: what kind of refusal it is (whether a
//! later try may succeed, whose fault it is) and the message that names the value. The CNI
//! plugin maps the kind to its error code in one `match`; the wire carries the kind by name
//! beside the `retry` flag older clients read.
use serde::{Deserialize, Serialize};

/// What kind of refusal.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalKind {
    /// What the request needs is not there yet (the apiserver does not have the pod): ask
    /// again later.
    Retry,
    /// The daemon has too much in hand (every reader or resolver busy): ask again later.
    Busy,
    /// The namespace or pod cannot be captured as asked (the host's namespace, a path the
    /// daemon does not see): asking again changes nothing.
    NotCapturable,
    /// The client may not ask this (no CAP_NET_ADMIN in the daemon's user namespace, a pod's
    /// client naming another namespace).
    Forbidden,
    /// The request did not decode, arrived incomplete or named a bad value.
    BadRequest,
    /// The daemon tried and failed; nothing was changed.
    Failed,
}

impl RefusalKind {
    /// Every kind (for tests and docs).
    pub const ALL: [RefusalKind; 6] = [
        RefusalKind::Retry,
        RefusalKind::Busy,
        RefusalKind::NotCapturable,
        RefusalKind::Forbidden,
        RefusalKind::BadRequest,
        RefusalKind::Failed,
    ];

    /// Whether asking again later may succeed.
    pub fn retry(self) -> bool {
        matches!(self, RefusalKind::Retry | RefusalKind::Busy)
    }

    /// The kind's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            RefusalKind::Retry => "retry",
            RefusalKind::Busy => "busy",
            RefusalKind::NotCapturable => "not_capturable",
            RefusalKind::Forbidden => "forbidden",
            RefusalKind::BadRequest => "bad_request",
            RefusalKind::Failed => "failed",
        }
    }

    /// The kind a frame names: by `kind` when this release knows the name, else by the `retry`
    /// flag (an older daemon sends no kind; a newer one may send a kind this client lacks).
    pub(crate) fn received(kind: Option<&str>, retry: bool) -> Self {
        kind.and_then(|k| Self::ALL.into_iter().find(|c| c.name() == k))
            .unwrap_or(if retry {
                RefusalKind::Retry
            } else {
                RefusalKind::Failed
            })
    }
}

/// A refusal: its kind and the message naming the value (and the fix, where there is one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// What kind of refusal.
    pub kind: RefusalKind,
    /// What was refused and why.
    pub message: String,
}

impl Refusal {
    /// A refusal of `kind`.
    pub fn new(kind: RefusalKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_serde_names_and_unknown_kinds_fall_back_on_the_flag() {
        for k in RefusalKind::ALL {
            assert_eq!(serde_json::to_value(k).expect("json"), k.name());
            assert_eq!(RefusalKind::received(Some(k.name()), false), k);
        }
        assert_eq!(
            RefusalKind::received(Some("newer"), true),
            RefusalKind::Retry
        );
        assert_eq!(RefusalKind::received(None, false), RefusalKind::Failed);
    }
}
