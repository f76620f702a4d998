//! The node's one view of what is captured: every namespace the kernel holds a policy for,
//! joined with what records say of it (the daemon's list when a daemon owns the datapath,
//! else the enrollment files a direct `istio-iptables` or `vm` wrote) and the running `redirect
//! attach` instances. `list`, `stats` and `trace` all read it.
use std::{collections::HashMap, net::IpAddr, path::PathBuf};

use redirect_common::NetnsCookie;
use redirect_daemon_api::{DaemonDir, Enrollment, Writer};
use redirect_datapath::{captured, Captured, Labels, NodeDatapath};
use serde::Serialize;

/// Whether the daemon follows a namespace (its addresses, its repair, its removal when gone).
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Followed {
    /// The running daemon holds it among its enrollments.
    Yes,
    /// A daemon runs and does not hold it (written behind its back, or it could not adopt it).
    NotByTheDaemon,
    /// No daemon runs: nothing follows it until one starts (and adopts what is recorded).
    NoDaemon,
    /// A `redirect attach` process holds it (its own datapath, gone when the process exits).
    ByItsProcess,
}

impl Followed {
    pub(crate) fn shown(self) -> &'static str {
        match self {
            Followed::Yes => "yes",
            Followed::NotByTheDaemon => "NO",
            Followed::NoDaemon => "no-daemon",
            Followed::ByItsProcess => "process",
        }
    }
}

/// One captured thing: a namespace with a policy, or an attach instance's cgroup.
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    /// The namespace's path; `None`: nothing names it ("path unknown"), or an attach instance.
    pub netns: Option<PathBuf>,
    /// Its netns cookie (`None` for an attach instance).
    #[cfg_attr(test, schemars(with = "Option<u64>"))]
    pub cookie: Option<NetnsCookie>,
    /// Who wrote the policy.
    pub writer: Writer,
    /// Whether the daemon follows it.
    pub followed: Followed,
    /// What the kernel's maps hold for it: `ok`, `inbound-differs`, `missing` (recorded, not in
    /// the maps), `unreadable`.
    #[cfg_attr(test, schemars(extend("enum" = ["ok", "inbound_differs", "missing"])))]
    pub kernel: &'static str,
    /// Its addresses as last recorded (empty when no record).
    pub addrs: Vec<IpAddr>,
    /// Inbound capture on (from the kernel's maps when it holds the policy).
    pub inbound: bool,
    /// Inbound capture is TPROXY mode's (`-m TPROXY`, from the kernel's maps).
    pub tproxy: bool,
    /// The proxy listens on the outbound port.
    pub proxy_listening: bool,
    /// Where the policy came from, as recorded (`-` when no record).
    pub source: String,
    /// The cgroup of an attach instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, schemars(with = "PathBuf"))]
    pub cgroup: Option<PathBuf>,
    /// The pid of an attach instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, schemars(with = "u32"))]
    pub pid: Option<u32>,
    /// The record, as the daemon lists it (policy, pod, connections outside capture).
    #[serde(skip)]
    pub record: Option<Enrollment>,
}

/// What the node holds, assembled once.
pub(crate) struct NodeView {
    pub rows: Vec<Row>,
    /// The daemon's pid, when one owns the datapath and answered.
    pub daemon: Option<u32>,
    /// The kernel's namespaces, for labels.
    pub captured: Vec<Captured>,
    /// Why the records shown are the files, not the daemon's answer (it owns the datapath and
    /// did not answer, or the records cannot be read), if so.
    pub records_note: Option<String>,
}

/// Reads the pinned datapath at `bpffs` (absent: no namespace rows), the records and the attach
/// instances. A daemon that owns the datapath but does not answer is an error (its records are
/// what it believes; the files alone could be stale).
pub(crate) fn node_view(
    dirs: &crate::dir_args::Dirs,
    bpffs: &std::path::Path,
) -> anyhow::Result<NodeView> {
    node_view_with(dirs, bpffs, true)
}

/// [`node_view`]; without `ask_daemon` (a caller it did not answer already) the owning
/// daemon's records are read from its files at once rather than after another wait.
pub(crate) fn node_view_with(
    dirs: &crate::dir_args::Dirs,
    bpffs: &std::path::Path,
    ask_daemon: bool,
) -> anyhow::Result<NodeView> {
    let mut dp = NodeDatapath::exists(bpffs)
        .then(|| NodeDatapath::open(bpffs))
        .transpose()?;
    let kernel = match dp.as_mut() {
        Some(dp) => captured(dp.maps())?,
        None => Vec::new(),
    };
    let files = || -> (Vec<Enrollment>, Option<String>) {
        let dir = crate::direct_record::records_dir(dirs, bpffs);
        let enrollments = DaemonDir::new(&dir).enrollments();
        let note = match std::fs::read_dir(&enrollments) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Some(format!(
                "the enrollment records in {} cannot be read ({e}): writers are shown as unknown",
                enrollments.display()
            )),
            _ => None,
        };
        let records = redirect_daemon_api::read_records(&dir)
            .into_iter()
            .map(|r| r.to_wire(false))
            .collect();
        (records, note)
    };
    let (daemon, records, records_note) = match crate::writer::NodeWriter::for_node(bpffs) {
        crate::writer::NodeWriter::Daemon { .. } if !ask_daemon => {
            let (records, _) = files();
            (None, records, None)
        }
        crate::writer::NodeWriter::Daemon { pid, client } => match client.list() {
            Ok(l) => (Some(pid), l.enrollments, None),
            Err(e) => {
                let (records, _) = files();
                let note = format!(
                    "the daemon (pid {pid}) that owns the datapath does not answer \
                    ({e}): its records are shown from its files, and nothing follows them until it \
                    answers"
                );
                (None, records, Some(note))
            }
        },
        crate::writer::NodeWriter::Direct => {
            let (records, note) = files();
            (None, records, note)
        }
    };
    let mut labels = Labels::new(HashMap::new(), &kernel);
    let mut rows = Vec::new();
    for e in &records {
        let k = kernel.iter().find(|c| c.cookie == e.record.cookie);
        let state = match (k, dp.is_some()) {
            (Some(k), _) if k.inbound == e.record.inbound => "ok",
            (Some(_), _) => "inbound_differs",
            // Recorded, not in the maps (or no datapath pinned at all).
            (None, _) => "missing",
        };
        rows.push(Row {
            netns: Some(e.record.netns.clone()),
            cookie: Some(e.record.cookie),
            writer: e.record.writer,
            followed: if daemon.is_some() {
                Followed::Yes
            } else {
                Followed::NoDaemon
            },
            kernel: state,
            addrs: e.record.addrs.clone(),
            inbound: k.map_or(e.record.inbound, |k| k.inbound),
            tproxy: k.is_some_and(|k| k.tproxy),
            proxy_listening: k.map_or(e.proxy_listening, |k| k.proxy_listening),
            source: e.record.source.clone(),
            cgroup: None,
            pid: None,
            record: Some(e.clone()),
        });
    }
    for k in kernel
        .iter()
        .filter(|k| !records.iter().any(|e| e.record.cookie == k.cookie))
    {
        rows.push(Row {
            netns: labels.path(k.cookie),
            cookie: Some(k.cookie),
            writer: Writer::Unknown,
            followed: if daemon.is_some() {
                Followed::NotByTheDaemon
            } else {
                Followed::NoDaemon
            },
            kernel: "ok",
            addrs: Vec::new(),
            inbound: k.inbound,
            tproxy: k.tproxy,
            proxy_listening: k.proxy_listening,
            source: "-".into(),
            cgroup: None,
            pid: None,
            record: None,
        });
    }
    let (live, _) = redirect_datapath::read_instances(&dirs.state).unwrap_or_default();
    for inst in live {
        rows.push(Row {
            netns: None,
            cookie: None,
            writer: Writer::Attach,
            followed: Followed::ByItsProcess,
            kernel: "ok",
            addrs: Vec::new(),
            inbound: !inst.options.inbound.is_empty(),
            tproxy: false,
            proxy_listening: false,
            source: format!("redirect attach (pid {})", inst.pid),
            cgroup: Some(inst.options.cgroup.clone()),
            pid: Some(inst.pid),
            record: None,
        });
    }
    Ok(NodeView {
        rows,
        daemon,
        captured: kernel,
        records_note,
    })
}

impl NodeView {
    /// Labels for `stats` and `trace`: every row's path, then the machine's names by inode.
    pub(crate) fn labels(&self) -> Labels {
        let recorded = self
            .rows
            .iter()
            .filter_map(|r| Some((r.cookie?, r.netns.clone()?)))
            .collect();
        Labels::new(recorded, &self.captured)
    }
}
