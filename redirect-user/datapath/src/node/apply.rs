//! Applying one namespace's policy to the node datapath: checked against the node's quotas
//! before anything is written, then written in an order that never leaves a half policy
//! active. A new namespace's apply is rolled back whole when a write fails or the namespace's
//! path names another namespace by the end; a re-apply over a live policy that fails leaves
//! the entries in force (capture stays), and leaves out addresses another namespace owns.
use redirect_common::NetnsCookie;
use std::os::fd::AsFd as _;

use redirect_common::map_names;
use redirect_policy::{inbound_spec_of, Policy};

use crate::netns::tproxy::TproxyRouting;

use super::{
    entries::{seed_proxy_listeners, write_ifaces},
    index::{Index, Owned},
    ipv6_follows, needs,
    pins::pin_err,
    Applied, NodeDatapath,
};
use crate::{
    error::Result,
    maps::inbound,
    maps::outbound,
    maps::store::hash,
    netns::routes,
    netns::NetnsHandle,
    phases::Phases,
    sizing,
    sys::bpfsys::{self, attach_type},
};

/// What one apply wrote: whether inbound capture is on, and the entries the namespace owns.
struct Written {
    inbound: bool,
    owned: Owned,
}

impl NodeDatapath {
    /// Applies `policy` to namespace `ns`, replacing a previous one. Every lookup and the
    /// sk_lookup link go through `ns`'s descriptor (its path is not opened again). The quotas
    /// are checked first (an over-quota policy writes nothing and leaves a previous one as it
    /// was); nothing is active for the namespace until its outbound policy value is written
    /// (last); for a new namespace, a write that fails, or a path that names another namespace
    /// after the last write ([`NetnsHandle::verify`]), removes everything the namespace has,
    /// so no entry (an address another pod may be given, a port rule) is left behind; a
    /// re-apply that fails leaves what is in force (on doubt, capture).
    pub fn apply(&mut self, ns: &NetnsHandle, policy: &Policy) -> Result<Applied> {
        self.apply_with_addresses(ns, policy, None)
    }

    /// [`apply`](Self::apply), with the namespace's addresses when the caller has just read
    /// them through `ns` (the CNI ADD checks the runtime's prevResult against them): the
    /// namespace is then not asked for them a second time.
    pub fn apply_with_addresses(
        &mut self,
        ns: &NetnsHandle,
        policy: &Policy,
        addrs: Option<Vec<std::net::IpAddr>>,
    ) -> Result<Applied> {
        let netns_path = ns.path();
        let mut phases = Phases::start();
        // Before anything is read or written: a policy this datapath cannot enforce.
        needs::check(self.sk_lookup, policy, netns_path)?;
        let cookie = ns.cookie();
        let addrs = match addrs {
            Some(addrs) => addrs,
            // Past four times the quota the namespace is refused below whatever else it holds:
            // the rest is not decoded.
            None => ns.addresses_at_most(self.quotas.addresses as usize * 4)?.0,
        };
        let (addrs, not_own) = super::claims::own_only(policy, addrs);
        if !not_own.is_empty() {
            tracing::error!(netns = %netns_path.display(), %cookie,
                not_own = %redirect_policy::Comma(&not_own),
                "the pod's namespace holds addresses that are not its pod's (status.podIPs / \
                prevResult): left out of its inbound capture, never claimed");
        }
        phases.mark("addresses");
        // Pods die without --cleanup-only (istio-init never runs it): their entries, and the
        // addresses a new pod may reuse, go before this one is written (the daemon does it
        // on its tick, and again here only when an address of this pod is still claimed).
        if self.sweep_on_apply || self.addresses_claimed(cookie, &addrs)? {
            self.remove_stale()?;
        }
        phases.mark("sweep");
        let new = !self.has_policy(cookie)?;
        // A new pod claiming a live neighbour's address is refused whole (below); one already
        // enrolled keeps its capture without that address.
        let addrs = if new {
            self.without_taken_link_local(netns_path, cookie, addrs)?
        } else {
            self.without_taken(netns_path, cookie, addrs)?
        };
        let ipv6 = ipv6_follows(policy, &addrs);
        let routes = if policy.exclude_interfaces.is_empty() {
            Vec::new()
        } else {
            routes::via_interfaces(ns, &policy.exclude_interfaces, self.quotas.read_cap())?
        };
        let mut compiled = outbound::compile(policy, ipv6, routes)?;
        compiled.policy.netns_ino = ns.inode();
        phases.mark("compile");
        let enrolled = self.index()?.policies();
        self.quotas.check(&sizing::Enrollment {
            netns: netns_path,
            policy,
            compiled: &compiled,
            addrs: &addrs,
            new,
            enrolled,
        })?;
        // A namespace the index does not know but the kernel has a policy for was written by
        // another process: its entries are looked for in the maps.
        let old = match self.index()?.get(cookie) {
            Some(old) => old,
            None if new => Owned::default(),
            None => Owned::scan(&mut self.maps, cookie)?,
        };
        phases.mark("quotas");
        let written = self
            .write_all(ns, policy, &addrs, &compiled, &old, &mut phases)
            .and_then(|done| ns.verify().map(|()| done));
        phases.mark("verify");
        let inbound = match written {
            Ok(Written { inbound, owned }) => {
                self.index()?.set(cookie, owned);
                inbound
            }
            Err(e) if !new => {
                // What is written is a mix of the old policy and the new, both capturing: on
                // doubt, capture. The index keeps the old entries (the next apply replaces them).
                tracing::error!(netns = %netns_path.display(), %cookie, error = %e,
                    "re-applying failed: the namespace keeps the entries in force");
                return Err(e);
            }
            Err(e) => {
                tracing::warn!(netns = %netns_path.display(), %cookie, error = %e,
                    "applying failed: removing everything written for the namespace");
                if let Err(undo) = self.remove_policy(cookie, Some(ns), netns_path) {
                    tracing::error!(netns = %netns_path.display(), error = %undo, "rolling back a failed apply");
                }
                return Err(e);
            }
        };
        tracing::info!(netns = %netns_path.display(), %cookie, ipv6, inbound,
            addrs = %redirect_policy::Comma(&addrs), us = phases.total_us(), "policy applied");
        Ok(Applied {
            cookie,
            addrs,
            ipv6,
            inbound,
            phases,
        })
    }

    /// Whether one of `addrs` is recorded for another namespace than `cookie` (a pod that is
    /// gone may still hold it until the next sweep).
    fn addresses_claimed(
        &mut self,
        cookie: NetnsCookie,
        addrs: &[std::net::IpAddr],
    ) -> Result<bool> {
        let map = hash::<redirect_common::AddrKey, u64>(&mut self.maps, map_names::POD_ADDRS)?;
        Ok(addrs.iter().any(|ip| {
            map.get(&inbound::addr_key(*ip), 0)
                .is_ok_and(|owner| owner != cookie)
        }))
    }

    /// Whether namespace `cookie` has an outbound policy.
    fn has_policy(&mut self, cookie: NetnsCookie) -> Result<bool> {
        Ok(
            hash::<NetnsCookie, redirect_common::outbound::OutboundPolicy>(
                &mut self.maps,
                map_names::NETNS_OUTBOUND,
            )?
            .get(&cookie, 0)
            .is_ok(),
        )
    }

    /// The namespaces' entries, read from the maps on first use.
    pub(super) fn index(&mut self) -> Result<&mut Index> {
        if self.index.is_none() {
            self.index = Some(Index::build(&mut self.maps)?);
        }
        Ok(self.index.get_or_insert_with(Index::default))
    }

    /// Every write of an apply over the namespace's previous entries `old`, the outbound
    /// policy last (each marked in `phases`). Returns whether inbound is on, and the entries
    /// the namespace now owns.
    fn write_all(
        &mut self,
        ns: &NetnsHandle,
        policy: &Policy,
        addrs: &[std::net::IpAddr],
        compiled: &outbound::Compiled,
        old: &Owned,
        phases: &mut Phases,
    ) -> Result<Written> {
        let (netns_path, cookie) = (ns.path(), ns.cookie());
        inbound::sync_addresses(&mut self.maps, netns_path, cookie, &old.addrs, addrs)?;
        phases.mark("pod_addrs");
        let mut now = Owned {
            addrs: addrs.to_vec(),
            ..Owned::default()
        };
        let spec = inbound_spec_of(policy, netns_path);
        let inbound = spec.is_some();
        // The policy being replaced says whether the pod has TPROXY routing to take away: a
        // map lookup, where asking the namespace would cost every apply a rule dump.
        let was_tproxy = inbound::is_tproxy(&mut self.maps, cookie)?;
        if let Some(spec) = spec {
            // New rules first, stale ones after: a re-apply never leaves a moment without one.
            inbound::write_inbound(&mut self.maps, &spec, cookie)?;
            inbound::remove_port_keys(&mut self.maps, &old.inbound_ports, &spec)?;
            now.inbound_ports = inbound::port_keys_of(&spec, cookie);
            phases.mark("inbound");
            self.attach_sk_lookup(ns)?;
            phases.mark("sk_lookup");
            inbound::adopt_listeners(&mut self.maps, &spec, ns)?;
            phases.mark("adopt");
            if spec.tproxy {
                ns.install_tproxy(TproxyRouting::ISTIO)?;
                phases.mark("tproxy_routing");
            } else if was_tproxy {
                ns.remove_tproxy()?;
            }
        } else {
            if was_tproxy {
                ns.remove_tproxy()?;
            }
            inbound::remove_inbound_keys(&mut self.maps, cookie, &old.inbound_ports)?;
            phases.mark("inbound");
            // With no inbound policy the program passes every lookup: the link is how the
            // kernel tells whether this namespace is gone (see `remove_stale`).
            self.attach_sk_lookup(ns)?;
            phases.mark("sk_lookup");
        }
        now.ifaces = write_ifaces(&mut self.maps, ns, policy, &old.ifaces)?;
        phases.mark("ifaces");
        now.out = outbound::write_over(&mut self.maps, cookie, compiled, &old.out)?;
        phases.mark("outbound");
        // After the policy: from now on sock_ops counts listen() calls; this counts the
        // listeners that were there before.
        seed_proxy_listeners(&mut self.maps, ns, policy.proxy_port)?;
        phases.mark("proxy_seen");
        Ok(Written {
            inbound,
            owned: now,
        })
    }

    pub(super) fn attach_sk_lookup(&mut self, ns: &NetnsHandle) -> Result<()> {
        let pin = self.dir.join("netns").join(ns.cookie().to_string());
        if pin.exists() {
            return Ok(());
        }
        let prog_path = self.dir.join("progs").join(self.sk_lookup);
        let prog =
            bpfsys::obj_get(&prog_path).map_err(pin_err("opening pinned program", &prog_path))?;
        let link = bpfsys::link_create(prog.as_fd(), ns.as_fd(), attach_type::SK_LOOKUP)
            .map_err(pin_err("attaching sk_lookup to", ns.path()))?;
        bpfsys::obj_pin(link.as_fd(), &pin).map_err(pin_err("pinning link", &pin))
    }

    pub(super) fn detach_sk_lookup(&mut self, cookie: NetnsCookie) -> Result<()> {
        let pin = self.dir.join("netns").join(cookie.to_string());
        match std::fs::remove_file(&pin) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(pin_err("unpinning", &pin)(e)),
        }
    }
}
