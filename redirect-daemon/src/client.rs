//! The CLI side of the daemon socket.
use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::Path,
    time::Duration,
};

use crate::proto::{Request, Response};
use redirect_datapath::error::{Error, Result};

/// Sends `req` to the daemon listening at `socket` and waits for its answer.
pub fn call(socket: &Path, req: &Request) -> Result<Response> {
    call_timeout(socket, req, Duration::from_secs(30))
}

/// [`call`], waiting at most `timeout` for the answer (a pod request GETs the pod with
/// retries first).
pub fn call_timeout(socket: &Path, req: &Request, timeout: Duration) -> Result<Response> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        Error::io(
            "connecting to the redirect daemon (is `redirect daemon` running?) at",
            socket,
            e,
        )
    })?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| Error::io("configuring", socket, e))?;
    let mut line = serde_json::to_string(req)
        .map_err(|e| Error::io("encoding a request for", socket, e.into()))?;
    line.push('\n');
    stream
        .write_all(line.as_bytes())
        .map_err(|e| Error::io("writing to", socket, e))?;
    let mut answer = String::new();
    BufReader::new(&stream)
        .read_line(&mut answer)
        .map_err(|e| Error::io("reading the answer from", socket, e))?;
    serde_json::from_str(&answer)
        .map_err(|e| Error::io("decoding the answer from", socket, e.into()))
}
