//! `redirect status`: what is attached where, verified against the kernel, and the counters.
use std::{collections::BTreeSet, fmt::Write as _};

use redirect_common::map_names;
use serde::Serialize;

use crate::{
    attach::state::{self, InstanceState},
    error::{Error, Result},
    maps::counters::{self, CounterValue},
    views::node_status::NodeStatus,
};

/// One attachment as status reports it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AttachmentStatus {
    /// Program name.
    pub(crate) program: String,
    /// Attach type.
    pub(crate) attach_type: String,
    /// Cgroup directory, or network namespace file for sk_lookup.
    pub(crate) target: String,
    /// Kernel program id.
    pub(crate) program_id: u32,
    /// True when the kernel still has a cgroup link for this program.
    pub(crate) linked: bool,
    /// What the kernel reports for it (verified instructions; runs and run time while
    /// `kernel.bpf_stats_enabled` is 1); `None` once it is unloaded.
    pub(crate) stat: Option<crate::load::program_stats::ProgramStat>,
}

/// One running `redirect attach`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
pub struct InstanceStatus {
    /// Its pid.
    pub(crate) pid: u32,
    /// Proxy uid / gid / port in force.
    pub(crate) proxy_uid: u32,
    /// Proxy gid.
    pub(crate) proxy_gid: u32,
    /// Outbound port.
    pub(crate) outbound_port: u16,
    /// Attachments.
    pub(crate) attachments: Vec<AttachmentStatus>,
    /// Decision counters (an object, name -> value, zeros included).
    #[serde(serialize_with = "crate::views::json::counters_as_object")]
    #[cfg_attr(
        feature = "schema",
        schemars(schema_with = "crate::views::schema::counters")
    )]
    pub(crate) counters: Vec<CounterValue>,
    /// Redirected connections whose hand-off the proxy has not claimed yet (`TRACKED`).
    pub(crate) tracked_entries: usize,
    /// Steered inbound connections whose hand-off the proxy has not claimed yet (`INBOUND`).
    pub(crate) inbound_entries: usize,
}

/// The whole report: the node datapath (pinned) and the running `redirect attach` instances
/// (process-owned links), one model for both.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// The pinned node datapath, when one is pinned.
    pub node: Option<NodeStatus>,
    /// Running instances.
    pub instances: Vec<InstanceStatus>,
    /// State files whose process is gone, removed by the caller before reporting.
    pub stale_removed: Vec<String>,
}

fn linked_program_ids() -> Result<BTreeSet<u32>> {
    let mut ids = BTreeSet::new();
    for link in aya::programs::loaded_links() {
        let link = match link {
            Ok(link) => link,
            // Released between the listing and the open (another process detaching): gone.
            Err(aya::programs::links::LinkError::SyscallError(e))
                if e.io_error.kind() == std::io::ErrorKind::NotFound =>
            {
                continue
            }
            Err(e) => {
                return Err(Error::Query {
                    op: "listing BPF links".into(),
                    source: Box::new(e),
                })
            }
        };
        ids.insert(link.program_id());
    }
    Ok(ids)
}

fn instance_status(state: &InstanceState, linked: &BTreeSet<u32>) -> Result<InstanceStatus> {
    let counters = match state.map_id(map_names::COUNTERS) {
        Some(id) => counters::read_counters_by_id(id)?,
        None => Vec::new(),
    };
    let tracked_entries = match state.map_id(map_names::TRACKED) {
        Some(id) => counters::tracked_len_by_id(id)?,
        None => 0,
    };
    let inbound_entries = match state.map_id(map_names::INBOUND) {
        Some(id) => counters::tracked_len_by_id(id)?,
        None => 0,
    };
    let ids: Vec<u32> = state.attachments.iter().map(|a| a.program_id).collect();
    let stats = crate::load::program_stats::of_ids(&ids);
    Ok(InstanceStatus {
        pid: state.pid,
        proxy_uid: state.options.proxy_uid,
        proxy_gid: state.options.proxy_gid,
        outbound_port: state.options.outbound_port,
        attachments: state
            .attachments
            .iter()
            .map(|a| AttachmentStatus {
                program: a.program.clone(),
                attach_type: a.attach_type.clone(),
                target: a.target.display().to_string(),
                program_id: a.program_id,
                linked: linked.contains(&a.program_id),
                stat: stats.get(&a.program_id).cloned(),
            })
            .collect(),
        counters,
        tracked_entries,
        inbound_entries,
    })
}

/// The running `redirect attach` instances, verified against the kernel, and the state files
/// whose process is gone (read only: removing those is [`state::remove_stale`], a step of its
/// own).
#[derive(Debug, Clone)]
pub struct Instances {
    /// Running instances.
    pub live: Vec<InstanceStatus>,
    /// State files of processes that exited.
    pub stale: Vec<std::path::PathBuf>,
}

/// Reads the attach instances from the state directory `dir` and the kernel; changes nothing.
pub fn instances(dir: &std::path::Path) -> Result<Instances> {
    let (live, stale) = state::read_all(dir)?;
    let linked = linked_program_ids()?;
    let live = live
        .iter()
        .map(|s| instance_status(s, &linked))
        .collect::<Result<Vec<_>>>()?;
    Ok(Instances { live, stale })
}

/// Human-readable rendering.
pub fn render(status: &Status) -> String {
    let mut out = String::new();
    match &status.node {
        Some(node) => out.push_str(&crate::views::node_status::render(node)),
        None if status.instances.is_empty() => out.push_str(
            "nothing attached: no node datapath is pinned and no `redirect attach` is running\n",
        ),
        None => {}
    }
    for inst in &status.instances {
        let _ = writeln!(
            out,
            "redirect attach pid {}: proxy uid {} gid {}, outbound -> 127.0.0.1:{}",
            inst.pid, inst.proxy_uid, inst.proxy_gid, inst.outbound_port
        );
        let _ = writeln!(
            out,
            "  {:<12} {:<22} {:>6} {:<7} CGROUP / NETNS",
            "HOOK", "PROGRAM", "ID", "LINKED"
        );
        for a in &inst.attachments {
            let _ = writeln!(
                out,
                "  {:<12} {:<22} {:>6} {:<7} {}",
                a.attach_type,
                a.program,
                a.program_id,
                if a.linked { "yes" } else { "NO" },
                a.target
            );
        }
        let _ = writeln!(out, "  counters:");
        for c in &inst.counters {
            let _ = writeln!(out, "    {:<16} {}", c.name, c.value);
        }
        let _ = writeln!(
            out,
            "  hand-offs in flight: {} outbound (TRACKED), {} inbound (INBOUND)",
            inst.tracked_entries, inst.inbound_entries
        );
    }
    for s in &status.stale_removed {
        let _ = writeln!(out,
            "removed stale state file {s} (its process had exited; the kernel detached its programs)");
    }
    out
}
