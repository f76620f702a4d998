//! `--control-plane`: before it opens any listener, the proxy connects to its control plane,
//! as Envoy opens its listeners only once istiod's first xDS answer arrived. A capture that
//! does not yet bypass the proxy's own connections (strict proxy binding, before the node
//! daemon has bound the bypass to this container) refuses that connection instead of
//! delivering it; the proxy retries once a second, so it never forwards (and never loops its
//! own upstream connections back to itself) before its connections leave the pod as its own.
use std::{io, net::SocketAddr, time::Duration};

use tokio::{io::AsyncWriteExt as _, net::TcpStream, time::Instant};

/// What the proxy says on the connection (a control plane of the tests records it).
const HELLO: &[u8] = b"redirect-proxy control plane\n";

/// Connects to `addr` once a second until a connection is made, for at most `timeout`.
pub async fn wait_reachable(addr: SocketAddr, timeout: Duration) -> io::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut tries = 0u32;
    loop {
        tries += 1;
        let attempt = tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(addr)).await;
        let error = match attempt {
            Ok(Ok(mut stream)) => {
                let _ = stream.write_all(HELLO).await;
                tracing::info!(control_plane = %addr, tries, "control plane reached: opening the listeners");
                return Ok(());
            }
            Ok(Err(e)) => e,
            Err(_) => io::Error::new(io::ErrorKind::TimedOut, "no answer in 3 s"),
        };
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                error.kind(),
                format!("control plane {addr} not reached in {timeout:?} ({tries} tries): {error}"),
            ));
        }
        tracing::warn!(control_plane = %addr, tries, %error, "control plane not reached yet: retrying in 1 s");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_once_the_control_plane_answers_and_names_it_when_it_never_does() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let up = listener.local_addr().expect("addr");
        wait_reachable(up, Duration::from_secs(5))
            .await
            .expect("reached");
        drop(listener);
        let error = wait_reachable(up, Duration::from_millis(10))
            .await
            .expect_err("nothing listens any more");
        assert!(error.to_string().contains(&up.to_string()), "{error}");
    }
}
