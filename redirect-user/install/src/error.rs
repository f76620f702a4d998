//! What install-cni, uninstall-cni and the check refuse, each naming the file or value.
use std::path::PathBuf;

/// An install error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file system call failed on `path`.
    #[error("{call} {}: {source}", path.display())]
    Io {
        /// The call (`reading`, `writing`, `renaming`, ...).
        call: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The configuration directory holds no valid CNI network configuration.
    #[error("no CNI network configuration in {}: no valid *.conflist, *.conf or *.json file{}; \
        redirect-cni is a chained plugin and needs the primary plugin's configuration (start the \
        primary CNI first, or pass --watch to wait for it)", dir.display(), skipped_text(skipped))]
    NoConfig {
        /// The directory.
        dir: PathBuf,
        /// Files skipped as invalid, with why.
        skipped: Vec<String>,
    },
    /// The state file cannot be decoded.
    #[error("the install state file {} is not valid: {reason}", path.display())]
    BadState {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Converting a `.conf` would overwrite a conflist that is not ours.
    #[error(
        "converting {} into a conflist would overwrite {}, which install-cni did not write: move \
        one of them away",
        from.display(),
        to.display()
    )]
    WouldOverwrite {
        /// The single-plugin config.
        from: PathBuf,
        /// The conflist that exists already.
        to: PathBuf,
    },
    /// The configuration the runtime uses is one our plugin would fail on: nothing written.
    #[error("{} cannot take redirect-cni: {why}", path.display())]
    Refused {
        /// The highest-priority configuration.
        path: PathBuf,
        /// Why, and the fix ([`crate::conflist::refusal`]).
        why: String,
    },
    /// `--check`: something is not in place.
    /// A configuration file that is a symlink out of its directory.
    #[error("{} is a symlink to {}, outside the CNI configuration directory: refused, the entry not \
        written (install-cni writes through a link only into its own directory, as a ConfigMap's \
        ..data; replace the link with the file)", path.display(), target.display())]
    LinkOutside {
        /// The link.
        path: PathBuf,
        /// Where it leads.
        target: PathBuf,
    },
    /// The configuration file changed between install-cni's read and its write.
    #[error("{} changed between install-cni's read and its write (another writer, e.g. the primary \
        plugin's installer): not replaced, so that write is kept; it is read again at the next \
        pass", path.display())]
    ChangedMeanwhile {
        /// The file.
        path: PathBuf,
    },
    #[error("the redirect-cni plugin is not in place: {0}")]
    NotInPlace(String),
}

fn skipped_text(skipped: &[String]) -> String {
    if skipped.is_empty() {
        String::new()
    } else {
        format!(" (skipped: {})", skipped.join("; "))
    }
}

/// An [`Error::Io`] maker for `map_err`.
pub(crate) fn io(
    call: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io { call, path, source }
}

/// The crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
