//! Requests arrive off the thread that serves pods and runs the tick: an accept thread takes
//! every connection as it comes and judges its peer at once; a reader thread per connection
//! reads its request whole before one deadline ([`DEADLINE`]) and hands it, decoded, to the
//! serving thread through a channel that wakes its poll. A client that sends a byte at a
//! time, or nothing, holds only its own reader, for at most the deadline; past
//! [`MAX_READERS`] readers a new connection is refused at once (busy: retry), so idle
//! connections cannot take every reader either for longer than the deadline.
use std::{
    io::Read as _,
    os::{
        fd::{AsFd, BorrowedFd, OwnedFd},
        unix::net::{UnixListener, UnixStream},
    },
    sync::{
        atomic::{AtomicUsize, Ordering},
        mpsc::{channel, Receiver, Sender},
        Arc,
    },
    time::{Duration, Instant},
};

use redirect_daemon_api::{encode_answer, DecodeError, Refusal, RefusalKind, Request};

use super::{peer, receive, reply};
use redirect_daemon_api::decode_request;

/// How long a client has to send its whole request after it connected.
pub(super) const DEADLINE: Duration = Duration::from_secs(1);
/// Connections being read at once.
pub(super) const MAX_READERS: usize = 64;

/// A request read whole, or why it could not be: for the serving thread to answer.
#[derive(Debug)]
pub(super) struct Arrived {
    /// The client's connection, to answer on.
    pub stream: UnixStream,
    /// What the peer may do (judged at accept).
    pub peer: peer::Peer,
    /// The request and the namespace descriptor that came with it, or the refusal.
    pub request: Result<(Request, Option<OwnedFd>), Refusal>,
    /// When the connection was accepted.
    pub accepted: Instant,
}

/// The serving thread's end: requests waiting, and a socket that is readable while any is.
#[derive(Debug)]
pub(super) struct Intake {
    rx: Receiver<Arrived>,
    wake_read: UnixStream,
}

impl Intake {
    /// Starts the accept thread on `listener` (a clone of the daemon's socket).
    pub(super) fn start(listener: UnixListener) -> std::io::Result<Self> {
        let (wake_read, wake_write) = UnixStream::pair()?;
        wake_read.set_nonblocking(true)?;
        listener.set_nonblocking(false)?;
        let (tx, rx) = channel();
        let readers = Arc::new(AtomicUsize::new(0));
        let wake_write = Arc::new(wake_write);
        std::thread::Builder::new()
            .name("accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    match conn {
                        Ok(stream) => take(stream, &tx, &wake_write, &readers),
                        // The listener was shut down: the daemon stops.
                        Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => return,
                        Err(e) => {
                            tracing::warn!(error = %e, "accept");
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                }
            })?;
        Ok(Self { rx, wake_read })
    }

    /// What the serving thread polls: readable when a request is waiting.
    pub(super) fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake_read.as_fd()
    }

    /// The requests waiting now.
    pub(super) fn drain(&self) -> Vec<Arrived> {
        let mut sink = [0u8; 64];
        while (&self.wake_read).read(&mut sink).is_ok_and(|n| n > 0) {}
        self.rx.try_iter().collect()
    }
}

/// Judges the peer of a new connection and starts its reader, or refuses it at once.
fn take(
    stream: UnixStream,
    tx: &Sender<Arrived>,
    wake: &Arc<UnixStream>,
    readers: &Arc<AtomicUsize>,
) {
    let accepted = Instant::now();
    let peer = match peer::check(&stream) {
        Ok(peer) => peer,
        Err(refused) => {
            tracing::warn!(%refused, "connection refused");
            reply::send(stream, encode_answer(&Err(refused)));
            return;
        }
    };
    if readers.fetch_add(1, Ordering::SeqCst) >= MAX_READERS {
        readers.fetch_sub(1, Ordering::SeqCst);
        tracing::warn!(
            readers = MAX_READERS,
            "connection refused: every reader is busy"
        );
        let busy = Err(Refusal::new(
            RefusalKind::Busy,
            format!("the daemon is reading {MAX_READERS} requests already: retry (fail closed)"),
        ));
        reply::send(stream, encode_answer(&busy));
        return;
    }
    let (tx, wake, left) = (tx.clone(), Arc::clone(wake), Arc::clone(readers));
    let spawned = std::thread::Builder::new()
        .name("request".into())
        .spawn(move || {
            let request = read(&stream, accepted + DEADLINE);
            left.fetch_sub(1, Ordering::SeqCst);
            let _ = tx.send(Arrived {
                stream,
                peer,
                request,
                accepted,
            });
            let _ = std::io::Write::write_all(&mut &*wake, b"x");
        });
    if let Err(e) = spawned {
        // No thread: its client sees the connection close (the plugin fails closed).
        readers.fetch_sub(1, Ordering::SeqCst);
        tracing::error!(error = %e, "starting a request reader");
    }
}

/// The request on `stream`, read whole before `deadline` and decoded.
fn read(stream: &UnixStream, deadline: Instant) -> Result<(Request, Option<OwnedFd>), Refusal> {
    let _ = stream.set_nonblocking(false);
    let bad = |message: String| Refusal::new(RefusalKind::BadRequest, message);
    match receive::receive(stream, deadline) {
        Ok(r) => decode_request(&r.line)
            .map(|req| (req, r.fd))
            .map_err(|e| bad(format!("bad request: {e}"))),
        Err(DecodeError::Read(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(bad(format!(
                "bad request: it did not arrive whole within {} ms of connecting: refused",
                DEADLINE.as_millis()
            )))
        }
        Err(e) => Err(bad(format!("bad request: {e}"))),
    }
}
