//! The daemon's Prometheus endpoint: decision counters (node-wide and per namespace) and map
//! fill levels, read from the pinned maps at each scrape.
use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader, Write as _},
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
};

use redirect_common::Counter;
use redirect_datapath::{
    error::{Error, Result},
    metrics,
    node::NodeDatapath,
    node_status, observe,
};

/// Renders the exposition text for the datapath pinned at `bpffs`; `names` maps netns cookies
/// to the namespaces' paths. Every enrolled namespace exports every counter, zeros included.
pub fn render(bpffs: &Path, names: &BTreeMap<u64, String>) -> Result<String> {
    let status = node_status::collect(bpffs)?;
    let mut dp = NodeDatapath::open(bpffs)?;
    let mut per_ns = observe::ns_counters(dp.maps())?;
    for cookie in names.keys() {
        per_ns.entry(*cookie).or_default();
    }
    let per_netns = per_ns
        .into_iter()
        .map(|(cookie, seen)| {
            let all = Counter::ALL
                .iter()
                .map(|c| {
                    let n = seen
                        .iter()
                        .find(|(name, _)| *name == c.name())
                        .map_or(0, |(_, n)| *n);
                    (c.name(), n)
                })
                .collect();
            (cookie, names.get(&cookie).map_or("", String::as_str), all)
        })
        .collect();
    Ok(metrics::render(&metrics::Exposition {
        counters: status.counters.clone(),
        per_netns,
        maps: status.fill.clone(),
    }))
}

/// Serves `GET /metrics` on `addr` from a thread; returns the bound address.
pub fn spawn(
    addr: SocketAddr,
    bpffs: PathBuf,
    names: impl Fn() -> BTreeMap<u64, String> + Send + 'static,
) -> Result<SocketAddr> {
    let listener = TcpListener::bind(addr)
        .map_err(|e| Error::io("binding the metrics endpoint on", addr.to_string(), e))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Error::io("binding the metrics endpoint on", addr.to_string(), e))?;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            // An idle client must not hold up the next scrape.
            let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
            let _ = stream.set_write_timeout(Some(std::time::Duration::from_secs(2)));
            let mut line = String::new();
            if BufReader::new(&stream).read_line(&mut line).is_err() {
                continue;
            }
            let (status, body) = if line.starts_with("GET /metrics") {
                match render(&bpffs, &names()) {
                    Ok(text) => ("200 OK", text),
                    Err(e) => ("500 Internal Server Error", format!("{e}\n")),
                }
            } else {
                ("404 Not Found", "try GET /metrics\n".to_owned())
            };
            let _ = write!(
                &stream,
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    Ok(bound)
}
