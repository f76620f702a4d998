//! The traffic listeners' accept loop and per-connection bookkeeping (stats, access log).
use std::{
    net::{IpAddr, SocketAddr},
    sync::{atomic::Ordering, Arc},
    time::{Instant, SystemTime},
};

use tokio::net::{TcpListener, TcpStream};
use tracing::Instrument as _;

use crate::{
    access_log::{rfc3339, Record},
    blackhole,
    forward::{forward, Outcome},
    metrics::Direction,
    registry::Cluster,
    state::Shared,
    OrigDstAddr,
};

/// Where a connection goes.
#[derive(Debug)]
pub struct Route {
    /// The original destination.
    pub orig_dst: OrigDstAddr,
    /// The chosen cluster.
    pub cluster: Cluster,
    /// Where to connect (None for the blackhole).
    pub upstream: Option<SocketAddr>,
    /// Source address to bind for the upstream connect.
    pub source: Option<IpAddr>,
    /// TPROXY mode: the upstream socket is transparent (its source is not the pod's) and
    /// carries this mark.
    pub mark: Option<u32>,
}

/// Why a connection has no route.
#[derive(Debug)]
pub struct NoRoute {
    /// The original destination, when it was known.
    pub orig_dst: Option<OrigDstAddr>,
    /// Why.
    pub reason: String,
}

/// Accepts until drained; each connection is routed by `route` and forwarded.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    direction: Direction,
    route: fn(&TcpStream, SocketAddr, &Shared) -> Result<Route, NoRoute>,
) {
    let Ok(local) = listener.local_addr() else {
        return;
    };
    let mut drain = shared.drain_signal();
    if *drain.borrow_and_update() {
        return;
    }
    shared.listeners_up.fetch_add(1, Ordering::SeqCst);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let shared = Arc::clone(&shared);
                    let span = tracing::info_span!("conn", direction = direction.as_str(), %peer);
                    tokio::spawn(handle(stream, peer, local, shared, direction, route).instrument(span));
                }
                Err(e) => {
                    tracing::warn!(error = %e, %local, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            changed = drain.changed() => {
                let draining = changed.is_err() || *drain.borrow_and_update();
                if draining {
                    break;
                }
            }
        }
    }
    shared.listeners_up.fetch_sub(1, Ordering::SeqCst);
    tracing::info!(%local, direction = direction.as_str(), "listener drained");
}

async fn handle(
    stream: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    shared: Arc<Shared>,
    direction: Direction,
    route: fn(&TcpStream, SocketAddr, &Shared) -> Result<Route, NoRoute>,
) {
    let start = SystemTime::now();
    let started = Instant::now();
    let _active = shared.stats.active(direction);
    let mut record = Record {
        kind: "access",
        start_time: rfc3339(start),
        direction: direction.as_str(),
        peer: peer.to_string(),
        orig_dst: "-".into(),
        cluster: "-".into(),
        upstream: "-".into(),
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: 0,
        flags: "-",
    };
    match route(&stream, local, &shared) {
        Err(no) => {
            tracing::warn!(reason = %no.reason, "no route; closing");
            record.orig_dst = no.orig_dst.map_or_else(|| "-".into(), |d| d.to_string());
            record.flags = "NR";
            drop(stream);
        }
        Ok(r) => {
            record.orig_dst = r.orig_dst.to_string();
            record.cluster = r.cluster.to_string();
            let stats = shared.stats.cluster(direction, &record.cluster);
            stats.connections.fetch_add(1, Ordering::Relaxed);
            match r.upstream {
                None => {
                    let (read, written) = blackhole::respond(stream).await;
                    (record.bytes_up, record.bytes_down, record.flags) = (read, written, "NR");
                }
                Some(upstream) => {
                    record.upstream = upstream.to_string();
                    match forward(stream, upstream, r.source, r.mark, shared.connect_timeout).await
                    {
                        Outcome::Done(up, down) => {
                            (record.bytes_up, record.bytes_down) = (up, down)
                        }
                        Outcome::ConnectFailed(e) => {
                            tracing::warn!(%upstream, error = %e, "upstream connect failed");
                            stats.connect_failures.fetch_add(1, Ordering::Relaxed);
                            record.flags = "UF";
                        }
                        Outcome::StreamError(e) => {
                            tracing::debug!(error = %e, "stream ended with an error");
                            record.flags = "DC";
                        }
                    }
                }
            }
            stats.bytes_up.fetch_add(record.bytes_up, Ordering::Relaxed);
            stats
                .bytes_down
                .fetch_add(record.bytes_down, Ordering::Relaxed);
        }
    }
    record.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    if shared.log_format != crate::access_log::Format::Off {
        println!("{}", record.line(shared.log_format));
    }
}
