//! The one Prometheus rendering of the datapath's state, for the daemon's endpoint and for
//! `redirect attach --metrics-file`: one metric name per counter, every series exported, zeros
//! included.
use redirect_common::NetnsCookie;
use redirect_sys::{MetricKind as Kind, PrometheusText as Text};
use std::path::Path;

use crate::error::{Error, Result};

/// Counter name -> value.
pub(crate) type Counts = Vec<(&'static str, u64)>;

/// What is exported.
#[derive(Debug, Clone, Default)]
pub struct Exposition<'a> {
    /// Every decision counter, summed over CPUs and namespaces (zeros included).
    pub counters: Counts,
    /// Per namespace: (netns cookie, its path or name, every counter of it).
    pub per_netns: Vec<(NetnsCookie, &'a str, Counts)>,
    /// Entries per map.
    pub maps: Vec<(&'static str, usize)>,
    /// Capacity (`max_entries`) per map, for the maps of `maps` it is known for.
    pub capacity: Vec<(&'static str, usize)>,
    /// The build and datapath serving: (version, layout, attach scope).
    pub build: Option<(&'a str, u32, &'a str)>,
}

/// The node-wide decisions counter.
pub(crate) const DECISIONS: &str = "redirect_decisions_total";
/// The per-namespace decisions counter.
pub(crate) const NETNS_DECISIONS: &str = "redirect_netns_decisions_total";
/// The map fill gauge.
pub(crate) const MAP_ENTRIES: &str = "redirect_map_entries";
/// The map capacity gauge.
pub(crate) const MAP_CAPACITY: &str = "redirect_map_capacity";
/// The build info gauge (always 1; the labels are the information).
pub(crate) const BUILD_INFO: &str = "redirect_build_info";

/// Renders `e` in the Prometheus text exposition format.
pub fn render(e: &Exposition<'_>) -> String {
    let mut t = Text::new();
    if let Some((version, layout, scope)) = e.build {
        t.family(
            BUILD_INFO,
            Kind::Gauge,
            "The daemon's build: its version, the pinned datapath's layout and attach scope.",
        );
        let layout = layout.to_string();
        let labels = [("version", version), ("layout", &layout), ("scope", scope)];
        t.sample(BUILD_INFO, &labels, 1u64);
    }
    t.family(
        DECISIONS,
        Kind::Counter,
        "Capture decisions of the datapath.",
    );
    for (decision, n) in &e.counters {
        t.sample(DECISIONS, &[("decision", decision)], n);
    }
    // Declared only when exported: the daemon serves it only when asked.
    if !e.per_netns.is_empty() {
        let help = "Capture decisions per network namespace.";
        t.family(NETNS_DECISIONS, Kind::Counter, help);
    }
    for (cookie, netns, counters) in &e.per_netns {
        let cookie = cookie.to_string();
        for (decision, n) in counters {
            let labels = [
                ("netns", *netns),
                ("cookie", &cookie),
                ("decision", decision),
            ];
            t.sample(NETNS_DECISIONS, &labels, n);
        }
    }
    t.family(MAP_ENTRIES, Kind::Gauge, "Entries in the datapath's maps.");
    for (map, n) in &e.maps {
        t.sample(MAP_ENTRIES, &[("map", map)], n);
    }
    if !e.capacity.is_empty() {
        let help = "Capacity (max_entries) of the datapath's maps: a full hash map refuses \
            new entries, a full LRU map (INBOUND) evicts its oldest.";
        t.family(MAP_CAPACITY, Kind::Gauge, help);
    }
    for (map, n) in &e.capacity {
        t.sample(MAP_CAPACITY, &[("map", map)], n);
    }
    t.finish()
}

/// Writes `text` to `path` atomically (temporary file + rename), readable by everyone so an
/// unprivileged proxy can merge it.
pub fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(|e| Error::io("writing", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io("renaming into", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_series_once() {
        let text = render(&Exposition {
            counters: vec![("redirected", 3), ("bypass_uid", 0)],
            per_netns: vec![(NetnsCookie(7), "/run/netns/a\"b", vec![("redirected", 0)])],
            maps: vec![("TRACKED", 1)],
            capacity: vec![("TRACKED", 65536)],
            build: Some(("0.1.0", 7, "root")),
        });
        assert!(text.contains("# TYPE redirect_decisions_total counter\n"));
        assert!(text.starts_with("# HELP redirect_build_info"), "{text}");
        assert!(
            text.contains("redirect_build_info{version=\"0.1.0\",layout=\"7\",scope=\"root\"} 1\n")
        );
        assert!(text.contains("redirect_map_entries{map=\"TRACKED\"} 1\n"));
        assert!(text.contains("redirect_decisions_total{decision=\"redirected\"} 3\n"));
        assert!(text.contains("redirect_decisions_total{decision=\"bypass_uid\"} 0\n"));
        assert!(text.contains(
            "redirect_netns_decisions_total{netns=\"/run/netns/a\\\"b\",cookie=\"7\",decision=\"redirected\"} 0\n"
        ));
        assert!(text.ends_with("redirect_map_capacity{map=\"TRACKED\"} 65536\n"));
    }

    #[test]
    fn no_namespaces_no_namespace_family() {
        let text = render(&Exposition {
            counters: vec![("redirected", 3)],
            per_netns: Vec::new(),
            maps: vec![("TRACKED", 1)],
            ..Exposition::default()
        });
        assert!(!text.contains(NETNS_DECISIONS), "{text}");
        assert!(
            !text.contains(BUILD_INFO) && !text.contains(MAP_CAPACITY),
            "{text}"
        );
        assert!(text.contains("redirect_decisions_total{decision=\"redirected\"} 3\n"));
    }
}
