//! The record of what install-cni did, so uninstall-cni undoes exactly that: the binary it
//! wrote (by digest), the configuration file it edited, the text that file had before and the
//! text it wrote. It lives in the configuration directory by default (a name the runtime does
//! not read: no `.conf`, `.conflist` or `.json` ending), so it lasts exactly as long as the
//! edit it describes: across restarts of the DaemonSet's pods and reboots of the node alike.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{io, Error, Result};

/// The default state file's name inside the configuration directory.
pub const FILE: &str = ".redirect-cni-install.state";

/// The configuration file install-cni edited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Config {
    /// The conflist holding our entry.
    pub path: PathBuf,
    /// The single-plugin file it was made from (removed), when install-cni converted one.
    pub converted_from: Option<PathBuf>,
    /// The text before our edit (of `converted_from` when converted).
    pub original: String,
    /// The text we wrote.
    pub written: String,
}

/// The binary install-cni wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Plugin {
    /// Its path.
    pub path: PathBuf,
    /// Its SHA-256.
    pub sha256: String,
    /// [`crate::plugin::stamp`] when it was last found in place.
    #[serde(default)]
    pub stamp: Option<String>,
}

/// The whole record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct State {
    /// The binary.
    pub plugin: Option<Plugin>,
    /// The configuration.
    pub config: Option<Config>,
    /// Times the watcher put our entry back after another writer dropped it.
    #[serde(default)]
    pub reinserts: u64,
    /// Times the watcher stopped re-inserting, a fight with another writer detected.
    #[serde(default)]
    pub fights: u64,
}

/// Reads the state at `path`; `None` when there is none.
pub(crate) fn load(path: &Path) -> Result<Option<State>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("reading", path)(e)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::BadState {
            path: path.to_owned(),
            reason: e.to_string(),
        })
}

/// [`load`], refused unless every file it names is one install-cni may touch: configuration
/// files directly in `conf_dir` (`.conflist`, `.conf`, `.json`) and a plugin binary named
/// `redirect-cni`. The state file lives in a directory others write; what it names is undone
/// (written, removed), so a name elsewhere would let its writer have any file rewritten.
pub(crate) fn load_in(path: &Path, conf_dir: &Path) -> Result<Option<State>> {
    let Some(st) = load(path)? else {
        return Ok(None);
    };
    let home = std::fs::canonicalize(conf_dir).map_err(io("resolving", conf_dir))?;
    let bad = |named: &Path, why: &str| Error::BadState {
        path: path.to_owned(),
        reason: format!(
            "it names {}, {why}: refused, nothing undone",
            named.display()
        ),
    };
    let config_files = st
        .config
        .iter()
        .flat_map(|c| std::iter::once(&c.path).chain(c.converted_from.as_ref()));
    for named in config_files {
        let parent = named.parent().and_then(|p| std::fs::canonicalize(p).ok());
        let ext = named.extension().and_then(|e| e.to_str());
        if parent.as_deref() != Some(home.as_path()) {
            return Err(bad(
                named,
                &format!("outside the configuration directory {}", conf_dir.display()),
            ));
        }
        if !matches!(ext, Some("conflist" | "conf" | "json")) {
            return Err(bad(named, "not a CNI configuration file"));
        }
    }
    if let Some(p) = &st.plugin {
        if p.path.file_name() != Some(std::ffi::OsStr::new(crate::conflist::TYPE)) {
            return Err(bad(&p.path, "not the redirect-cni binary"));
        }
    }
    Ok(Some(st))
}

/// Writes `state` to `path` (atomically, mode 0600) when it differs from `before`.
pub(crate) fn save(path: &Path, state: &State, before: Option<&State>) -> Result<()> {
    if before == Some(state) {
        return Ok(());
    }
    let mut text = serde_json::to_string_pretty(state).unwrap_or_default();
    text.push('\n');
    crate::atomic::write(path, text.as_bytes(), 0o600)
}
