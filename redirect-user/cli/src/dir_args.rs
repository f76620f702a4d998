//! The directories a command works in, resolved once in `main` from its flags and the
//! environment and handed down by value: `--daemon-dir` (the daemon's socket, lock and
//! enrollment files), `--state-dir` (running `redirect attach` instances) and the pin directory
//! a command uses when it has no `--bpffs`. No library reads these variables.
use std::{ffi::OsString, path::PathBuf};

use clap::Args;
use redirect_daemon_api::DaemonDir;

/// `REDIRECT_BPFFS`: the pin directory when a command is given no `--bpffs`.
pub(crate) const BPFFS_ENV: &str = "REDIRECT_BPFFS";
/// `REDIRECT_STATE_DIR`: the directory of `redirect attach` state files.
pub(crate) const STATE_ENV: &str = "REDIRECT_STATE_DIR";

/// `--daemon-dir`.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct DaemonDirArg {
    /// The daemon's directory: socket, lock and enrollment files [default: /run/redirect/daemon].
    #[arg(long, value_name = "DIR", env = "REDIRECT_DAEMON_DIR")]
    pub daemon_dir: Option<PathBuf>,
}

/// `--state-dir`.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct StateDirArg {
    /// Where running `redirect attach` instances keep their state files [default: /run/redirect/attach].
    #[arg(long, value_name = "DIR", env = "REDIRECT_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
}

/// The directories in effect for one run of the CLI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dirs {
    /// The daemon directory: `--daemon-dir`, else `REDIRECT_DAEMON_DIR`, else the default.
    pub daemon: DaemonDir,
    /// Whether the daemon directory was named (by the flag or the variable) rather than taken
    /// by default: pins of their own then record their policies there.
    pub daemon_named: bool,
    /// The `redirect attach` state directory: `--state-dir`, else `REDIRECT_STATE_DIR`, else
    /// the default.
    pub state: PathBuf,
    /// The pin directory for a command given no `--bpffs`: `REDIRECT_BPFFS`, else the node's
    /// default.
    pub bpffs: PathBuf,
}

impl Dirs {
    /// Resolves the directories from a command's flags (either may be absent: the command has
    /// no such flag) and `env` (the process environment in `main`, a map in tests).
    pub(crate) fn resolve(
        daemon_dir: Option<&DaemonDirArg>,
        state_dir: Option<&StateDirArg>,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Self {
        let named = daemon_dir
            .and_then(|d| d.daemon_dir.clone())
            .or_else(|| env(redirect_daemon_api::DIR_ENV).map(PathBuf::from));
        let state = state_dir
            .and_then(|s| s.state_dir.clone())
            .or_else(|| env(STATE_ENV).map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from(redirect_datapath::DEFAULT_STATE_DIR));
        let bpffs = env(BPFFS_ENV).map_or_else(
            || PathBuf::from(redirect_datapath::DEFAULT_NODE_DIR),
            PathBuf::from,
        );
        Self {
            daemon_named: named.is_some(),
            daemon: DaemonDir::new(
                named.unwrap_or_else(|| PathBuf::from(redirect_daemon_api::DEFAULT_DIR)),
            ),
            state,
            bpffs,
        }
    }

    /// The pin directory of a command: its `--bpffs`, else [`Dirs::bpffs`].
    pub(crate) fn bpffs_or_default(&self, flag: Option<PathBuf>) -> PathBuf {
        flag.unwrap_or_else(|| self.bpffs.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_wins_over_its_variable_and_the_variable_over_the_default() {
        let env = |name: &str| {
            [
                ("REDIRECT_DAEMON_DIR", "/env/daemon"),
                ("REDIRECT_STATE_DIR", "/env/state"),
                ("REDIRECT_BPFFS", "/env/pins"),
            ]
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| OsString::from(v))
        };
        let from_env = Dirs::resolve(None, None, env);
        assert_eq!(from_env.daemon.path(), std::path::Path::new("/env/daemon"));
        assert!(from_env.daemon_named);
        assert_eq!(from_env.state, PathBuf::from("/env/state"));
        assert_eq!(from_env.bpffs_or_default(None), PathBuf::from("/env/pins"));
        assert_eq!(
            from_env.bpffs_or_default(Some("/flag".into())),
            PathBuf::from("/flag")
        );
        let flags = Dirs::resolve(
            Some(&DaemonDirArg {
                daemon_dir: Some("/flag/daemon".into()),
            }),
            Some(&StateDirArg {
                state_dir: Some("/flag/state".into()),
            }),
            env,
        );
        assert_eq!(flags.daemon.path(), std::path::Path::new("/flag/daemon"));
        assert_eq!(flags.state, PathBuf::from("/flag/state"));
        let defaults = Dirs::resolve(None, None, |_| None);
        assert!(!defaults.daemon_named);
        assert_eq!(
            defaults.daemon.path(),
            std::path::Path::new(redirect_daemon_api::DEFAULT_DIR)
        );
        assert_eq!(defaults.state, PathBuf::from("/run/redirect/attach"));
        assert_eq!(defaults.bpffs, PathBuf::from("/sys/fs/bpf/redirect"));
    }
}
