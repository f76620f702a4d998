//! The process at the other end of a unix socket, held by a pidfd the kernel makes at connect
//! (`SO_PEERPIDFD`, Linux 6.5): unlike the pid `SO_PEERCRED` gives, it keeps naming that
//! process, so a judge that reads `/proc/PID` and then finds the pidfd's process still there
//! knows it read the peer, not a process that was given its pid after it was reaped. And
//! that uid and pid (`SO_PEERCRED`), by hand: rustix's `UCred` cannot hold the pid 0 the
//! kernel gives for a peer outside the reader's PID namespace.
use std::{
    io,
    os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
};

/// The uid and pid of the process that connected `sock` (`SO_PEERCRED`); the pid is 0 when
/// that process is not visible in this PID namespace.
pub fn peer_credentials(sock: BorrowedFd<'_>) -> io::Result<(u32, i32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, a ucred of that size, and
    // `sock` is a descriptor borrowed for the call.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((cred.uid, cred.pid))
}

/// A pidfd of the process that connected `sock`; `None` where the kernel predates
/// `SO_PEERPIDFD` (before 6.5: the caller then has only the pid, and says so).
pub fn peer_pidfd(sock: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `fd`, a c_int of that size, and
    // `sock` is a descriptor borrowed for the call.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERPIDFD,
            (&raw mut fd).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOPROTOOPT) => Ok(None),
            _ => Err(e),
        };
    }
    if fd < 0 {
        return Err(io::Error::other("SO_PEERPIDFD returned no descriptor"));
    }
    // SAFETY: the kernel installed `fd` in this process for this call; nothing else owns it,
    // and it is wrapped once, so it is closed once.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Whether the process `pidfd` names has not been reaped yet (`pidfd_send_signal` with
/// signal 0: delivery is checked, nothing is sent). Until it is reaped its pid cannot be
/// given to another process.
pub fn still_there(pidfd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: pidfd_send_signal(2) with a borrowed descriptor, signal 0, no siginfo (NULL)
    // and no flags reads and writes no memory of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ESRCH) => Ok(false),
        // A process of another user (it cannot be signalled) is still there.
        Some(libc::EPERM) => Ok(true),
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::{fd::AsFd as _, unix::net::UnixStream};

    #[test]
    fn the_peer_of_a_pair_is_this_process_and_still_there() {
        let (a, _b) = UnixStream::pair().expect("pair");
        let Some(pidfd) = peer_pidfd(a.as_fd()).expect("SO_PEERPIDFD") else {
            // A kernel before 6.5: nothing to check.
            return;
        };
        assert!(still_there(pidfd.as_fd()).expect("pidfd_send_signal"));
    }

    #[test]
    fn the_credentials_of_a_pair_are_this_process() {
        let (a, _b) = UnixStream::pair().expect("pair");
        let (uid, pid) = peer_credentials(a.as_fd()).expect("SO_PEERCRED");
        // SAFETY: getuid(2) reads and writes no memory of ours.
        let me = unsafe { libc::getuid() };
        assert_eq!(
            (uid, pid),
            (me, i32::try_from(std::process::id()).expect("pid"))
        );
    }
}
