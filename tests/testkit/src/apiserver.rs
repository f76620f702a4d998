//! The recorded-object apiserver: a local HTTP server replaying recorded Kubernetes Pod objects at
//! `GET /api/v1/namespaces/NS/pods/NAME` (404 with a `Status` otherwise), a recorded list and
//! watch stream at `GET /api/v1/pods` (`?watch=true`: ADDED/MODIFIED/DELETED events, then the
//! stream stays open; `/api/v1/namespaces/NS/pods`: those of namespace NS), any other object at its path (a Service, a Node, a DaemonSet; a merge
//! PATCH applied to it and recorded with its body), and the kubeconfig that points the daemon's
//! real kube-rs client at it; behind TLS ([`crate::apiserver_tls`]) it checks bearer tokens and
//! rotates the one it issues, as in-cluster credentials meet it. No kube-apiserver can be
//! installed here; the daemon's client, its retries and its decoding are the real ones.
use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use serde_json::{json, Value};

type Pods = Arc<Mutex<BTreeMap<(String, String), Value>>>;
type Objects = Arc<Mutex<BTreeMap<String, Value>>>;

/// The bearer tokens: the ones accepted (none: every request is), the one issued to pods
/// now, and the token each request carried with its target.
#[derive(Debug, Default)]
struct Tokens {
    accepted: Vec<String>,
    issued: String,
    seen: Vec<(Option<String>, String)>,
}

/// What `GET /api/v1/pods` answers: the listed pods and the watch events after them, and
/// the watch streams open now (an event added later reaches them at once).
#[derive(Debug, Default)]
struct Recorded {
    list: Vec<Value>,
    events: Vec<Value>,
    watching: Vec<TcpStream>,
}

/// The server: pods by (namespace, name), and every path asked for.
#[derive(Debug)]
pub struct PodServer {
    addr: SocketAddr,
    pods: Pods,
    objects: Objects,
    recorded: Arc<Mutex<Recorded>>,
    hits: Arc<Mutex<Vec<String>>>,
    tokens: Arc<Mutex<Tokens>>,
    kubeconfig: PathBuf,
}

impl PodServer {
    /// Listens on 127.0.0.1 (an ephemeral port) and writes `DIR/kubeconfig` for it.
    pub fn start(dir: &Path) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the pod server");
        Self::serve(listener, dir)
    }

    /// Listens on 127.0.0.1 of the network namespace at `netns` (a node's host network),
    /// served from here, and writes `DIR/kubeconfig` for it.
    pub fn start_in(dir: &Path, netns: &Path) -> Self {
        let listener = crate::netns::in_netns(netns, || TcpListener::bind("127.0.0.1:0"))
            .expect("enter the node's network namespace")
            .expect("bind the pod server");
        Self::serve(listener, dir)
    }

    fn serve(listener: TcpListener, dir: &Path) -> Self {
        let addr = listener.local_addr().expect("its address");
        let pods: Pods = Arc::default();
        let objects: Objects = Arc::default();
        let recorded: Arc<Mutex<Recorded>> = Arc::default();
        let hits: Arc<Mutex<Vec<String>>> = Arc::default();
        let tokens: Arc<Mutex<Tokens>> = Arc::default();
        let (p, r, h) = (Arc::clone(&pods), Arc::clone(&recorded), Arc::clone(&hits));
        let (o, t) = (Arc::clone(&objects), Arc::clone(&tokens));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (p, r, h) = (Arc::clone(&p), Arc::clone(&r), Arc::clone(&h));
                let (o, t) = (Arc::clone(&o), Arc::clone(&t));
                std::thread::spawn(move || serve(stream, &p, &o, &r, &h, &t));
            }
        });
        std::fs::create_dir_all(dir).expect("kubeconfig dir");
        let kubeconfig = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: recorded\n  cluster:\n    server: http://{addr}\ncontexts:\n- name: recorded\n  context:\n    cluster: recorded\n    user: nobody\ncurrent-context: recorded\nusers:\n- name: nobody\n  user: {{}}\n"
        );
        std::fs::write(&kubeconfig, text).expect("write the kubeconfig");
        Self {
            addr,
            pods,
            objects,
            recorded,
            hits,
            tokens,
            kubeconfig,
        }
    }

    /// The kubeconfig naming this server.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `pod` (a Pod object) from now on.
    pub fn put(&self, pod: &Value) {
        let key = (
            pod["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            pod["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
        self.pods.lock().expect("pods").insert(key, pod.clone());
    }

    /// Serves `object` (a Service, a Node, ...) at `GET path` from now on.
    pub fn put_object(&self, path: &str, object: &Value) {
        let mut objects = self.objects.lock().expect("objects");
        objects.insert(path.to_owned(), object.clone());
    }

    /// Stops serving the object at `path` (404 from now on).
    pub fn remove_object(&self, path: &str) {
        self.objects.lock().expect("objects").remove(path);
    }

    /// The object served at `path` now (after PATCHes).
    pub fn object(&self, path: &str) -> Option<Value> {
        self.objects.lock().expect("objects").get(path).cloned()
    }

    /// Serves the cluster DNS Service `kube-system/kube-dns` with cluster IP `ip`.
    pub fn put_kube_dns(&self, ip: &str) {
        let service = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": "kube-system"},
            "spec": {"clusterIP": ip, "clusterIPs": [ip], "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}});
        self.put_object("/api/v1/namespaces/kube-system/services/kube-dns", &service);
    }

    /// Lists `pod` in `GET /api/v1/pods` (never served by its own GET).
    pub fn list(&self, pod: &Value) {
        let mut pod = pod.clone();
        pod["metadata"]["resourceVersion"] = "1".into();
        self.recorded.lock().expect("recorded").list.push(pod);
    }

    /// Adds a watch event (`ADDED`, `MODIFIED`, `DELETED`) of `pod` to the watch stream.
    pub fn event(&self, kind: &str, pod: &Value) {
        let mut r = self.recorded.lock().expect("recorded");
        // Every object of a watch carries a resourceVersion (the watcher resumes from it).
        let mut object = pod.clone();
        object["metadata"]["resourceVersion"] = (r.events.len() + 2).to_string().into();
        let event = json!({"type": kind, "object": object});
        let line = format!("{event}\n");
        r.watching.retain_mut(|s| {
            write!(s, "{:x}\r\n{line}\r\n", line.len()).is_ok() && s.flush().is_ok()
        });
        r.events.push(event);
    }

    /// GETs of `namespace/name` find nothing from now on (a deleted pod).
    pub fn remove(&self, namespace: &str, name: &str) {
        self.pods
            .lock()
            .expect("pods")
            .remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// Issues bearer token `token` (what a pod's projected service-account token holds from
    /// now on) and accepts it beside those accepted already; from the first one issued, a
    /// request without an accepted token is answered 401.
    pub fn issue_token(&self, token: &str) {
        let mut t = self.tokens.lock().expect("tokens");
        t.accepted.push(token.to_owned());
        t.issued = token.to_owned();
    }

    /// The token issued last.
    pub fn issued_token(&self) -> String {
        self.tokens.lock().expect("tokens").issued.clone()
    }

    /// Accepts only the token issued last: the others expired.
    pub fn expire_older_tokens(&self) {
        let mut t = self.tokens.lock().expect("tokens");
        t.accepted = vec![t.issued.clone()];
    }

    /// The bearer token of each request received (`None`: it had none) and its target, in
    /// order.
    pub fn bearers(&self) -> Vec<(Option<String>, String)> {
        self.tokens.lock().expect("tokens").seen.clone()
    }

    /// Ends every open watch stream, as the apiserver does at a watch's timeout: the client
    /// watches again.
    pub fn end_watches(&self) {
        for s in self.recorded.lock().expect("recorded").watching.drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Every request path received (with its query), in order.
    pub fn hits(&self) -> Vec<String> {
        self.hits.lock().expect("hits").clone()
    }
}

fn serve(
    stream: TcpStream,
    pods: &Pods,
    objects: &Objects,
    recorded: &Mutex<Recorded>,
    hits: &Mutex<Vec<String>>,
    tokens: &Mutex<Tokens>,
) {
    let mut reader = BufReader::new(&stream);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    // The rest of the head; only a PATCH has a body.
    let mut header = String::new();
    let mut length = 0usize;
    let mut bearer = None;
    while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
        if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if let Some((name, v)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("authorization") {
                bearer = v.trim().strip_prefix("Bearer ").map(str::to_owned);
            }
        }
        header.clear();
    }
    let method = line
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    let target = line.split_whitespace().nth(1).unwrap_or_default();
    {
        let mut t = tokens.lock().expect("tokens");
        t.seen.push((bearer.clone(), target.to_owned()));
        let refused =
            !t.accepted.is_empty() && !bearer.as_ref().is_some_and(|b| t.accepted.contains(b));
        if refused {
            hits.lock().expect("hits").push(format!("401 {target}"));
            let body =
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
                .to_string();
            let _ = write!(
                &stream,
                "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            return;
        }
    }
    if method == "PATCH" {
        let mut body = vec![0u8; length.min(1 << 20)];
        let _ = std::io::Read::read_exact(&mut reader, &mut body);
        let body = String::from_utf8_lossy(&body).into_owned();
        hits.lock()
            .expect("hits")
            .push(format!("PATCH {target} {body}"));
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        return patch(&stream, objects, path, &body);
    }
    hits.lock().expect("hits").push(target.to_owned());
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let path = path.to_owned();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let listed = match parts.as_slice() {
        ["api", "v1", "pods"] => Some(None),
        ["api", "v1", "namespaces", ns, "pods"] => Some(Some(*ns)),
        _ => None,
    };
    if let Some(namespace) = listed {
        let watch = query
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1");
        return pod_list(&stream, recorded, watch, namespace);
    }
    let found = match parts.as_slice() {
        ["api", "v1", "namespaces", ns, "pods", name] => pods
            .lock()
            .expect("pods")
            .get(&((*ns).to_owned(), (*name).to_owned()))
            .cloned(),
        _ => objects.lock().expect("objects").get(&path).cloned(),
    };
    let (status, body) = match found {
        Some(pod) => ("200 OK", pod),
        None => (
            "404 Not Found",
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": format!("{path} not found"), "reason": "NotFound", "code": 404}),
        ),
    };
    let body = body.to_string();
    let _ = write!(
        &stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// A merge patch (RFC 7386) of the object at `path`: applied and the result answered; 404
/// when there is none.
fn patch(mut stream: &TcpStream, objects: &Objects, path: &str, body: &str) {
    fn merge(target: &mut Value, patch: &Value) {
        match (target.as_object_mut(), patch.as_object()) {
            (Some(t), Some(p)) => {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
            _ => *target = patch.clone(),
        }
    }
    let patched = serde_json::from_str::<Value>(body).ok().and_then(|p| {
        let mut objects = objects.lock().expect("objects");
        let object = objects.get_mut(path)?;
        merge(object, &p);
        Some(object.clone())
    });
    let (status, body) = match patched {
        Some(o) => ("200 OK", o.to_string()),
        None => ("404 Not Found", json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": format!("{path} not found")}).to_string()),
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// `GET /api/v1/pods`: the recorded list, or (watch) the recorded events as a chunked stream
/// that then stays open until the client goes; with `namespace`, only that namespace's pods
/// (and a watch stream of the namespace gets every later event: its tests add only theirs).
fn pod_list(
    mut stream: &TcpStream,
    recorded: &Mutex<Recorded>,
    watch: bool,
    namespace: Option<&str>,
) {
    let ours = |pod: &Value| namespace.is_none_or(|ns| pod["metadata"]["namespace"] == ns);
    if !watch {
        let list: Vec<Value> = recorded
            .lock()
            .expect("recorded")
            .list
            .iter()
            .filter(|p| ours(p))
            .cloned()
            .collect();
        let body = json!({"kind": "PodList", "apiVersion": "v1",
                          "metadata": {"resourceVersion": "1"}, "items": list})
        .to_string();
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        return;
    }
    {
        // Under the lock: no event falls between the replay and the registration.
        let mut r = recorded.lock().expect("recorded");
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        for event in r.events.iter().filter(|e| ours(&e["object"])) {
            let line = format!("{event}\n");
            let _ = write!(stream, "{:x}\r\n{line}\r\n", line.len());
        }
        let _ = stream.flush();
        if let Ok(clone) = stream.try_clone() {
            r.watching.push(clone);
        }
    }
    // Held open, as a watch is: returns when the client closes it.
    let mut sink = [0u8; 64];
    while std::io::Read::read(&mut stream, &mut sink).is_ok_and(|n| n > 0) {}
}
