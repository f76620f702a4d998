//! One request as it arrives on the socket: its line, and the namespace descriptor its first
//! bytes carry (`SCM_RIGHTS`) when the client sent one.
use std::{
    io::{BufReader, Cursor, IoSliceMut, Read as _},
    os::{
        fd::{FromRawFd as _, OwnedFd},
        unix::{io::AsRawFd as _, net::UnixStream},
    },
};

use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};

use crate::decode::{read_frame, DecodeError};

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

/// Reads one request from `stream`: the first bytes with their ancillary data, the rest of the
/// line as plain reads. More than one descriptor is refused (all of them closed).
pub(super) fn receive(stream: &UnixStream) -> Result<Received, DecodeError> {
    let mut first = vec![0u8; FIRST_READ];
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
        read_frame(Cursor::new(first).chain(BufReader::new(stream)))?
    };
    Ok(Received { line, fd })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{IoSlice, Write as _};

    use nix::sys::socket::{sendmsg, ControlMessage};

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
        let got = receive(&b).expect("received");
        writer.join().expect("writer");
        assert_eq!(got.line.len(), FIRST_READ * 2);
        assert!(got.fd.is_some(), "the descriptor arrived");
    }

    #[test]
    fn no_descriptor_is_none_and_two_are_refused() {
        let (mut a, b) = UnixStream::pair().expect("pair");
        a.write_all(b"{}\n").expect("write");
        let got = receive(&b).expect("received");
        assert_eq!((got.line.as_slice(), got.fd.is_none()), (&b"{}"[..], true));
        let (a, b) = UnixStream::pair().expect("pair");
        let (f1, f2) = (
            std::fs::File::open("/dev/null").expect("file"),
            std::fs::File::open("/dev/null").expect("file"),
        );
        send_with(&a, b"{}\n", &[f1.as_raw_fd(), f2.as_raw_fd()]);
        assert!(matches!(receive(&b), Err(DecodeError::Descriptors)));
    }
}
