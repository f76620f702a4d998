//! Proxy statistics (per direction and cluster) and their Prometheus text rendering.
use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicI64, AtomicU64, Ordering},
        Arc, Mutex,
    },
};

use redirect_sys::{MetricKind as Kind, PrometheusText as Text};

/// Counters of one (direction, cluster) pair.
#[derive(Debug, Default)]
pub(crate) struct ClusterStats {
    /// Connections handled.
    pub connections: AtomicU64,
    /// Bytes sent upstream (client -> upstream).
    pub bytes_up: AtomicU64,
    /// Bytes sent downstream (upstream -> client).
    pub bytes_down: AtomicU64,
    /// Failed upstream connects.
    pub connect_failures: AtomicU64,
}

/// All proxy statistics.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    clusters: Mutex<BTreeMap<(&'static str, String), Arc<ClusterStats>>>,
    active: [AtomicI64; 2],
}

/// Direction of a connection through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Captured outbound (15001).
    Outbound,
    /// Captured inbound (15006).
    Inbound,
}

impl Direction {
    /// Label value.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Outbound => "outbound",
            Self::Inbound => "inbound",
        }
    }
    const fn index(self) -> usize {
        match self {
            Self::Outbound => 0,
            Self::Inbound => 1,
        }
    }
}

/// Decrements the active gauge when the connection ends.
#[derive(Debug)]
pub(crate) struct ActiveGuard<'a>(&'a AtomicI64);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// (metric name, help text, how to read it from a cluster's counters).
type Family = (&'static str, &'static str, fn(&ClusterStats) -> u64);

impl Stats {
    /// The counters for (direction, cluster), created on first use.
    pub(crate) fn cluster(&self, direction: Direction, cluster: &str) -> Arc<ClusterStats> {
        let mut map = self
            .clusters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(
            map.entry((direction.as_str(), cluster.to_owned()))
                .or_default(),
        )
    }

    /// Counts a connection as active until the guard drops.
    pub(crate) fn active(&self, direction: Direction) -> ActiveGuard<'_> {
        let gauge = &self.active[direction.index()];
        gauge.fetch_add(1, Ordering::Relaxed);
        ActiveGuard(gauge)
    }

    /// Prometheus text exposition of every metric.
    pub(crate) fn render(&self) -> String {
        let map = self
            .clusters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = Text::new();
        let families: [Family; 4] = [
            (
                "redirect_proxy_connections_total",
                "Connections handled, by direction and cluster.",
                |s| s.connections.load(Ordering::Relaxed),
            ),
            (
                "redirect_proxy_sent_bytes_total",
                "Bytes sent to the upstream (client to upstream).",
                |s| s.bytes_up.load(Ordering::Relaxed),
            ),
            (
                "redirect_proxy_received_bytes_total",
                "Bytes sent back to the client (upstream to client).",
                |s| s.bytes_down.load(Ordering::Relaxed),
            ),
            (
                "redirect_proxy_upstream_connect_failures_total",
                "Upstream connects that failed or timed out.",
                |s| s.connect_failures.load(Ordering::Relaxed),
            ),
        ];
        for (name, help, get) in families {
            out.family(name, Kind::Counter, help);
            for ((direction, cluster), stats) in map.iter() {
                let labels = [("direction", *direction), ("cluster", cluster.as_str())];
                out.sample(name, &labels, get(stats));
            }
        }
        let name = "redirect_proxy_active_connections";
        out.family(name, Kind::Gauge, "Connections open right now.");
        for d in [Direction::Outbound, Direction::Inbound] {
            let active = self.active[d.index()].load(Ordering::Relaxed);
            out.sample(name, &[("direction", d.as_str())], active);
        }
        out.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_gauge() {
        let stats = Stats::default();
        let c = stats.cluster(Direction::Outbound, "outbound|80||a\"b");
        c.connections.fetch_add(2, Ordering::Relaxed);
        let guard = stats.active(Direction::Inbound);
        let text = stats.render();
        assert!(text.contains("redirect_proxy_connections_total{direction=\"outbound\",cluster=\"outbound|80||a\\\"b\"} 2"), "{text}");
        assert!(
            text.contains("redirect_proxy_active_connections{direction=\"inbound\"} 1"),
            "{text}"
        );
        drop(guard);
        assert!(stats
            .render()
            .contains("redirect_proxy_active_connections{direction=\"inbound\"} 0"));
    }
}
