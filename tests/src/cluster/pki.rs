//! The cluster's certificates and kubeconfigs, made here with rcgen as an installer's `kubeadm
//! init phase certs` would: one CA for every serving and client certificate, the apiserver's
//! serving certificate for the node's address, the `kubernetes` Service's cluster IP and its
//! DNS names, a client certificate per component (its user and groups are what RBAC and the
//! Node authorizer see), and the service-account signing key.
use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// The files under `DIR/pki`.
#[derive(Clone)]
pub struct Pki {
    /// Its directory.
    pub dir: PathBuf,
    ca: Arc<(rcgen::Certificate, KeyPair)>,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// A certificate and key written as `NAME.crt` and `NAME.key`.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The certificate's file.
    pub cert: PathBuf,
    /// The key's file.
    pub key: PathBuf,
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

impl Pki {
    /// A fresh CA under `dir/pki`, with the service-account key beside it.
    pub fn new(dir: &Path) -> anyhow::Result<Self> {
        let dir = dir.join("pki");
        std::fs::create_dir_all(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        let ca_key = KeyPair::generate().context("the CA's key")?;
        let mut params = CertificateParams::new(Vec::<String>::new()).context("CA params")?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "kubernetes");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::CrlSign,
        ];
        let ca = params.self_signed(&ca_key).context("the CA certificate")?;
        write(&dir.join("ca.crt"), &ca.pem())?;
        write(&dir.join("ca.key"), &ca_key.serialize_pem())?;
        // The service-account tokens' signing key (ES256); the apiserver reads the public key
        // from the same PEM.
        let sa = KeyPair::generate().context("the service-account key")?;
        write(&dir.join("sa.key"), &sa.serialize_pem())?;
        write(&dir.join("sa.pub"), &sa.public_key_pem())?;
        Ok(Self {
            dir,
            ca: Arc::new((ca, ca_key)),
        })
    }

    /// The CA's certificate file.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The CA's key file (the controller-manager signs kubelet CSRs with it).
    pub fn ca_key(&self) -> PathBuf {
        self.dir.join("ca.key")
    }

    /// The service-account public key's file (what verifies the tokens).
    pub fn sa_pub(&self) -> PathBuf {
        self.dir.join("sa.pub")
    }

    /// The service-account signing key's file.
    pub fn sa_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }

    /// The CA's PEM text.
    pub fn ca_pem(&self) -> String {
        self.ca.0.pem()
    }

    /// A serving certificate for `names` (IP addresses or DNS names).
    pub fn server(&self, name: &str, names: &[&str]) -> anyhow::Result<Pair> {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).context("server params")?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(name, params)
    }

    /// A client certificate: user `user` in `groups` (the subject's CN and Os).
    pub fn client(&self, name: &str, user: &str, groups: &[&str]) -> anyhow::Result<Pair> {
        let mut params = CertificateParams::new(Vec::<String>::new()).context("client params")?;
        params.distinguished_name.push(DnType::CommonName, user);
        for g in groups {
            params.distinguished_name.push(DnType::OrganizationName, *g);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(name, params)
    }

    fn sign(&self, name: &str, mut params: CertificateParams) -> anyhow::Result<Pair> {
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().with_context(|| format!("{name}'s key"))?;
        let cert = params
            .signed_by(&key, &self.ca.0, &self.ca.1)
            .with_context(|| format!("{name}'s certificate"))?;
        let pair = Pair {
            cert: self.dir.join(format!("{name}.crt")),
            key: self.dir.join(format!("{name}.key")),
        };
        write(&pair.cert, &cert.pem())?;
        write(&pair.key, &key.serialize_pem())?;
        Ok(pair)
    }

    /// A kubeconfig `DIR/NAME.conf` for `server` with the client certificate `pair`.
    pub fn kubeconfig(&self, name: &str, server: &str, pair: &Pair) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(format!("{name}.conf"));
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\n\
             users:\n- name: {name}\n  user:\n    client-certificate: {cert}\n    client-key: {key}\n\
             contexts:\n- name: test\n  context: {{cluster: test, user: {name}}}\ncurrent-context: test\n",
            ca = self.ca().display(),
            cert = pair.cert.display(),
            key = pair.key.display(),
        );
        write(&path, &text)?;
        Ok(path)
    }
}
