//! Keeps the kernel's sk_lookup switch on while the daemon runs. The kernel runs sk_lookup
//! programs behind a static key (`bpf_sk_lookup_enabled`) that the first sk_lookup link on the
//! node turns on and the last one's release turns off; each turn rewrites kernel text and
//! stops every CPU with an IPI (measured: about half of a pod's enrollment on a node with no
//! other pod enrolled, and the same again on its removal). One link of the datapath's own
//! sk_lookup program, in a private empty namespace nothing runs in (so it never runs), holds
//! the key on: a node going from no pods to one, or back, no longer pays the turn.
use std::{fs::File, os::fd::AsFd as _, os::fd::OwnedFd};

use super::{pins::pin_err, NodeDatapath};
use crate::{
    error::Result,
    netns,
    sys::bpfsys::{self, attach_type},
};

/// The held link and the namespace it is attached to; dropping it closes both (the kernel
/// detaches the link and frees the namespace).
#[derive(Debug)]
pub struct SkLookupKey {
    _link: OwnedFd,
    _netns: File,
}

impl NodeDatapath {
    /// Holds the sk_lookup static key on for as long as the returned value lives (see the
    /// module). Nothing is pinned: the key follows this process.
    pub fn hold_sk_lookup_key(&self) -> Result<SkLookupKey> {
        let ns = netns::private()?;
        let prog_path = self.dir.join("progs").join(self.sk_lookup);
        let prog =
            bpfsys::obj_get(&prog_path).map_err(pin_err("opening pinned program", &prog_path))?;
        let link = bpfsys::link_create(prog.as_fd(), ns.as_fd(), attach_type::SK_LOOKUP).map_err(
            pin_err("attaching sk_lookup to a private namespace for", &prog_path),
        )?;
        Ok(SkLookupKey {
            _link: link,
            _netns: ns,
        })
    }
}
