//! Who may talk to the daemon: a peer of the daemon's own uid (root on a node), whatever the
//! socket's file mode says; and only a peer holding CAP_NET_ADMIN, the capability iptables
//! needs to change a pod's rules, may change what is captured. The mode is the first guard;
//! the peer's credentials, which the kernel records at connect and a client cannot forge, are
//! the second: a widened directory, or a container whose root is not the host's (a user
//! namespace), still gets nothing, and a root container that mounts the host's /run with the
//! runtime's default capabilities (no NET_ADMIN) may read (`list`, `status`, CNI CHECK) but
//! not enroll, unenroll, uninstall, nor send CNI ADD, DEL or GC.
use std::os::unix::net::UnixStream;

use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use redirect_daemon_api::Request;

/// CAP_NET_ADMIN's bit in a capability set.
const CAP_NET_ADMIN: u32 = 12;

/// A client the daemon answers: its pid as the daemon's PID namespace sees it (0 when it is
/// not visible there).
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pid: i32,
}

/// `Ok` when the peer of `stream` runs as the daemon's effective uid; else the refusal, naming
/// the peer's uid and pid.
pub fn check(stream: &UnixStream) -> Result<Peer, String> {
    let me = nix::unistd::geteuid().as_raw();
    match getsockopt(stream, PeerCredentials) {
        Ok(c) if c.uid() == me => Ok(Peer { pid: c.pid() }),
        Ok(c) => Err(format!(
            "the daemon answers only uid {me} on its socket; this client runs as uid {} (pid {}): refused (run the command as root on the node)",
            c.uid(),
            c.pid()
        )),
        Err(e) => Err(format!(
            "reading the client's credentials (SO_PEERCRED) failed: {e}: refused"
        )),
    }
}

/// Whether `req` changes what is captured (every request but the reads).
pub fn changes(req: &Request) -> bool {
    !matches!(
        req,
        Request::List | Request::Status | Request::PodCheck { .. }
    )
}

impl Peer {
    /// `Ok` when the peer holds CAP_NET_ADMIN in its effective set, read from its
    /// `/proc/PID/status`; else the refusal naming `op`, the pid and what to do.
    pub fn may_change(self, op: &str) -> Result<(), String> {
        if self.pid <= 0 {
            return Err(format!(
                "{op} changes capture and needs a client holding CAP_NET_ADMIN, but this client's process is not visible in the daemon's PID namespace: refused (run the daemon with the host's PID namespace, as the DaemonSet does)"
            ));
        }
        let path = format!("/proc/{}/status", self.pid);
        let status = std::fs::read_to_string(&path).map_err(|e| {
            format!("{op}: reading {path} for the client's capabilities: {e}: refused")
        })?;
        let eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .ok_or_else(|| format!("{op}: {path} has no CapEff line: refused"))?;
        if eff & (1 << CAP_NET_ADMIN) != 0 {
            Ok(())
        } else {
            Err(format!(
                "{op} changes capture and needs CAP_NET_ADMIN (as iptables does); this client (pid {}) runs as root without it: refused (reads such as list and status need no capability)",
                self.pid
            ))
        }
    }
}
