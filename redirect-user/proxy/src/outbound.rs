//! virtualOutbound (15001): original destination -> service cluster, passthrough or blackhole.
use std::{net::SocketAddr, sync::atomic::Ordering};

use tokio::net::TcpStream;

use crate::{
    listener::{NoRoute, Route},
    orig_dst::original_dst,
    registry::Cluster,
    state::Shared,
};

/// Routes one outbound connection accepted on `local`.
pub fn route(stream: &TcpStream, local: SocketAddr, shared: &Shared) -> Result<Route, NoRoute> {
    let orig_dst = original_dst(stream).map_err(|e| NoRoute {
        orig_dst: None,
        reason: e.to_string(),
    })?;
    let dst = orig_dst.0;
    if dst.port() == local.port()
        && (dst.ip().is_loopback() || dst.ip().is_unspecified() || dst == local)
    {
        return Err(NoRoute {
            orig_dst: Some(orig_dst),
            reason: "original destination is this listener; refusing to loop".into(),
        });
    }
    shared.validated.store(true, Ordering::SeqCst);
    let cluster = shared.registry.route(dst);
    let upstream = match &cluster {
        Cluster::Outbound { upstream, .. } => Some(*upstream),
        Cluster::BlackHole => None,
        Cluster::Passthrough | Cluster::Inbound { .. } => Some(dst),
    };
    Ok(Route {
        orig_dst,
        cluster,
        upstream,
        source: None,
        mark: None,
    })
}

/// Routes a connection on a static listener (`--static LISTEN=UPSTREAM`): an explicitly dialled
/// proxy address with a fixed upstream, as an Envoy static listener + cluster.
pub fn route_static(
    _stream: &TcpStream,
    local: SocketAddr,
    shared: &Shared,
) -> Result<Route, NoRoute> {
    let upstream = shared
        .statics
        .iter()
        .find(|(listen, _)| {
            *listen == local || (listen.port() == local.port() && listen.ip().is_unspecified())
        })
        .map(|(_, up)| *up)
        .ok_or_else(|| NoRoute {
            orig_dst: None,
            reason: format!("no static route for {local}"),
        })?;
    Ok(Route {
        orig_dst: crate::OrigDstAddr(upstream),
        cluster: Cluster::Outbound {
            port: upstream.port(),
            name: "static".into(),
            upstream,
        },
        upstream: Some(upstream),
        source: None,
        mark: None,
    })
}
