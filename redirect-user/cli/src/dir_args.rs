//! The directory flags, on the commands that use them only: `--daemon-dir` (the daemon's
//! socket, lock and enrollment files) and `--state-dir` (running `redirect attach` instances).
//! Each stands for its environment variable, which the libraries read.
use std::path::PathBuf;

use clap::Args;

/// `--daemon-dir`.
#[derive(Debug, Clone, Default, Args)]
pub struct DaemonDirArg {
    /// The daemon's directory: socket, lock and enrollment files [default: /run/redirect/daemon].
    #[arg(long, value_name = "DIR", env = "REDIRECT_DAEMON_DIR")]
    pub daemon_dir: Option<PathBuf>,
}

/// `--state-dir`.
#[derive(Debug, Clone, Default, Args)]
pub struct StateDirArg {
    /// Where running `redirect attach` instances keep their state files [default: /run/redirect/attach].
    #[arg(long, value_name = "DIR", env = "REDIRECT_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
}

/// Sets the variables the libraries read from the flags given (before any thread starts).
pub fn apply(daemon_dir: Option<&DaemonDirArg>, state_dir: Option<&StateDirArg>) {
    if let Some(d) = daemon_dir.and_then(|d| d.daemon_dir.as_ref()) {
        std::env::set_var(redirect_daemon_api::DIR_ENV, d);
    }
    if let Some(s) = state_dir.and_then(|s| s.state_dir.as_ref()) {
        std::env::set_var("REDIRECT_STATE_DIR", s);
    }
}
