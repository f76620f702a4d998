//! State shared by every listener: registry, statistics, readiness and drain signal.
use std::{
    path::PathBuf,
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
    time::Duration,
};

use tokio::sync::watch;

use crate::{access_log::Format, metrics::Stats, registry::Registry};

/// Everything the listeners and admin endpoints share.
#[derive(Debug)]
pub struct Shared {
    /// Services and the outbound traffic policy.
    pub registry: Registry,
    /// Counters for /stats/prometheus.
    pub(crate) stats: Stats,
    /// Access log format.
    pub log_format: Format,
    /// Upstream connect timeout.
    pub(crate) connect_timeout: Duration,
    /// Source address of inbound connections to the application (Istio: 127.0.0.6).
    pub(crate) inbound_source: std::net::IpAddr,
    /// Readiness requires a verified redirected connection.
    pub(crate) validate: bool,
    /// Set once an outbound connection arrived with a readable original destination.
    pub(crate) validated: AtomicBool,
    /// Listeners currently accepting.
    pub(crate) listeners_up: AtomicUsize,
    /// Listeners that should be accepting.
    pub(crate) listeners_expected: usize,
    /// Application metrics to merge into 15020 (`http://host:port/path`).
    pub(crate) app_metrics: Option<String>,
    /// Prometheus text file written by `redirect attach --metrics-file`, merged into 15020.
    pub(crate) bpf_metrics_file: Option<PathBuf>,
    /// Static listeners (`--static LISTEN=UPSTREAM`): listener address -> upstream.
    pub statics: Vec<(std::net::SocketAddr, std::net::SocketAddr)>,
    /// TPROXY mode: inbound connections reach the application from the client's address,
    /// transparent, with this socket mark.
    pub tproxy_mark: Option<u32>,
    drain_tx: watch::Sender<bool>,
}

impl Shared {
    /// New shared state; `listeners_expected` counts the traffic listeners (15001/15006).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        registry: Registry,
        log_format: Format,
        connect_timeout: Duration,
        inbound_source: std::net::IpAddr,
        validate: bool,
        listeners_expected: usize,
        app_metrics: Option<String>,
        bpf_metrics_file: Option<PathBuf>,
    ) -> Self {
        Self {
            registry,
            stats: Stats::default(),
            log_format,
            connect_timeout,
            inbound_source,
            validate,
            validated: AtomicBool::new(false),
            listeners_up: AtomicUsize::new(0),
            listeners_expected,
            app_metrics,
            bpf_metrics_file,
            statics: Vec::new(),
            tproxy_mark: None,
            drain_tx: watch::channel(false).0,
        }
    }

    /// `Ok` when ready, else the reason for 503.
    pub fn readiness(&self) -> Result<(), String> {
        let up = self.listeners_up.load(Ordering::SeqCst);
        if *self.drain_tx.borrow() {
            return Err("listeners drained".into());
        }
        if up < self.listeners_expected {
            return Err(format!("{up} of {} listeners up", self.listeners_expected));
        }
        if self.validate && !self.validated.load(Ordering::SeqCst) {
            return Err("redirection not verified yet (no captured connection with an original destination)".into());
        }
        Ok(())
    }

    /// Stops every traffic listener (Envoy's `POST /drain_listeners`).
    pub fn drain(&self) {
        self.drain_tx.send_replace(true);
    }

    /// A receiver that changes to `true` when draining starts.
    pub(crate) fn drain_signal(&self) -> watch::Receiver<bool> {
        self.drain_tx.subscribe()
    }
}
