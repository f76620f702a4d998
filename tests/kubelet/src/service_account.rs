//! In-cluster credentials, as the kubelet gives them to a pod that automounts its
//! service-account token: `KUBERNETES_SERVICE_HOST`/`_PORT` in every container's environment,
//! and the projected volume (`token`, `ca.crt`, `namespace`) read-only at
//! `/var/run/secrets/kubernetes.io/serviceaccount`, written as the kubelet's atomic writer writes
//! it (the files are symlinks into `..data`, a symlink swapped to a new timestamped directory at
//! each rotation), so a client that re-reads its token sees the rotated one.
use std::{
    path::Path,
    sync::{Arc, Mutex},
};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;

use crate::pod::NodeInfo;

/// Where containers find the projected volume.
pub const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The apiserver as the node's pods reach it.
#[derive(Debug, Clone)]
pub struct ApiAccess {
    /// `KUBERNETES_SERVICE_HOST`.
    pub host: String,
    /// `KUBERNETES_SERVICE_PORT`.
    pub port: u16,
    /// The cluster's CA, PEM (`ca.crt`).
    pub ca_pem: String,
    /// The token the apiserver issues now (what TokenRequest would answer).
    pub token: Arc<Mutex<String>>,
}

/// Whether `pod` gets the projected token (`automountServiceAccountToken` unset or true).
pub fn automounts(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.automount_service_account_token)
        != Some(false)
}

/// The projected volume's directory on the node.
pub fn volume_dir(pod: &Pod, node: &NodeInfo) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap_or("no-uid");
    format!("{}/{uid}/volumes/kube-api-access", node.pods_root)
}

/// The environment the kubelet gives every container of the node's pods.
pub fn env(api: &ApiAccess) -> [(String, String); 3] {
    [
        ("KUBERNETES_SERVICE_HOST".into(), api.host.clone()),
        ("KUBERNETES_SERVICE_PORT".into(), api.port.to_string()),
        ("KUBERNETES_SERVICE_PORT_HTTPS".into(), api.port.to_string()),
    ]
}

/// Writes (or rotates) `pod`'s projected volume with the token issued now.
pub fn project(pod: &Pod, node: &NodeInfo, api: &ApiAccess) -> anyhow::Result<()> {
    let dir = volume_dir(pod, node);
    let dir = Path::new(&dir);
    std::fs::create_dir_all(dir).with_context(|| format!("mkdir {}", dir.display()))?;
    let token = api.token.lock().expect("token").clone();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    // A new timestamped directory with every file, then `..data` swapped to it in one rename.
    let stamp = format!(
        "..{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let data = dir.join(&stamp);
    std::fs::create_dir(&data).with_context(|| format!("mkdir {}", data.display()))?;
    for (name, text) in [
        ("token", token.as_str()),
        ("ca.crt", api.ca_pem.as_str()),
        ("namespace", namespace),
    ] {
        std::fs::write(data.join(name), text).with_context(|| format!("writing {name}"))?;
    }
    let old = std::fs::read_link(dir.join("..data")).ok();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&stamp, &tmp).context("the ..data_tmp symlink")?;
    std::fs::rename(&tmp, dir.join("..data")).context("swapping ..data")?;
    for name in ["token", "ca.crt", "namespace"] {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(name), &link)
                .with_context(|| format!("the {name} symlink"))?;
        }
    }
    if let Some(old) = old.filter(|o| o.as_os_str() != stamp.as_str()) {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(())
}
