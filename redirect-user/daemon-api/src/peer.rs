//! Who is at the other end of the daemon's socket, as the kernel recorded it at connect: its
//! uid and pid (`SO_PEERCRED`), a pidfd of it (`SO_PEERPIDFD`, Linux 6.5), and whether it holds
//! CAP_NET_ADMIN in the judge's own user namespace. The daemon asks it of its clients
//! (changing capture needs CAP_NET_ADMIN); its clients ask it of the daemon (whatever answers
//! at the socket's path must be root holding CAP_NET_ADMIN, so a process that took the path
//! over cannot answer a CNI ADD as if it had enrolled the pod).
//!
//! A capability counts only in the judge's user namespace: any process may make a user
//! namespace of its own (`unshare -Ur`) and holds every capability inside it, while
//! `SO_PEERCRED` still says uid 0. So a peer in another user namespace holds nothing here.
//! The capabilities and the namespace are read from `/proc/PID`; where the kernel gives a
//! pidfd, the peer is checked to be still there after the reads, so a pid reused meanwhile
//! (the peer exited and was reaped) is never what was judged.
use std::os::{fd::AsFd as _, unix::fs::MetadataExt as _, unix::net::UnixStream};

/// CAP_NET_ADMIN's bit in a capability set.
pub(crate) const CAP_NET_ADMIN: u32 = 12;

/// The peer of a connected socket: uid and pid (0 when not visible in this PID namespace).
pub(crate) fn credentials(stream: &UnixStream) -> std::io::Result<(u32, i32)> {
    redirect_sys::peer_credentials(stream.as_fd())
}

/// The effective capability set of process `pid` (`/proc/PID/status`, `CapEff`).
pub(crate) fn effective_caps(pid: i32) -> std::io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .ok_or_else(|| std::io::Error::other(format!("/proc/{pid}/status has no CapEff line")))
}

/// Whether the capability set `caps` holds capability `cap`.
#[must_use]
pub(crate) fn holds(caps: u64, cap: u32) -> bool {
    caps & (1 << cap) != 0
}

/// The user namespace of `pid` (`/proc/PID/ns/user`: device and inode), `self` for this
/// process.
fn user_ns(pid: &str) -> std::io::Result<(u64, u64)> {
    let m = std::fs::metadata(format!("/proc/{pid}/ns/user"))?;
    Ok((m.dev(), m.ino()))
}

/// What a peer may do, judged in this process's user namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Holds CAP_NET_ADMIN in this user namespace.
    NetAdmin,
    /// Runs in this user namespace without CAP_NET_ADMIN.
    NoNetAdmin,
    /// Runs in a user namespace of its own: its capabilities count there, not here.
    OtherUserNamespace,
    /// Not visible in this PID namespace (`SO_PEERCRED` pid 0).
    NotVisible,
    /// Exited (and its pid may be another process's) before it was judged.
    Gone,
    /// Its `/proc` entries could not be read (the reason).
    Unreadable(String),
}

/// A peer: uid, pid, and what it may do.
#[derive(Debug, Clone)]
pub struct PeerProcess {
    /// Its uid (as this user namespace sees it).
    pub uid: u32,
    /// Its pid (0 when not visible).
    pub pid: i32,
    /// What it may do here.
    pub standing: Standing,
    /// Whether a pidfd held it while it was judged (Linux 6.5 and later).
    pub held_by_pidfd: bool,
    /// Its network namespace (`/proc/PID/ns/net`: device and inode), when it could be read.
    pub net_ns: Option<(u64, u64)>,
}

/// Judges the peer of `stream` now: its credentials, and CAP_NET_ADMIN in this user namespace.
pub fn judge(stream: &UnixStream) -> std::io::Result<PeerProcess> {
    let (uid, pid) = credentials(stream)?;
    if pid <= 0 {
        return Ok(PeerProcess {
            uid,
            pid,
            standing: Standing::NotVisible,
            held_by_pidfd: false,
            net_ns: None,
        });
    }
    let pidfd = redirect_sys::peer_pidfd(stream.as_fd())?;
    let mut standing = read_standing(pid);
    let net_ns = std::fs::metadata(format!("/proc/{pid}/ns/net"))
        .ok()
        .map(|m| (m.dev(), m.ino()));
    if let Some(pidfd) = &pidfd {
        if !redirect_sys::peer_still_there(pidfd.as_fd())? {
            standing = Standing::Gone;
        }
    }
    Ok(PeerProcess {
        uid,
        pid,
        standing,
        held_by_pidfd: pidfd.is_some(),
        net_ns,
    })
}

fn read_standing(pid: i32) -> Standing {
    let theirs = match user_ns(&pid.to_string()) {
        Ok(ns) => ns,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Standing::Gone,
        Err(e) => {
            return Standing::Unreadable(format!("its user namespace (/proc/{pid}/ns/user): {e}"))
        }
    };
    match user_ns("self") {
        Ok(mine) if mine == theirs => {}
        Ok(_) => return Standing::OtherUserNamespace,
        Err(e) => return Standing::Unreadable(format!("this process's user namespace: {e}")),
    }
    match effective_caps(pid) {
        Ok(caps) if holds(caps, CAP_NET_ADMIN) => Standing::NetAdmin,
        Ok(_) => Standing::NoNetAdmin,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Standing::Gone,
        Err(e) => Standing::Unreadable(format!("its capabilities (/proc/{pid}/status): {e}")),
    }
}

impl Standing {
    /// Why a peer of this standing may not change capture; `None` for [`Standing::NetAdmin`].
    #[must_use]
    pub fn why_not(&self, pid: i32) -> Option<String> {
        Some(match self {
            Self::NetAdmin => return None,
            Self::NoNetAdmin => format!("its process (pid {pid}) runs as root without CAP_NET_ADMIN"),
            Self::OtherUserNamespace => format!(
                "its process (pid {pid}) runs in a user namespace of its own, where capabilities count for nothing here"
            ),
            Self::NotVisible => "its process is not visible in this PID namespace".to_owned(),
            Self::Gone => format!("its process (pid {pid}) exited before it could be judged"),
            Self::Unreadable(why) => format!("reading {why} failed"),
        })
    }
}

/// Whether the process that answers on `stream` may be the daemon: root, and, where its pid
/// is visible (this process's PID namespace: the node's, for the CNI plugin), holding
/// CAP_NET_ADMIN in this process's user namespace, as the daemon does (privileged, or the
/// DaemonSet's capabilities): a process that made a user namespace of its own holds every
/// capability there and none here. A client that may not read the answering process's user
/// namespace (root without CAP_SYS_PTRACE, which can only read) judges by its capabilities.
pub(crate) fn is_the_daemon(stream: &UnixStream) -> Result<(), String> {
    let peer = judge(stream).map_err(|e| format!("judging the answering process failed: {e}"))?;
    let (uid, pid) = (peer.uid, peer.pid);
    if uid != 0 {
        return Err(format!(
            "it runs as uid {uid} (pid {pid}), the daemon as root"
        ));
    }
    match peer.standing {
        Standing::NetAdmin => Ok(()),
        // Another PID namespace (a client inside a pod): its uid is all there is to check.
        Standing::NotVisible => Ok(()),
        Standing::Unreadable(_) => match effective_caps(pid) {
            Ok(caps) if holds(caps, CAP_NET_ADMIN) => Ok(()),
            Ok(_) => Err(format!(
                "its process (pid {pid}) runs as root without CAP_NET_ADMIN, which the daemon holds"
            )),
            Err(e) => Err(format!(
                "reading the capabilities of its process (pid {pid}): {e}"
            )),
        },
        other => Err(format!(
            "{}, while the daemon holds CAP_NET_ADMIN on the node",
            other.why_not(pid).unwrap_or_default()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_judged_in_its_own_user_namespace() {
        let (a, _b) = UnixStream::pair().expect("pair");
        let peer = judge(&a).expect("judged");
        assert_eq!(peer.pid, i32::try_from(std::process::id()).expect("pid"));
        let caps = effective_caps(peer.pid).expect("caps");
        let want = if holds(caps, CAP_NET_ADMIN) {
            Standing::NetAdmin
        } else {
            Standing::NoNetAdmin
        };
        assert_eq!(peer.standing, want);
    }
}
