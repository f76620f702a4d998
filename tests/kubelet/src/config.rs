//! containerd's configuration for a test node: every directory it writes under the node's own
//! (root, state, socket, runc's root, the `opt` plugin), the CRI plugin with the pause image
//! built here, the node's CNI directories and runc with the cgroupfs driver.
use std::path::Path;

/// The pause image every sandbox runs (built here; nothing can be pulled).
pub const PAUSE_IMAGE: &str = "localhost/redirect-test/pause:1";

/// Where the CNI plugins and conflists are inside the node (the DaemonSet's hostPaths).
pub const CNI_BIN_DIR: &str = "/opt/cni/bin";
/// See [`CNI_BIN_DIR`].
pub const CNI_CONF_DIR: &str = "/etc/cni/net.d";

/// `config.toml` (version 2) for a containerd whose state is all under `dir`.
pub fn containerd_toml(dir: &Path) -> String {
    let d = dir.display();
    // restrict_oom_score_adj: the sandbox's -998 needs CAP_SYS_RESOURCE, which a test
    // machine's root may lack (runc then fails "failed to update /proc/self/oom_score_adj");
    // containerd clamps it to its own, as it does for rootless setups.
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[debug]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  disable_apparmor = true
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{CNI_CONF_DIR}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{d}/runc"
        SystemdCgroup = false
"#
    )
}

/// The node's primary network: Debian's bridge with host-local addresses (its state under
/// `dir`), in the version `version`, as a node's network add-on would write it.
pub fn bridge_conflist(dir: &Path, version: &str, subnet: &str) -> String {
    serde_json::json!({
        "cniVersion": version,
        "name": "podnet",
        "plugins": [{
            "type": "bridge",
            "bridge": "cni0",
            "isGateway": true,
            "ipMasq": false,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": subnet}]],
                "dataDir": dir.join("ipam").display().to_string()
            }
        }]
    })
    .to_string()
}
