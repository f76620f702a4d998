//! virtualInbound (15006): original destination port -> `inbound|<port>||`, forwarded to the
//! application at the original destination from 127.0.0.6 (so capture lets it through), or in
//! TPROXY mode from the client's own address (transparent and marked).
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use tokio::net::TcpStream;

use crate::{
    listener::{NoRoute, Route},
    orig_dst::{original_dst, OrigDstAddr},
    registry::Cluster,
    state::Shared,
};

/// Source for IPv6 inbound passthrough, as Istio uses.
const INBOUND_SOURCE_V6: IpAddr = IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6));

/// Routes one inbound connection accepted on `local`.
///
/// The original destination comes from `SO_ORIGINAL_DST` (NAT or our BPF hook); without one,
/// a socket steered without NAT has the original destination as its local address.
pub fn route(stream: &TcpStream, local: SocketAddr, shared: &Shared) -> Result<Route, NoRoute> {
    let orig_dst = match original_dst(stream) {
        Ok(d) => d,
        Err(_) => {
            let own = stream.local_addr().map_err(|e| NoRoute {
                orig_dst: None,
                reason: format!("getsockname: {e}"),
            })?;
            if own.port() == local.port() {
                return Err(NoRoute {
                    orig_dst: None,
                    reason: "no original destination: the connection was addressed to the inbound port itself".into(),
                });
            }
            OrigDstAddr(own)
        }
    };
    let dst = orig_dst.0;
    if dst.port() == local.port() {
        return Err(NoRoute {
            orig_dst: Some(orig_dst),
            reason: "original destination is the inbound listener; refusing to loop".into(),
        });
    }
    let source = match shared.tproxy_mark {
        // TPROXY: from the client's own address, as Envoy's original_src connects.
        Some(_) => stream
            .peer_addr()
            .map_err(|e| NoRoute {
                orig_dst: Some(orig_dst),
                reason: format!("getpeername: {e}"),
            })?
            .ip()
            // A dual-stack listener reports IPv4 clients as ::ffff:a.b.c.d.
            .to_canonical(),
        None if dst.is_ipv4() => shared.inbound_source,
        None => INBOUND_SOURCE_V6,
    };
    Ok(Route {
        orig_dst,
        cluster: Cluster::Inbound { port: dst.port() },
        upstream: Some(dst),
        source: Some(source),
        mark: shared.tproxy_mark,
    })
}
