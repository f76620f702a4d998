//! kubectl as an operator runs it: the cluster administrator's kubeconfig, in the node's
//! network (where the apiserver listens), every call's output and exit status returned.
use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context as _};
use serde_json::Value;

/// The built kubectl with a kubeconfig.
#[derive(Debug, Clone)]
pub struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    netns: PathBuf,
}

impl Kubectl {
    /// kubectl `bin` with `kubeconfig`, run in the network namespace `netns`.
    pub fn new(bin: &Path, kubeconfig: &Path, netns: &Path) -> Self {
        Self {
            bin: bin.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            netns: netns.to_owned(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", self.netns.display()))
            .arg(&self.bin)
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(args);
        cmd
    }

    /// `kubectl ARGS` with `stdin`: its stdout, or an error with its stderr.
    pub fn run_with(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        let mut child = self
            .command(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting kubectl")?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes()).context("kubectl's stdin")?;
        }
        let out = child.wait_with_output().context("kubectl")?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            bail!(
                "kubectl {}: {}{}",
                args.join(" "),
                stdout,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(stdout)
    }

    /// `kubectl ARGS`.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        self.run_with(args, None)
    }

    /// `kubectl auth can-i VERB RESOURCE --as=USER`: the apiserver's answer (kubectl exits 1
    /// for "no", which is an answer, not a failure).
    pub fn can_i(&self, verb: &str, resource: &str, user: &str) -> anyhow::Result<bool> {
        let as_user = format!("--as={user}");
        let out = self
            .command(&["auth", "can-i", verb, resource, &as_user])
            .stdin(Stdio::null())
            .output()
            .context("kubectl auth can-i")?;
        match String::from_utf8_lossy(&out.stdout).trim() {
            "yes" => Ok(true),
            "no" => Ok(false),
            other => bail!(
                "kubectl auth can-i {verb} {resource} {as_user}: {other:?} {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    /// `kubectl apply -f -` of `yaml`.
    pub fn apply(&self, yaml: &str) -> anyhow::Result<String> {
        self.run_with(&["apply", "-f", "-"], Some(yaml))
    }

    /// `kubectl get ARGS -o json`, parsed.
    pub fn get(&self, args: &[&str]) -> anyhow::Result<Value> {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        let text = self.run(&all)?;
        serde_json::from_str(&text).with_context(|| format!("kubectl get {args:?}: {text}"))
    }
}
