//! Errors of istio-iptables argument, environment, cluster.env and policy JSON parsing.

/// Why an istio-iptables invocation was refused. Every variant names the flag (short and long
/// form, plus the env var when the value came from one) and the offending value.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A flag or env value that does not parse or is out of range.
    #[error("{flag}: {value:?} {reason}")]
    Invalid {
        /// The flag, e.g. `-i/--istio-service-cidr` or `-i/--istio-service-cidr ($ISTIO_SERVICE_CIDR)`.
        flag: String,
        /// The bad value (one list item when the value is a list).
        value: String,
        /// What is wrong with it, e.g. `is not a CIDR`.
        reason: String,
    },
    /// A flag istio-iptables does not have.
    #[error("unknown flag {0}")]
    UnknownFlag(String),
    /// A flag that takes a value was the last argument.
    #[error("flag {0} needs a value")]
    MissingValue(String),
    /// A positional argument (istio-iptables takes none).
    #[error(
        "unexpected argument {0:?}: istio-iptables takes no positional arguments (a bool flag \
        takes its value as --flag=false)"
    )]
    UnexpectedArgument(String),
    /// A value that must come from the pod's files (its resolv.conf, passwd or group), and no
    /// source of them could answer.
    #[error("{needed}, and {lookup}: {fix}")]
    PodFile {
        /// What needed the lookup, naming the flag or variable that asked for it.
        needed: String,
        /// Why no answer was found.
        lookup: Box<crate::LookupError>,
        /// What to pass instead.
        fix: String,
    },
    /// Policy JSON that does not deserialize: the field (`policy.proxy_port`, or `policy`
    /// for the document itself) and serde's reason, which names the bad value.
    #[error("{field}: {reason}")]
    Json {
        /// `policy`, then the path of the failing field.
        field: String,
        /// What is wrong, with its line and column.
        reason: String,
    },
    /// A cluster.env line that is not `KEY=value`, `KEY='value'` or a comment.
    #[error("cluster.env line {line}: {reason}: {text:?}")]
    ClusterEnv {
        /// 1-based line number.
        line: usize,
        /// What is wrong with the line.
        reason: String,
        /// The line as written.
        text: String,
    },
}

impl PolicyError {
    /// A [`PolicyError::Invalid`] for `flag` and `value`.
    pub(super) fn invalid(flag: &str, value: &str, reason: impl Into<String>) -> Self {
        PolicyError::Invalid {
            flag: flag.to_string(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}
