//! The bounded `GET` of a plain `http://` URL (the proxy merging its application's metrics):
//! hyper's client, a deadline for the whole exchange, a cap on the body, 200 only.
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::{
    header::{ACCEPT, HOST},
    StatusCode, Uri,
};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::Error;

/// Fetches `url` (`http://HOST[:PORT]/PATH`) within `deadline`; the body must be 200 and at
/// most `max_body` bytes.
pub async fn get(url: &str, deadline: Duration, max_body: usize) -> Result<String, Error> {
    let bad_url = || Error::Url {
        url: url.to_owned(),
    };
    let uri: Uri = url.parse().map_err(|_| bad_url())?;
    if uri.scheme_str() != Some("http") {
        return Err(bad_url());
    }
    let authority = uri.authority().ok_or_else(bad_url)?.clone();
    let fail = |why: String| Error::Fetch {
        url: url.to_owned(),
        why,
    };
    let fetch = async {
        let dial = match authority.port() {
            Some(_) => authority.as_str().to_owned(),
            None => format!("{}:80", authority.as_str()),
        };
        let stream = TcpStream::connect(&dial)
            .await
            .map_err(|e| fail(format!("connecting to {dial}: {e}")))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| fail(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let req = hyper::Request::get(path)
            .header(HOST, authority.as_str())
            .header(ACCEPT, "text/plain")
            .body(Empty::<Bytes>::new())
            .map_err(|e| fail(e.to_string()))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| fail(e.to_string()))?;
        if resp.status() != StatusCode::OK {
            return Err(fail(format!("HTTP status {}", resp.status().as_u16())));
        }
        let body = Limited::new(resp.into_body(), max_body)
            .collect()
            .await
            .map_err(|e| fail(format!("reading the body (at most {max_body} bytes): {e}")))?;
        Ok(String::from_utf8_lossy(&body.to_bytes()).into_owned())
    };
    tokio::time::timeout(deadline, fetch)
        .await
        .map_err(|_| fail(format!("no answer within {deadline:?}")))?
}
