//! The maps, as every writer and reader shares them: typed access to owned or pinned maps,
//! the counters and fill levels, and one namespace's outbound and inbound entries written and
//! removed (the kernel form itself is compiled by `redirect_policy::compile_outbound` and its inbound peers).
pub(crate) mod counters;
pub(crate) mod inbound;
pub(crate) mod outbound;
pub(crate) mod store;
