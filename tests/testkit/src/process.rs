//! Child processes of our own: stdout and stderr collected line by line (stderr, and stdout
//! when asked, echoed with a `[name]` prefix), awaited for a line, stopped on drop.
use std::{
    io::{BufRead as _, BufReader, Read},
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
    sync::{Arc, Mutex, PoisonError},
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{bail, Context as _};
use nix::{
    sys::signal::{kill, Signal},
    unistd::Pid,
};

use crate::wait;

/// How a [`Child`] is stopped when dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnDrop {
    /// SIGKILL at once (tests: nothing to flush).
    Kill,
    /// SIGTERM, then SIGKILL after the grace period (daemons that clean up on exit).
    Terminate(Duration),
}

/// How to start a [`Child`]: `Spawn::new("proxy").echo().start(cmd)`.
#[derive(Debug, Clone)]
pub struct Spawn {
    name: String,
    echo: bool,
    process_group: bool,
    on_drop: OnDrop,
    stderr_to: Option<PathBuf>,
}

impl Spawn {
    /// A child called `name` in messages; stdout collected, not echoed; SIGKILL on drop.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            echo: false,
            process_group: false,
            on_drop: OnDrop::Kill,
            stderr_to: None,
        }
    }

    /// Also print each stdout line as `[name] line`.
    pub fn echo(mut self) -> Self {
        self.echo = true;
        self
    }

    /// Start it in a process group of its own, so a Ctrl-C at the terminal reaches only us
    /// (and we stop it in order).
    pub fn own_process_group(mut self) -> Self {
        self.process_group = true;
        self
    }

    /// On drop send SIGTERM and allow `grace` before SIGKILL.
    pub fn terminate_on_drop(mut self, grace: Duration) -> Self {
        self.on_drop = OnDrop::Terminate(grace);
        self
    }

    /// Append its stderr to the file `log` instead of collecting it: no reader thread of
    /// this process wakes for each of its log lines (a benchmark's timed section).
    pub fn stderr_to(mut self, log: &Path) -> Self {
        self.stderr_to = Some(log.to_owned());
        self
    }

    /// Spawns `cmd` (stdin null, stdout piped, stderr piped or to [`Spawn::stderr_to`]'s file).
    pub fn start(self, mut cmd: Command) -> anyhow::Result<Child> {
        if self.process_group {
            cmd.process_group(0);
        }
        let stderr = match &self.stderr_to {
            Some(log) => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .with_context(|| format!("opening {} for {}'s stderr", log.display(), self.name))?
                .into(),
            None => Stdio::piped(),
        };
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {} ({cmd:?})", self.name))?;
        let out = Arc::new(Output::default());
        let stdout = child.stdout.take().context("piped stdout")?;
        let mut readers = vec![reader(
            stdout,
            Arc::clone(&out),
            Stream::Out,
            self.echo,
            &self.name,
        )];
        if let Some(stderr) = child.stderr.take() {
            readers.push(reader(
                stderr,
                Arc::clone(&out),
                Stream::Err,
                true,
                &self.name,
            ));
        }
        Ok(Child {
            name: self.name,
            child: Some(child),
            out,
            readers,
            on_drop: self.on_drop,
        })
    }
}

#[derive(Debug, Default)]
struct Output {
    stdout: Mutex<Vec<String>>,
    stderr: Mutex<Vec<String>>,
}

#[derive(Debug, Clone, Copy)]
enum Stream {
    Out,
    Err,
}

impl Output {
    fn lines(&self, stream: Stream) -> Vec<String> {
        let lines = match stream {
            Stream::Out => &self.stdout,
            Stream::Err => &self.stderr,
        };
        lines.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

fn reader(
    pipe: impl Read + Send + 'static,
    out: Arc<Output>,
    stream: Stream,
    echo: bool,
    name: &str,
) -> JoinHandle<()> {
    let name = name.to_owned();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            match (stream, echo) {
                (Stream::Out, true) => println!("[{name}] {line}"),
                (Stream::Err, true) => eprintln!("[{name}] {line}"),
                (_, false) => {}
            }
            let sink = match stream {
                Stream::Out => &out.stdout,
                Stream::Err => &out.stderr,
            };
            sink.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(line);
        }
    })
}

/// A child process, stopped (by its pid) and reaped on drop.
#[derive(Debug)]
pub struct Child {
    name: String,
    child: Option<std::process::Child>,
    out: Arc<Output>,
    readers: Vec<JoinHandle<()>>,
    on_drop: OnDrop,
}

impl Child {
    /// [`Spawn::new`]`(name).start(cmd)`.
    pub fn spawn(name: &str, cmd: Command) -> anyhow::Result<Self> {
        Spawn::new(name).start(cmd)
    }

    /// Its name in messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its pid (0 once stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, std::process::Child::id)
    }

    /// Stdout lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.out.lines(Stream::Out)
    }

    /// Stderr lines so far.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.out.lines(Stream::Err)
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits until a stdout line satisfies `pred` and returns it; fails after `timeout`, or
    /// at once when the process exits first.
    pub fn wait_line(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> anyhow::Result<String> {
        self.wait_stream(Stream::Out, what, timeout, pred)
    }

    /// Same, for stderr.
    pub fn wait_stderr_line(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> anyhow::Result<String> {
        self.wait_stream(Stream::Err, what, timeout, pred)
    }

    fn wait_stream(
        &mut self,
        stream: Stream,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> anyhow::Result<String> {
        let find = |out: &Output| out.lines(stream).into_iter().find(|l| pred(l));
        let out = Arc::clone(&self.out);
        let found = wait::eventually(format!("{} ({what})", self.name), timeout, || {
            if let Some(line) = find(&out) {
                return Ok(Ok(line));
            }
            match self.exited() {
                Some(status) => Ok(Err(status)),
                None => Err(Tail(out.lines(stream))),
            }
        })
        .with_context(|| self.context())?;
        match found {
            Ok(line) => Ok(line),
            Err(status) => {
                self.join_readers();
                match find(&self.out) {
                    Some(line) => Ok(line),
                    None => bail!(
                        "{} exited with {status} before {what}; {}",
                        self.name,
                        self.context()
                    ),
                }
            }
        }
    }

    fn context(&self) -> String {
        format!(
            "stdout: {:?}; stderr: {:?}",
            Tail(self.lines()),
            Tail(self.stderr_lines())
        )
    }

    /// Reads what is left in its pipes (after it exited).
    fn join_readers(&mut self) {
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }

    /// Waits up to `timeout` for it to exit on its own, then for its output to be read.
    pub fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let name = self.name.clone();
        let status = wait::eventually(format!("{name} to exit"), timeout, || {
            self.exited().ok_or("still running")
        })?;
        self.join_readers();
        Ok(status)
    }

    /// Sends `signal`, waits for the exit and returns whether it exited successfully.
    pub fn stop(&mut self, signal: Signal) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
        child.wait().is_ok_and(|s| s.success())
    }

    /// SIGTERM, up to `grace` to exit, then SIGKILL; returns the exit status.
    pub fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        let pid = i32::try_from(self.child.as_ref()?.id()).ok()?;
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        let exited = wait::eventually(format!("{} to exit on SIGTERM", self.name), grace, || {
            self.exited().ok_or(())
        });
        let mut child = self.child.take()?;
        match exited {
            Ok(status) => Some(status),
            Err(_) => {
                let _ = child.kill();
                child.wait().ok()
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        match self.on_drop {
            OnDrop::Kill => {
                self.stop(Signal::SIGKILL);
            }
            OnDrop::Terminate(grace) => {
                self.terminate(grace);
            }
        }
    }
}

/// The last lines of a stream, for messages.
struct Tail(Vec<String>);

impl std::fmt::Debug for Tail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let skip = self.0.len().saturating_sub(20);
        f.debug_list().entries(&self.0[skip..]).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        cmd
    }

    #[test]
    fn a_line_is_awaited_and_output_collected() {
        let mut c =
            Child::spawn("sh", sh("echo one; echo err >&2; echo ready; sleep 5")).expect("spawn");
        let line = c
            .wait_line("ready", Duration::from_secs(5), |l| l == "ready")
            .expect("ready line");
        assert_eq!(line, "ready");
        c.wait_stderr_line("err", Duration::from_secs(5), |l| l == "err")
            .expect("stderr line");
        assert_eq!(c.lines()[0], "one");
        assert!(c.pid() > 0);
        assert!(!c.stop(Signal::SIGKILL), "killed, not a success");
        assert_eq!(c.pid(), 0);
    }

    #[test]
    fn an_exit_before_the_line_fails_at_once_naming_both() {
        let mut c = Child::spawn("quitter", sh("echo bye; exit 3")).expect("spawn");
        let e = c
            .wait_line("never printed", Duration::from_secs(30), |l| l == "x")
            .expect_err("exits first");
        let text = format!("{e:#}");
        assert!(
            text.contains("quitter exited") && text.contains("never printed"),
            "{text}"
        );
        assert!(text.contains("bye"), "{text}");
    }

    #[test]
    fn a_missing_line_times_out_naming_the_process() {
        let mut c = Child::spawn("sleeper", sh("sleep 5")).expect("spawn");
        let e = c
            .wait_line("a greeting", Duration::from_millis(50), |_| true)
            .expect_err("prints nothing");
        assert!(
            format!("{e:#}").contains("waiting for sleeper (a greeting)"),
            "{e:#}"
        );
    }

    #[test]
    fn wait_exit_reads_everything_and_terminate_stops() {
        let mut c = Child::spawn("counter", sh("for i in 1 2 3; do echo $i; done")).expect("spawn");
        let status = c.wait_exit(Duration::from_secs(5)).expect("exits");
        assert!(status.success());
        assert_eq!(c.lines(), ["1", "2", "3"]);
        let mut t = Spawn::new("term")
            .terminate_on_drop(Duration::from_secs(5))
            .start(sh("sleep 30"))
            .expect("spawn");
        let status = t.terminate(Duration::from_secs(5)).expect("status");
        assert_eq!(status.code(), None, "ended by SIGTERM");
    }
}
