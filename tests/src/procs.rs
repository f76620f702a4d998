//! redirect's own processes in the tests: `redirect attach`, `redirect-proxy` and the probe
//! client, on the testkit's child, namespace and wait guards.
use std::{
    io::{BufRead as _, Write as _},
    path::{Path, PathBuf},
    process::Command,
    sync::mpsc,
    time::Duration,
};

use nix::sys::signal::Signal;
use redirect_testkit::{
    eventually,
    probe::{ClientResult, Echo},
    unique_name, Child, Netns,
};
use serde_json::Value;

use crate::env::bin_path;

/// `RUST_LOG` of the processes under test (`REDIRECT_TEST_LOG`, default `warn`).
fn test_log() -> String {
    std::env::var("REDIRECT_TEST_LOG").unwrap_or_else(|_| "warn".into())
}

/// A running `redirect attach` with its own state directory.
#[derive(Debug)]
pub struct Attach {
    /// The process.
    pub child: Child,
    /// Its REDIRECT_STATE_DIR.
    pub state_dir: PathBuf,
}

impl Attach {
    /// Starts `redirect attach --cgroup CGROUP EXTRA...` and waits for its `ready` line.
    pub fn start(cgroup: &Path, extra: &[&str]) -> Self {
        let state_dir = std::env::temp_dir().join(format!("redirect-test-{}", unique_name("st")));
        let _ = std::fs::remove_dir_all(&state_dir);
        let mut cmd = Command::new(bin_path("redirect"));
        cmd.arg("attach")
            .arg("--cgroup")
            .arg(cgroup)
            .args(extra)
            .env("REDIRECT_STATE_DIR", &state_dir)
            .env("RUST_LOG", test_log());
        let mut child = Child::spawn("redirect attach", cmd).expect("start redirect attach");
        child
            .wait_line("its ready line", Duration::from_secs(40), |l| {
                l.starts_with("ready ")
            })
            .expect("redirect attach ready");
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
        status["instances"][0]["counters"][name]
            .as_u64()
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
        cmd.args(ns.exec_args_as(1337, 1337))
            .arg(bin_path("redirect-proxy"))
            .args(["--log-format", "json"])
            .args(extra)
            .env("RUST_LOG", test_log());
        let mut child = Child::spawn("redirect-proxy", cmd).expect("start redirect-proxy");
        child
            .wait_line("its ready line", Duration::from_secs(10), |l| {
                l.contains("\"kind\":\"ready\"")
            })
            .expect("proxy listening");
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
        eventually(
            format!("{n} proxy access records"),
            Duration::from_secs(10),
            || {
                let r = self.records();
                if r.len() >= n {
                    Ok(r)
                } else {
                    Err(r)
                }
            },
        )
        .unwrap_or_else(|e| panic!("{e}"))
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

/// Spawns the probe client; returns a receiver for its result once it exits.
pub fn spawn_client(
    connect: &str,
    send: &str,
    opts: &ClientOpts<'_>,
) -> mpsc::Receiver<ClientResult> {
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
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().next().unwrap_or_else(|| {
            panic!(
                "probe-client printed nothing: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let result = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("probe-client output {line:?}: {e}"));
        let _ = tx.send(result);
    });
    rx
}

/// Runs the probe client to completion and returns its result.
pub fn client(connect: &str, send: &str, opts: &ClientOpts<'_>) -> ClientResult {
    spawn_client(connect, send, opts)
        .recv_timeout(Duration::from_secs(120))
        .expect("probe-client finished")
}

/// Connects from the test process itself (the host's namespace), sends a line and reads the
/// echo server's answer, like the probe client.
pub fn host_client(dst: &str) -> ClientResult {
    let result = (|| -> anyhow::Result<ClientResult> {
        let addr = dst.parse()?;
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"hi\n")?;
        let mut reply = String::new();
        let n = std::io::BufReader::new(&s).read_line(&mut reply)?;
        let reply: Option<Echo> = (n > 0).then(|| serde_json::from_str(&reply)).transpose()?;
        Ok(ClientResult {
            ok: true,
            local: Some(s.local_addr()?),
            peer: Some(s.peer_addr()?),
            reply,
            reply_bytes: n as u64,
            ..ClientResult::default()
        })
    })();
    result.unwrap_or_else(|e| ClientResult::failed(format!("{e:#}")))
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

/// Waits (up to 2 s: unpinned links are released asynchronously by the kernel) until nothing
/// is attached at `cgroup`; panics naming what is still there.
pub fn wait_detached(cgroup: &Path) {
    eventually(
        format!("no program attached at {}", cgroup.display()),
        Duration::from_secs(2),
        || {
            let ids = attached_program_ids(cgroup);
            if ids.is_empty() {
                Ok(())
            } else {
                Err(ids)
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// True when the kernel still has a program with this id loaded.
pub fn program_loaded(id: u64) -> bool {
    Command::new("bpftool")
        .args(["prog", "show", "id", &id.to_string()])
        .output()
        .is_ok_and(|o| o.status.success())
}
