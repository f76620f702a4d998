//! redirect-proxy: a small L4 sidecar proxy with Istio's virtualOutbound (15001) and
//! virtualInbound (15006) semantics, admin ports (15021, 15090, 15020, 15000) and an access log.
//!
//! Every module is the crate's own: the binary (`main.rs`) and the tests come in only through
//! the doors below.
// The library and the binary (`main.rs`) share one dependency list: the binary's own
// (clap, anyhow, tracing-subscriber) are unused here.
#![allow(unused_crate_dependencies)]
mod access_log;
mod admin;
mod blackhole;
mod control_plane;
mod forward;
mod inbound;
mod listener;
mod metrics;
mod orig_dst;
mod outbound;
mod registry;
mod state;

// The state the listeners share, and the original destination they recover.
pub use orig_dst::OrigDstAddr;
pub use state::Shared;

// The registry: its file, the routing it answers.
pub use registry::{
    Cluster, OutboundTrafficPolicy, Registry, RegistryError, RegistryFile, Service,
};

// The listeners: the accept loop, the two routes it takes (and the static outbound one), the
// admin ports, the transparent inbound bind, the wait for the control plane.
pub use admin::{serve as serve_admin, Role};
pub use control_plane::wait_reachable;
pub use forward::bind_transparent;
pub use inbound::route as route_inbound;
pub use listener::serve as serve_listener;
pub use outbound::{route as route_outbound, route_static as route_outbound_static};

// The access log's format and the metrics' direction label.
pub use access_log::Format as AccessLogFormat;
pub use metrics::Direction;
