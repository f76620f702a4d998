//! `redirect istio-iptables` on a node whose datapath a daemon owns: the change goes through
//! that daemon's socket (found in the pinned layout record), so `redirect list`, `status` and
//! the daemon's enrollment files stay true.
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use redirect_daemon_api::{Client, NetnsFd};
use redirect_datapath::netns;
use redirect_policy::Invocation;

/// A path the daemon can open itself and keep following: not this process's own `/proc/self`
/// (or `/proc/thread-self`) view, and absolute.
fn daemon_can_open(path: &Path) -> bool {
    path.is_absolute() && !path.starts_with("/proc/self") && !path.starts_with("/proc/thread-self")
}

/// The path the daemon knows namespace `ns` by: its enrollment's when it has one (found by
/// netns cookie, so running inside the pod works too), else `ns` when the daemon can open it.
fn daemon_path(client: &Client, ns: &Path) -> anyhow::Result<Option<PathBuf>> {
    let cookie = netns::cookie(ns)?;
    let list = client.list()?;
    if let Some(e) = list.enrollments.iter().find(|e| e.record.cookie == cookie) {
        return Ok(Some(e.record.netns.clone()));
    }
    Ok(daemon_can_open(ns).then(|| ns.to_path_buf()))
}

/// Applies or cleans up through the daemon pid `pid` (its `client`). Returns `false` when the
/// daemon cannot reach the namespace by a path (the caller's own namespace, not enrolled), or
/// for a cleanup of a namespace the daemon did not enroll: the caller then writes the maps
/// itself (and keeps the daemon's datapath pinned).
pub fn run(
    pid: u32,
    client: &Client,
    ns: &Path,
    inv: &Invocation,
    args: &[String],
) -> anyhow::Result<bool> {
    let Some(path) = daemon_path(client, ns)? else {
        tracing::warn!(daemon = pid, netns = %ns.display(), "the daemon owns the datapath but cannot open this namespace by path; writing its policy directly (it will not show in `redirect list`): pass --netns /run/netns/NAME or /proc/PID/ns/net to enroll it through the daemon");
        return Ok(false);
    };
    if inv.cleanup_only {
        let enrolled = client
            .list()?
            .enrollments
            .iter()
            .any(|e| e.record.netns == path);
        if !enrolled {
            // Not the daemon's: a policy written directly, if any, is removed directly.
            return Ok(false);
        }
        let r = client.unenroll(&path)?;
        println!("{} (through the daemon, pid {pid})", r.message);
        return Ok(true);
    }
    let source = format!("istio-iptables {}", args.join(" "));
    // Opened here, where `ns` means what the operator meant; the daemon enrolls the namespace
    // behind the descriptor.
    let fd = NetnsFd::open(ns)
        .with_context(|| format!("opening network namespace {}", ns.display()))?
        .named(path);
    let r = client.enroll(&fd, inv.policy.clone(), source)?;
    println!("{} (through the daemon, pid {pid})", r.message);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_the_daemon_can_keep() {
        assert!(daemon_can_open(Path::new("/run/netns/pod1")));
        assert!(daemon_can_open(Path::new("/proc/4242/ns/net")));
        assert!(!daemon_can_open(Path::new("/proc/self/ns/net")));
        assert!(!daemon_can_open(Path::new("/proc/thread-self/ns/net")));
        assert!(!daemon_can_open(Path::new("pod1")));
    }
}
