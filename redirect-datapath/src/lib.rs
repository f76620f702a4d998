//! The datapath of redirect: the BPF object, loaded and attached (process-owned or pinned for the node), the maps each namespace's policy is written into, and the views of them (status, stats, trace, explain, validate).
pub mod adopt;
pub mod bpfsys;
pub mod cgroup;
pub mod counters;
pub mod datapath;
pub mod enroll;
pub mod error;
pub mod explain;
pub mod explain_inbound;
pub mod json;
pub mod metrics;
pub mod netns;
pub mod node;
pub mod node_status;
pub mod object;
pub mod observe;
pub mod outbound;
pub mod plan;
pub mod preflight;
pub mod probe;
pub mod routes;
pub mod state;
pub mod status;
pub mod store;
pub mod validate;

pub use datapath::{AttachOptions, Datapath};
pub use error::{Error, Result};
