//! One request as it arrives on the socket: its line, and the namespace descriptor its first
//! bytes carry (`SCM_RIGHTS`) when the client sent one, read whole before one deadline (a
//! client that sends a byte at a time, or nothing, is cut off there). A task of the daemon's
//! runtime waits for it; no thread does.
use std::{
    io::{Cursor, IoSliceMut},
    mem::MaybeUninit,
    os::fd::{AsFd, OwnedFd},
    time::Instant,
};

use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags};
use tokio::{
    io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader, Interest},
    net::UnixStream,
};

use redirect_daemon_api::{read_frame, DecodeError, MAX_REQUEST_BYTES};

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
pub(super) async fn receive(
    stream: &mut UnixStream,
    deadline: Instant,
) -> Result<Received, DecodeError> {
    tokio::time::timeout_at(deadline.into(), whole(stream))
        .await
        .unwrap_or_else(|_| Err(DecodeError::Read(std::io::ErrorKind::TimedOut.into())))
}

/// [`receive`] without its deadline.
async fn whole(stream: &mut UnixStream) -> Result<Received, DecodeError> {
    let mut first = vec![0u8; FIRST_READ];
    let (n, fds, truncated) = stream
        .async_io(Interest::READABLE, || first_read(&*stream, &mut first))
        .await
        .map_err(DecodeError::Read)?;
    first.truncate(n);
    if truncated || fds.len() > 1 {
        return Err(DecodeError::Descriptors);
    }
    let fd = fds.into_iter().next();
    let mut rest = Vec::new();
    if !first.contains(&b'\n') && n > 0 {
        // One byte past the cap, as read_frame takes, so an over-long line is told apart.
        let limit = (MAX_REQUEST_BYTES + 1).saturating_sub(n);
        let limit = u64::try_from(limit).unwrap_or(u64::MAX);
        BufReader::new(&mut *stream)
            .take(limit)
            .read_until(b'\n', &mut rest)
            .await
            .map_err(DecodeError::Read)?;
    }
    let line = read_frame(std::io::Read::chain(Cursor::new(first), Cursor::new(rest)))?;
    Ok(Received { line, fd })
}

/// One `recvmsg` of the first bytes and their descriptors (would block: nothing yet).
fn first_read(socket: impl AsFd, buf: &mut [u8]) -> std::io::Result<(usize, Vec<OwnedFd>, bool)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg(socket, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)?;
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    Ok((msg.bytes, fds, msg.flags.contains(ReturnFlags::CTRUNC)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{IoSlice, Write as _};

    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::os::fd::BorrowedFd;

    fn soon() -> Instant {
        Instant::now() + std::time::Duration::from_secs(5)
    }

    /// A connected pair: the client's end (std, written by a thread) and the daemon's (tokio).
    fn pair() -> (std::os::unix::net::UnixStream, UnixStream) {
        let (a, b) = std::os::unix::net::UnixStream::pair().expect("pair");
        b.set_nonblocking(true).expect("nonblocking");
        (a, UnixStream::from_std(b).expect("tokio stream"))
    }

    #[tokio::test]
    async fn a_client_that_sends_a_byte_at_a_time_is_cut_off_at_the_deadline() {
        let (mut a, mut b) = pair();
        let writer = std::thread::spawn(move || {
            for _ in 0..20 {
                if a.write_all(b"x").is_err() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        });
        let start = Instant::now();
        let got = receive(&mut b, start + std::time::Duration::from_millis(500)).await;
        let took = start.elapsed();
        drop(b);
        writer.join().expect("writer");
        assert!(matches!(got, Err(DecodeError::Read(_))), "{got:?}");
        assert!(took < std::time::Duration::from_secs(2), "took {took:?}");
    }

    fn send_with(
        stream: &std::os::unix::net::UnixStream,
        bytes: &[u8],
        fds: &[BorrowedFd<'_>],
    ) -> usize {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        assert!(
            control.push(SendAncillaryMessage::ScmRights(fds)),
            "room for the descriptors"
        );
        sendmsg(
            stream,
            &[IoSlice::new(bytes)],
            &mut control,
            SendFlags::empty(),
        )
        .expect("sendmsg")
    }

    #[tokio::test]
    async fn the_descriptor_comes_with_the_line_even_past_the_first_read() {
        let (mut a, mut b) = pair();
        let file = std::fs::File::open("/dev/null").expect("a file");
        let mut line = vec![b'x'; FIRST_READ * 2];
        line.push(b'\n');
        let writer = std::thread::spawn(move || {
            let sent = send_with(&a, &line, &[file.as_fd()]);
            a.write_all(&line[sent..]).expect("the rest");
        });
        let got = receive(&mut b, soon()).await.expect("received");
        writer.join().expect("writer");
        assert_eq!(got.line.len(), FIRST_READ * 2);
        assert!(got.fd.is_some(), "the descriptor arrived");
    }

    #[tokio::test]
    async fn a_line_past_the_cap_is_refused_as_too_long() {
        let (mut a, mut b) = pair();
        let writer = std::thread::spawn(move || {
            let _ = a.write_all(&vec![b'x'; MAX_REQUEST_BYTES + 10]);
        });
        let got = receive(&mut b, soon()).await;
        drop(b);
        writer.join().expect("writer");
        assert!(matches!(got, Err(DecodeError::TooLong)), "{got:?}");
    }

    #[tokio::test]
    async fn no_descriptor_is_none_and_two_are_refused() {
        let (mut a, mut b) = pair();
        a.write_all(b"{}\n").expect("write");
        let got = receive(&mut b, soon()).await.expect("received");
        assert_eq!((got.line.as_slice(), got.fd.is_none()), (&b"{}"[..], true));
        let (a, mut b) = pair();
        let (f1, f2) = (
            std::fs::File::open("/dev/null").expect("file"),
            std::fs::File::open("/dev/null").expect("file"),
        );
        send_with(&a, b"{}\n", &[f1.as_fd(), f2.as_fd()]);
        assert!(matches!(
            receive(&mut b, soon()).await,
            Err(DecodeError::Descriptors)
        ));
    }
}
