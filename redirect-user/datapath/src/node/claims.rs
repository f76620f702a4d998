//! The addresses a namespace may hold in `POD_ADDRS`: a pod's own only (its pod's addresses
//! and link-local ones, `Policy::own_addresses`); when it is re-applied or its addresses are
//! followed, none another enrolled namespace holds (a pod with NET_ADMIN can put a
//! neighbour's address on its own interface), and at most its quota. What is left out
//! is logged as an alarm; the namespace keeps its policy (and the neighbour its address)
//! rather than either losing capture.
use std::{net::IpAddr, path::Path};

use redirect_common::{map_names, NetnsCookie};

use super::NodeDatapath;
use crate::{
    error::Result,
    maps::{inbound, store::hash},
};

/// `addrs` less those the policy does not give the namespace (`Policy::own_addresses`:
/// its pod's addresses and link-local ones), and what was left out.
pub(super) fn own_only(
    policy: &redirect_policy::Policy,
    addrs: Vec<IpAddr>,
) -> (Vec<IpAddr>, Vec<IpAddr>) {
    let Some(own) = &policy.own_addresses else {
        return (addrs, Vec::new());
    };
    let (mut kept, left): (Vec<IpAddr>, Vec<IpAddr>) = addrs
        .into_iter()
        .partition(|ip| own.contains(ip) || link_local(ip));
    // The pod's own first: the quota keeps the first ones.
    kept.sort_by_key(|ip| !own.contains(ip));
    (kept, left)
}

/// Whether `ip` is link-local (169.254/16, fe80::/10): unique on its link only, and
/// predictable (derived from a MAC), so no proof that a namespace is the one it belongs to.
fn link_local(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    }
}

impl NodeDatapath {
    /// `addrs` of a namespace enrolled for the first time without the link-local ones another
    /// enrolled namespace holds: a pod with NET_ADMIN that put its neighbour's predictable
    /// link-local address on its own interface first must not make the neighbour's ADD fail.
    /// (A routable address another holds still refuses the new one whole.)
    pub(super) fn without_taken_link_local(
        &mut self,
        netns: &Path,
        cookie: NetnsCookie,
        addrs: Vec<IpAddr>,
    ) -> Result<Vec<IpAddr>> {
        let local: Vec<IpAddr> = addrs.iter().copied().filter(link_local).collect();
        let kept = self.without_taken(netns, cookie, local)?;
        // In their order: the pod's own first, as the quota keeps the first ones.
        Ok(addrs
            .into_iter()
            .filter(|ip| !link_local(ip) || kept.contains(ip))
            .collect())
    }

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
            tracing::error!(netns = %netns.display(), %cookie,
                taken = %redirect_policy::Comma(&taken),
                "the namespace holds addresses another enrolled namespace owns: left out of its \
                policy (the owner keeps its inbound capture); the namespace's own capture stays");
        }
        Ok(kept)
    }

    /// The first `--quota-addresses` of `addrs` (the rest logged).
    pub(super) fn within_quota(&self, netns: &Path, mut addrs: Vec<IpAddr>) -> Vec<IpAddr> {
        let quota = self.quotas.addresses as usize;
        if addrs.len() > quota {
            let over = addrs.split_off(quota);
            tracing::error!(netns = %netns.display(), quota, left_out = over.len(),
                "the namespace holds more addresses than --quota-addresses: the first ones kept, \
                the others get no inbound capture");
        }
        addrs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_owns_its_addresses_and_link_local_ones_only() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        let held = vec![
            ip("10.0.0.2"),
            ip("10.0.0.3"),
            ip("fe80::1"),
            ip("169.254.1.1"),
        ];
        let mut policy = redirect_policy::Policy::default();
        assert_eq!(
            own_only(&policy, held.clone()).0,
            held,
            "by hand: everything"
        );
        policy.own_addresses = Some(vec![ip("10.0.0.2")]);
        let (kept, left) = own_only(&policy, held);
        assert_eq!(kept, [ip("10.0.0.2"), ip("fe80::1"), ip("169.254.1.1")]);
        assert_eq!(left, [ip("10.0.0.3")]);
    }
}
