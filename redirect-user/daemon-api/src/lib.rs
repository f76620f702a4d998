//! The daemon socket's protocol, shared by the daemon, the CLI and the exec'd CNI plugin: one
//! JSON request per line (`{"v": VERSION, "call": ...}`) and one typed answer per request, a
//! protocol version both sides check, the client, the daemon directory's path rule, the CNI
//! plugin's failure counter file and the CNI versions it speaks. A request about a namespace
//! carries the caller's descriptor of it beside the line ([`NetnsFd`]). It links no datapath, cluster client or async runtime, so the
//! plugin the runtime execs on every pod start stays small.
// Every dependency of the product build is used (the test build has dev-dependencies too).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
pub mod answer;
pub mod client;
pub mod cni_failures;
pub mod cni_spec;
mod dir;
pub mod exclusions;
pub mod netns_fd;
pub mod peer;
pub mod records;
mod refusal;
pub mod request;
pub mod wire;

pub use answer::{
    Answer, Enrolled, Enrollment, EnrollmentRecord, GcDone, Listed, PodAnswer, PodOutcome, Status,
    Unenrolled, Uninstalled, Writer,
};
pub use client::{Client, ClientError};
pub use dir::{DaemonDir, DEFAULT_DIR, DIR_ENV};
pub use exclusions::{DaemonPods, Exclusions};
pub use netns_fd::NetnsFd;
pub use refusal::{Refusal, RefusalKind};
pub use request::{PodRef, Request, PROTOCOL_VERSION};
