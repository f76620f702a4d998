//! Every namespace the kernel holds a policy for, read from the pinned maps, whoever wrote it
//! (the daemon, `istio-iptables`, `vm`): the one list `list`, `stats` and `trace` label from.
use std::{collections::HashMap, path::PathBuf};

use redirect_common::{map_names, outbound::OutboundPolicy, InboundPolicy, NetnsCookie};
use serde::Serialize;

use crate::{
    error::Result,
    maps::store::{hash, MapStore},
};

/// One namespace with a policy in the kernel's maps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Captured {
    /// Its netns cookie (the key of its map entries).
    pub cookie: NetnsCookie,
    /// The namespace's inode, as recorded with its outbound policy (0: not recorded).
    pub netns_ino: u64,
    /// Whether it has an inbound policy (`NETNS_INBOUND`).
    pub inbound: bool,
    /// Whether its inbound policy is TPROXY mode's (`-m TPROXY`).
    pub tproxy: bool,
    /// Whether its proxy listens on the outbound port.
    pub proxy_listening: bool,
}

/// Every namespace with an outbound policy (cookie 0, the default policy of `attach`, left
/// out), in cookie order.
pub fn captured(store: &mut dyn MapStore) -> Result<Vec<Captured>> {
    let mut out: Vec<Captured> =
        hash::<NetnsCookie, OutboundPolicy>(store, map_names::NETNS_OUTBOUND)?
            .iter()
            .filter_map(|e| e.ok())
            .filter(|(cookie, _)| *cookie != 0)
            .map(|(cookie, p)| Captured {
                cookie,
                netns_ino: p.netns_ino,
                inbound: false,
                tproxy: false,
                proxy_listening: false,
            })
            .collect();
    out.sort_by_key(|c| c.cookie);
    {
        let inbound = hash::<NetnsCookie, InboundPolicy>(store, map_names::NETNS_INBOUND)?;
        for c in &mut out {
            let policy = inbound.get(&c.cookie, 0).ok();
            c.inbound = policy.is_some();
            c.tproxy = policy.is_some_and(|p| p.flags & redirect_common::INBOUND_TPROXY != 0);
        }
    }
    let listeners = hash::<NetnsCookie, u64>(store, map_names::PROXY_LISTENERS)?;
    for c in &mut out {
        c.proxy_listening = listeners.get(&c.cookie, 0).is_ok_and(|n| n > 0);
    }
    Ok(out)
}

/// Whether namespace `cookie` is captured in TPROXY mode (`-m TPROXY`: its outbound policy's
/// TPROXY step, or its inbound policy's), `None` when the kernel holds no policy for it.
pub fn tproxy_mode(store: &mut dyn MapStore, cookie: NetnsCookie) -> Result<Option<bool>> {
    let outbound = hash::<NetnsCookie, OutboundPolicy>(store, map_names::NETNS_OUTBOUND)?
        .get(&cookie, 0)
        .ok()
        .map(|p| p.flags & redirect_common::outbound::OUT_TPROXY != 0);
    let inbound = hash::<NetnsCookie, InboundPolicy>(store, map_names::NETNS_INBOUND)?
        .get(&cookie, 0)
        .ok()
        .map(|p| p.flags & redirect_common::INBOUND_TPROXY != 0);
    Ok(match (outbound, inbound) {
        (None, None) => None,
        (o, i) => Some(o.unwrap_or(false) || i.unwrap_or(false)),
    })
}

/// Names for namespaces: netns cookie -> path, from what records say first, then from the
/// namespace's inode as the machine names it now (`netns::names`). A namespace nothing names
/// is shown as "path unknown" with its cookie.
#[derive(Debug, Default)]
pub struct Labels {
    /// Cookie -> path from records (the daemon's list, the enrollment files).
    pub(crate) recorded: HashMap<NetnsCookie, PathBuf>,
    /// Cookie -> namespace inode from the kernel's maps.
    pub(crate) inodes: HashMap<NetnsCookie, u64>,
    /// Inode -> path, as the machine names it now (filled on first use).
    by_inode: Option<HashMap<u64, PathBuf>>,
}

impl Labels {
    /// Labels from `recorded` paths and the kernel's `captured` namespaces.
    pub fn new(recorded: HashMap<NetnsCookie, PathBuf>, captured: &[Captured]) -> Self {
        Self {
            recorded,
            inodes: captured
                .iter()
                .filter(|c| c.netns_ino != 0)
                .map(|c| (c.cookie, c.netns_ino))
                .collect(),
            by_inode: None,
        }
    }

    /// The path of namespace `cookie`, if anything names it.
    pub fn path(&mut self, cookie: NetnsCookie) -> Option<PathBuf> {
        if let Some(p) = self.recorded.get(&cookie) {
            return Some(p.clone());
        }
        let ino = *self.inodes.get(&cookie)?;
        self.by_inode
            .get_or_insert_with(crate::netns::names::by_inode)
            .get(&ino)
            .cloned()
    }

    /// The path, or `path unknown` (the cookie is shown beside it by every view).
    pub fn shown(&mut self, cookie: NetnsCookie) -> String {
        self.path(cookie)
            .map_or_else(|| "path unknown".to_owned(), |p| p.display().to_string())
    }
}
