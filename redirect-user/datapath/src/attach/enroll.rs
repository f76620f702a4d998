//! `redirect attach`'s inbound enrollment of a network namespace: its policy, port rules and
//! addresses through the shared map writers (`maps::inbound`), then the sk_lookup link this
//! process holds, and the proxy already listening adopted.
use redirect_policy::{InboundSpec, InboundSpecPorts as InboundPorts};

use crate::{
    attach::datapath::{AttachDatapath, Enrolled},
    error::Result,
    maps::inbound::{adopt_listeners, sync_addresses, write_inbound},
    netns::NetnsHandle,
};

impl AttachDatapath {
    /// Enrolls `spec`'s namespace: policy, port rules and addresses first, then sk_lookup.
    pub(crate) fn enroll(&mut self, spec: &InboundSpec) -> Result<()> {
        if spec.ports == InboundPorts::None {
            tracing::info!(netns = %spec.netns.display(), "inbound capture disabled (empty -b)");
            return Ok(());
        }
        // Opened once: every lookup and the link below go through this descriptor.
        let ns = NetnsHandle::open(&spec.netns)?;
        let cookie = ns.cookie();
        let addrs = ns.addresses()?;
        write_inbound(&mut self.ebpf, spec, cookie)?;
        sync_addresses(&mut self.ebpf, &spec.netns, cookie, &[], &addrs)?;

        let link = crate::attach::plan::link_sk_lookup(&mut self.ebpf, self.sk_lookup, &ns)?;
        self.hold(link);
        adopt_listeners(&mut self.ebpf, spec, &ns)?;
        // The process's maps and links go with it: an error here leaves nothing behind.
        ns.verify()?;
        tracing::info!(netns = %spec.netns.display(), %cookie,
            addrs = %redirect_policy::Comma(&addrs), "inbound capture enrolled");
        self.ebpf_enrolled.push(Enrolled {
            spec: spec.clone(),
            cookie,
            addrs,
        });
        self.ebpf_netns.push(ns);
        Ok(())
    }

    /// Re-reads every enrolled namespace's addresses and updates `POD_ADDRS` (addresses may
    /// be added after enrollment, e.g. by a CNI). Returns how many namespaces changed.
    pub fn refresh_addresses(&mut self) -> Result<usize> {
        let mut changed = 0;
        for i in 0..self.ebpf_enrolled.len() {
            let (path, cookie, old) = {
                let e = &self.ebpf_enrolled[i];
                (e.spec.netns.clone(), e.cookie, e.addrs.clone())
            };
            // The descriptor opened at enrollment, not the path again.
            let new = self.ebpf_netns[i].addresses()?;
            if new != old {
                sync_addresses(&mut self.ebpf, &path, cookie, &old, &new)?;
                tracing::info!(netns = %path.display(), addrs = %redirect_policy::Comma(&new), "pod addresses changed");
                self.ebpf_enrolled[i].addrs = new;
                changed += 1;
            }
        }
        Ok(changed)
    }

    /// Enrolled namespaces.
    pub fn enrolled(&self) -> &[Enrolled] {
        &self.ebpf_enrolled
    }
}
