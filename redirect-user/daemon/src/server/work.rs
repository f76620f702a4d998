//! What the connections' tasks hand the datapath's owner (`serve.rs`) over its bounded
//! channel: a request read whole and judged, its pod read when it had to be, and where its
//! outcome goes back.
use std::os::fd::OwnedFd;

use redirect_daemon_api::{Answer, Refusal, Request};
use tokio::sync::oneshot;

use super::pods::Found;

/// Requests handed to the owner and not yet taken (the tasks behind them wait their turn).
pub(super) const QUEUE: usize = 16;

/// A request for the owner, read whole and judged, its pod read when it had to be.
#[derive(Debug)]
pub(super) struct Work {
    /// The request.
    pub req: Request,
    /// The namespace descriptor that came with it.
    pub fd: Option<OwnedFd>,
    /// Its pod, when its task read it from the apiserver.
    pub found: Option<Found>,
    /// Where the outcome goes.
    pub answer: oneshot::Sender<std::result::Result<Answer, Refusal>>,
}
