//! `redirect status`, assembled here and only here from three reports: the datapath's kernel
//! facts (`node_status::collect`), the owning daemon's answers over its socket (`status`,
//! `list`) checked against the kernel's maps, and the running `attach` instances. Stale state
//! files are removed as a step of their own, never by a read.
use std::path::{Path, PathBuf};

use redirect_daemon_api::{cni_failures::METRIC, Client, DaemonDir};
use redirect_datapath::{
    attach::state,
    node::{KernelPolicy, NodeDatapath},
    views::node_status::{self, EnrolledNs, NodeStatus},
    views::status,
};

/// Prints the report (text or JSON).
pub fn status(bpffs: Option<PathBuf>, json: bool) -> anyhow::Result<()> {
    let dir = bpffs.unwrap_or_else(redirect_daemon::default_bpffs);
    let instances = status::instances()?;
    let node = if NodeDatapath::exists(&dir) {
        Some(node_report(&dir)?)
    } else {
        None
    };
    let stale_removed = state::remove_stale(&instances.stale);
    let report = status::Status {
        node,
        instances: instances.live,
        stale_removed,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", status::render(&report));
    }
    Ok(())
}

/// The pinned datapath's facts with the daemon's view beside them.
fn node_report(dir: &Path) -> anyhow::Result<NodeStatus> {
    let mut node = node_status::collect(dir)?;
    let client = Client::new(
        redirect_daemon::owner(dir).map_or_else(|| DaemonDir::from_env().socket(), |(_, s)| s),
    );
    let (answer, listed) = match client.status().and_then(|s| Ok((s, client.list()?))) {
        Ok(both) => both,
        Err(e) => {
            if node.owner == "daemon" {
                node.warnings.push(format!(
                    "the daemon that owns this datapath does not answer ({e}): its enrollments are not followed until it is back"
                ));
            }
            return Ok(node);
        }
    };
    let mut dp = NodeDatapath::open(dir)?;
    for e in &listed.enrollments {
        match dp.kernel_policy(e.cookie) {
            Ok(KernelPolicy {
                outbound: true,
                inbound,
            }) if inbound == e.inbound => {}
            Ok(KernelPolicy { outbound: true, .. }) => node.warnings.push(format!(
                "{} is enrolled with inbound capture {}, but the kernel's maps say {}: re-enroll it",
                e.netns.display(),
                if e.inbound { "on" } else { "off" },
                if e.inbound { "off" } else { "on" }
            )),
            _ => node.warnings.push(format!(
                "{} is enrolled (netns cookie {}) but the kernel's maps hold no policy for it: its traffic is not captured; re-enroll it or restart the daemon",
                e.netns.display(),
                e.cookie
            )),
        }
    }
    if let Some(alarm) = &answer.alarm {
        node.warnings
            .push(format!("the daemon cannot repair its datapath: {alarm}"));
    }
    if answer.repairs > 0 {
        node.warnings.push(format!(
            "the daemon repaired its datapath {} time(s); last: {}",
            answer.repairs,
            answer.last_problem.as_deref().unwrap_or("-")
        ));
    }
    if answer.cni_add_unreachable > 0 {
        node.warnings.push(format!(
            "{} CNI ADD(s) found the daemon unreachable and failed closed (the kubelet retries them; {METRIC} in the metrics, the plugin's cni.log says which pods)",
            answer.cni_add_unreachable
        ));
    }
    node.enrolled = listed
        .enrollments
        .into_iter()
        .map(|e| EnrolledNs {
            netns: e.netns.display().to_string(),
            cookie: e.cookie,
            source: e.source,
        })
        .collect();
    Ok(node)
}
