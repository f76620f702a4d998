//! Errors of reading a pod: each names the annotation, container field or manifest part, and the bad value.

/// Why a pod or manifest could not be turned into a policy.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An annotation (or proxy env variable, or container field) whose value istio-cni would
    /// refuse, or that istio-iptables would not parse.
    #[error("{origin} = {whole:?}: {item:?} {reason}")]
    Invalid {
        /// Where the value came from: `annotation traffic.sidecar.istio.io/excludeInboundPorts`,
        /// `istio-proxy env ISTIO_META_DNS_CAPTURE`.
        origin: String,
        /// The whole value as written.
        whole: String,
        /// The offending item (the whole value, or one list item).
        item: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A pod that captures DNS without any DNS server known for it.
    #[error("{0}")]
    NoDnsServer(String),
    /// The istio-iptables arguments built for the pod were refused for a reason no single
    /// annotation explains.
    #[error("the istio-iptables arguments built for the pod ({args}) were refused: {source}")]
    Policy {
        /// The arguments, space-separated.
        args: String,
        /// The parser's reason.
        source: redirect_policy::PolicyError,
    },
    /// A manifest document that is not YAML/JSON, or whose pod part does not decode.
    #[error("manifest document {document}: {reason}")]
    Manifest {
        /// 1-based document number in the file.
        document: usize,
        /// What is wrong, naming the field when serde does.
        reason: String,
    },
}

impl Error {
    pub(crate) fn invalid(
        origin: &str,
        whole: &str,
        item: &str,
        reason: impl Into<String>,
    ) -> Self {
        Error::Invalid {
            origin: origin.to_owned(),
            whole: whole.to_owned(),
            item: item.to_owned(),
            reason: reason.into(),
        }
    }
}
