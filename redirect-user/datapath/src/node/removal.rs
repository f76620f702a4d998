//! Removing what a namespace owns: one policy (`--cleanup-only`, a pod's DEL), the policies
//! of namespaces the kernel says are gone, and the whole datapath with its last policy.
use std::{os::fd::AsFd as _, path::Path};

use redirect_common::{map_names, NetnsCookie};

use super::{
    entries::{owned_addresses, remove_ifaces, remove_ns_counters},
    remove_dir, remove_tproxy_logged, NodeDatapath,
};
use crate::{
    error::Result,
    maps::{inbound, outbound, store::hash},
    netns::NetnsHandle,
    sys::bpfsys,
};

impl NodeDatapath {
    /// Removes the namespace's policy (`--cleanup-only`). When no namespace has a policy any
    /// more, the whole datapath is unpinned (and so detached) unless `keep_empty` (a daemon
    /// owns it and keeps it with no policy). Returns whether it was unpinned.
    pub fn cleanup(&mut self, netns_path: &Path, keep_empty: bool) -> Result<bool> {
        // Opened once: its TPROXY routing is removed through this handle.
        let ns = NetnsHandle::open(netns_path)?;
        self.remove_policy(ns.cookie(), Some(&ns), netns_path)?;
        self.remove_stale()?;
        if keep_empty {
            return Ok(false);
        }
        if outbound::count(&mut self.maps)? == 0 {
            self.maps.0.clear();
            remove_dir(&self.dir)?;
            tracing::info!(dir = %self.dir.display(), "last policy removed: node datapath unpinned");
            return Ok(true);
        }
        Ok(false)
    }

    /// Removes everything stored for namespace `cookie` (which may no longer exist; `shown`
    /// only names it in logs and errors). `ns` is the caller's handle on the namespace while it
    /// lives, through which its TPROXY routing goes too; never reopened by a path, which may
    /// name another namespace by now. The datapath itself stays.
    pub fn remove_policy(
        &mut self,
        cookie: NetnsCookie,
        ns: Option<&NetnsHandle>,
        shown: &Path,
    ) -> Result<()> {
        // TPROXY's routing lives in the namespace: removed while it is there (a namespace that
        // is gone took it along), best effort: the maps go whatever happens there.
        if let Some(ns) = ns.filter(|ns| ns.cookie() == cookie) {
            remove_tproxy_logged(ns);
        }
        outbound::remove(&mut self.maps, cookie)?;
        self.detach_sk_lookup(cookie)?;
        inbound::remove_inbound(&mut self.maps, cookie)?;
        remove_ifaces(&mut self.maps, cookie)?;
        remove_ns_counters(&mut self.maps, cookie)?;
        let _ =
            hash::<NetnsCookie, u64>(&mut self.maps, map_names::PROXY_LISTENERS)?.remove(&cookie);
        // Its hand-offs still in flight go with their sockets; the count starts again at 0.
        let _ = hash::<NetnsCookie, u64>(&mut self.maps, map_names::HANDOFFS)?.remove(&cookie);
        let _ = hash::<NetnsCookie, u64>(&mut self.maps, map_names::LOCAL_COUNTS)?.remove(&cookie);
        let old = owned_addresses(&mut self.maps, cookie)?;
        inbound::sync_addresses(&mut self.maps, shown, cookie, &old, &[])?;
        // Found by iterating the maps, whatever the index says: nothing can be left behind.
        if let Some(index) = &mut self.index {
            index.forget(cookie);
        }
        tracing::info!(netns = %shown.display(), %cookie, "policy removed");
        Ok(())
    }

    /// Removes the policies of namespaces that no longer exist, as the kernel says: each
    /// enrollment holds an sk_lookup link on its namespace, and a link whose namespace died
    /// reports inode 0. What this process can see (its /proc, its /run/netns) does not matter,
    /// so a run inside a pod's own PID and mount namespaces removes nobody else's policy. A
    /// policy without a link (written by an older version) is kept: on doubt, capture.
    /// Returns the cookies removed.
    pub fn remove_stale(&mut self) -> Result<Vec<NetnsCookie>> {
        let cookies: Vec<NetnsCookie> = {
            let map = hash::<NetnsCookie, redirect_common::outbound::OutboundPolicy>(
                &mut self.maps,
                map_names::NETNS_OUTBOUND,
            )?;
            map.keys()
                .filter_map(|k| k.ok())
                .filter(|k| *k != 0)
                .collect()
        };
        let mut gone = Vec::new();
        for cookie in cookies {
            if self.namespace_gone(cookie) {
                self.remove_policy(cookie, None, Path::new("(a namespace that is gone)"))?;
                gone.push(cookie);
            }
        }
        Ok(gone)
    }

    /// Whether the kernel says namespace `cookie` is gone (its pinned sk_lookup link reports
    /// no namespace). No link, or a link that cannot be read: not known to be gone.
    pub fn namespace_gone(&self, cookie: NetnsCookie) -> bool {
        self.namespace_inode(cookie) == Some(0)
    }

    /// The inode of namespace `cookie` as its pinned sk_lookup link reports it: `Some(0)` when
    /// the namespace is gone, `None` when there is no link or it cannot be read (not known).
    pub fn namespace_inode(&self, cookie: NetnsCookie) -> Option<u64> {
        let pin = self.dir.join("netns").join(cookie.to_string());
        let link = bpfsys::obj_get(&pin).ok()?;
        match bpfsys::link_netns_ino(link.as_fd()) {
            Ok(ino) => Some(u64::from(ino)),
            Err(e) => {
                tracing::warn!(pin = %pin.display(), error = %e, "cannot read the namespace link");
                None
            }
        }
    }
}
