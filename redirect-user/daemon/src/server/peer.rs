//! Who may talk to the daemon: a peer of the daemon's own uid (root on a node), whatever the
//! socket's file mode says; and only a peer holding CAP_NET_ADMIN in the daemon's own user
//! namespace, the capability iptables needs to change a pod's rules, may change what is
//! captured. The mode is the first guard; the peer's credentials, which the kernel records at
//! connect and a client cannot forge, are the second: a widened directory, or a container
//! whose root is not the host's, still gets nothing; a root container that mounts the host's
//! /run with the runtime's default capabilities (no NET_ADMIN), or a process that made a user
//! namespace of its own (`unshare -Ur`: every capability there, none on the node), may read
//! (`list`, `status`, CNI CHECK) but not enroll, unenroll, uninstall, nor send CNI ADD, DEL or
//! GC. The peer is judged as soon as its connection is accepted, before its request, through
//! a pidfd where the kernel gives one (6.5 and later), so the process judged is the one that
//! connected, never another given its pid later.
use std::os::unix::net::UnixStream;

use redirect_daemon_api::{judge_peer as judge, Refusal, RefusalKind, Request, Standing};

/// A client the daemon answers, and whether it may change capture (or why not).
#[derive(Debug, Clone)]
pub(super) struct Peer {
    may_change: Result<(), String>,
    /// Its network namespace (device, inode), when it could be read.
    net_ns: Option<(u64, u64)>,
}

/// `Ok` when the peer of `stream` runs as the daemon's effective uid (judged now); else the
/// refusal, naming the peer's uid and pid.
pub(super) fn check(stream: &UnixStream) -> Result<Peer, Refusal> {
    let me = rustix::process::geteuid().as_raw();
    let forbidden = |message: String| Refusal::new(RefusalKind::Forbidden, message);
    let peer = judge(stream).map_err(|e| {
        forbidden(format!(
            "judging the client (SO_PEERCRED, SO_PEERPIDFD) failed: {e}: refused"
        ))
    })?;
    let (uid, pid) = (peer.uid, peer.pid);
    if uid != me {
        return Err(forbidden(format!(
            "the daemon answers only uid {me} on its socket; this client runs as uid {uid} (pid \
                {pid}): refused (run the command as root on the node)"
        )));
    }
    let may_change = match &peer.standing {
        Standing::NetAdmin => Ok(()),
        Standing::NotVisible => Err("this client's process is not visible in the daemon's PID \
            namespace (run the daemon with the host's PID namespace, as the DaemonSet does)"
            .to_owned()),
        Standing::NoNetAdmin => Err(format!(
            "this client (pid {pid}) runs as root without CAP_NET_ADMIN (as iptables needs); reads \
                such as list and status need no capability"
        )),
        Standing::OtherUserNamespace => Err(format!(
            "this client (pid {pid}) runs in a user namespace other than the daemon's, where its \
                capabilities count for nothing on the node; reads such as list and status need no \
                capability"
        )),
        other => Err(format!(
            "this client: {}",
            other.why_not(pid).unwrap_or_default()
        )),
    };
    if may_change.is_err() && peer.standing != Standing::NoNetAdmin {
        tracing::debug!(pid, standing = ?peer.standing, pidfd = peer.held_by_pidfd, "a client that may only read");
    }
    Ok(Peer {
        may_change,
        net_ns: peer.net_ns,
    })
}

/// The daemon's own network namespace (device, inode).
fn own_net_ns() -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self/ns/net")
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Whether `req` changes what is captured (every request but the reads).
pub(super) fn changes(req: &Request) -> bool {
    !matches!(
        req,
        Request::List | Request::Status | Request::PodCheck { .. }
    )
}

impl Peer {
    /// `Ok` when this peer may make request `req` (`fd`: the namespace descriptor that came
    /// with it): reads always; changes only with CAP_NET_ADMIN (see [`Peer::may_change`]); and
    /// a client inside another network namespace than the daemon's (a pod's: istio-init run
    /// with this image) may enroll its own namespace and nothing else: neither another
    /// namespace, nor unenroll, nor uninstall. CNI requests are judged as the runtime's.
    pub(super) fn may(
        &self,
        req: &Request,
        fd: Option<&std::os::fd::OwnedFd>,
    ) -> Result<(), Refusal> {
        if !changes(req) {
            return Ok(());
        }
        let op = req.op();
        self.may_change(op)?;
        if self.net_ns.is_some() && self.net_ns == own_net_ns() {
            return Ok(());
        }
        let refused = |what: &str| {
            Err(Refusal::new(
                RefusalKind::Forbidden,
                format!(
                    "{op} from a client inside a pod's network namespace (not the node's): it may \
                    enroll its own namespace only, {what}: refused"
                ),
            ))
        };
        match req {
            Request::Enroll { netns, .. } => {
                use std::os::unix::fs::MetadataExt as _;
                let target = match fd {
                    Some(fd) => fd
                        .try_clone()
                        .map(std::fs::File::from)
                        .and_then(|f| f.metadata()),
                    None => std::fs::metadata(netns),
                }
                .ok()
                .map(|m| (m.dev(), m.ino()));
                if target.is_some() && target == self.net_ns {
                    Ok(())
                } else {
                    refused(&format!("and {} is another", netns.display()))
                }
            }
            Request::PodAdd { .. }
            | Request::PodDel { .. }
            | Request::PodCheck { .. }
            | Request::PodGc { .. } => Ok(()),
            _ => refused("not change the node's other captures"),
        }
    }

    /// `Ok` when the peer held CAP_NET_ADMIN when it was accepted; else the refusal naming
    /// `op`.
    pub(super) fn may_change(&self, op: &str) -> Result<(), Refusal> {
        self.may_change.clone().map_err(|why| {
            Refusal::new(
                RefusalKind::Forbidden,
                format!("{op} changes capture and needs CAP_NET_ADMIN: {why}: refused"),
            )
        })
    }
}
