//! A local HTTP server replaying recorded Kubernetes Pod objects at
//! `GET /api/v1/namespaces/NS/pods/NAME` (404 with a `Status` otherwise), and the kubeconfig
//! that points the daemon's real kube-rs client at it. No kube-apiserver can be installed
//! here; the daemon's client, its retries and its decoding are the real ones.
use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use redirect_testkit::reference;
use serde_json::{json, Value};

type Pods = Arc<Mutex<BTreeMap<(String, String), Value>>>;

/// The server: pods by (namespace, name), and every path asked for.
#[derive(Debug)]
pub struct PodServer {
    addr: SocketAddr,
    pods: Pods,
    hits: Arc<Mutex<Vec<String>>>,
    kubeconfig: PathBuf,
}

impl PodServer {
    /// Listens on 127.0.0.1 (an ephemeral port) and writes `DIR/kubeconfig` for it.
    pub fn start(dir: &Path) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the pod server");
        let addr = listener.local_addr().expect("its address");
        let pods: Pods = Arc::default();
        let hits: Arc<Mutex<Vec<String>>> = Arc::default();
        let (p, h) = (Arc::clone(&pods), Arc::clone(&hits));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (p, h) = (Arc::clone(&p), Arc::clone(&h));
                std::thread::spawn(move || serve(stream, &p, &h));
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
            hits,
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

    /// Every request path received, in order.
    pub fn hits(&self) -> Vec<String> {
        self.hits.lock().expect("hits").clone()
    }
}

fn serve(stream: TcpStream, pods: &Pods, hits: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(&stream);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    // The rest of the head; GETs have no body.
    let mut header = String::new();
    while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
        header.clear();
    }
    let path = line.split_whitespace().nth(1).unwrap_or_default();
    let path = path.split('?').next().unwrap_or_default().to_owned();
    hits.lock().expect("hits").push(path.clone());
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let found = match parts.as_slice() {
        ["api", "v1", "namespaces", ns, "pods", name] => pods
            .lock()
            .expect("pods")
            .get(&((*ns).to_owned(), (*name).to_owned()))
            .cloned(),
        _ => None,
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

/// A pod as the apiserver returns it, built from the vendored kube-inject manifest `manifest`
/// (one of [`reference::INJECT_MANIFESTS`]) migrated to what Istio's injector emits with
/// istio-cni enabled (native sidecar, no istio-init), named and scheduled on `node`.
pub fn recorded_pod(manifest: &str, namespace: &str, name: &str, uid: &str, node: &str) -> Value {
    let text = reference::inject(manifest);
    let mut docs = redirect_k8s::manifest::documents(&text).expect("the manifest parses");
    let doc = docs
        .iter_mut()
        .find(|d| d.kind() == "Deployment" || d.kind() == "Pod")
        .expect("a workload in the manifest");
    redirect_k8s::manifest::migrate(doc).expect("migrate");
    let pod = doc.pod().expect("decode").expect("a pod");
    let mut v = serde_json::to_value(pod).expect("a Pod serialises");
    v["apiVersion"] = "v1".into();
    v["kind"] = "Pod".into();
    v["metadata"]["name"] = name.into();
    v["metadata"]["namespace"] = namespace.into();
    v["metadata"]["uid"] = uid.into();
    v["spec"]["nodeName"] = node.into();
    v
}
