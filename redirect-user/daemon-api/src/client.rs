//! The client side of the daemon socket: one typed call per request, each waiting for its own
//! answer type, the protocol version checked on every answer.
use std::{
    io::{BufRead as _, BufReader},
    net::IpAddr,
    os::{
        fd::{AsFd as _, BorrowedFd},
        unix::net::UnixStream,
    },
    path::{Path, PathBuf},
    time::Duration,
};

use serde::de::DeserializeOwned;

use redirect_policy::Policy;

use crate::{
    answer::{Enrolled, GcDone, Listed, PodAnswer, Status, Unenrolled, Uninstalled},
    request::{PodRef, Request, PROTOCOL_VERSION},
    wire::AnswerError,
    DaemonDir, NetnsFd, Refusal,
};

/// A call that did not get its answer, naming the socket and the call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens at the socket.
    #[error("connecting to the redirect daemon at {} (is `redirect daemon` running?): {source}", socket.display())]
    Unreachable {
        /// The socket.
        socket: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// What answers at the socket's path is not the daemon: not root, or root without
    /// CAP_NET_ADMIN (a process that took the path over).
    #[error("the process answering at {} is not the redirect daemon: {why}; refused (fail closed)", socket.display())]
    NotTheDaemon {
        /// The socket.
        socket: PathBuf,
        /// What it is.
        why: String,
    },
    /// The exchange failed after connecting.
    #[error("{call} {}: {source}", socket.display())]
    Io {
        /// What was being done.
        call: &'static str,
        /// The socket.
        socket: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The answer is not this protocol's JSON.
    #[error("decoding the answer to {op} from {}: {source} (answer: {answer:?})", socket.display())]
    Decode {
        /// The request's op.
        op: &'static str,
        /// The socket.
        socket: PathBuf,
        /// The line received (at most 200 bytes of it).
        answer: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// The daemon speaks another protocol version.
    #[error("the redirect daemon at {} speaks protocol version {theirs}, this client \
        {PROTOCOL_VERSION}: run the same release of redirect, redirect-cni and the daemon", socket.display())]
    Version {
        /// The socket.
        socket: PathBuf,
        /// The daemon's version (1: it sent none).
        theirs: u32,
    },
    /// The daemon carried out nothing and said why.
    #[error("{refusal}")]
    Refused {
        /// The request's op.
        op: &'static str,
        /// The daemon's refusal: its kind and the message naming the value.
        refusal: Refusal,
    },
}

impl ClientError {
    /// Whether a daemon answered at all: it refused, or speaks another version. Anything else
    /// (nothing listening, the exchange broken, an answer that is not JSON) is no answer.
    pub fn answered(&self) -> bool {
        matches!(
            self,
            ClientError::Refused { .. } | ClientError::Version { .. }
        )
    }
}

/// A client of the daemon listening at one socket.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
    timeout: Duration,
}

impl Client {
    /// The daemon at `socket`, waiting at most 30 s for each answer.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            timeout: Duration::from_secs(30),
        }
    }

    /// The daemon of directory `dir`.
    pub fn of(dir: &DaemonDir) -> Self {
        Self::new(dir.socket())
    }

    /// This client, waiting at most `timeout` for each answer.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Applies `policy` to the namespace `netns` (replacing its previous one); its descriptor
    /// goes with the request.
    pub fn enroll(
        &self,
        netns: &NetnsFd,
        policy: Policy,
        source: String,
        writer: crate::writer::Writer,
    ) -> Result<Enrolled, ClientError> {
        let req = Request::Enroll {
            netns: netns.path().to_owned(),
            policy: Box::new(policy),
            source,
            writer,
        };
        self.call_with(&req, Some(netns.as_fd()))
    }

    /// Removes the namespace's policy (success when nothing is enrolled for it).
    pub fn unenroll(&self, netns: &Path) -> Result<Unenrolled, ClientError> {
        self.call(&Request::Unenroll {
            netns: netns.to_owned(),
        })
    }

    /// Every enrollment.
    pub fn list(&self) -> Result<Listed, ClientError> {
        self.call(&Request::List)
    }

    /// Removes every enrollment, pin and attachment; the daemon then exits.
    pub fn uninstall(&self) -> Result<Uninstalled, ClientError> {
        self.call(&Request::Uninstall)
    }

    /// CNI ADD of the namespace the plugin opened; its descriptor goes with the request.
    pub fn pod_add(
        &self,
        pod: PodRef,
        netns: &NetnsFd,
        ips: Vec<IpAddr>,
    ) -> Result<PodAnswer, ClientError> {
        let netns_path = netns.path().to_owned();
        self.call_with(
            &Request::PodAdd {
                pod,
                netns: netns_path,
                ips,
            },
            Some(netns.as_fd()),
        )
    }

    /// CNI DEL.
    pub fn pod_del(&self, pod: PodRef, netns: Option<PathBuf>) -> Result<PodAnswer, ClientError> {
        self.call(&Request::PodDel { pod, netns })
    }

    /// CNI CHECK of the namespace the plugin opened; its descriptor goes with the request.
    pub fn pod_check(
        &self,
        pod: PodRef,
        netns: &NetnsFd,
        ips: Vec<IpAddr>,
    ) -> Result<PodAnswer, ClientError> {
        let netns_path = netns.path().to_owned();
        self.call_with(
            &Request::PodCheck {
                pod,
                netns: netns_path,
                ips,
            },
            Some(netns.as_fd()),
        )
    }

    /// CNI GC: every pod enrollment whose container id is not in `valid` goes.
    pub fn pod_gc(&self, valid: Vec<String>) -> Result<GcDone, ClientError> {
        self.call(&Request::PodGc { valid })
    }

    /// Whether the daemon answers.
    pub fn status(&self) -> Result<Status, ClientError> {
        self.call(&Request::Status)
    }

    fn call<A: DeserializeOwned>(&self, req: &Request) -> Result<A, ClientError> {
        self.call_with(req, None)
    }

    fn call_with<A: DeserializeOwned>(
        &self,
        req: &Request,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<A, ClientError> {
        let socket = &self.socket;
        let io = |call| {
            move |source| ClientError::Io {
                call,
                socket: socket.clone(),
                source,
            }
        };
        let stream = UnixStream::connect(socket).map_err(|source| ClientError::Unreachable {
            socket: socket.clone(),
            source,
        })?;
        crate::peer::is_the_daemon(&stream).map_err(|why| ClientError::NotTheDaemon {
            socket: socket.clone(),
            why,
        })?;
        stream
            .set_read_timeout(Some(self.timeout))
            .map_err(io("configuring"))?;
        let line =
            crate::wire::encode_request(req).map_err(|e| io("encoding a request for")(e.into()))?;
        let sent = crate::netns_fd::send(&stream, line.as_bytes(), fd);
        let mut answer = String::new();
        let read = match &sent {
            Err(e) if !peer_closed(e) => Ok(0),
            _ => BufReader::new(&stream).read_line(&mut answer),
        };
        match (sent, read) {
            // A daemon that refuses a client at accept (its credentials) answers and closes
            // before reading: the request's write may then fail (EPIPE) while the refusal is
            // already waiting to be read. The refusal is the answer.
            (Err(e), Ok(n)) if n > 0 && peer_closed(&e) => {}
            (Err(e), _) => return Err(io("writing to")(e)),
            (Ok(()), Err(e)) => return Err(io("reading the answer from")(e)),
            (Ok(()), Ok(_)) => {}
        }
        let op = req.op();
        crate::wire::decode_answer(op, &answer).map_err(|e| match e {
            AnswerError::Json(source) => ClientError::Decode {
                op,
                socket: socket.clone(),
                answer: answer.chars().take(200).collect(),
                source,
            },
            AnswerError::Version(theirs) => ClientError::Version {
                socket: socket.clone(),
                theirs,
            },
            AnswerError::Refused(refusal) => ClientError::Refused { op, refusal },
        })
    }
}

/// The daemon closed its end (after answering, perhaps): EPIPE or ECONNRESET.
fn peer_closed(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{io::Write as _, os::unix::net::UnixListener};

    /// A fake daemon's socket in a directory of the test's own.
    fn fake_socket() -> (PathBuf, UnixListener) {
        let dir = std::env::temp_dir().join(redirect_testkit::unique_name("dapi"));
        std::fs::create_dir_all(&dir).expect("dir");
        let socket = dir.join("daemon.sock");
        let listener = UnixListener::bind(&socket).expect("bind");
        (socket, listener)
    }

    fn serve_once(answer: &'static str) -> (PathBuf, std::thread::JoinHandle<String>) {
        let (socket, listener) = fake_socket();
        let t = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let mut line = String::new();
            BufReader::new(&s).read_line(&mut line).expect("read");
            s.write_all(answer.as_bytes()).expect("write");
            line
        });
        (socket, t)
    }

    #[test]
    fn a_typed_answer_comes_back() {
        let (socket, t) = serve_once(
            "{\"v\":2,\"ok\":true,\"answer\":{\"message\":\"up\",\"pid\":7,\"enrolled\":3}}\n",
        );
        let s = Client::new(&socket).status().expect("status");
        assert_eq!((s.pid, s.enrolled), (7, 3));
        let sent: serde_json::Value =
            serde_json::from_str(&t.join().expect("server")).expect("json");
        assert_eq!(sent["v"], PROTOCOL_VERSION);
        assert_eq!(sent["call"], "status");
        let _ = std::fs::remove_dir_all(socket.parent().expect("dir"));
    }

    #[test]
    fn another_version_is_named() {
        let (socket, t) = serve_once("{\"ok\":true,\"message\":\"old\"}\n");
        let e = Client::new(&socket).status().expect_err("version 1");
        t.join().expect("server");
        assert!(matches!(e, ClientError::Version { theirs: 1, .. }), "{e:?}");
        assert!(
            e.to_string().contains("protocol version 1, this client 2"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(socket.parent().expect("dir"));
    }

    #[test]
    fn a_refusal_carries_the_daemons_words() {
        let (socket, t) = serve_once("{\"v\":2,\"ok\":false,\"error\":\"pod x/y: no such pod\"}\n");
        let e = Client::new(&socket)
            .pod_gc(Vec::new())
            .expect_err("refused");
        t.join().expect("server");
        assert_eq!(e.to_string(), "pod x/y: no such pod");
        let _ = std::fs::remove_dir_all(socket.parent().expect("dir"));
    }

    /// A daemon refuses some clients at accept: it answers and closes before it reads. A
    /// request too large for the socket's buffer then fails to write (EPIPE), and the
    /// refusal waiting in the buffer is still what the client reports.
    #[test]
    fn a_refusal_sent_before_the_request_was_read_is_reported() {
        let (socket, listener) = fake_socket();
        let t = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            s.write_all(b"{\"v\":2,\"ok\":false,\"error\":\"uid 65534: refused\"}\n")
                .expect("write");
        });
        let many = vec!["x".repeat(1000); 4000];
        let e = Client::new(&socket).pod_gc(many).expect_err("refused");
        t.join().expect("server");
        assert_eq!(e.to_string(), "uid 65534: refused", "{e:?}");
        let _ = std::fs::remove_dir_all(socket.parent().expect("dir"));
    }

    #[test]
    fn no_daemon_is_unreachable() {
        let e = Client::new("/nonexistent/daemon.sock")
            .list()
            .expect_err("nothing there");
        assert!(
            matches!(e, ClientError::Unreachable { .. }) && !e.answered(),
            "{e:?}"
        );
        assert!(e.to_string().contains("/nonexistent/daemon.sock"), "{e}");
    }
}
