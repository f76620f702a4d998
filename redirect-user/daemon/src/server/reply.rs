//! Answers written without holding the request thread: as much as the socket takes at once,
//! and the rest, for a client that reads slower than the daemon answers (or not at all: a
//! `list` of many large policies is megabytes), on a writer thread of its own with a write
//! timeout. At most [`MAX_WRITERS`] such threads at once; past them the connection is dropped
//! (the client sees an answer cut short, never a daemon that stopped answering).
use std::{
    io::{ErrorKind, Write as _},
    os::unix::net::UnixStream,
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

/// Writer threads at once.
pub(super) const MAX_WRITERS: usize = 8;
/// How long a writer thread waits on a client that reads nothing.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

static WRITERS: AtomicUsize = AtomicUsize::new(0);

/// Sends `frame` on `stream`, handing what does not fit at once to a writer thread.
pub(super) fn send(stream: UnixStream, frame: String) {
    let bytes = frame.into_bytes();
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let mut sent = 0;
    while sent < bytes.len() {
        match (&stream).write(&bytes[sent..]) {
            Ok(0) => return,
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(_) => return,
        }
    }
    if sent == bytes.len() {
        return;
    }
    if WRITERS.fetch_add(1, Ordering::SeqCst) >= MAX_WRITERS {
        WRITERS.fetch_sub(1, Ordering::SeqCst);
        tracing::warn!(
            unsent = bytes.len() - sent,
            "an answer's client reads nothing and every writer thread is busy: connection dropped"
        );
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("reply".into())
        .spawn(move || {
            let written = stream
                .set_nonblocking(false)
                .and_then(|()| stream.set_write_timeout(Some(WRITE_TIMEOUT)))
                .and_then(|()| (&stream).write_all(&bytes[sent..]));
            if let Err(error) = written {
                tracing::warn!(%error, unsent = bytes.len() - sent, "an answer's client stopped \
                    reading: connection dropped");
            }
            WRITERS.fetch_sub(1, Ordering::SeqCst);
        });
    if spawned.is_err() {
        WRITERS.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    #[test]
    fn a_client_that_reads_late_gets_the_whole_answer_and_the_caller_is_not_held() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let frame = "x".repeat(4 << 20) + "\n";
        // Returns although nobody reads yet: the rest goes on a writer thread.
        send(a, frame.clone());
        let mut got = String::new();
        b.read_to_string(&mut got).unwrap();
        assert_eq!(got.len(), frame.len());
    }
}
