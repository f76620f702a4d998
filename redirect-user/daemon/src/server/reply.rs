//! Answers written by their connection's task: as much as the socket takes at once, and the
//! rest, for a client that reads slower than the daemon answers (or not at all: a `list` of
//! many large policies is megabytes), with a write timeout while holding one of
//! [`MAX_WRITERS`] slots; past them the connection is dropped (the client sees an answer cut
//! short, never a daemon that stopped answering).
use std::{io::ErrorKind, sync::Arc, time::Duration};

use tokio::{io::AsyncWriteExt as _, net::UnixStream, sync::Semaphore};

/// Answers written to slow readers at once.
pub(super) const MAX_WRITERS: usize = 8;
/// How long an answer waits on a client that reads nothing.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Sends `frame` on `stream`; what does not fit at once waits for the client while holding a
/// slot of `writers`.
pub(super) async fn send(mut stream: UnixStream, frame: String, writers: &Arc<Semaphore>) {
    let bytes = frame.into_bytes();
    let mut sent = 0;
    while sent < bytes.len() {
        match stream.try_write(&bytes[sent..]) {
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
    let Ok(_slot) = Arc::clone(writers).try_acquire_owned() else {
        tracing::warn!(
            unsent = bytes.len() - sent,
            "an answer's client reads nothing and every writer slot is busy: connection dropped"
        );
        return;
    };
    let written = tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(&bytes[sent..])).await;
    let error = match written {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(_) => ErrorKind::TimedOut.into(),
    };
    tracing::warn!(%error, unsent = bytes.len() - sent, "an answer's client stopped reading: \
        connection dropped");
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt as _;

    #[tokio::test]
    async fn a_client_that_reads_late_gets_the_whole_answer() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let frame = "x".repeat(4 << 20) + "\n";
        let writers = Arc::new(Semaphore::new(MAX_WRITERS));
        // The answer waits for its reader on a task of its own.
        let sending = tokio::spawn({
            let (frame, writers) = (frame.clone(), Arc::clone(&writers));
            async move { send(a, frame, &writers).await }
        });
        let mut got = String::new();
        b.read_to_string(&mut got).await.unwrap();
        sending.await.unwrap();
        assert_eq!(got.len(), frame.len());
    }

    #[tokio::test]
    async fn past_the_writer_slots_a_slow_reader_is_dropped_not_waited_for() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let writers = Arc::new(Semaphore::new(0));
        send(a, "x".repeat(4 << 20), &writers).await;
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert!(got.len() < 4 << 20, "cut short: {}", got.len());
    }
}
