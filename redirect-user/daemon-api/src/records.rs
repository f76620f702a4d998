//! The readers of the enrollment files in a daemon directory (`enrollments/COOKIE.json`), for
//! the daemon and every command that shows or adopts them: a file that does not decode is
//! skipped with a warning naming it, never taken for a policy.
use std::{collections::BTreeMap, path::Path};

use redirect_common::NetnsCookie;

use crate::{wire::decode_enrollment, DaemonDir, EnrollmentRecord};

/// The enrollments recorded in daemon directory `dir` (none when it has no enrollment
/// directory).
pub fn read(dir: &Path) -> Vec<EnrollmentRecord> {
    let Ok(entries) = std::fs::read_dir(DaemonDir::new(dir).enrollments()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        match std::fs::read(&path) {
            Ok(bytes) => match decode_enrollment(&bytes) {
                Ok(e) => out.push(e),
                Err(error) => {
                    tracing::warn!(file = %path.display(), %error, "invalid enrollment file skipped");
                }
            },
            Err(error) => {
                tracing::warn!(file = %path.display(), %error, "unreadable enrollment file skipped");
            }
        }
    }
    out
}

/// Netns cookie -> namespace path of the enrollments recorded in `dir`.
pub fn names(dir: &Path) -> BTreeMap<NetnsCookie, String> {
    read(dir)
        .into_iter()
        .map(|e| (e.cookie, e.netns.display().to_string()))
        .collect()
}
