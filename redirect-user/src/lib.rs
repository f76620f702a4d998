//! redirect: eBPF replacement for istio-init's iptables capture (library side of the `redirect` CLI).
pub mod adopt;
pub mod bpfsys;
pub mod cgroup;
pub mod counters;
pub mod daemon;
pub mod datapath;
pub mod describe;
pub mod enroll;
pub mod error;
pub mod explain;
pub mod inbound;
pub mod metrics;
pub mod netns;
pub mod node;
pub mod node_status;
pub mod object;
pub mod observe;
pub mod outbound;
pub mod policy;
pub mod preflight;
pub mod routes;
pub mod state;
pub mod status;
pub mod store;
pub mod validate;

pub use datapath::{AttachOptions, Datapath};
pub use error::{Error, Result};
