//! What the tests reach under the doors (feature `test-support`, enabled only by the
//! dev-dependencies of this crate's tests/): internals they check, never a product's way in.

// The pod watch's cache (`pod_cache_memory`).
pub use crate::pod_cache::PodCache;
