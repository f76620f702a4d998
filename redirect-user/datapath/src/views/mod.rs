//! The read-only views of a datapath: every namespace captured (`captured`), `status` (one model
//! for the node datapath and the attach
//! instances), the node's part, `explain` of an outbound or inbound connection, `stats` and
//! `trace`, the Prometheus rendering, `validate`, connections outside capture (`outside`), and
//! the one JSON shape they share.
pub(crate) mod captured;
pub(crate) mod explain;
pub(crate) mod explain_inbound;
mod json;
pub(crate) mod metrics;
pub(crate) mod node_status;
pub(crate) mod observe;
pub(crate) mod outside;
#[cfg(feature = "schema")]
pub mod schema;
pub(crate) mod status;
pub(crate) mod validate;
