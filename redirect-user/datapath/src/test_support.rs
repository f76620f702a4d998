//! What the tests reach under the doors (feature `test-support`, enabled only by the
//! dev-dependencies of this crate's tests/ and of the workspace's tests/): internals they check
//! on a real kernel or against goldens, never a product's way in.

// An upgrade in place's bpf(2) calls and map copies, on maps a test made (`port_tries`).
pub use crate::sys::bpfsys::obj_get;
pub use crate::sys::bpfsys_replace::{copy_hash_into_trie, hash_becomes_trie, map_def, MapDef};

// Listener adoption and the `/proc/net/tcp` parser behind it (`adopt`, `fuzz_proc`).
pub use crate::netns::adopt::{check_listener, listeners, take_listener, NotAdoptable};
pub use crate::netns::{proc_tcp::parse_listeners, sockdiag::Listening};

// The pod's files read through its processes' root (`pod_files`).
pub use crate::netns::pod_files::{members, read_in_root};

// The routes via excluded interfaces (`routes_netlink`).
pub use crate::netns::routes::{resolve_in, table::Resolved};

// An address as `POD_ADDRS` keys it (`inbound_golden`).
pub use crate::maps::inbound::addr_key;

// Another vendor's connect4 program beside ours, a socket load balancer's (`coexistence`).
pub use crate::sys::stand_in::service_rewrite;
