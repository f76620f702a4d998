//! Connections outside capture: established TCP connections of an enrolled namespace that its
//! policy would capture now but that never went through the proxy, because they were opened
//! before the namespace was enrolled (a pod enrolled in place) or before its policy captured
//! them. iptables has the same hole (conntrack keeps established flows); a long-lived stream
//! or a connection pool then bypasses the proxy, and its mTLS, for the pod's life. Each
//! connection is judged by the same `outbound::decide` as a new connect ([`explain`]), with
//! its owner's uid and gid; accepted connections (their local port listens), loopback ones
//! (a captured connection is one to the proxy on loopback) and the proxy's own (its uid or
//! gid) are not outbound connects of an application.
use std::{
    collections::{HashMap, HashSet},
    net::IpAddr,
    os::unix::fs::MetadataExt as _,
};

use serde::Serialize;

use crate::{
    error::Result,
    maps::store::MapStore,
    netns::{conns::Connection, NetnsHandle},
    views::explain::{explain, Query},
};

/// One connection outside capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outside {
    /// The connection.
    #[serde(flatten)]
    pub connection: Connection,
    /// The process holding it, when one of the namespace's processes does.
    pub pid: Option<u32>,
    /// Where a new connect of its owner to its remote end would go now (`proxy:15001`, ...).
    pub(crate) now: String,
}

/// Most descriptors read (`readlink`) in one search for owners: a pod's process holding a
/// million costs the daemon this many, then the rest go unowned (judged by their uid alone).
const FDS_READ: usize = 65_536;

/// The processes running in the namespace whose nsfs inode is `netns` that hold one of the
/// socket inodes `wanted`: each found inode with its pid and gid. The search stops once every
/// one is found, or after [`FDS_READ`] descriptors: what a pod's processes hold (a million
/// descriptors is its own to open) never sets the daemon's cost.
fn owners(netns: u64, wanted: &HashSet<u64>) -> HashMap<u64, (u32, u32)> {
    let mut found = HashMap::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    let mut budget = FDS_READ;
    for entry in procs.flatten() {
        if found.len() == wanted.len() || budget == 0 {
            break;
        }
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        if !std::fs::metadata(dir.join("ns/net")).is_ok_and(|m| m.ino() == netns) {
            continue;
        }
        let gid = std::fs::read_to_string(dir.join("status"))
            .ok()
            .and_then(|s| {
                let line = s.lines().find_map(|l| l.strip_prefix("Gid:"))?;
                line.split_whitespace().nth(1)?.parse().ok()
            })
            .unwrap_or(u32::MAX);
        for fd in std::fs::read_dir(dir.join("fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if budget == 0 || found.len() == wanted.len() {
                break;
            }
            budget -= 1;
            let Ok(link) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let inode = link
                .to_str()
                .and_then(|l| l.strip_prefix("socket:["))
                .and_then(|l| l.strip_suffix(']'))
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(inode) = inode.filter(|i| wanted.contains(i)) {
                found.entry(inode).or_insert((pid, gid));
            }
        }
    }
    if budget == 0 && found.len() < wanted.len() {
        tracing::warn!(
            netns,
            read = FDS_READ,
            unowned = wanted.len() - found.len(),
            "the namespace's processes hold more descriptors than one search reads: connections \
            outside capture whose owner was not reached are judged by their uid alone"
        );
    }
    found
}

/// The connections of `ns` (enrolled as `ns.cookie()`) outside capture; `proxy` is its
/// policy's proxy uids and gids.
pub fn outside_capture(
    store: &mut dyn MapStore,
    ns: &NetnsHandle,
    proxy: (&[u32], &[u32]),
) -> Result<Vec<Outside>> {
    let (conns, listening) = ns.connections()?;
    let local_end = |ip: IpAddr| ip.is_loopback() || ip.is_unspecified();
    let candidates: Vec<Connection> = conns
        .into_iter()
        .filter(|c| !listening.contains(&c.local.port()))
        .filter(|c| !local_end(c.remote.ip()) && !local_end(c.local.ip()))
        .collect();
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let wanted: HashSet<u64> = candidates.iter().map(|c| c.inode).collect();
    let owners = owners(ns.inode(), &wanted);
    let mut out = Vec::new();
    for connection in candidates {
        let (pid, gid) = match owners.get(&connection.inode) {
            Some((pid, gid)) => (Some(*pid), *gid),
            None => (None, connection.uid),
        };
        if proxy.0.contains(&connection.uid) || proxy.1.contains(&gid) {
            continue;
        }
        let q = Query {
            uid: connection.uid,
            gid,
            dst: connection.remote,
            tcp: true,
            src: Some(connection.local.ip()),
            caller_cgroup: None,
            // The socket's mark is not read here; the application's sockets carry none.
            mark: 0,
        };
        let now = explain(store, ns.cookie(), &q)?.outcome;
        if now != "untouched" {
            out.push(Outside {
                connection,
                pid,
                now,
            });
        }
    }
    Ok(out)
}
