//! The daemon socket's protocol, shared by the daemon, the CLI and the exec'd CNI plugin: one
//! JSON request per line (`{"v": VERSION, "call": ...}`) and one typed answer per request, a
//! protocol version both sides check, the client, the daemon directory's path rule, the CNI
//! plugin's failure counter file and the CNI versions it speaks. A request about a namespace
//! carries the caller's descriptor of it beside the line ([`NetnsFd`]). It links no datapath,
//! cluster client or async runtime, so the
//! plugin the runtime execs on every pod start stays small.
// Every dependency of the product build is used (the test build has dev-dependencies too).
#![cfg_attr(test, allow(unused_crate_dependencies))]
mod answer;
mod client;
mod cni_failures;
mod cni_spec;
mod dir;
mod exclusions;
mod netns_fd;
mod peer;
mod records;
mod refusal;
mod request;
mod wire;
mod writer;

// The protocol: requests, one answer type per request, a typed refusal, the descriptor a
// request carries.
pub use answer::{
    Answer, Enrolled, Enrollment, EnrollmentRecord, GcDone, Listed, PodAnswer, PodOutcome, Status,
    Unenrolled, Uninstalled,
};
pub use netns_fd::NetnsFd;
pub use refusal::{Refusal, RefusalKind};
pub use request::{PodRef, Request, PROTOCOL_VERSION};
pub use writer::Writer;

// The wire: frames read, both directions encoded and decoded, the size cap.
#[cfg(feature = "schema")]
pub use wire::answer_frame_schema;
pub use wire::{
    decode_enrollment, decode_request, encode_answer, encode_request, read_frame, DecodeError,
    MAX_REQUEST_BYTES,
};

// The client, and the daemon's judgement of who is calling.
pub use client::{Client, ClientError};
pub use peer::{judge as judge_peer, PeerProcess, Standing};

// The daemon's directory: its path rule, the enrollment files' readers, the CNI failure
// counters kept there.
pub use cni_failures::{
    increment as count_cni_unreachable, increment_refused as count_cni_refused,
    read as read_cni_unreachable, read_refused as read_cni_refused, CounterError,
    METRIC as CNI_UNREACHABLE_METRIC, REFUSED_METRIC as CNI_REFUSED_METRIC,
};
pub use dir::{DaemonDir, DEFAULT_DIR, DIR_ENV};
pub use records::{names as record_names, read as read_records};

// The plugin's side: the CNI versions and commands supported, its exclusions.
pub use cni_spec::{
    allows as cni_allows, introduced as cni_introduced, supported as cni_supported,
    SUPPORTED_VERSIONS as SUPPORTED_CNI_VERSIONS,
};
pub use exclusions::{DaemonPods, Exclusions, DEFAULT_EXCLUDED_NAMESPACE};
