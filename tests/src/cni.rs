//! A real CNI chain run exactly as a container runtime runs it (environment + stdin, spec
//! 1.0.0), inside a "host" network namespace of the test's own: Debian's `loopback`, `bridge`
//! with `host-local` IPAM (a test-only subnet, a unique bridge, IPAM state in a directory of
//! the test's own), then `redirect-cni` with the bridge's result as `prevResult`.
use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Output, Stdio},
};

use redirect_testkit::{unique_name, Child, Netns};
use serde_json::{json, Value};

use crate::bin_path;

/// Debian's plugins (`containernetworking-plugins`; `cargo xtask setup` installs it).
pub const PLUGIN_DIR: &str = "/usr/lib/cni";

/// The CNI version of the chain (Debian's plugins speak up to 1.0.0).
pub const VERSION: &str = "1.0.0";

/// The subnet the bridge's IPAM hands out, inside the test's host namespace only.
pub const SUBNET: &str = "198.18.200.0/24";

/// The bridge's address in the host namespace (the pods' gateway).
pub const GATEWAY: &str = "198.18.200.1";

/// What one plugin invocation gave: exit status, stdout parsed as JSON (`Null` when empty).
#[derive(Debug)]
pub struct Run {
    /// The process's output.
    pub output: Output,
    /// stdout as JSON.
    pub json: Value,
}

impl Run {
    /// Whether it exited 0.
    pub fn ok(&self) -> bool {
        self.output.status.success()
    }

    /// stdout and stderr, for assertion messages.
    pub fn text(&self) -> String {
        format!(
            "exit {:?}\nstdout: {}\nstderr: {}",
            self.output.status.code(),
            String::from_utf8_lossy(&self.output.stdout),
            String::from_utf8_lossy(&self.output.stderr)
        )
    }
}

/// The runtime's view of one pod sandbox: its container id, netns and CNI_ARGS.
#[derive(Debug, Clone)]
pub struct PodCall {
    /// CNI_CONTAINERID.
    pub container_id: String,
    /// CNI_NETNS.
    pub netns: PathBuf,
    /// (namespace, name, uid).
    pub pod: (String, String, String),
}

impl PodCall {
    fn cni_args(&self) -> String {
        let (ns, name, uid) = &self.pod;
        format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={ns};K8S_POD_NAME={name};K8S_POD_INFRA_CONTAINER_ID={};K8S_POD_UID={uid}",
            self.container_id
        )
    }
}

/// The host side: a namespace of the test's own, where the bridge lives.
#[derive(Debug)]
pub struct CniHost {
    /// The host namespace the runtime runs the plugins in.
    pub ns: Netns,
    /// The bridge's name.
    pub bridge: String,
    ipam_dir: PathBuf,
}

impl CniHost {
    /// A fresh host namespace; the bridge appears with the first ADD.
    pub fn new() -> Self {
        let ns = Netns::new("rch").expect("host netns");
        Self {
            bridge: unique_name("rcb"),
            ipam_dir: std::env::temp_dir().join(unique_name("rci")),
            ns,
        }
    }

    /// The bridge network's configuration (one plugin of the chain).
    pub fn bridge_conf(&self) -> Value {
        json!({
            "cniVersion": VERSION,
            "name": "redirect-test",
            "type": "bridge",
            "bridge": self.bridge,
            "isGateway": true,
            "isDefaultGateway": true,
            "ipam": {
                "type": "host-local",
                "subnet": SUBNET,
                "gateway": GATEWAY,
                "dataDir": self.ipam_dir,
            }
        })
    }

    /// Runs `plugin` (a path) for `command` as the runtime does: in the host namespace, the
    /// `CNI_*` environment, `conf` on stdin.
    pub fn invoke(&self, plugin: &Path, command: &str, call: &PodCall, conf: &Value) -> Run {
        self.invoke_in(plugin, command, call, conf, PLUGIN_DIR)
    }

    /// [`Self::invoke`] with `CNI_PATH` = `cni_path` (directories joined by `:`).
    pub fn invoke_in(
        &self,
        plugin: &Path,
        command: &str,
        call: &PodCall,
        conf: &Value,
        cni_path: &str,
    ) -> Run {
        let mut cmd = self.ns.exec(plugin);
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", &call.container_id)
            .env("CNI_NETNS", &call.netns)
            .env("CNI_IFNAME", "eth0")
            .env("CNI_ARGS", call.cni_args())
            .env("CNI_PATH", cni_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start the plugin");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(conf.to_string().as_bytes())
            .expect("write the config");
        drop(stdin);
        let output = child.wait_with_output().expect("wait for the plugin");
        let json = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        Run { output, json }
    }

    /// The chain's primary part for a new sandbox: `loopback` then `bridge`; returns the
    /// bridge's result (the prevResult of the next plugin).
    pub fn primary_add(&self, call: &PodCall) -> Value {
        let lo = json!({"cniVersion": VERSION, "name": "lo", "type": "loopback"});
        let ran = self.invoke(&plugin("loopback"), "ADD", call, &lo);
        assert!(ran.ok(), "loopback ADD: {}", ran.text());
        let ran = self.invoke(&plugin("bridge"), "ADD", call, &self.bridge_conf());
        assert!(ran.ok(), "bridge ADD: {}", ran.text());
        ran.json
    }

    /// `redirect-cni COMMAND` with `entry` (our conflist entry) and, when given, prevResult.
    pub fn redirect_cni(
        &self,
        command: &str,
        call: &PodCall,
        entry: &Value,
        prev: Option<&Value>,
    ) -> Run {
        self.redirect_cni_at(&bin_path("redirect-cni"), command, call, entry, prev)
    }

    /// [`CniHost::redirect_cni`] with the plugin binary at `plugin` (e.g. the image's).
    pub fn redirect_cni_at(
        &self,
        plugin: &Path,
        command: &str,
        call: &PodCall,
        entry: &Value,
        prev: Option<&Value>,
    ) -> Run {
        let mut conf = entry.clone();
        // libcni sends STATUS and GC only for lists of 1.1.0 (they came with it); the plugin
        // refuses them in an older version, as the spec has it.
        conf["cniVersion"] = if matches!(command, "STATUS" | "GC") {
            "1.1.0"
        } else {
            VERSION
        }
        .into();
        conf["name"] = "redirect-test".into();
        if let Some(prev) = prev {
            conf["prevResult"] = prev.clone();
        }
        self.invoke(plugin, command, call, &conf)
    }

    /// A listener at the bridge's gateway, port 80, in the host namespace: where a pod's
    /// uncaptured outbound lands (the bridge exists from the first sandbox on).
    pub fn world_listener(&self) -> Child {
        crate::world::listen(
            &self.ns,
            None,
            None,
            "world",
            &[format!("{GATEWAY}:80")],
            &[],
        )
    }

    /// The bridge's DEL for a sandbox (releases its address).
    pub fn primary_del(&self, call: &PodCall) {
        let _ = self.invoke(&plugin("bridge"), "DEL", call, &self.bridge_conf());
    }
}

impl Default for CniHost {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for CniHost {
    fn drop(&mut self) {
        let _ = redirect_testkit::ip(&["-n", self.ns.name(), "link", "del", &self.bridge]);
        let _ = std::fs::remove_dir_all(&self.ipam_dir);
    }
}

impl CniHost {
    /// Runs the conflist `list` as libcni does: ADD through `plugins` in order, each given the
    /// list's `name` and `cniVersion` and the previous result as `prevResult`, its binary
    /// (`type`) looked up in `cni_path`; DEL in reverse order with the ADD's result (`prev`).
    /// Returns the first failure or the last result.
    pub fn run_conflist(
        &self,
        command: &str,
        call: &PodCall,
        list: &Value,
        cni_path: &[&Path],
        prev: Option<&Value>,
    ) -> Run {
        let mut plugins: Vec<Value> = list["plugins"].as_array().cloned().unwrap_or_default();
        if command == "DEL" {
            plugins.reverse();
        }
        let path: Vec<String> = cni_path.iter().map(|p| p.display().to_string()).collect();
        let mut result = prev.cloned();
        let mut last = None;
        for mut conf in plugins {
            conf["name"] = list["name"].clone();
            conf["cniVersion"] = list["cniVersion"].clone();
            if let Some(prev) = &result {
                conf["prevResult"] = prev.clone();
            }
            let kind = conf["type"].as_str().unwrap_or_default().to_owned();
            let binary = cni_path
                .iter()
                .map(|d| d.join(&kind))
                .find(|p| p.is_file())
                .unwrap_or_else(|| panic!("plugin {kind:?} in none of {path:?}"));
            let ran = self.invoke_in(&binary, command, call, &conf, &path.join(":"));
            if !ran.ok() {
                return ran;
            }
            if command == "ADD" {
                result = Some(ran.json.clone());
            }
            last = Some(ran);
        }
        last.expect("a conflist with plugins")
    }
}

/// A Debian plugin's path.
pub fn plugin(name: &str) -> PathBuf {
    Path::new(PLUGIN_DIR).join(name)
}

/// Why a test of the CNI chain cannot run (Debian's plugins are missing), for `privileged!`.
pub fn plugins_missing() -> Option<String> {
    (!plugins_installed()).then(|| {
        "Debian's containernetworking-plugins are missing (cargo xtask setup installs them)"
            .to_owned()
    })
}

/// Whether Debian's plugins are installed.
pub fn plugins_installed() -> bool {
    ["loopback", "bridge", "host-local"]
        .iter()
        .all(|p| plugin(p).is_file())
}

/// Our conflist entry for a daemon whose socket is `socket`.
pub fn entry(socket: &Path) -> Value {
    json!({
        "type": "redirect-cni",
        "daemon_socket": socket,
        "exclude_namespaces": ["kube-system"],
        "log_level": "debug",
    })
}

/// A pod sandbox: its own netns, given its address by the primary plugins; the bridge's
/// DEL runs on drop, then the netns goes.
#[derive(Debug)]
pub struct Sandbox<'h> {
    host: &'h CniHost,
    /// The runtime's call for it.
    pub call: PodCall,
    /// Its network namespace.
    pub netns: Netns,
    /// The bridge's result.
    pub prev: Value,
}

impl CniHost {
    /// A new sandbox for pod `namespace/name` (uid `uid`) with its address.
    pub fn sandbox(&self, namespace: &str, name: &str, uid: &str) -> Sandbox<'_> {
        let netns = Netns::new("rcp").expect("pod netns");
        let call = PodCall {
            container_id: unique_name("sandbox"),
            netns: netns.path(),
            pod: (namespace.into(), name.into(), uid.into()),
        };
        let prev = self.primary_add(&call);
        Sandbox {
            host: self,
            call,
            netns,
            prev,
        }
    }
}

impl Sandbox<'_> {
    /// Its IPv4 address from prevResult.
    pub fn ip(&self) -> String {
        let cidr = self.prev["ips"][0]["address"].as_str().unwrap_or_default();
        cidr.split('/').next().unwrap_or_default().to_owned()
    }

    /// Where a TCP connect from the pod's app (uid 1000, in `cgroup`) to the gateway's port 80
    /// lands (`at=... orig=...`).
    pub fn outbound(&self, cgroup: &Path) -> String {
        crate::world::probe(
            &self.netns,
            Some(cgroup),
            Some((1000, 1000)),
            &[format!("tcp:{GATEWAY}:80")],
        )[0]
        .at()
    }

    /// `redirect-cni COMMAND` for this sandbox, with its prevResult for ADD and CHECK.
    pub fn redirect_cni(&self, command: &str, entry: &Value) -> Run {
        let prev = matches!(command, "ADD" | "CHECK").then_some(&self.prev);
        self.host.redirect_cni(command, &self.call, entry, prev)
    }
}

impl Drop for Sandbox<'_> {
    fn drop(&mut self) {
        self.host.primary_del(&self.call);
    }
}
