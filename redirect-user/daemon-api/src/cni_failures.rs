//! The counts of failed CNI ADDs: files beside the socket (one decimal number each) incremented
//! under an exclusive `flock`, so concurrent ADDs (the kubelet starts pods in parallel) are all
//! counted. `cni-add-unreachable`: ADDs that found the daemon unreachable, counted by each
//! `redirect-cni` process (the daemon exports it when it is back,
//! `redirect_cni_add_unreachable_total`, and `redirect status` shows it); `cni-add-refused`:
//! ADDs the daemon answered with an error (a pod it cannot read or capture, a namespace it
//! cannot open), counted by the daemon (`redirect_cni_add_refused_total`). They only grow
//! (Prometheus counters) and live as long as the daemon directory (a node reboot clears `/run`).
use std::{
    fs::OpenOptions,
    io::{Read as _, Seek as _, SeekFrom, Write as _},
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
};

use rustix::fs::{flock, FlockOperation};

/// The file's name in the daemon directory.
pub(crate) const FILE: &str = "cni-add-unreachable";

/// The metric's name.
pub const METRIC: &str = "redirect_cni_add_unreachable_total";

/// The file of the daemon's refusals.
pub(crate) const REFUSED_FILE: &str = "cni-add-refused";

/// Its metric's name.
pub const REFUSED_METRIC: &str = "redirect_cni_add_refused_total";

/// The counter file of the daemon directory `dir`.
pub(crate) fn path(dir: &Path) -> PathBuf {
    crate::DaemonDir::new(dir).cni_failures()
}

/// Adds one to the daemon's count of refused ADDs in `dir`; returns the new count.
pub fn increment_refused(dir: &Path) -> Result<u64, CounterError> {
    increment_at(&dir.join(REFUSED_FILE))
}

/// The daemon's count of refused ADDs in `dir`.
pub fn read_refused(dir: &Path) -> Result<u64, CounterError> {
    read_at(&dir.join(REFUSED_FILE))
}

/// A counter file's failure, naming the file.
#[derive(Debug, thiserror::Error)]
#[error("{call} {}: {source}", path.display())]
pub struct CounterError {
    /// The call.
    pub call: &'static str,
    /// The file.
    pub path: PathBuf,
    /// The OS error.
    #[source]
    pub source: std::io::Error,
}

fn err<'p>(call: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> CounterError + 'p {
    move |source| CounterError {
        call,
        path: path.to_owned(),
        source,
    }
}

fn parse(text: &str) -> u64 {
    text.trim().parse().unwrap_or(0)
}

/// Adds one to the counter of `dir` (created when absent, mode 0600); returns the new count.
pub fn increment(dir: &Path) -> Result<u64, CounterError> {
    increment_at(&path(dir))
}

fn increment_at(file: &Path) -> Result<u64, CounterError> {
    let file = file.to_owned();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&file)
        .map_err(err("opening", &file))?;
    // Released when `locked` is closed (nothing else holds its descriptor).
    flock(&f, FlockOperation::LockExclusive).map_err(|e| err("locking", &file)(e.into()))?;
    let mut locked = f;
    let mut text = String::new();
    locked
        .read_to_string(&mut text)
        .map_err(err("reading", &file))?;
    let n = parse(&text).saturating_add(1);
    locked
        .seek(SeekFrom::Start(0))
        .map_err(err("seeking", &file))?;
    locked.set_len(0).map_err(err("truncating", &file))?;
    locked
        .write_all(format!("{n}\n").as_bytes())
        .map_err(err("writing", &file))?;
    Ok(n)
}

/// The counter of `dir` (0 when there is no file), read under a shared lock.
pub fn read(dir: &Path) -> Result<u64, CounterError> {
    read_at(&path(dir))
}

fn read_at(file: &Path) -> Result<u64, CounterError> {
    let file = file.to_owned();
    let f = match std::fs::File::open(&file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(err("opening", &file)(e)),
    };
    flock(&f, FlockOperation::LockShared).map_err(|e| err("locking", &file)(e.into()))?;
    let mut locked = f;
    let mut text = String::new();
    locked
        .read_to_string(&mut text)
        .map_err(err("reading", &file))?;
    Ok(parse(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_increments_are_all_counted() {
        let dir = std::env::temp_dir().join(redirect_testkit::unique_name("cnifail"));
        std::fs::create_dir_all(&dir).expect("dir");
        assert_eq!(read(&dir).expect("read"), 0);
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        increment(&dir).expect("increment");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(read(&dir).expect("read"), 400);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
