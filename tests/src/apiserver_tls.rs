//! The recorded-object apiserver as in-cluster credentials meet it: TLS with a CA of its own
//! (rcgen) and a server certificate for `127.0.0.1` and `kubernetes.default.svc`, ended here
//! (tokio-rustls) in front of the plain [`PodServer`], listening in a node's network namespace.
//! What a pod needs to reach it is [`InCluster`]: `KUBERNETES_SERVICE_HOST`/`_PORT` and the CA
//! the kubelet projects beside the service-account token.
use std::{net::SocketAddr, path::Path, sync::Arc};

use redirect_testkit::netns::in_netns;

/// What in-cluster credentials name: the apiserver's address and the CA that signed it.
#[derive(Debug, Clone)]
pub struct InCluster {
    /// `KUBERNETES_SERVICE_HOST`.
    pub host: String,
    /// `KUBERNETES_SERVICE_PORT`.
    pub port: u16,
    /// The CA certificate, PEM (`ca.crt` of the projected volume).
    pub ca_pem: String,
}

/// TLS in front of a plain server; it stops listening on drop.
#[derive(Debug)]
pub struct TlsFront {
    /// What clients are given.
    pub in_cluster: InCluster,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TlsFront {
    /// Listens on 127.0.0.1 of the network namespace at `netns` and passes each connection,
    /// once its TLS is ended, to the plain server at `backend`.
    pub fn start_in(netns: &Path, backend: SocketAddr) -> Self {
        let (config, ca_pem) = server_config();
        let listener = in_netns(netns, || std::net::TcpListener::bind("127.0.0.1:0"))
            .expect("enter the node's network namespace")
            .expect("bind the TLS front");
        let addr = listener.local_addr().expect("its address");
        listener.set_nonblocking(true).expect("non-blocking");
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(serve(listener, backend, config, stopped));
        });
        Self {
            in_cluster: InCluster {
                host: addr.ip().to_string(),
                port: addr.port(),
                ca_pem,
            },
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    backend: SocketAddr,
    config: Arc<rustls::ServerConfig>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    loop {
        let tcp = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(_) => continue,
            },
        };
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let Ok(mut tls) = acceptor.accept(tcp).await else {
                return;
            };
            let Ok(mut plain) = tokio::net::TcpStream::connect(backend).await else {
                return;
            };
            let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
        });
    }
}

/// A CA and a server certificate it signed, for the names in-cluster clients use.
fn server_config() -> (Arc<rustls::ServerConfig>, String) {
    let ca_key = rcgen::KeyPair::generate().expect("a CA key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "recorded-apiserver-ca");
    let ca = ca.self_signed(&ca_key).expect("the CA certificate");
    let key = rcgen::KeyPair::generate().expect("a server key");
    let names = ["127.0.0.1", "kubernetes.default.svc"].map(str::to_owned);
    let cert = rcgen::CertificateParams::new(names.to_vec())
        .expect("server params")
        .signed_by(&key, &ca, &ca_key)
        .expect("the server certificate");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .expect("the server's certificate and key");
    (Arc::new(config), ca.pem())
}
