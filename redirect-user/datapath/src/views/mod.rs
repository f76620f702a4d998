//! The read-only views of a datapath: every namespace captured (`captured`), `status` (one model for the node datapath and the attach
//! instances), the node's part, `explain` of an outbound or inbound connection, `stats` and
//! `trace`, the Prometheus rendering, `validate`, connections outside capture (`outside`), and
//! the one JSON shape they share.
pub mod captured;
pub mod explain;
pub mod explain_inbound;
pub(crate) mod json;
pub mod metrics;
pub mod node_status;
pub mod observe;
pub mod outside;
pub mod status;
pub mod validate;
