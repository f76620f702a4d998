//! redirect-proxy: a small L4 sidecar proxy that forwards each captured connection to its
//! original destination (read with `SO_ORIGINAL_DST`, as Envoy does).
pub mod orig_dst;
pub mod outbound;

pub use orig_dst::OrigDstAddr;
pub use outbound::{serve_outbound, ConnectionRecord, OutboundConfig};
