//! Who is at the other end of the daemon's socket, as the kernel recorded it at connect
//! (`SO_PEERCRED`): its uid and pid, and the effective capabilities of that pid. The daemon
//! asks it of its clients (changing capture needs CAP_NET_ADMIN); its clients ask it of the
//! daemon (whatever answers at the socket's path must be root holding CAP_NET_ADMIN, so a
//! process that took the path over cannot answer a CNI ADD as if it had enrolled the pod).
use std::os::unix::net::UnixStream;

use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};

/// CAP_NET_ADMIN's bit in a capability set.
pub const CAP_NET_ADMIN: u32 = 12;

/// The peer of a connected socket: uid and pid (0 when not visible in this PID namespace).
pub fn credentials(stream: &UnixStream) -> std::io::Result<(u32, i32)> {
    let c = getsockopt(stream, PeerCredentials).map_err(std::io::Error::from)?;
    Ok((c.uid(), c.pid()))
}

/// The effective capability set of process `pid` (`/proc/PID/status`, `CapEff`).
pub fn effective_caps(pid: i32) -> std::io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .ok_or_else(|| std::io::Error::other(format!("/proc/{pid}/status has no CapEff line")))
}

/// Whether the capability set `caps` holds capability `cap`.
#[must_use]
pub fn holds(caps: u64, cap: u32) -> bool {
    caps & (1 << cap) != 0
}
