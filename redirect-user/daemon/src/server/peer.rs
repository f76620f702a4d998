//! Who may talk to the daemon: a peer of the daemon's own uid (root on a node), whatever the
//! socket's file mode says; and only a peer holding CAP_NET_ADMIN, the capability iptables
//! needs to change a pod's rules, may change what is captured. The mode is the first guard;
//! the peer's credentials, which the kernel records at connect and a client cannot forge, are
//! the second: a widened directory, or a container whose root is not the host's (a user
//! namespace), still gets nothing, and a root container that mounts the host's /run with the
//! runtime's default capabilities (no NET_ADMIN) may read (`list`, `status`, CNI CHECK) but
//! not enroll, unenroll, uninstall, nor send CNI ADD, DEL or GC. The capabilities are read as
//! soon as the connection is accepted, before its request: a peer's pid could be another
//! process's by the time a slow request arrives.
use std::os::unix::net::UnixStream;

use redirect_daemon_api::{
    peer::{credentials, effective_caps, holds, CAP_NET_ADMIN},
    Request,
};

/// A client the daemon answers, and whether it may change capture (or why not).
#[derive(Debug, Clone)]
pub struct Peer {
    may_change: Result<(), String>,
}

/// `Ok` when the peer of `stream` runs as the daemon's effective uid (its capabilities read
/// now); else the refusal, naming the peer's uid and pid.
pub fn check(stream: &UnixStream) -> Result<Peer, String> {
    let me = nix::unistd::geteuid().as_raw();
    let (uid, pid) = credentials(stream).map_err(|e| {
        format!("reading the client's credentials (SO_PEERCRED) failed: {e}: refused")
    })?;
    if uid != me {
        return Err(format!(
            "the daemon answers only uid {me} on its socket; this client runs as uid {uid} (pid {pid}): refused (run the command as root on the node)"
        ));
    }
    let may_change = if pid <= 0 {
        Err("this client's process is not visible in the daemon's PID namespace (run the daemon with the host's PID namespace, as the DaemonSet does)".to_owned())
    } else {
        match effective_caps(pid) {
            Ok(caps) if holds(caps, CAP_NET_ADMIN) => Ok(()),
            Ok(_) => Err(format!(
                "this client (pid {pid}) runs as root without CAP_NET_ADMIN (as iptables needs); reads such as list and status need no capability"
            )),
            Err(e) => Err(format!("reading the capabilities of this client (pid {pid}): {e}")),
        }
    };
    Ok(Peer { may_change })
}

/// Whether `req` changes what is captured (every request but the reads).
pub fn changes(req: &Request) -> bool {
    !matches!(
        req,
        Request::List | Request::Status | Request::PodCheck { .. }
    )
}

impl Peer {
    /// `Ok` when the peer held CAP_NET_ADMIN when it was accepted; else the refusal naming
    /// `op`.
    pub fn may_change(&self, op: &str) -> Result<(), String> {
        self.may_change
            .clone()
            .map_err(|why| format!("{op} changes capture and needs CAP_NET_ADMIN: {why}: refused"))
    }
}
