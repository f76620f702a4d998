//! Instance state files: one JSON file per running `redirect attach`, read by `status` and `exec`.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{
    attach::{datapath::AttachOptions, plan::Attachment},
    error::{Error, Result},
};

/// Default directory of state files (the CLI's `--state-dir` and `REDIRECT_STATE_DIR`
/// override it; callers pass the directory).
pub const DEFAULT_STATE_DIR: &str = "/run/redirect/attach";

/// What a running `redirect attach` records about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceState {
    /// Pid of the attach process; the programs live as long as it does.
    pub pid: u32,
    /// Validated options.
    pub options: AttachOptions,
    /// Programs and where they are attached.
    pub attachments: Vec<Attachment>,
    /// Map name -> kernel map id.
    pub maps: Vec<(String, u32)>,
}

impl InstanceState {
    /// Kernel id of a map by name.
    pub fn map_id(&self, name: &str) -> Option<u32> {
        self.maps.iter().find(|(n, _)| n == name).map(|(_, id)| *id)
    }
}

/// A state file written on creation and removed on drop.
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    /// Writes `state` to `<dir>/<pid>.json`.
    pub fn create(dir: &Path, state: &InstanceState) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("creating", dir, e))?;
        let path = dir.join(format!("{}.json", state.pid));
        let text = serde_json::to_string_pretty(state).map_err(|source| Error::State {
            path: path.clone(),
            source,
        })?;
        std::fs::write(&path, text).map_err(|e| Error::io("writing", &path, e))?;
        Ok(Self { path })
    }

    /// Where it was written.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for StateFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// True when a process with this pid exists.
pub(crate) fn pid_alive(pid: u32) -> bool {
    use rustix::process::{test_kill_current_process_group, test_kill_process, Pid};
    i32::try_from(pid).is_ok_and(|raw| {
        // kill(pid, 0); pid 0 (no `Pid`) is kill(0, 0), this process's group, as before.
        let probe =
            Pid::from_raw(raw).map_or_else(test_kill_current_process_group, test_kill_process);
        !matches!(probe, Err(rustix::io::Errno::SRCH))
    })
}

/// Removes the state files `stale` (of processes that exited, as [`read_all`] found them);
/// returns those removed.
pub fn remove_stale(stale: &[PathBuf]) -> Vec<String> {
    stale
        .iter()
        .filter(|p| std::fs::remove_file(p).is_ok())
        .map(|p| p.display().to_string())
        .collect()
}

/// Every state file in `dir`, split into live instances and stale files (process gone).
pub fn read_all(dir: &Path) -> Result<(Vec<InstanceState>, Vec<PathBuf>)> {
    let mut live = Vec::new();
    let mut stale = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((live, stale)),
        Err(e) => return Err(Error::io("listing", dir, e)),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io("reading", &path, e))?;
        let state: InstanceState = serde_json::from_str(&text).map_err(|source| Error::State {
            path: path.clone(),
            source,
        })?;
        if pid_alive(state.pid) {
            live.push(state);
        } else {
            stale.push(path);
        }
    }
    live.sort_by_key(|s| s.pid);
    Ok((live, stale))
}
