//! Connections outside capture: established TCP connections of an enrolled namespace that its
//! policy would capture now but that never went through the proxy, because they were opened
//! before the namespace was enrolled (a pod enrolled in place) or before its policy captured
//! them. iptables has the same hole (conntrack keeps established flows); a long-lived stream
//! or a connection pool then bypasses the proxy, and its mTLS, for the pod's life. Each
//! connection is judged by the same `outbound::decide` as a new connect ([`explain`]), with
//! its owner's uid and gid; accepted connections (their local port listens), loopback ones
//! (a captured connection is one to the proxy on loopback) and the proxy's own (its uid or
//! gid) are not outbound connects of an application.
use std::{collections::HashMap, net::IpAddr, os::unix::fs::MetadataExt as _};

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
    pub now: String,
}

/// The processes running in the namespace whose nsfs inode is `netns`: their socket inodes,
/// each with its pid and gid.
fn owners(netns: u64) -> HashMap<u64, (u32, u32)> {
    let mut found = HashMap::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in procs.flatten() {
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
            let Ok(link) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let inode = link
                .to_str()
                .and_then(|l| l.strip_prefix("socket:["))
                .and_then(|l| l.strip_suffix(']'))
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(inode) = inode {
                found.entry(inode).or_insert((pid, gid));
            }
        }
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
    let owners = owners(ns.inode());
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
