//! Errors of the HTTP server and client, naming the call and the address or URL.
use std::net::SocketAddr;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listener could not be bound or configured.
    #[error("binding the {what} on {addr}: {source}")]
    Bind {
        /// Which endpoint (for the message).
        what: &'static str,
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The server's thread or runtime could not be started.
    #[error("starting the {what}'s thread: {source}")]
    Start {
        /// Which endpoint.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A URL the client cannot fetch (only `http://host:port/path`).
    #[error("'{url}' is not an http://HOST:PORT/PATH URL")]
    Url {
        /// The URL given.
        url: String,
    },
    /// The fetch failed: connect, exchange, status or size.
    #[error("GET {url}: {why}")]
    Fetch {
        /// The URL fetched.
        url: String,
        /// What failed.
        why: String,
    },
}
