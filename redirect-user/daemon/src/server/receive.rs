//! One request as it arrives on the socket: its line, and the namespace descriptor its first
//! bytes carry (`SCM_RIGHTS`) when the client sent one, read whole before one deadline (a
//! client that sends a byte at a time, or nothing, is cut off there).
use std::{
    io::{BufReader, Cursor, IoSliceMut, Read},
    os::{
        fd::{FromRawFd as _, OwnedFd},
        unix::{io::AsRawFd as _, net::UnixStream},
    },
    time::Instant,
};

use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};

use redirect_daemon_api::{read_frame, DecodeError};

/// How much the first read takes (the rest of a longer line is read after it).
const FIRST_READ: usize = 64 * 1024;

/// A request's line and the descriptor that came with it.
#[derive(Debug)]
pub(super) struct Received {
    /// The line, without its newline.
    pub line: Vec<u8>,
    /// The namespace descriptor, if the client sent one.
    pub fd: Option<OwnedFd>,
}

/// Reads one request from `stream` before `deadline`: the first bytes with their ancillary
/// data, the rest of the line as plain reads. More than one descriptor is refused (all of them
/// closed); a request not whole by the deadline is a read error (timed out).
pub(super) fn receive(stream: &UnixStream, deadline: Instant) -> Result<Received, DecodeError> {
    let mut first = vec![0u8; FIRST_READ];
    until(stream, deadline).map_err(DecodeError::Read)?;
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let (n, fds, truncated) = loop {
        let mut iov = [IoSliceMut::new(&mut first)];
        match recvmsg::<UnixAddr>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(DecodeError::Read(e.into())),
            Ok(msg) => {
                let mut fds = Vec::new();
                for cmsg in msg.cmsgs().map_err(|e| DecodeError::Read(e.into()))? {
                    if let ControlMessageOwned::ScmRights(raw) = cmsg {
                        // SAFETY: the kernel installed these descriptors in this process for
                        // this message (MSG_CMSG_CLOEXEC); nothing else owns them, and each is
                        // wrapped exactly once, so each is closed exactly once.
                        fds.extend(
                            raw.into_iter()
                                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                        );
                    }
                }
                break (msg.bytes, fds, msg.flags.contains(MsgFlags::MSG_CTRUNC));
            }
        }
    };
    first.truncate(n);
    if truncated || fds.len() > 1 {
        return Err(DecodeError::Descriptors);
    }
    let fd = fds.into_iter().next();
    let line = if first.contains(&b'\n') || n == 0 {
        read_frame(Cursor::new(first))?
    } else {
        read_frame(Cursor::new(first).chain(BufReader::new(Deadline { stream, deadline })))?
    };
    Ok(Received { line, fd })
}

/// Sets `stream`'s read timeout to what is left before `deadline`; timed out when nothing is.
fn until(stream: &UnixStream, deadline: Instant) -> std::io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(std::io::ErrorKind::TimedOut.into());
    }
    stream.set_read_timeout(Some(left))
}

/// `stream` read with every read bounded by what is left before one deadline.
struct Deadline<'a> {
    stream: &'a UnixStream,
    deadline: Instant,
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        until(self.stream, self.deadline)?;
        self.stream.read(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{IoSlice, Write as _};

    use nix::sys::socket::{sendmsg, ControlMessage};

    fn soon() -> Instant {
        Instant::now() + std::time::Duration::from_secs(5)
    }

    #[test]
    fn a_client_that_sends_a_byte_at_a_time_is_cut_off_at_the_deadline() {
        let (mut a, b) = UnixStream::pair().expect("pair");
        let writer = std::thread::spawn(move || {
            for _ in 0..20 {
                if a.write_all(b"x").is_err() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        });
        let start = Instant::now();
        let got = receive(&b, start + std::time::Duration::from_millis(500));
        let took = start.elapsed();
        drop(b);
        writer.join().expect("writer");
        assert!(matches!(got, Err(DecodeError::Read(_))), "{got:?}");
        assert!(took < std::time::Duration::from_secs(2), "took {took:?}");
    }

    fn send_with(stream: &UnixStream, bytes: &[u8], fds: &[std::os::fd::RawFd]) -> usize {
        sendmsg::<UnixAddr>(
            stream.as_raw_fd(),
            &[IoSlice::new(bytes)],
            &[ControlMessage::ScmRights(fds)],
            MsgFlags::empty(),
            None,
        )
        .expect("sendmsg")
    }

    #[test]
    fn the_descriptor_comes_with_the_line_even_past_the_first_read() {
        let (mut a, b) = UnixStream::pair().expect("pair");
        let file = std::fs::File::open("/dev/null").expect("a file");
        let mut line = vec![b'x'; FIRST_READ * 2];
        line.push(b'\n');
        let writer = std::thread::spawn(move || {
            let sent = send_with(&a, &line, &[file.as_raw_fd()]);
            a.write_all(&line[sent..]).expect("the rest");
        });
        let got = receive(&b, soon()).expect("received");
        writer.join().expect("writer");
        assert_eq!(got.line.len(), FIRST_READ * 2);
        assert!(got.fd.is_some(), "the descriptor arrived");
    }

    #[test]
    fn no_descriptor_is_none_and_two_are_refused() {
        let (mut a, b) = UnixStream::pair().expect("pair");
        a.write_all(b"{}\n").expect("write");
        let got = receive(&b, soon()).expect("received");
        assert_eq!((got.line.as_slice(), got.fd.is_none()), (&b"{}"[..], true));
        let (a, b) = UnixStream::pair().expect("pair");
        let (f1, f2) = (
            std::fs::File::open("/dev/null").expect("file"),
            std::fs::File::open("/dev/null").expect("file"),
        );
        send_with(&a, b"{}\n", &[f1.as_raw_fd(), f2.as_raw_fd()]);
        assert!(matches!(receive(&b, soon()), Err(DecodeError::Descriptors)));
    }
}
