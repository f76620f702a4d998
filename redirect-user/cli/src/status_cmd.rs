//! `redirect status`, assembled here and only here from three reports: the datapath's kernel
//! facts (`collect_node_status`), the owning daemon's answers over its socket (`status`,
//! `list`) checked against the kernel's maps, and the running `attach` instances. Stale state
//! files are removed as a step of their own, never by a read. A daemon that does not answer
//! (down, or busy past a few seconds) is reported from its directory's files, read only.
use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use crate::dir_args::Dirs;
use redirect_daemon_api::{Client, DaemonDir, CNI_UNREACHABLE_METRIC as METRIC};
use redirect_datapath::{
    attach_instances, collect_node_status, remove_stale_instances, render_status, EnrolledNs,
    KernelPolicy, NodeDatapath, NodeStatus, Status,
};

/// Prints the report (text or JSON).
pub(crate) fn status(dirs: &Dirs, bpffs: Option<PathBuf>, json: bool) -> anyhow::Result<()> {
    let dir = dirs.bpffs_or_default(bpffs);
    let instances = attach_instances(&dirs.state)?;
    let node = if NodeDatapath::exists(&dir) {
        Some(node_report(dirs, &dir)?)
    } else {
        None
    };
    let stale_removed = remove_stale_instances(&instances.stale);
    let report = Status {
        node,
        instances: instances.live,
        stale_removed,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_status(&report));
    }
    Ok(())
}

/// How long `status` waits for each answer of the daemon (it serves one request at a time, and a
/// pod ADD may be waiting on the apiserver).
const DAEMON_WAIT: Duration = Duration::from_secs(3);

/// What the daemon directory's files say while the daemon does not answer: its enrollment
/// files checked against the kernel, its last health record, the CNI failure count.
fn from_files(node: &mut NodeStatus, dir: &Path, daemon: &DaemonDir) -> anyhow::Result<()> {
    let records = redirect_daemon_api::read_records(daemon.path());
    let mut dp = NodeDatapath::open(dir)?;
    for e in &records {
        check_kernel(node, &mut dp, &e.netns, e.cookie, e.inbound);
    }
    let health = redirect_daemon::read_health(daemon.path());
    health_warnings(
        node,
        health.alarm.as_deref(),
        health.repairs,
        health.last_problem.as_deref(),
    );
    failures_warning(
        node,
        redirect_daemon_api::read_cni_unreachable(daemon.path()).unwrap_or(0),
    );
    Ok(())
}

/// A warning when the kernel's maps do not hold what the daemon says it enrolled.
fn check_kernel(
    node: &mut NodeStatus,
    dp: &mut NodeDatapath,
    netns: &Path,
    cookie: redirect_common::NetnsCookie,
    inbound_on: bool,
) {
    match dp.kernel_policy(cookie) {
        Ok(KernelPolicy {
            outbound: true,
            inbound,
        }) if inbound == inbound_on => {}
        Ok(KernelPolicy { outbound: true, .. }) => node.warnings.push(format!(
            "{} is enrolled with inbound capture {}, but the kernel's maps say {}: re-enroll it",
            netns.display(),
            if inbound_on { "on" } else { "off" },
            if inbound_on { "off" } else { "on" }
        )),
        _ => node.warnings.push(format!(
            "{} is enrolled (netns cookie {cookie}) but the kernel's maps hold no policy for it: \
                its traffic is not captured; re-enroll it or restart the daemon",
            netns.display(),
        )),
    }
}

fn health_warnings(node: &mut NodeStatus, alarm: Option<&str>, repairs: u64, last: Option<&str>) {
    if let Some(alarm) = alarm {
        node.warnings
            .push(format!("the daemon cannot repair its datapath: {alarm}"));
    }
    if repairs > 0 {
        node.warnings.push(format!(
            "the daemon repaired its datapath {repairs} time(s); last: {}",
            last.unwrap_or("-")
        ));
    }
}

fn failures_warning(node: &mut NodeStatus, n: u64) {
    if n > 0 {
        node.warnings.push(format!(
            "{n} CNI ADD(s) found the daemon unreachable and failed closed (the kubelet retries \
                them; {METRIC} in the metrics, the plugin's cni.log says which pods)"
        ));
    }
}

/// Every namespace with a policy, as `redirect list` shows it (`answered`: the daemon
/// answered, so it is asked for its records; else they are read from its files at once).
fn captured(dirs: &Dirs, dir: &Path, answered: bool) -> anyhow::Result<Vec<EnrolledNs>> {
    let view = crate::captured::node_view_with(dirs, dir, answered)?;
    Ok(view
        .rows
        .into_iter()
        .filter_map(|r| {
            Some(EnrolledNs {
                netns: r.netns.map(|p| p.display().to_string()),
                cookie: r.cookie?,
                source: r.source,
                writer: r.writer.key().to_owned(),
                followed: serde_json::to_value(r.followed)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
            })
        })
        .collect())
}

/// The pinned datapath's facts with the daemon's view beside them.
fn node_report(dirs: &Dirs, dir: &Path) -> anyhow::Result<NodeStatus> {
    let mut node = collect_node_status(dir)?;
    // The directory the owning daemon recorded in the layout (alive or not), else ours.
    let daemon_dir = redirect_datapath::check_layout(dir)
        .ok()
        .and_then(|r| r.daemon_dir)
        .map_or_else(|| dirs.daemon.clone(), DaemonDir::new);
    let client = Client::new(daemon_dir.socket()).timeout(DAEMON_WAIT);
    let (answer, listed) = match client.status().and_then(|s| Ok((s, client.list()?))) {
        Ok(both) => both,
        Err(e) => {
            if node.owner == "daemon" {
                node.warnings.push(format!(
                    "the daemon that owns this datapath does not answer ({e}): its enrollments are \
                        not followed until it is back"
                ));
            }
            from_files(&mut node, dir, &daemon_dir)?;
            node.captured = captured(dirs, dir, false)?;
            return Ok(node);
        }
    };
    node.owner_answers = true;
    let mut dp = NodeDatapath::open(dir)?;
    for e in &listed.enrollments {
        check_kernel(
            &mut node,
            &mut dp,
            &e.record.netns,
            e.record.cookie,
            e.record.inbound,
        );
    }
    health_warnings(
        &mut node,
        answer.alarm.as_deref(),
        answer.repairs,
        answer.last_problem.as_deref(),
    );
    failures_warning(&mut node, answer.cni_add_unreachable);
    node.captured = captured(dirs, dir, true)?;
    Ok(node)
}
