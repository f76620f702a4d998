//! Who writes a node's maps, decided in one place: the daemon that owns the pinned datapath
//! (recorded in its layout and alive), over its socket, so its enrollments, `list` and
//! `status` stay true; otherwise this process, under the node lock.
use std::path::Path;

use redirect_daemon_api::Client;

/// The writer of the datapath pinned at one directory.
#[derive(Debug)]
pub(crate) enum NodeWriter {
    /// The owning daemon.
    Daemon {
        /// Its pid (from the layout record).
        pid: u32,
        /// Its socket.
        client: Client,
    },
    /// This process, under the node lock (no live daemon owns the datapath, or none is pinned).
    Direct,
}

impl NodeWriter {
    /// The writer for the datapath at `bpffs`.
    pub(crate) fn for_node(bpffs: &Path) -> Self {
        match redirect_daemon::owner(bpffs) {
            Some((pid, socket)) => NodeWriter::Daemon {
                pid,
                client: Client::new(socket),
            },
            None => NodeWriter::Direct,
        }
    }
}
