//! The one HTTP/1 server of the daemon's metrics port and the proxy's admin ports, on hyper:
//! concurrent connections up to a cap (and a share of it per peer address), a cap on the request
//! head and body, a header read
//! timeout and a whole-connection deadline, one request per connection; and the bounded
//! `GET` the proxy scrapes its application with.
// Every dependency of the product build is used (the test build has dev-dependencies too).
#![cfg_attr(test, allow(unused_crate_dependencies))]
mod client;
mod error;
mod exchange;
mod limits;
mod server;
mod share;

pub use client::get;
pub use error::Error;
pub use exchange::{Request, Response};
pub use hyper::{Method, StatusCode};
pub use limits::Limits;
pub use server::{serve, spawn_on};
