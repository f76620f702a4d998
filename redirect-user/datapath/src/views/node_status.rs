//! What `redirect status` shows about the pinned node datapath: links, per-namespace links,
//! map fill levels, decision counters and warnings.
use redirect_common::NetnsCookie;
use std::path::{Path, PathBuf};

use aya::maps::{HashMap, MapData, PerCpuArray};
use redirect_common::{
    map_names, outbound::OutboundPolicy, AddrKey, ConnKey, Counter, InboundPolicy, Tracked,
};
use serde::Serialize;

use crate::{
    error::Result,
    maps::store::{map_error, MapStore},
    node::{layout::Owner, NodeDatapath},
};

/// One namespace with a policy (whoever wrote it), as `redirect list` shows it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
pub struct EnrolledNs {
    /// The namespace's path (`None`: nothing names it; shown as `(path unknown)`).
    pub netns: Option<String>,
    /// Its netns cookie.
    #[cfg_attr(feature = "schema", schemars(with = "u64"))]
    pub cookie: NetnsCookie,
    /// Where its policy came from.
    pub source: String,
    /// The command that wrote it (`enroll`, `istio_iptables`, `vm`, `cni`, `reconcile`,
    /// `unknown`).
    #[cfg_attr(
        feature = "schema",
        schemars(extend("enum" = ["enroll", "istio_iptables", "vm", "cni", "reconcile", "attach", "unknown"]))
    )]
    pub writer: String,
    /// Whether the daemon follows it (`yes`, `not_by_the_daemon`, `no_daemon`).
    #[cfg_attr(
        feature = "schema",
        schemars(extend("enum" = ["yes", "not_by_the_daemon", "no_daemon", "by_its_process"]))
    )]
    pub followed: String,
}

/// The node datapath, as pinned.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
pub struct NodeStatus {
    /// Pin directory.
    pub(crate) dir: PathBuf,
    /// Layout version of the pins.
    pub layout: u32,
    /// `daemon` or `cli`.
    #[cfg_attr(
        feature = "schema",
        schemars(schema_with = "crate::views::schema::owner")
    )]
    pub owner: &'static str,
    /// The owning daemon's pid, when a daemon owns it.
    pub(crate) owner_pid: Option<u32>,
    /// Whether that daemon is running.
    pub(crate) owner_up: bool,
    /// Whether it answered on its socket (`redirect status` asks it; a running daemon that does
    /// not answer, stopped or hung, follows nothing).
    pub owner_answers: bool,
    /// The capture attach cgroup (path when found, else `cgroup id N`).
    pub(crate) cgroup: String,
    /// The proxy attach cgroup (getsockopt, sock_ops).
    pub(crate) proxy_cgroup: String,
    /// Pinned cgroup links (program-n; none in the per-pod scope).
    pub(crate) links: Vec<String>,
    /// Where the cgroup programs are linked: once at `cgroup` (`root`), or at each enrolled
    /// pod's cgroup (`per-pod`).
    pub scope: crate::AttachScope,
    /// The per-pod scope: the cgroup ids of the pods whose cgroups are linked.
    pub(crate) pod_cgroups: Vec<u64>,
    /// The sk_lookup program it runs (the one without `ingress_ifindex` refuses `-c`/`-k`).
    pub(crate) sk_lookup: &'static str,
    /// Netns cookies with an sk_lookup link (numbers, as every view gives cookies).
    #[cfg_attr(feature = "schema", schemars(with = "Vec<u64>"))]
    pub(crate) inbound_netns: Vec<NetnsCookie>,
    /// Entries per map, for the maps whose fill matters.
    #[serde(serialize_with = "crate::views::json::pairs_as_object")]
    #[cfg_attr(
        feature = "schema",
        schemars(schema_with = "crate::views::schema::fill")
    )]
    pub fill: Vec<(&'static str, usize)>,
    /// Each map of `fill`'s capacity (its `max_entries`, as created for this node's sizing).
    #[serde(serialize_with = "crate::views::json::pairs_as_object")]
    #[cfg_attr(
        feature = "schema",
        schemars(schema_with = "crate::views::schema::fill")
    )]
    pub capacity: Vec<(&'static str, usize)>,
    /// Every decision counter summed over CPUs, zeros included.
    #[serde(serialize_with = "crate::views::json::pairs_as_object")]
    #[cfg_attr(
        feature = "schema",
        schemars(schema_with = "crate::views::schema::counters")
    )]
    pub counters: Vec<(&'static str, u64)>,
    /// Every namespace with a policy, as `redirect list` shows it; filled by the caller, which
    /// knows the daemon's directory (empty from [`collect`]).
    pub captured: Vec<EnrolledNs>,
    /// Each pinned link's and program's program: id, verified instructions, runs and run time
    /// (counted while `kernel.bpf_stats_enabled` is 1).
    pub(crate) programs: Vec<PinnedProgram>,
    /// Things an operator should look at.
    pub warnings: Vec<String>,
}

/// One pinned link's (or pinned program's) program.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PinnedProgram {
    /// The pin (`redirect_connect4-11`, `redirect_sk_lookup`).
    pub(crate) pin: String,
    /// What the kernel reports.
    #[serde(flatten)]
    pub(crate) stat: crate::load::program_stats::ProgramStat,
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The map's `max_entries` as the kernel reports it.
fn max_entries(store: &mut dyn MapStore, name: &'static str) -> Option<usize> {
    let data: &MapData = match store.map(name).ok()? {
        aya::maps::Map::HashMap(d) | aya::maps::Map::LruHashMap(d) => d,
        _ => return None,
    };
    let max = data.info().ok()?.max_entries();
    (max > 0).then(|| usize::try_from(max).unwrap_or(usize::MAX))
}

fn entries(store: &mut dyn MapStore, name: &'static str) -> usize {
    let Ok(map) = store.map(name) else { return 0 };
    match name {
        map_names::NETNS_OUTBOUND => HashMap::<&mut MapData, u64, OutboundPolicy>::try_from(map)
            .map_or(0, |m| m.keys().count()),
        map_names::NETNS_INBOUND => HashMap::<&mut MapData, u64, InboundPolicy>::try_from(map)
            .map_or(0, |m| m.keys().count()),
        map_names::TRACKED => {
            HashMap::<&mut MapData, ConnKey, Tracked>::try_from(map).map_or(0, |m| m.keys().count())
        }
        map_names::INBOUND => aya::maps::HashMap::<&mut MapData, ConnKey, Tracked>::try_from(map)
            .map_or(0, |m| m.keys().count()),
        map_names::POD_ADDRS => {
            HashMap::<&mut MapData, AddrKey, u64>::try_from(map).map_or(0, |m| m.keys().count())
        }
        map_names::LOCAL_CONNECTS => {
            HashMap::<&mut MapData, ConnKey, u64>::try_from(map).map_or(0, |m| m.keys().count())
        }
        _ => 0,
    }
}

/// Reads the datapath pinned at `dir`.
pub fn collect(dir: &Path) -> Result<NodeStatus> {
    let mut dp = NodeDatapath::open(dir)?;
    let layout = dp.layout()?;
    let (owner, owner_pid) = match layout.owner {
        Owner::Cli => ("cli", None),
        Owner::Daemon { pid, .. } => ("daemon", Some(pid)),
    };
    let cgroup_name = |id: u64| {
        crate::cgroup::path_of_id(id).map_or_else(
            || format!("cgroup id {id} (gone)"),
            |p| p.display().to_string(),
        )
    };
    let sk_lookup = dp.sk_lookup();
    let store = dp.maps();
    let mut fill = Vec::new();
    let mut capacity = Vec::new();
    for name in [
        map_names::NETNS_OUTBOUND,
        map_names::NETNS_INBOUND,
        map_names::POD_ADDRS,
        map_names::TRACKED,
        map_names::INBOUND,
        map_names::LOCAL_CONNECTS,
    ] {
        fill.push((name, entries(store, name)));
        // Left out when the kernel does not say (never exported as 0).
        if let Some(max) = max_entries(store, name) {
            capacity.push((name, max));
        }
    }
    let counters: PerCpuArray<&mut MapData, u64> =
        PerCpuArray::try_from(store.map(map_names::COUNTERS)?)
            .map_err(map_error("opening", map_names::COUNTERS))?;
    let mut totals = Vec::new();
    for c in Counter::ALL {
        let n: u64 = counters.get(&(c as u32), 0).map_or(0, |v| v.iter().sum());
        totals.push((c.name(), n));
    }
    let mut warnings = Vec::new();
    if let Some((_, n)) = totals
        .iter()
        .find(|(name, n)| *name == Counter::ProxyIdElsewhere.name() && *n > 0)
    {
        warnings.push(format!(
            "{n} connects came from a process with the proxy's uid/gid outside the proxy's cgroup; \
                they were captured as applications (see `redirect trace`)"
        ));
    }
    Ok(NodeStatus {
        dir: dir.to_path_buf(),
        layout: layout.version,
        owner,
        owner_pid,
        owner_up: crate::node::layout::daemon_up(dir, &layout),
        owner_answers: false,
        cgroup: cgroup_name(layout.app_cgroup),
        proxy_cgroup: cgroup_name(layout.proxy_cgroup),
        links: names(&dir.join("links")),
        scope: crate::node::pod_links::scope_of(dir),
        pod_cgroups: names(&dir.join(crate::node::pod_links::CGROUPS))
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect(),
        sk_lookup,
        inbound_netns: names(&dir.join("netns"))
            .iter()
            .filter_map(|n| n.parse::<u64>().ok().map(NetnsCookie))
            .collect(),
        fill,
        capacity,
        counters: totals,
        captured: Vec::new(),
        programs: crate::load::program_stats::of_pins(dir)
            .into_iter()
            .map(|(pin, stat)| PinnedProgram { pin, stat })
            .collect(),
        warnings,
    })
}

/// Text form.
pub(crate) fn render(s: &NodeStatus) -> String {
    let owner = match (s.owner_pid, s.owner_up) {
        (Some(pid), true) if s.owner_answers => format!("the redirect daemon, pid {pid} (up)"),
        (Some(pid), true) => format!(
            "the redirect daemon, pid {pid} (running but not answering on its socket: capture \
                stays, nothing follows addresses until it answers)"
        ),
        (Some(pid), false) => {
            format!(
                "the redirect daemon, pid {pid} (down: capture stays, nothing follows addresses)"
            )
        }
        (None, _) => "the CLI (redirect istio-iptables / vm; no daemon)".to_owned(),
    };
    let mut out = format!(
        "node datapath pinned at {} (layout v{})\n  owner: {owner}\n  attached at cgroup {}, proxy cgroup {}\n",
        s.dir.display(),
        s.layout,
        s.cgroup,
        s.proxy_cgroup
    );
    match s.scope {
        crate::AttachScope::Root => {
            out.push_str(&format!("  links: {}\n", s.links.join(" ")))
        }
        crate::AttachScope::PerPod => out.push_str(&format!(
            "  attach scope per-pod: programs linked at {} pod cgroup(s) (ids {}); other sockets run none\n",
            s.pod_cgroups.len(),
            redirect_policy::Comma(&s.pod_cgroups)
        )),
    }
    if s.sk_lookup == redirect_common::prog_names::SK_LOOKUP_NO_IFINDEX {
        out.push_str(&format!(
            "  sk_lookup program: {} (without ingress_ifindex: policies with inbound -c/-k are refused)\n",
            s.sk_lookup
        ));
    }
    if !s.inbound_netns.is_empty() {
        out.push_str(&format!(
            "  sk_lookup linked in netns cookies: {}\n",
            s.inbound_netns
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    out.push_str("  map fill:");
    for (name, n) in &s.fill {
        match s.capacity.iter().find(|(c, _)| c == name) {
            Some((_, cap)) => out.push_str(&format!(" {name}={n}/{cap}")),
            None => out.push_str(&format!(" {name}={n}")),
        }
    }
    out.push('\n');
    for EnrolledNs {
        netns,
        cookie,
        source,
        writer,
        followed,
    } in &s.captured
    {
        let down = if s.owner == "daemon" && !s.owner_up {
            " (daemon down)"
        } else {
            ""
        };
        out.push_str(&format!(
            "  captured: {}{down} (netns cookie {cookie}) written by {}, followed by the daemon: \
                {followed}, from {source}\n",
            netns.as_deref().unwrap_or("(path unknown)"),
            writer.replace('_', "-")
        ));
    }
    let verified: u64 = s
        .programs
        .iter()
        .filter(|p| p.pin.starts_with("redirect_") && !p.pin.contains("sk_lookup"))
        .filter_map(|p| p.stat.verified_insns.map(u64::from))
        .sum();
    if verified > 0 {
        out.push_str(&format!(
            "  programs: {} linked, {verified} instructions verified to load them\n",
            s.links.len()
        ));
    }
    out.push_str("  decisions:\n");
    for (name, n) in s.counters.iter().filter(|(_, n)| *n > 0) {
        out.push_str(&format!("    {name:<24} {n}\n"));
    }
    for w in &s.warnings {
        out.push_str(&format!("  WARNING: {w}\n"));
    }
    out
}
