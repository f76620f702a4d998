//! Advisory locks (`flock`) held for as long as a value lives: the node lock's exclusive one
//! (`lock.rs`) and the shared one a running daemon holds on its pin directory
//! ([`hold_as_daemon`](super::layout::hold_as_daemon)). Dropping the value unlocks, then
//! closes the file (the kernel would release the lock at the close alone; the unlock first
//! makes the release explicit, as it was with nix's `Flock`).
use std::fs::File;

use rustix::fs::{flock, FlockOperation};

/// A file with an `flock` on it, unlocked and closed on drop.
#[derive(Debug)]
pub(crate) struct Flocked(File);

impl Flocked {
    /// Locks `file` (`op`: shared or exclusive, blocking or not).
    pub(crate) fn lock(file: File, op: FlockOperation) -> rustix::io::Result<Self> {
        flock(&file, op)?;
        Ok(Self(file))
    }

    /// The locked file.
    pub(crate) fn file(&self) -> &File {
        &self.0
    }
}

impl Drop for Flocked {
    fn drop(&mut self) {
        // Cannot fail on an open descriptor; the close that follows releases it regardless.
        let _ = flock(&self.0, FlockOperation::Unlock);
    }
}

/// The shared lock a running daemon holds on its pin directory for its lifetime (from
/// [`hold_as_daemon`](super::layout::hold_as_daemon)): released when dropped.
#[derive(Debug)]
pub struct PinsHeld {
    /// Held, never read: the lock lives as long as the value.
    pub(crate) _lock: Flocked,
}
