//! The daemon's check of its own datapath, every tick: the pins are there and recorded as its
//! own, and every enrollment's policy is in the maps. What is gone is put back (the datapath
//! recreated and every enrollment re-applied, a policy removed behind its back re-applied);
//! what it cannot repair (another owner in the record) is an alarm. Both are counted in
//! `DIR/health` (JSON), which `redirect status` and the metrics read.
use std::path::Path;

use redirect_datapath::{NodeDatapath, Owner, Result};
use serde::{Deserialize, Serialize};

/// What the daemon found and did, as `DIR/health` holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// Repairs since the daemon started (datapath recreated, policies re-applied).
    pub repairs: u64,
    /// The last problem found, repaired or not.
    pub last_problem: Option<String>,
    /// A problem that is still there (not repairable by the daemon).
    pub alarm: Option<String>,
}

/// `DIR/health`.
pub(crate) fn health_path(dir: &Path) -> std::path::PathBuf {
    redirect_daemon_api::DaemonDir::new(dir).health()
}

/// Reads `DIR/health` (none yet: all well).
pub fn read_health(dir: &Path) -> Health {
    std::fs::read_to_string(health_path(dir))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

pub(crate) fn write_health(dir: &Path, h: &Health) {
    let path = health_path(dir);
    let tmp = path.with_extension("tmp");
    if let Ok(text) = serde_json::to_string(h) {
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
}

/// What the pins say about the datapath at `bpffs`, for this daemon (pid `me`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PinState {
    /// Pinned and recorded as this daemon's.
    Ours,
    /// Nothing pinned any more.
    Gone,
    /// Pinned, but the record names another owner.
    Other(String),
}

pub(crate) fn pin_state(bpffs: &Path, me: u32) -> Result<PinState> {
    if !NodeDatapath::exists(bpffs) {
        return Ok(PinState::Gone);
    }
    let record = redirect_datapath::check_layout(bpffs)?;
    Ok(match record.owner {
        Owner::Daemon { pid, .. } if pid == me => PinState::Ours,
        Owner::Daemon { pid, .. } => PinState::Other(format!("the redirect daemon pid {pid}")),
        Owner::Cli => PinState::Other("a command (the CLI)".to_owned()),
    })
}
