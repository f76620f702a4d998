//! A policy written straight into the pinned maps (no daemon owns them) is recorded in the
//! daemon directory as an enrollment, under a name that outlives this process: `redirect list`
//! shows its writer, and the next daemon adopts it and follows its addresses.
use std::path::{Path, PathBuf};

use redirect_daemon_api::{EnrollmentRecord, Writer};
use redirect_datapath::{netns_cookie, netns_names_by_inode, Applied, NetnsHandle};
use redirect_policy::Policy;

use crate::dir_args::Dirs;

/// Records what `applied` did to `ns` (`writer`, from `source`). Never fails the command: the
/// policy is in the kernel already; a record that cannot be written is a warning naming why
/// (the namespace is then listed as written by "unknown", and not adopted by a daemon).
pub(crate) fn record(
    dirs: &Dirs,
    bpffs: &Path,
    ns: &NetnsHandle,
    policy: &Policy,
    applied: &Applied,
    writer: Writer,
    source: String,
) {
    let Some(dir) = record_dir(dirs, bpffs) else {
        tracing::debug!(bpffs = %bpffs.display(), "a pin directory of its own and no \
            REDIRECT_DAEMON_DIR: the policy is not recorded");
        return;
    };
    let Some(path) = lasting_name(ns) else {
        tracing::warn!(netns = %ns.path().display(), cookie = %applied.cookie,
            "no name of this namespace outlives this process (no /run/netns name, no other process \
            inside): not recorded, so a daemon will not follow it; pass --netns NAME");
        return;
    };
    let record = EnrollmentRecord {
        netns: path,
        cookie: applied.cookie,
        source,
        policy: policy.clone(),
        addrs: applied.addrs.clone(),
        ipv6: applied.ipv6,
        inbound: applied.inbound,
        pod: None,
        writer,
    };
    if let Err(error) = redirect_daemon::record_direct(&dir, &record) {
        tracing::warn!(dir = %dir.display(), %error, "recording the policy for `redirect list` and \
            the next daemon failed (the policy is applied)");
    }
}

/// Forgets the record of namespace `path`'s policy after `--cleanup-only`.
pub(crate) fn forget(dirs: &Dirs, bpffs: &Path, path: &Path) {
    if let (Some(dir), Ok(cookie)) = (record_dir(dirs, bpffs), netns_cookie(path)) {
        redirect_daemon::forget_direct(&dir, cookie);
    }
}

/// The daemon directory that goes with the pins at `bpffs`: the one a daemon recorded in the
/// layout, else the daemon directory when one was named (`--daemon-dir`, `REDIRECT_DAEMON_DIR`),
/// else the default one for the node's default pins. Pins of their own with none of these have
/// no daemon to adopt them: `None`.
fn record_dir(dirs: &Dirs, bpffs: &Path) -> Option<PathBuf> {
    if let Ok(Some(layout)) = redirect_datapath::read_layout(bpffs) {
        if let Some(dir) = layout.daemon_dir {
            return Some(dir);
        }
    }
    if dirs.daemon_named {
        return Some(dirs.daemon.path().to_path_buf());
    }
    (bpffs == Path::new(redirect_datapath::DEFAULT_NODE_DIR))
        .then(|| PathBuf::from(redirect_daemon_api::DEFAULT_DIR))
}

/// Where the records of the pins at `bpffs` are read from (`list`, `status`, `uninstall`): as
/// [`record_dir`], else the daemon directory in effect.
pub(crate) fn records_dir(dirs: &Dirs, bpffs: &Path) -> PathBuf {
    record_dir(dirs, bpffs).unwrap_or_else(|| dirs.daemon.path().to_path_buf())
}

/// A path naming `ns` after this process exits: a `/proc/...` path (this process's own view,
/// or a process that may exit) is replaced by the machine's lasting name for the namespace (a
/// `/run/netns` name first, else the lowest pid inside); any other path as given.
fn lasting_name(ns: &NetnsHandle) -> Option<PathBuf> {
    let path = ns.path();
    if !path.starts_with("/proc") {
        return Some(path.to_path_buf());
    }
    let own = format!("/proc/{}/", std::process::id());
    let mine = path.starts_with("/proc/self")
        || path.starts_with("/proc/thread-self")
        || path.starts_with(&own);
    netns_names_by_inode()
        .remove(&ns.inode())
        .or_else(|| (!mine).then(|| path.to_path_buf()))
}

/// What applying `policy` to namespace `cookie` straight into the pins at `bpffs` replaces, as
/// a note for the command's answer (read before the apply): the lines that change against the
/// recorded policy, a policy no record describes, or nothing.
pub(crate) fn replacing(
    dirs: &Dirs,
    bpffs: &Path,
    cookie: redirect_common::NetnsCookie,
    policy: &Policy,
) -> String {
    let recorded = record_dir(dirs, bpffs).and_then(|dir| {
        redirect_daemon_api::read_records(&dir)
            .into_iter()
            .find(|e| e.cookie == cookie)
    });
    if let Some(was) = recorded {
        let lines = redirect_policy::describe_changes(&was.policy, policy, was.ipv6);
        if lines.is_empty() {
            return format!("; its policy is unchanged ({}: {})", was.writer, was.source);
        }
        return format!(
            "; replaced its policy from {} ({}):\n  {}",
            was.writer,
            was.source,
            lines.join("\n  ")
        );
    }
    let held = redirect_datapath::NodeDatapath::exists(bpffs)
        && redirect_datapath::NodeDatapath::open(bpffs)
            .and_then(|mut dp| dp.kernel_policy(cookie))
            .is_ok_and(|k| k.outbound);
    if held {
        "; replaced a policy no record describes (`redirect explain` shows the new one)".to_owned()
    } else {
        String::new()
    }
}
