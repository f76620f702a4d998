//! Requests arrive as tasks of the daemon's runtime, never on the datapath's owner: an accept
//! loop takes every connection as it comes and judges its peer at once; a task per connection
//! reads its request whole before one deadline ([`DEADLINE`]), reads its pod from the
//! apiserver when the watch has not listed it ([`resolver`]), hands the request to the owner
//! over a bounded channel and writes the owner's answer back ([`reply`]). A client that sends
//! a byte at a time, or nothing, holds only its own task, for at most the deadline; past
//! [`MAX_READERS`] connections being read a new one is refused at once (busy: retry), so idle
//! connections cannot hold the daemon either for longer than the deadline. A request read
//! whole waits for its turn at the owner, however many arrive at once (a node's boot starts
//! every pod together: 110 ADDs wait in line and are all served, none refused).
use std::{
    os::{fd::OwnedFd, unix::net::UnixStream as StdStream},
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use redirect_daemon_api::{encode_answer, Answer, PodRef, Refusal, RefusalKind, Request};
use tokio::{
    net::{UnixListener, UnixStream},
    sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore},
};

use super::{peer, receive, reply, resolver, work::Work};
use crate::apiserver::Kube;
use redirect_daemon_api::decode_request;

/// How long a client has to send its whole request after it connected.
pub(super) const DEADLINE: Duration = Duration::from_secs(1);
/// Connections being read at once.
pub(super) const MAX_READERS: usize = 64;

/// A request's answer, or its refusal.
type Outcome = Result<Answer, Refusal>;

/// What every connection's task shares: the way to the owner and the bounds.
#[derive(Debug)]
pub(super) struct Intake {
    owner: mpsc::Sender<Work>,
    kube: Option<Arc<Kube>>,
    /// The daemon directory (its count of refused ADDs).
    dir: PathBuf,
    readers: Arc<Semaphore>,
    resolvers: Arc<Semaphore>,
    writers: Arc<Semaphore>,
}

impl Intake {
    /// The intake of a daemon whose owner reads `owner`'s other end.
    pub(super) fn new(owner: mpsc::Sender<Work>, kube: Option<Arc<Kube>>, dir: PathBuf) -> Self {
        Self {
            owner,
            kube,
            dir,
            readers: Arc::new(Semaphore::new(MAX_READERS)),
            resolvers: Arc::new(Semaphore::new(resolver::WORKERS)),
            writers: Arc::new(Semaphore::new(reply::MAX_WRITERS)),
        }
    }

    /// Takes every connection of `listener` until the task is aborted.
    pub(super) async fn accept(self: Arc<Self>, listener: UnixListener) {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => self.take(stream),
                Err(e) => {
                    // Out of descriptors and the like: let the moment pass instead of spinning.
                    tracing::warn!(error = %e, "accept");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }

    /// Judges the peer of a new connection and starts its task, or refuses it at once.
    fn take(self: &Arc<Self>, stream: UnixStream) {
        let accepted = Instant::now();
        // The peer's judge reads a std stream; the task takes it back into the runtime.
        let Ok(stream) = stream.into_std() else {
            return;
        };
        let peer = match peer::check(&stream) {
            Ok(peer) => peer,
            Err(refused) => {
                tracing::warn!(%refused, "connection refused");
                return self.refuse(stream, refused);
            }
        };
        let Ok(reading) = Arc::clone(&self.readers).try_acquire_owned() else {
            tracing::warn!(
                readers = MAX_READERS,
                "connection refused: every reader is busy"
            );
            let busy = Refusal::new(
                RefusalKind::Busy,
                format!(
                    "the daemon is reading {MAX_READERS} requests already: retry (fail closed)"
                ),
            );
            return self.refuse(stream, busy);
        };
        tokio::spawn(Arc::clone(self).serve(stream, peer, accepted, reading));
    }

    /// Answers `refused` on `stream` from a task of its own.
    fn refuse(self: &Arc<Self>, stream: StdStream, refused: Refusal) {
        let writers = Arc::clone(&self.writers);
        tokio::spawn(async move {
            if let Ok(stream) = UnixStream::from_std(stream) {
                reply::send(stream, encode_answer(&Err(refused)), &writers).await;
            }
        });
    }

    /// One connection's life: its request read, judged, carried out, answered.
    async fn serve(
        self: Arc<Self>,
        stream: StdStream,
        peer: peer::Peer,
        accepted: Instant,
        reading: OwnedSemaphorePermit,
    ) {
        let Ok(mut stream) = UnixStream::from_std(stream) else {
            return;
        };
        let request = read(&mut stream, accepted + DEADLINE).await;
        // Read whole (or refused): the reader's slot is free for the next connection.
        drop(reading);
        let (op, outcome) = match request {
            Err(refused) => {
                tracing::warn!(%refused, "bad request refused");
                ("bad", Err(refused))
            }
            Ok((req, fd)) => {
                let op = req.op();
                match peer.may(&req, fd.as_ref()) {
                    Err(refused) => {
                        tracing::warn!(op, %refused, "request refused");
                        (op, Err(refused))
                    }
                    Ok(()) => match self.carry_out(req, fd, &stream).await {
                        Some(outcome) => (op, outcome),
                        None => return,
                    },
                }
            }
        };
        if op == "pod_add" && outcome.is_err() {
            let dir = self.dir.clone();
            let counted =
                tokio::task::spawn_blocking(move || redirect_daemon_api::count_cni_refused(&dir));
            if let Ok(Err(e)) = counted.await {
                tracing::warn!(error = %e, "counting a refused ADD");
            }
        }
        let ok = outcome.is_ok();
        reply::send(stream, encode_answer(&outcome), &self.writers).await;
        tracing::debug!(
            op,
            ok,
            since_accept_us = accepted.elapsed().as_micros(),
            "request served"
        );
    }

    /// The owner's outcome of `req`, its pod read first when the watch has not listed it;
    /// `None` when the client hung up meanwhile (nothing is done for it).
    async fn carry_out(
        &self,
        req: Request,
        fd: Option<OwnedFd>,
        stream: &UnixStream,
    ) -> Option<Outcome> {
        let op = req.op();
        let found = match self.needs_get(&req) {
            None => None,
            Some((kube, pod)) => {
                let Ok(_slot) = Arc::clone(&self.resolvers).try_acquire_owned() else {
                    tracing::warn!(op, "pod request refused: every resolver is busy");
                    return Some(Err(Refusal::new(RefusalKind::Busy, format!(
                        "the daemon is reading {} pods from the apiserver already: retry (fail closed)",
                        resolver::WORKERS
                    ))));
                };
                let found = resolver::read(&kube, &pod, stream).await;
                if resolver::hung_up(stream) {
                    tracing::warn!(
                        op,
                        "the client hung up while its pod was read: request dropped"
                    );
                    return None;
                }
                Some(found)
            }
        };
        let stopping = || {
            Err(Refusal::new(
                RefusalKind::Retry,
                "the daemon is stopping: retry (fail closed)".to_owned(),
            ))
        };
        let (answer, answered) = oneshot::channel();
        let work = Work {
            req,
            fd,
            found,
            answer,
        };
        if self.owner.send(work).await.is_err() {
            return Some(stopping());
        }
        Some(answered.await.unwrap_or_else(|_| stopping()))
    }

    /// The pod a pod request names, when it must be read from the apiserver (not in the
    /// watch's cache).
    fn needs_get(&self, req: &Request) -> Option<(Arc<Kube>, PodRef)> {
        let pod = match req {
            Request::PodAdd { pod, .. } | Request::PodCheck { pod, .. } => pod,
            _ => return None,
        };
        let kube = self.kube.as_ref()?;
        kube.needs_get(pod).then(|| (Arc::clone(kube), pod.clone()))
    }
}

/// The request on `stream`, read whole before `deadline` and decoded.
async fn read(
    stream: &mut UnixStream,
    deadline: Instant,
) -> Result<(Request, Option<OwnedFd>), Refusal> {
    use redirect_daemon_api::DecodeError;
    let bad = |message: String| Refusal::new(RefusalKind::BadRequest, message);
    match receive::receive(stream, deadline).await {
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
