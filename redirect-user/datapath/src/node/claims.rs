//! The addresses a namespace already enrolled may hold in `POD_ADDRS` when it is re-applied or
//! its addresses are followed: none another enrolled namespace holds (a pod with NET_ADMIN can
//! put a neighbour's address on its own interface), and at most its quota. What is left out
//! is logged as an alarm; the namespace keeps its policy (and the neighbour its address)
//! rather than either losing capture.
use std::{net::IpAddr, path::Path};

use redirect_common::{map_names, NetnsCookie};

use super::NodeDatapath;
use crate::{
    error::Result,
    maps::{inbound, store::hash},
};

impl NodeDatapath {
    /// `addrs` without those `POD_ADDRS` records for another namespace than `cookie`.
    pub(super) fn without_taken(
        &mut self,
        netns: &Path,
        cookie: NetnsCookie,
        addrs: Vec<IpAddr>,
    ) -> Result<Vec<IpAddr>> {
        let map = hash::<redirect_common::AddrKey, u64>(&mut self.maps, map_names::POD_ADDRS)?;
        let (taken, kept): (Vec<IpAddr>, Vec<IpAddr>) = addrs.into_iter().partition(|ip| {
            map.get(&inbound::addr_key(*ip), 0)
                .is_ok_and(|owner| owner != cookie.get())
        });
        if !taken.is_empty() {
            tracing::error!(netns = %netns.display(), %cookie, taken = ?taken, "the namespace holds addresses another enrolled namespace owns: left out of its policy (the owner keeps its inbound capture); the namespace's own capture stays");
        }
        Ok(kept)
    }

    /// The first `--quota-addresses` of `addrs` (the rest logged).
    pub(super) fn within_quota(&self, netns: &Path, mut addrs: Vec<IpAddr>) -> Vec<IpAddr> {
        let quota = self.quotas.addresses as usize;
        if addrs.len() > quota {
            let over = addrs.split_off(quota);
            tracing::error!(netns = %netns.display(), quota, left_out = over.len(), "the namespace holds more addresses than --quota-addresses: the first ones kept, the others get no inbound capture");
        }
        addrs
    }
}
