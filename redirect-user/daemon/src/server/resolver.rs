//! Pod requests whose pod is not in the watch's cache are read from the apiserver off the
//! request thread: a bounded set of resolver threads does the GETs with their retries (up to
//! istio-cni's 30 x 1 s), holding the client's connection and namespace descriptor, and hands
//! the result back to the request thread, which enrolls under the node lock (milliseconds).
//! Meanwhile every other request (other pods' ADD and DEL, `list`, the tick) is served. A
//! request past the bound is refused at once (fail closed; the runtime retries), and one whose
//! client hung up while its pod was read stops being read at the next attempt and is dropped,
//! not enrolled.
use std::{
    io::Read as _,
    os::{
        fd::{AsFd, BorrowedFd, OwnedFd},
        unix::net::UnixStream,
    },
    sync::{
        atomic::{AtomicUsize, Ordering},
        mpsc::{channel, Receiver, Sender},
        Arc,
    },
};

use redirect_daemon_api::{PodRef, Request};

use crate::{
    resolution::Resolved,
    {apiserver::Kube, kube_error::KubeError},
};

/// Most pods read from the apiserver at once.
pub(super) const WORKERS: usize = 8;

/// A request whose pod was read (or could not be).
#[derive(Debug)]
pub(super) struct Done {
    /// The client's connection, to answer on.
    pub stream: UnixStream,
    /// Its request.
    pub req: Request,
    /// The namespace descriptor that came with it.
    pub fd: Option<OwnedFd>,
    /// The pod, or why it could not be read.
    pub found: Result<Resolved, KubeError>,
}

/// The resolver threads' hand-back: a channel and a socket pair that wakes the request
/// thread's poll.
#[derive(Debug)]
pub(super) struct Resolver {
    tx: Sender<Done>,
    rx: Receiver<Done>,
    wake_read: UnixStream,
    wake_write: Arc<UnixStream>,
    in_flight: Arc<AtomicUsize>,
}

impl Resolver {
    /// An idle resolver.
    pub(super) fn new() -> std::io::Result<Self> {
        let (wake_read, wake_write) = UnixStream::pair()?;
        wake_read.set_nonblocking(true)?;
        let (tx, rx) = channel();
        Ok(Self {
            tx,
            rx,
            wake_read,
            wake_write: Arc::new(wake_write),
            in_flight: Arc::default(),
        })
    }

    /// What the request thread polls: readable when a result is waiting.
    pub(super) fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake_read.as_fd()
    }

    /// Pods being read now.
    pub(super) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Reads `pod` on a thread of its own and hands `(stream, req, fd)` back with it; gives
    /// the stream back at once (to refuse on) when [`WORKERS`] pods are being read already.
    pub(super) fn spawn(
        &self,
        kube: Arc<Kube>,
        pod: PodRef,
        (stream, req, fd): (UnixStream, Request, Option<OwnedFd>),
    ) -> Result<(), UnixStream> {
        if self.in_flight.fetch_add(1, Ordering::SeqCst) >= WORKERS {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err(stream);
        }
        let (tx, wake, in_flight) = (
            self.tx.clone(),
            Arc::clone(&self.wake_write),
            Arc::clone(&self.in_flight),
        );
        let spawned = std::thread::Builder::new()
            .name("pod-get".into())
            .spawn(move || {
                // Work for a client that hung up is dropped between two GETs, freeing the slot.
                let found = kube.pod_while(&pod, &|| !hung_up(&stream));
                in_flight.fetch_sub(1, Ordering::SeqCst);
                let _ = tx.send(Done {
                    stream,
                    req,
                    fd,
                    found,
                });
                let _ = std::io::Write::write_all(&mut &*wake, b"x");
            });
        if let Err(e) = spawned {
            // No thread: the request is lost with the closure; its client sees the
            // connection close (the plugin fails closed) and the runtime retries.
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            tracing::error!(error = %e, "starting a pod-get thread");
        }
        Ok(())
    }

    /// The results waiting now.
    pub(super) fn drain(&self) -> Vec<Done> {
        let mut sink = [0u8; 64];
        while (&self.wake_read).read(&mut sink).is_ok_and(|n| n > 0) {}
        self.rx.try_iter().collect()
    }
}

/// Whether the client at the other end of `stream` has gone (its request was read whole
/// before, so any readable end of file means it hung up).
pub(super) fn hung_up(stream: &UnixStream) -> bool {
    use nix::sys::socket::{recv, MsgFlags};
    let mut byte = [0u8; 1];
    matches!(
        recv(
            std::os::fd::AsRawFd::as_raw_fd(stream),
            &mut byte,
            MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT
        ),
        Ok(0)
    )
}
