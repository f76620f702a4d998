//! Child-process guards: `redirect attach`, `redirect-proxy` and the probe client.
use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{mpsc, Arc, Mutex},
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{kill, Signal},
    unistd::Pid,
};
use serde_json::Value;

use crate::{env::bin_path, netns::Netns};

/// A child process killed (by its PID) and reaped on drop.
#[derive(Debug)]
pub struct Child {
    child: Option<std::process::Child>,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Child {
    /// Spawns `cmd` with stdout collected line by line; stderr is inherited.
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().expect("lock").push(line);
            }
        });
        Self {
            child: Some(child),
            lines,
        }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, std::process::Child::id)
    }

    /// Stdout lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("lock").clone()
    }

    /// Waits until a stdout line satisfies `pred`, or panics after `timeout`.
    pub fn wait_line(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let start = Instant::now();
        loop {
            if let Some(l) = self.lines().into_iter().find(|l| pred(l)) {
                return l;
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(std::process::Child::try_wait) {
                panic!(
                    "process exited with {status} before {what}; stdout: {:?}",
                    self.lines()
                );
            }
            assert!(
                start.elapsed() < timeout,
                "timed out waiting for {what}; stdout: {:?}",
                self.lines()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `signal` and waits for the exit; returns whether it exited successfully.
    pub fn stop(&mut self, signal: Signal) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
        child.wait().is_ok_and(|s| s.success())
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.stop(Signal::SIGKILL);
    }
}

/// `netns exec NS setpriv --reuid 1337 --regid 1337 --clear-groups`: appended to an `ip`
/// command, runs what follows in `ns` as the proxy uid/gid.
pub fn proxy_user_args(ns: &str) -> [&str; 9] {
    [
        "netns",
        "exec",
        ns,
        "setpriv",
        "--reuid",
        "1337",
        "--regid",
        "1337",
        "--clear-groups",
    ]
}

/// A running `redirect attach` with its own state directory.
#[derive(Debug)]
pub struct Attach {
    /// The process.
    pub child: Child,
    /// Its REDIRECT_STATE_DIR.
    pub state_dir: PathBuf,
}

/// Removes a test's state directory on drop.
fn state_dir_for(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("redirect-test-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

impl Attach {
    /// Starts `redirect attach --cgroup CGROUP EXTRA...` and waits for its `ready` line.
    pub fn start(cgroup: &Path, extra: &[&str]) -> Self {
        let state_dir = state_dir_for(&crate::env::unique_name("st"));
        let mut cmd = Command::new(bin_path("redirect"));
        cmd.arg("attach")
            .arg("--cgroup")
            .arg(cgroup)
            .args(extra)
            .env("REDIRECT_STATE_DIR", &state_dir)
            .env(
                "RUST_LOG",
                std::env::var("REDIRECT_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            );
        let mut child = Child::spawn(cmd);
        child.wait_line("redirect attach ready", Duration::from_secs(20), |l| {
            l.starts_with("ready ")
        });
        Self { child, state_dir }
    }

    /// `redirect status --json` for this instance.
    pub fn status(&self) -> Value {
        let out = self.redirect(&["status", "--json"]);
        assert!(
            out.status.success(),
            "redirect status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("status json")
    }

    /// Value of one decision counter of this instance.
    pub fn counter(&self, name: &str) -> u64 {
        let status = self.status();
        status["instances"][0]["counters"]
            .as_array()
            .expect("counters")
            .iter()
            .find(|c| c["name"] == name)
            .and_then(|c| c["value"].as_u64())
            .unwrap_or_else(|| panic!("no counter {name} in {status}"))
    }

    /// Runs `redirect ARGS` with this instance's state directory.
    pub fn redirect(&self, args: &[&str]) -> std::process::Output {
        Command::new(bin_path("redirect"))
            .args(args)
            .env("REDIRECT_STATE_DIR", &self.state_dir)
            .output()
            .expect("run redirect")
    }

    /// Program ids this instance attached.
    pub fn program_ids(&self) -> Vec<u64> {
        self.status()["instances"][0]["attachments"]
            .as_array()
            .expect("attachments")
            .iter()
            .filter_map(|a| a["program_id"].as_u64())
            .collect()
    }

    /// Stops it with SIGTERM; returns whether it exited 0.
    pub fn stop(&mut self) -> bool {
        self.child.stop(Signal::SIGTERM)
    }
}

impl Drop for Attach {
    fn drop(&mut self) {
        self.child.stop(Signal::SIGTERM);
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

/// `redirect-proxy` running as uid/gid 1337 inside a namespace, logging JSON access lines.
#[derive(Debug)]
pub struct Proxy {
    /// The process.
    pub child: Child,
}

impl Proxy {
    /// Starts the proxy in `ns` (in the test's own cgroup) and waits until it listens.
    pub fn start(ns: &Netns) -> Self {
        Self::start_with(ns, None, &[])
    }

    /// Starts the proxy in `ns`, inside `cgroup` when given (through `redirect exec`, the way a
    /// pod's containers share its cgroup), and waits until it listens.
    pub fn start_in(ns: &Netns, cgroup: Option<&Path>) -> Self {
        Self::start_with(ns, cgroup, &[])
    }

    /// Same, with extra proxy arguments.
    pub fn start_with(ns: &Netns, cgroup: Option<&Path>, extra: &[&str]) -> Self {
        let mut cmd = match cgroup {
            Some(cg) => {
                let mut c = Command::new(bin_path("redirect"));
                c.arg("exec").arg("--cgroup").arg(cg).args(["--", "ip"]);
                c
            }
            None => Command::new("ip"),
        };
        cmd.args(proxy_user_args(ns.name()))
            .arg(bin_path("redirect-proxy"))
            .args(["--log-format", "json"])
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("REDIRECT_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            );
        let mut child = Child::spawn(cmd);
        child.wait_line("proxy listening", Duration::from_secs(10), |l| {
            l.contains("\"kind\":\"ready\"")
        });
        Self { child }
    }

    /// Access-log records (one per finished connection).
    pub fn records(&self) -> Vec<Value> {
        self.child
            .lines()
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["kind"] == "access")
            .collect()
    }

    /// Waits until at least `n` access records exist, or panics.
    pub fn wait_records(&self, n: usize) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let r = self.records();
            if r.len() >= n {
                return r;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "expected {n} proxy records, have {r:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Options of one probe-client run.
#[derive(Debug, Clone, Default)]
pub struct ClientOpts<'a> {
    /// Namespace to connect from.
    pub netns: Option<&'a Netns>,
    /// Cgroup to run in.
    pub cgroup: Option<&'a Path>,
    /// Uid to switch to.
    pub uid: Option<u32>,
    /// Gid to switch to.
    pub gid: Option<u32>,
    /// Source port to bind.
    pub bind_port: Option<u16>,
    /// Milliseconds to wait between connect and send.
    pub hold_ms: Option<u64>,
    /// Send an HTTP/1.1 GET and read the whole response.
    pub http: bool,
    /// Number of sequential connections.
    pub count: Option<u32>,
}

/// Spawns the probe client; returns a receiver for its parsed JSON output lines once it exits.
pub fn spawn_client(
    connect: &str,
    send: &str,
    opts: &ClientOpts<'_>,
) -> mpsc::Receiver<Vec<Value>> {
    let mut cmd = Command::new(bin_path("probe-client"));
    cmd.args(["--connect", connect, "--send", send]);
    if let Some(ns) = opts.netns {
        cmd.arg("--netns").arg(ns.path());
    }
    if let Some(cg) = opts.cgroup {
        cmd.arg("--cgroup").arg(cg);
    }
    for (flag, v) in [
        ("--uid", opts.uid.map(u64::from)),
        ("--gid", opts.gid.map(u64::from)),
        ("--bind-port", opts.bind_port.map(u64::from)),
        ("--hold-ms", opts.hold_ms),
        ("--count", opts.count.map(u64::from)),
    ] {
        if let Some(v) = v {
            cmd.arg(flag).arg(v.to_string());
        }
    }
    if opts.http {
        cmd.arg("--http");
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let out = cmd.output().expect("run probe-client");
        assert!(
            out.status.success() || !out.stdout.is_empty(),
            "probe-client failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let _ = tx.send(lines);
    });
    rx
}

/// Program ids attached at `cgroup` (itself, not inherited), from `bpftool cgroup show`.
pub fn attached_program_ids(cgroup: &Path) -> Vec<u64> {
    let out = Command::new("bpftool")
        .args(["-j", "cgroup", "show"])
        .arg(cgroup)
        .output()
        .expect("run bpftool");
    assert!(
        out.status.success(),
        "bpftool cgroup show: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    if text.trim().is_empty() {
        return Vec::new();
    }
    let v: Value = serde_json::from_str(text.trim()).expect("bpftool json");
    v.as_array()
        .map(|a| a.iter().filter_map(|p| p["id"].as_u64()).collect())
        .unwrap_or_default()
}

/// True when the kernel still has a program with this id loaded.
pub fn program_loaded(id: u64) -> bool {
    Command::new("bpftool")
        .args(["prog", "show", "id", &id.to_string()])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs the probe client to completion and returns its first output line.
pub fn client(connect: &str, send: &str, opts: &ClientOpts<'_>) -> Value {
    spawn_client(connect, send, opts)
        .recv_timeout(Duration::from_secs(120))
        .expect("probe-client finished")
        .into_iter()
        .next()
        .expect("probe-client printed a result")
}
