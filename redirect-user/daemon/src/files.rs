//! The daemon's directory and what it owns: the single-instance lock, the root-only socket,
//! one enrollment file per namespace, and its ownership record in the pinned layout.
use redirect_common::NetnsCookie;
use std::{
    fs::File,
    io::{Read as _, Seek as _, Write as _},
    os::unix::{fs::PermissionsExt as _, net::UnixListener},
    path::{Path, PathBuf},
};

use redirect_daemon_api::DaemonDir;
use redirect_datapath::{write_layout, NodeDatapath, Owner};

use crate::{
    error::{Error, Result},
    state::Record,
};

pub(crate) fn enrollment_dir(dir: &Path) -> PathBuf {
    DaemonDir::new(dir).enrollments()
}

/// The pin directory is the unit of ownership: a live daemon recorded there (another daemon
/// directory, another mount namespace) refuses this one; otherwise this daemon records itself.
pub(crate) fn take_ownership(dp: &NodeDatapath, dir: &Path) -> Result<()> {
    let mut record = dp.layout()?;
    if let Owner::Daemon { pid, .. } = record.owner {
        if pid != std::process::id() && record.owner.is_live_daemon() {
            return Err(redirect_datapath::Error::OwnedByDaemon {
                dir: dp.dir().to_path_buf(),
                pid,
            }
            .into());
        }
    }
    record.owner = Owner::this_daemon()?;
    record.daemon_dir = Some(dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf()));
    Ok(write_layout(dp.dir(), &record)?)
}

pub(crate) fn single_instance(dir: &Path) -> Result<File> {
    let path = DaemonDir::new(dir).lock();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| Error::io("opening", &path, e))?;
    let mut locked = file;
    // Held for as long as the file is open (the daemon's lifetime): the close releases it.
    if rustix::fs::flock(
        &locked,
        rustix::fs::FlockOperation::NonBlockingLockExclusive,
    )
    .is_err()
    {
        let mut pid = String::new();
        let _ = locked.read_to_string(&mut pid);
        return Err(Error::AlreadyRunning {
            pid: pid.trim().to_owned(),
            lock: path,
        });
    }
    locked
        .set_len(0)
        .map_err(|e| Error::io("writing", &path, e))?;
    locked
        .rewind()
        .map_err(|e| Error::io("writing", &path, e))?;
    write!(locked, "{}", std::process::id()).map_err(|e| Error::io("writing", &path, e))?;
    Ok(locked)
}

pub(crate) fn write_enrollment(dir: &Path, e: &Record) -> Result<()> {
    let dir = enrollment_dir(dir);
    std::fs::create_dir_all(&dir).map_err(|err| Error::io("creating", &dir, err))?;
    let path = dir.join(format!("{}.json", e.cookie));
    let tmp = dir.join(format!(".{}.json.tmp", e.cookie));
    let text = serde_json::to_vec_pretty(e).map_err(|err| Error::State {
        path: path.clone(),
        source: err,
    })?;
    std::fs::write(&tmp, text).map_err(|err| Error::io("writing", &tmp, err))?;
    std::fs::rename(&tmp, &path).map_err(|err| Error::io("renaming", &path, err))
}

pub(crate) fn remove_enrollment(dir: &Path, cookie: NetnsCookie) {
    let _ = std::fs::remove_file(enrollment_dir(dir).join(format!("{cookie}.json")));
}

pub(crate) fn read_enrollments(dir: &Path) -> Vec<Record> {
    redirect_daemon_api::read_records(dir)
}

pub(crate) fn bind(dir: &Path) -> Result<UnixListener> {
    let path = DaemonDir::new(dir).socket();
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(|e| Error::io("binding", &path, e))?;
    // Root only: enrolling changes what every process of a pod may reach.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io("restricting", &path, e))?;
    Ok(listener)
}

/// Records a policy a command wrote straight into the pinned maps (no daemon owned them) in
/// daemon directory `dir`, as an enrollment: `redirect list` names its writer, and the next
/// daemon to start adopts it (follows its addresses, repairs it, removes it when its namespace
/// goes). The directory is made private first, as the daemon makes it.
pub fn record_direct(dir: &Path, e: &Record) -> Result<()> {
    crate::private_dir::make_private(dir)?;
    write_enrollment(dir, e)
}

/// Forgets the record of a policy removed straight from the pinned maps (`--cleanup-only`).
pub fn forget_direct(dir: &Path, cookie: NetnsCookie) {
    remove_enrollment(dir, cookie);
}
