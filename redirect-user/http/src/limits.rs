//! What one endpoint accepts: connections (in all, and per peer), head and body sizes, and how
//! long a client may take.
use std::time::Duration;

/// Limits of one endpoint. The defaults suit a metrics or admin port scraped by Prometheus or
/// probed by the kubelet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// Connections one peer address may hold at once (its share of `max_connections`); more
    /// of its are closed as soon as they are accepted.
    pub max_per_peer: usize,
    /// Request line plus headers, in bytes (more: 431); at least 8 KiB (hyper's minimum
    /// buffer).
    pub max_head_bytes: usize,
    /// Number of request headers (more: 431).
    pub max_headers: usize,
    /// Request body, in bytes (more: 413).
    pub max_body_bytes: usize,
    /// Time to receive the whole request head.
    pub header_timeout: Duration,
    /// Time for the whole connection: head, body, handling and answer. A client still there
    /// after it is disconnected.
    pub deadline: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 64,
            max_per_peer: 8,
            max_head_bytes: 8 * 1024,
            max_headers: 32,
            max_body_bytes: 1024,
            header_timeout: Duration::from_secs(3),
            deadline: Duration::from_secs(5),
        }
    }
}
