//! `redirect istio-iptables` on a node whose datapath a daemon owns: the change goes through
//! that daemon's socket (found in the pinned layout record), so `redirect list`, `status` and
//! the daemon's enrollment files stay true.
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use redirect_daemon_api::{Client, NetnsFd};
use redirect_datapath::netns_cookie;
use redirect_policy::Invocation;

/// The path the daemon knows namespace `ns` by: its enrollment's when it has one (found by
/// netns cookie, so running inside the pod works too).
fn enrolled_path(client: &Client, ns: &Path) -> anyhow::Result<Option<PathBuf>> {
    let cookie = netns_cookie(ns)?;
    let list = client.list()?;
    Ok(list
        .enrollments
        .iter()
        .find(|e| e.record.cookie == cookie)
        .map(|e| e.record.netns.clone()))
}

/// Applies or cleans up through the daemon pid `pid` (its `client`). Returns `false` for a
/// cleanup of a namespace the daemon did not enroll: the caller then removes a policy written
/// directly, if any. An apply always goes through the daemon, with the namespace's
/// descriptor: run inside the pod (`/proc/self/ns/net`), the daemon finds the name its runtime
/// gave the namespace, or refuses naming where it looked.
pub(crate) fn run(
    pid: u32,
    client: &Client,
    ns: &Path,
    inv: &Invocation,
    args: &[String],
) -> anyhow::Result<bool> {
    let enrolled = enrolled_path(client, ns)?;
    if inv.cleanup_only {
        let Some(path) = enrolled else {
            // Not the daemon's: a policy written directly, if any, is removed directly.
            return Ok(false);
        };
        let r = client.unenroll(&path)?;
        println!("{} (through the daemon, pid {pid})", r.message);
        return Ok(true);
    }
    let path = enrolled.unwrap_or_else(|| ns.to_path_buf());
    let source = crate::missing_inputs::with_notes(
        format!("istio-iptables {}", crate::node_cmds::join_args(args)),
        &inv.notes,
    );
    // Opened here, where `ns` means what the operator meant; the daemon enrolls the namespace
    // behind the descriptor.
    let fd = NetnsFd::open(ns)
        .with_context(|| format!("opening network namespace {}", ns.display()))?
        .named(path);
    let r = client.enroll(
        &fd,
        inv.policy.clone(),
        source,
        redirect_daemon_api::Writer::IstioIptables,
    )?;
    println!("{} (through the daemon, pid {pid})", r.message);
    Ok(true)
}
