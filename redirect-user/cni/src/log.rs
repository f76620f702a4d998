//! The plugin's log: a file beside the daemon's socket (`cni.log`), never stdout, which is
//! the CNI result.
use std::{fs::OpenOptions, path::Path, sync::Mutex};

use tracing_subscriber::EnvFilter;

/// The log file for a daemon socket at `socket`.
pub fn path(socket: &Path) -> std::path::PathBuf {
    socket
        .parent()
        .unwrap_or_else(|| Path::new("/run/redirect/daemon"))
        .join("cni.log")
}

/// Logs at `level` to [`path`]; when the file cannot be opened, logs nowhere.
pub fn init(socket: &Path, level: &str) {
    let file = path(socket);
    if let Some(dir) = file.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let Ok(out) = OpenOptions::new().create(true).append(true).open(&file) else {
        return;
    };
    let filter = EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(Mutex::new(out))
        .try_init();
}
