//! Temporary CNI directories for the install-cni tests, run with the real `redirect` binary,
//! and the configurations a node has (a bridge + portmap conflist, a flannel `.conf`).
use std::{
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use redirect_testkit::unique_name;
use serde_json::{json, Value};

use crate::bin_path;

/// A bridge + portmap conflist as a kubeadm/containerd node has it, formatted by hand.
pub const BRIDGE: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "k8s-pod-network",
  "disableCheck": false,
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.1.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
  ],
  "x-vendor": {"zeta": 1, "alpha": 2}
}
"#;

/// A single-plugin `.conf`.
pub const FLANNEL: &str = "{\"name\":\"cbr0\",\"cniVersion\":\"0.4.0\",\"type\":\"flannel\",\"delegate\":{\"hairpinMode\":true,\"isDefaultGateway\":true}}\n";

/// Temporary CNI directories, removed on drop.
#[derive(Debug)]
pub struct Dirs {
    root: PathBuf,
    /// The bin directory.
    pub bin: PathBuf,
    /// The configuration directory.
    pub conf: PathBuf,
}

impl Default for Dirs {
    fn default() -> Self {
        Self::new()
    }
}

impl Dirs {
    /// New empty directories.
    pub fn new() -> Self {
        let root = std::env::temp_dir().join(unique_name("rinst"));
        let (bin, conf) = (root.join("bin"), root.join("net.d"));
        std::fs::create_dir_all(&bin).expect("bin dir");
        std::fs::create_dir_all(&conf).expect("conf dir");
        Self { root, bin, conf }
    }

    /// The two directory flags.
    pub fn args(&self) -> Vec<String> {
        vec![
            "--cni-bin-dir".into(),
            self.bin.display().to_string(),
            "--cni-conf-dir".into(),
            self.conf.display().to_string(),
        ]
    }

    /// Runs `redirect CMD` on these directories.
    pub fn redirect(&self, cmd: &str, extra: &[&str]) -> Output {
        let mut c = Command::new(bin_path("redirect"));
        c.arg(cmd);
        if cmd == "install-cni" {
            c.args(self.args());
        } else {
            c.arg("--cni-conf-dir").arg(&self.conf);
        }
        c.args(extra).output().expect("run redirect")
    }

    /// Same, asserting success; returns stdout.
    pub fn ok(&self, cmd: &str, extra: &[&str]) -> String {
        let out = self.redirect(cmd, extra);
        assert!(
            out.status.success(),
            "redirect {cmd} {extra:?}: {}",
            text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A file of the configuration directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.conf.join(name)
    }

    /// The installed plugin binary.
    pub fn plugin(&self) -> PathBuf {
        self.bin.join("redirect-cni")
    }

    /// The names in the configuration directory, sorted (hidden ones too).
    pub fn listing(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.conf)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for Dirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Exit code, stdout and stderr, for messages.
pub fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A file's text.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A file's JSON.
pub fn json_of(path: &Path) -> Value {
    serde_json::from_str(&read(path)).expect("json")
}

/// Our entry as install-cni writes it by default.
pub fn default_entry() -> Value {
    json!({"type": "redirect-cni", "daemon_socket": "/run/redirect/daemon/daemon.sock",
           "exclude_namespaces": ["kube-system"], "log_level": "info"})
}

/// (inode, mtime in ns) of a file: unchanged means not rewritten.
pub fn stamp(path: &Path) -> (u64, i64) {
    let m = std::fs::metadata(path).expect("metadata");
    (m.ino(), m.mtime() * 1_000_000_000 + m.mtime_nsec())
}
