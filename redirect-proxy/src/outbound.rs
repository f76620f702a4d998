//! The outbound listener (virtualOutbound, 15001): accept, read the original destination, forward.
use std::{
    net::SocketAddr,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde::Serialize;
use tokio::{
    io::copy_bidirectional_with_sizes,
    net::{TcpListener, TcpStream},
};
use tracing::Instrument as _;

use crate::orig_dst::original_dst;

/// Settings of the outbound listener.
#[derive(Debug, Clone)]
pub struct OutboundConfig {
    /// How long to wait for the upstream connect.
    pub connect_timeout: Duration,
}

impl Default for OutboundConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// One finished connection, as logged (one line per connection).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ConnectionRecord {
    /// Start time, milliseconds since the Unix epoch.
    pub start_ms: u128,
    /// Who connected to the proxy.
    pub peer: String,
    /// Original destination, when known.
    pub orig_dst: Option<String>,
    /// Bytes copied client -> upstream.
    pub bytes_up: u64,
    /// Bytes copied upstream -> client.
    pub bytes_down: u64,
    /// Duration in milliseconds.
    pub duration_ms: u128,
    /// `ok`, `no_orig_dst`, `loop`, `upstream_connect_failed` or `stream_error`.
    pub result: &'static str,
}

/// Copy buffer per direction: big enough for bulk transfers, allocated once per connection.
const COPY_BUF: usize = 64 * 1024;

/// Accepts connections for ever, forwarding each to its original destination.
pub async fn serve_outbound(listener: TcpListener, config: OutboundConfig) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    loop {
        let (stream, peer) = listener.accept().await?;
        let config = config.clone();
        let span = tracing::info_span!("conn", %peer);
        tokio::spawn(
            async move {
                let record = handle(stream, peer, local, &config).await;
                log_record(&record);
            }
            .instrument(span),
        );
    }
}

fn log_record(r: &ConnectionRecord) {
    tracing::info!(
        target: "access",
        peer = %r.peer,
        orig_dst = r.orig_dst.as_deref().unwrap_or("-"),
        bytes_up = r.bytes_up,
        bytes_down = r.bytes_down,
        duration_ms = r.duration_ms as u64,
        result = r.result,
        "connection"
    );
}

async fn handle(
    mut client: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    config: &OutboundConfig,
) -> ConnectionRecord {
    let started = Instant::now();
    let start_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut record = ConnectionRecord {
        start_ms,
        peer: peer.to_string(),
        orig_dst: None,
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: 0,
        result: "ok",
    };
    let finish = |mut r: ConnectionRecord| {
        r.duration_ms = started.elapsed().as_millis();
        r
    };
    let dst = match original_dst(&client) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "closing connection");
            record.result = "no_orig_dst";
            return finish(record);
        }
    };
    record.orig_dst = Some(dst.to_string());
    if dst.0 == local {
        tracing::warn!(%dst, "original destination is the proxy itself; refusing to loop");
        record.result = "loop";
        return finish(record);
    }
    let upstream = tokio::time::timeout(config.connect_timeout, TcpStream::connect(dst.0)).await;
    let mut upstream = match upstream {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::warn!(%dst, error = %e, "upstream connect failed");
            record.result = "upstream_connect_failed";
            return finish(record);
        }
        Err(_) => {
            tracing::warn!(%dst, "upstream connect timed out");
            record.result = "upstream_connect_failed";
            return finish(record);
        }
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    match copy_bidirectional_with_sizes(&mut client, &mut upstream, COPY_BUF, COPY_BUF).await {
        Ok((up, down)) => {
            record.bytes_up = up;
            record.bytes_down = down;
        }
        Err(e) => {
            tracing::debug!(error = %e, "stream ended with an error");
            record.result = "stream_error";
        }
    }
    finish(record)
}
