//! The datapath's owner: the thread that runs [`Daemon::run`] carries out the requests the
//! connections' tasks hand it, one at a time, over a bounded channel, and ticks every second.
//! It is the only thread that changes the datapath or enters a namespace; it never reads a
//! client, so a slow one holds only its own task.
use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Instant,
};

use redirect_daemon_api::DaemonDir;
use tokio::sync::mpsc;

use super::{
    intake::Intake,
    work::{Work, QUEUE},
    Daemon, STOP_CHECK, TICK,
};
use crate::error::{Error, Result};

impl Daemon {
    /// Serves until `stop` is set or an uninstall completes: the connections as tasks of `rt`
    /// (the daemon's runtime, [`crate::runtime`]), the requests and the tick on the calling
    /// thread. The pins stay (capture goes on) unless uninstalled.
    pub fn run(mut self, rt: &tokio::runtime::Handle, stop: &AtomicBool) -> Result<()> {
        let socket = DaemonDir::new(&self.opts.dir).socket();
        let listener = {
            let _entered = rt.enter();
            self.listener
                .try_clone()
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .and_then(tokio::net::UnixListener::from_std)
                .map_err(|e| Error::io("listening for requests on", &socket, e))?
        };
        let (owner, mut work) = mpsc::channel(QUEUE);
        let intake = Intake::new(owner, self.pods.kube.clone(), self.opts.dir.clone());
        let accept = rt.spawn(Arc::new(intake).accept(listener));
        let mut last_tick = Instant::now();
        while !stop.load(Ordering::Relaxed) && !self.uninstalled {
            // Woken by a request at once (no polling interval on the pod-start path), else
            // at the next tick or stop check.
            let until_tick = TICK.saturating_sub(last_tick.elapsed());
            let wait = until_tick.min(STOP_CHECK);
            // The timer is made inside the runtime's context (block_on gives it).
            let next = rt.block_on(async { tokio::time::timeout(wait, work.recv()).await });
            if let Ok(Some(first)) = next {
                self.carry_out(first);
                while !self.uninstalled {
                    let Ok(more) = work.try_recv() else { break };
                    self.carry_out(more);
                }
            }
            if last_tick.elapsed() >= TICK {
                self.tick();
                last_tick = Instant::now();
            }
        }
        // No new connection; requests not carried out yet are answered "stopping: retry".
        accept.abort();
        work.close();
        let _ = rustix::net::shutdown(&self.listener, rustix::net::Shutdown::Both);
        if !self.uninstalled {
            self.hand_back_at_stop();
        }
        let dir = DaemonDir::new(&self.opts.dir);
        let _ = std::fs::remove_file(dir.socket());
        if self.uninstalled {
            dir.remove_node_files();
            let _ = std::fs::remove_file(dir.lock());
        }
        tracing::info!(
            uninstalled = self.uninstalled,
            "daemon stopped; capture stays pinned unless uninstalled"
        );
        Ok(())
    }

    /// Carries out one request and hands its outcome back to its connection's task.
    fn carry_out(&mut self, work: Work) {
        let Work {
            req,
            fd,
            found,
            answer,
        } = work;
        let op = req.op();
        let mut phases = redirect_datapath::Phases::start();
        let outcome = self.handle_with(req, fd, found).map_err(|e| e.refusal());
        phases.mark("handle");
        let ok = outcome.is_ok();
        if answer.send(outcome).is_err() {
            tracing::warn!(op, "the request's task is gone: its answer is dropped");
        }
        tracing::debug!(op, ok, elapsed_us = phases.total_us(), %phases, "request carried out");
    }
}
