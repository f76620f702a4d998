//! Finds a proxy that was already listening on the inbound port when its namespace was
//! enrolled (sock_ops only sees new `listen()` calls) and hands its socket to `LISTENERS`.
use std::{
    os::fd::{FromRawFd as _, OwnedFd},
    path::Path,
};

use crate::error::{Error, Result};

/// A listening socket found in a namespace: its inode and whether it is IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listening {
    /// Socket inode, as in `/proc/PID/fd/N -> socket:[INODE]`.
    pub inode: u64,
    /// From `/proc/net/tcp6` rather than `/proc/net/tcp`.
    pub ipv6: bool,
}

/// Parses `/proc/net/tcp{,6}` text: sockets in LISTEN state (0A) on `port`.
pub fn parse_listeners(text: &str, port: u16, ipv6: bool) -> Vec<Listening> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f.get(1)?.rsplit(':').next()?;
            let state = f.get(3)?;
            let inode: u64 = f.get(9)?.parse().ok()?;
            (u16::from_str_radix(local_port, 16).ok()? == port && *state == "0A" && inode != 0)
                .then_some(Listening { inode, ipv6 })
        })
        .collect()
}

/// The listening sockets on `port` inside the namespace at `netns`.
pub fn listeners(netns: &Path, port: u16) -> Result<Vec<Listening>> {
    let file =
        std::fs::File::open(netns).map_err(|e| Error::io("opening network namespace", netns, e))?;
    let shown = netns.to_path_buf();
    std::thread::spawn(move || -> std::io::Result<Vec<Listening>> {
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(std::io::Error::from)?;
        let mut out = Vec::new();
        for (path, ipv6) in [
            ("/proc/thread-self/net/tcp", false),
            ("/proc/thread-self/net/tcp6", true),
        ] {
            if let Ok(text) = std::fs::read_to_string(path) {
                out.extend(parse_listeners(&text, port, ipv6));
            }
        }
        Ok(out)
    })
    .join()
    .map_err(|_| {
        Error::io(
            "reading listeners in",
            &shown,
            std::io::Error::other("thread panicked"),
        )
    })?
    .map_err(|e| Error::io("reading listeners in", &shown, e))
}

/// Finds (pid, fd) of a process holding the socket with `inode`.
fn holder(inode: u64) -> Option<(i32, i32)> {
    let target = format!("socket:[{inode}]");
    for proc in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = proc.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(proc.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target.as_str()) {
                if let Ok(n) = fd.file_name().to_string_lossy().parse::<i32>() {
                    return Some((pid, n));
                }
            }
        }
    }
    None
}

/// Duplicates the socket with `inode` into this process (pidfd_open + pidfd_getfd).
pub fn take_socket(inode: u64) -> Option<OwnedFd> {
    let (pid, fd) = holder(inode)?;
    // SAFETY: syscall edge: pidfd_open(pid, 0) returns a new fd or -1; no memory is passed.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        return None;
    }
    // SAFETY: `pidfd` is a valid, owned file descriptor just returned by the kernel.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    // SAFETY: syscall edge: pidfd_getfd(pidfd, fd, 0) returns a new fd or -1; no memory is passed.
    let sock = unsafe {
        libc::syscall(
            libc::SYS_pidfd_getfd,
            std::os::fd::AsRawFd::as_raw_fd(&pidfd),
            fd,
            0,
        )
    };
    // SAFETY: a non-negative return is a new file descriptor owned by us.
    (sock >= 0).then(|| unsafe { OwnedFd::from_raw_fd(sock as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:3A9E 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1337        0 41234 1 0000000000000000 100 0 0 10 0
   1: 0100007F:3A99 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1337        0 41233 1 0000000000000000 100 0 0 10 0
   2: 0100007F:3A9E 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 41240 1 0000000000000000 20 4 30 10 -1
";

    #[test]
    fn finds_only_listeners_on_the_port() {
        // 0x3A9E = 15006, 0x3A99 = 15001.
        assert_eq!(
            parse_listeners(TCP, 15006, false),
            [Listening {
                inode: 41234,
                ipv6: false
            }]
        );
        assert_eq!(
            parse_listeners(TCP, 15001, true),
            [Listening {
                inode: 41233,
                ipv6: true
            }]
        );
        assert!(parse_listeners(TCP, 8080, false).is_empty());
        assert!(parse_listeners("", 15006, false).is_empty());
    }
}
