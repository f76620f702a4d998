//! probe-istio-cni: the stand-in for Istio's chained `istio-cni` plugin in the migration and
//! rollback tests (Istio's own cannot run here). Installed in a node's CNI bin directory as
//! `istio-cni` and chained by an entry `{"type": "istio-cni", "rules": FILE, "namespaces": [..]}`,
//! it does what istio-cni does for a sidecar pod: at ADD, for a pod of one of `namespaces`, it
//! enters the pod's network namespace (`CNI_NETNS`) and applies Istio's nat rules with
//! `iptables-restore` (the text in `rules`, as istio-iptables builds them), then hands the
//! previous result on. DEL and CHECK change nothing (the rules go with the namespace); VERSION
//! lists the versions it speaks. It reads no annotation: the tests' pods are all meshed alike.
// A probe links every dependency of the tests package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::{
    io::{Read as _, Write as _},
    process::{Command, Stdio},
};

use anyhow::{bail, Context as _};
use serde_json::{json, Value};

const VERSIONS: [&str; 4] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0"];

fn main() {
    if let Err(e) = run() {
        // The CNI error result: code 999 ("other"), the message the runtime logs.
        let out = json!({"cniVersion": "1.0.0", "code": 999, "msg": format!("{e:#}")});
        println!("{out}");
        std::process::exit(1);
    }
}

fn run() -> anyhow::Result<()> {
    let command = std::env::var("CNI_COMMAND").context("CNI_COMMAND is not set")?;
    if command == "VERSION" {
        println!(
            "{}",
            json!({"cniVersion": "1.0.0", "supportedVersions": VERSIONS})
        );
        return Ok(());
    }
    let mut stdin = String::new();
    std::io::stdin()
        .read_to_string(&mut stdin)
        .context("reading the configuration")?;
    let conf: Value = serde_json::from_str(&stdin).context("the configuration is not JSON")?;
    if command != "ADD" {
        return Ok(());
    }
    let mut result = conf
        .get("prevResult")
        .cloned()
        .context("no prevResult: istio-cni is a chained plugin")?;
    result["cniVersion"] = conf["cniVersion"].clone();
    let namespace = pod_namespace()?;
    let meshed = conf["namespaces"]
        .as_array()
        .is_some_and(|ns| ns.iter().any(|n| n.as_str() == Some(namespace.as_str())));
    if meshed {
        let netns = std::env::var("CNI_NETNS").context("CNI_NETNS is not set")?;
        let rules = conf["rules"]
            .as_str()
            .context("no \"rules\" in the entry")?;
        apply(&netns, rules)?;
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{result}").context("writing the result")?;
    Ok(())
}

/// `K8S_POD_NAMESPACE` of `CNI_ARGS`.
fn pod_namespace() -> anyhow::Result<String> {
    let args = std::env::var("CNI_ARGS").unwrap_or_default();
    args.split(';')
        .find_map(|kv| kv.strip_prefix("K8S_POD_NAMESPACE="))
        .map(str::to_owned)
        .context("CNI_ARGS names no K8S_POD_NAMESPACE")
}

/// `iptables-restore --noflush < rules` inside the namespace at `netns` (this process enters
/// it: a plugin is one short-lived thread).
fn apply(netns: &str, rules: &str) -> anyhow::Result<()> {
    let text = std::fs::read(rules).with_context(|| format!("reading {rules}"))?;
    let ns = std::fs::File::open(netns).with_context(|| format!("opening {netns}"))?;
    nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
        .with_context(|| format!("entering {netns}"))?;
    let mut child = Command::new("/usr/sbin/iptables-restore")
        .arg("--noflush")
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running iptables-restore")?;
    child
        .stdin
        .take()
        .context("iptables-restore's stdin")?
        .write_all(&text)
        .context("writing the rules to iptables-restore")?;
    let out = child.wait_with_output().context("iptables-restore")?;
    if !out.status.success() {
        bail!(
            "iptables-restore in {netns}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
