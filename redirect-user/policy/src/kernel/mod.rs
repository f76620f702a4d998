//! Both halves of policy -> kernel form, pure and side by side: what the maps get for one
//! namespace's outbound (`outbound`) and inbound (`inbound`) capture. The datapath writes
//! them; neither half touches a map, a cgroup or a namespace.
pub(crate) mod inbound;
pub(crate) mod outbound;
