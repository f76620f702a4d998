//! The daemon's serving loop: waits for a request read whole by the intake's threads or for
//! a resolver's answer, and answers each (handing pods unknown to the watch to a resolver
//! thread). Nothing here reads a client: a slow one holds only its own reader.
use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use redirect_daemon_api::{encode_answer, DaemonDir, Refusal, RefusalKind, Request};

use super::{intake, reply, resolver, Daemon, STOP_CHECK, TICK};
use crate::error::{Error, Result};

impl Daemon {
    /// Serves until `stop` is set or an uninstall completes. The pins stay (capture goes on)
    /// unless uninstalled.
    pub fn run(mut self, stop: &AtomicBool) -> Result<()> {
        let socket = DaemonDir::new(&self.opts.dir).socket();
        let intake = self
            .listener
            .try_clone()
            .and_then(intake::Intake::start)
            .map_err(|e| Error::io("starting the accept thread of", &socket, e))?;
        let mut last_tick = Instant::now();
        while !stop.load(Ordering::Relaxed) && !self.uninstalled {
            // Woken by a request at once (no polling interval on the pod-start path), else
            // at the next tick or stop check.
            let until_tick = TICK.saturating_sub(last_tick.elapsed());
            let (arrived, resolved) = self.wait_readable(&intake, until_tick.min(STOP_CHECK));
            if resolved {
                for done in self.pods.resolver.drain() {
                    self.finish(done);
                }
            }
            if arrived {
                for request in intake.drain() {
                    self.serve(request);
                    if self.uninstalled {
                        break;
                    }
                }
            }
            if last_tick.elapsed() >= TICK {
                self.tick();
                last_tick = Instant::now();
            }
        }
        // Ends the accept thread (its accept fails with EINVAL).
        let _ = nix::sys::socket::shutdown(
            std::os::fd::AsRawFd::as_raw_fd(&self.listener),
            nix::sys::socket::Shutdown::Both,
        );
        let dir = DaemonDir::new(&self.opts.dir);
        let _ = std::fs::remove_file(dir.socket());
        if self.uninstalled {
            let _ = std::fs::remove_file(dir.lock());
        }
        tracing::info!(
            uninstalled = self.uninstalled,
            "daemon stopped; capture stays pinned unless uninstalled"
        );
        Ok(())
    }

    /// Whether a request was read whole, and whether a resolver thread handed a request
    /// back, within `timeout`.
    fn wait_readable(&self, intake: &intake::Intake, timeout: Duration) -> (bool, bool) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [
            PollFd::new(intake.wake_fd(), PollFlags::POLLIN),
            PollFd::new(self.pods.resolver.wake_fd(), PollFlags::POLLIN),
        ];
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        if !matches!(poll(&mut fds, PollTimeout::from(ms)), Ok(n) if n > 0) {
            return (false, false);
        }
        let ready = |f: &PollFd<'_>| f.revents().is_some_and(|r| r.contains(PollFlags::POLLIN));
        (ready(&fds[0]), ready(&fds[1]))
    }

    /// Counts an ADD answered with an error (`redirect_cni_add_refused_total`).
    fn count_refused<T, E>(&self, op: &str, result: &std::result::Result<T, E>) {
        if op == "pod_add" && result.is_err() {
            if let Err(e) = redirect_daemon_api::count_cni_refused(&self.opts.dir) {
                tracing::warn!(error = %e, "counting a refused ADD");
            }
        }
    }

    /// Answers a request whose pod a resolver thread read, unless its client hung up.
    fn finish(&mut self, done: resolver::Done) {
        let op = done.req.op();
        if resolver::hung_up(&done.stream) {
            tracing::warn!(
                op,
                "the client hung up while its pod was read: request dropped"
            );
            return;
        }
        let result = self
            .handle_with(done.req, done.fd, Some(done.found))
            .map_err(|e| e.refusal());
        self.count_refused(op, &result);
        reply::send(done.stream, encode_answer(&result));
        tracing::debug!(
            op,
            ok = result.is_ok(),
            "request served after reading its pod"
        );
    }

    /// The pod a pod request names, when it must be read from the apiserver (not in the
    /// watch's cache): such requests go to a resolver thread.
    fn needs_get(
        &self,
        req: &Request,
    ) -> Option<(Arc<crate::apiserver::Kube>, redirect_daemon_api::PodRef)> {
        let pod = match req {
            Request::PodAdd { pod, .. } | Request::PodCheck { pod, .. } => pod,
            _ => return None,
        };
        let kube = self.pods.kube.as_ref()?;
        kube.needs_get(pod).then(|| (Arc::clone(kube), pod.clone()))
    }

    fn serve(&mut self, arrived: intake::Arrived) {
        let intake::Arrived {
            stream,
            peer,
            request,
            accepted,
        } = arrived;
        let mut phases = redirect_datapath::Phases::start();
        let (op, result) = match request {
            Ok((req, fd)) => {
                let op = req.op();
                let allowed = peer.may(&req, fd.as_ref());
                if let Err(refused) = allowed {
                    tracing::warn!(op, %refused, "request refused");
                    let refused = Err(refused);
                    self.count_refused(op, &refused);
                    reply::send(stream, encode_answer(&refused));
                    return;
                }
                if let Some((kube, pod)) = self.needs_get(&req) {
                    match self.pods.resolver.spawn(kube, pod, (stream, req, fd)) {
                        Ok(()) => return,
                        Err(stream) => {
                            let busy = Err(Refusal::new(RefusalKind::Busy, format!(
                                "the daemon is reading {} pods from the apiserver already: retry (fail closed)",
                                self.pods.resolver.in_flight()
                            )));
                            self.count_refused(op, &busy);
                            reply::send(stream, encode_answer(&busy));
                            tracing::warn!(op, "pod request refused: every resolver is busy");
                            return;
                        }
                    }
                }
                (op, self.handle(req, fd).map_err(|e| e.refusal()))
            }
            Err(refused) => {
                tracing::warn!(%refused, "bad request refused");
                ("bad", Err(refused))
            }
        };
        phases.mark("handle");
        self.count_refused(op, &result);
        reply::send(stream, encode_answer(&result));
        phases.mark("reply");
        tracing::debug!(op, ok = result.is_ok(), elapsed_us = phases.total_us(),
            since_accept_us = accepted.elapsed().as_micros(), %phases, "request served");
    }
}
