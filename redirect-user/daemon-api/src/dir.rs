//! The daemon directory's path rule, written once: where the socket, the single-instance lock,
//! the enrollment files and the CNI failure counter live, for the daemon and every client.
use std::{
    fs::File,
    path::{Path, PathBuf},
};

/// Default daemon directory (socket, lock, enrollment files); the CLI's `--daemon-dir` and
/// `REDIRECT_DAEMON_DIR` override it.
pub const DEFAULT_DIR: &str = "/run/redirect/daemon";

/// The variable that overrides [`DEFAULT_DIR`] (read by the CLI only, once).
pub const DIR_ENV: &str = "REDIRECT_DAEMON_DIR";

/// A daemon directory and the files in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonDir(PathBuf);

impl DaemonDir {
    /// The daemon directory at `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self(dir.into())
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The root-only socket the daemon listens on.
    pub fn socket(&self) -> PathBuf {
        self.0.join("daemon.sock")
    }

    /// The single-instance lock (the running daemon's pid inside).
    pub fn lock(&self) -> PathBuf {
        self.0.join("daemon.lock")
    }

    /// The directory of the enrollment files (`COOKIE.json`).
    pub fn enrollments(&self) -> PathBuf {
        self.0.join("enrollments")
    }

    /// The count of CNI ADDs that found the daemon unreachable.
    pub fn cni_failures(&self) -> PathBuf {
        self.0.join(crate::cni_failures::FILE)
    }

    /// The daemon's health record (its repairs, a standing alarm).
    pub fn health(&self) -> PathBuf {
        self.0.join("health")
    }

    /// The CNI plugin's log (and `cni.log.1`, the one rotated aside).
    pub fn cni_log(&self) -> PathBuf {
        self.0.join("cni.log")
    }

    /// The files the daemon and the plugin leave in the directory besides the enrollments, the
    /// socket and the lock: what an uninstall removes with them.
    pub fn node_files(&self) -> Vec<PathBuf> {
        vec![
            self.health(),
            self.cni_log(),
            self.0.join("cni.log.1"),
            self.cni_failures(),
            self.0.join(crate::cni_failures::REFUSED_FILE),
        ]
    }

    /// Removes [`Self::node_files`] (those there; the rest is left as it is).
    pub fn remove_node_files(&self) {
        for file in self.node_files() {
            let _ = std::fs::remove_file(file);
        }
    }

    /// True while a daemon holds the single-instance lock.
    pub fn running(&self) -> bool {
        let Ok(file) = File::open(self.lock()) else {
            return false;
        };
        rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared).is_err()
    }
}

impl AsRef<Path> for DaemonDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_sit_in_the_directory() {
        let d = DaemonDir::new("/run/x");
        assert_eq!(d.socket(), Path::new("/run/x/daemon.sock"));
        assert_eq!(d.lock(), Path::new("/run/x/daemon.lock"));
        assert_eq!(d.enrollments(), Path::new("/run/x/enrollments"));
        assert_eq!(d.cni_failures(), Path::new("/run/x/cni-add-unreachable"));
        assert!(!d.running(), "no lock file: no daemon");
    }
}
