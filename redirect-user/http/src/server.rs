//! The accept loop and one connection's life: the connection cap and each peer's share of it,
//! hyper's head limits and header timeout, the whole-connection deadline and the body cap; on
//! the caller's tokio runtime (`serve`, or `spawn_on` to bind first).
use std::{convert::Infallible, future::Future, net::SocketAddr, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, LengthLimitError, Limited};
use hyper::{
    body::Incoming,
    header::{HeaderValue, ALLOW, CONTENT_LENGTH, CONTENT_TYPE},
    server::conn::http1,
    service::service_fn,
    Method, StatusCode,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore},
};

use crate::{
    share::{Held, Shares},
    Error, Limits, Request, Response,
};

/// hyper's smallest read buffer.
const MIN_BUF: usize = 8 * 1024;

/// Serves `handler` on `listener` for ever, within `limits`: each connection on a task of its
/// own, one request per connection.
pub async fn serve<H, F>(listener: TcpListener, limits: Limits, handler: H)
where
    H: Fn(Request) -> F + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    let handler = Arc::new(handler);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let shares = Shares::new(limits.max_per_peer);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors and the like: let the moment pass instead of spinning.
                tracing::warn!(error = %e, "accepting an HTTP connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(share) = shares.take(peer.ip()) else {
            tracing::debug!(%peer, max = limits.max_per_peer, "connection closed: the peer holds its share");
            continue;
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::debug!(%peer, max = limits.max_connections, "connection closed: at the connection cap");
            continue;
        };
        tokio::spawn(connection(
            stream,
            peer,
            limits,
            Arc::clone(&handler),
            (slot, share),
        ));
    }
}

/// Binds `addr` now (errors come back here) and serves `handler` as a task of the caller's
/// runtime `rt` (a process with one runtime for all its work); returns the bound address.
pub fn spawn_on<H, F>(
    rt: &tokio::runtime::Handle,
    what: &'static str,
    addr: SocketAddr,
    limits: Limits,
    handler: H,
) -> Result<SocketAddr, Error>
where
    H: Fn(Request) -> F + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    let (listener, bound) = bind(rt, what, addr)?;
    rt.spawn(serve(listener, limits, handler));
    Ok(bound)
}

/// `addr` bound and registered with `rt`, and the address it got.
fn bind(
    rt: &tokio::runtime::Handle,
    what: &'static str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), Error> {
    let bind_err = |source| Error::Bind { what, addr, source };
    let std_listener = std::net::TcpListener::bind(addr).map_err(bind_err)?;
    let bound = std_listener.local_addr().map_err(bind_err)?;
    std_listener.set_nonblocking(true).map_err(bind_err)?;
    let _entered = rt.enter();
    Ok((
        TcpListener::from_std(std_listener).map_err(bind_err)?,
        bound,
    ))
}

async fn connection<H, F>(
    stream: TcpStream,
    peer: SocketAddr,
    limits: Limits,
    handler: Arc<H>,
    _held: (OwnedSemaphorePermit, Held),
) where
    H: Fn(Request) -> F + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    let service = service_fn(move |req| {
        let handler = Arc::clone(&handler);
        async move { Ok::<_, Infallible>(respond(req, limits, &*handler).await) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_head_bytes.max(MIN_BUF))
        .max_header_size(limits.max_head_bytes)
        .max_headers(limits.max_headers)
        .keep_alive(false)
        // A client that half-closes after its request still gets the answer.
        .half_close(true)
        .serve_connection(TokioIo::new(stream), service);
    match tokio::time::timeout(limits.deadline, conn).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "HTTP connection ended on an error"),
        Err(_) => tracing::debug!(
            %peer,
            deadline_ms = limits.deadline.as_millis(),
            "HTTP connection cut at the deadline"
        ),
    }
}

async fn respond<H, F>(
    req: hyper::Request<Incoming>,
    limits: Limits,
    handler: &H,
) -> hyper::Response<Full<Bytes>>
where
    H: Fn(Request) -> F,
    F: Future<Output = Response>,
{
    let method = match req.method() {
        &Method::HEAD => Method::GET,
        m => m.clone(),
    };
    let path = req.uri().path().to_owned();
    let query = req.uri().query().map(str::to_owned);
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || {
        Response::text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "request bodies end at {} bytes here\n",
                limits.max_body_bytes
            ),
        )
    };
    if declared.is_some_and(|n| n > limits.max_body_bytes as u64) {
        return to_hyper(too_large());
    }
    let body = match Limited::new(req.into_body(), limits.max_body_bytes)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => return to_hyper(too_large()),
        Err(e) => {
            return to_hyper(Response::text(
                StatusCode::BAD_REQUEST,
                format!("reading the request body: {e}\n"),
            ))
        }
    };
    to_hyper(
        handler(Request {
            method,
            path,
            query,
            body,
        })
        .await,
    )
}

fn to_hyper(r: Response) -> hyper::Response<Full<Bytes>> {
    let mut out = hyper::Response::new(Full::new(Bytes::from(r.body)));
    *out.status_mut() = r.status;
    out.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(r.content_type));
    if let Some(allow) = r.allow {
        out.headers_mut()
            .insert(ALLOW, HeaderValue::from_static(allow));
    }
    out
}
