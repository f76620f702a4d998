//! redirect-proxy: a small L4 sidecar proxy with Istio's virtualOutbound (15001) and
//! virtualInbound (15006) semantics, admin ports (15021, 15090, 15020, 15000) and an access log.
pub mod access_log;
pub mod admin;
pub mod blackhole;
pub mod control_plane;
pub mod forward;
pub mod inbound;
pub mod listener;
pub mod metrics;
pub mod orig_dst;
pub mod outbound;
pub mod registry;
pub mod state;

pub use orig_dst::OrigDstAddr;
pub use registry::{Cluster, OutboundTrafficPolicy, Registry};
pub use state::Shared;
