//! The daemon's Prometheus endpoint: decision counters (node-wide and per namespace) and map
//! fill levels, read from the pinned maps at each scrape.
use std::{
    collections::BTreeMap,
    fmt::Write as _,
    io::{BufRead as _, BufReader, Write as _},
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
};

use redirect_datapath::{
    error::{Error, Result},
    node::NodeDatapath,
    node_status, observe,
};

/// Renders the exposition text for the datapath pinned at `bpffs`; `names` maps netns cookies
/// to the namespaces' paths.
pub fn render(bpffs: &Path, names: &BTreeMap<u64, String>) -> Result<String> {
    let status = node_status::collect(bpffs)?;
    let mut dp = NodeDatapath::open(bpffs)?;
    let per_ns = observe::ns_counters(dp.maps())?;
    let mut out = String::new();
    let name = "redirect_decisions_total";
    let _ = writeln!(
        out,
        "# HELP {name} Capture decisions of the node datapath.\n# TYPE {name} counter"
    );
    for (decision, n) in &status.counters {
        let _ = writeln!(out, "{name}{{decision=\"{decision}\"}} {n}");
    }
    let name = "redirect_netns_decisions_total";
    let _ = writeln!(
        out,
        "# HELP {name} Capture decisions per network namespace.\n# TYPE {name} counter"
    );
    for (cookie, counters) in &per_ns {
        let netns = names.get(cookie).map_or("", String::as_str);
        for (decision, n) in counters {
            let _ = writeln!(
                out,
                "{name}{{netns=\"{netns}\",cookie=\"{cookie}\",decision=\"{decision}\"}} {n}"
            );
        }
    }
    let name = "redirect_map_entries";
    let _ = writeln!(
        out,
        "# HELP {name} Entries in the datapath's maps.\n# TYPE {name} gauge"
    );
    for (map, n) in &status.fill {
        let _ = writeln!(out, "{name}{{map=\"{map}\"}} {n}");
    }
    Ok(out)
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
