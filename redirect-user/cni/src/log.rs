//! The plugin's log: a file beside the daemon's socket (`cni.log`), never stdout, which is
//! the CNI result. It lives on the node's `/run` (memory): past [`ROTATE_AT`] it is moved to
//! `cni.log.1` (replacing the one before) and started again, so it never holds more than
//! twice that.
use std::{fs::OpenOptions, path::Path, sync::Mutex};

use tracing_subscriber::EnvFilter;

/// The log file for a daemon socket at `socket`.
pub(crate) fn path(socket: &Path) -> std::path::PathBuf {
    redirect_daemon_api::DaemonDir::new(
        socket
            .parent()
            .unwrap_or_else(|| Path::new(redirect_daemon_api::DEFAULT_DIR)),
    )
    .cni_log()
}

/// Size past which the log is rotated.
const ROTATE_AT: u64 = 4 << 20;

/// Logs at `level` to [`path`]; when the file cannot be opened, logs nowhere.
pub(crate) fn init(socket: &Path, level: &str) {
    let file = path(socket);
    if let Some(dir) = file.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    rotate(&file, ROTATE_AT);
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

/// Moves `file` to `FILE.1` when it is larger than `at` bytes. Atomic: a plugin run at the
/// same time appends to one file or the other.
fn rotate(file: &Path, at: u64) {
    if std::fs::metadata(file).is_ok_and(|m| m.len() > at) {
        let _ = std::fs::rename(file, file.with_extension("log.1"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_past_its_size_is_moved_aside_once() {
        let dir = std::env::temp_dir().join(format!("rcnilog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("cni.log");
        std::fs::write(&file, vec![b'x'; 10]).expect("write");
        rotate(&file, 100);
        assert!(file.exists(), "a small log was moved");
        std::fs::write(&file, vec![b'x'; 101]).expect("write");
        rotate(&file, 100);
        assert!(!file.exists() && dir.join("cni.log.1").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
