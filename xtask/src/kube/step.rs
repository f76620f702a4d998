//! Timed, resumable steps of the Kubernetes build: each prints its name and duration, sends the
//! output of its commands to a log file of its own, and leaves a marker so a rerun skips it.
use std::{
    cell::Cell,
    fs::File,
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{bail, Context as _};

/// Lines of a failed command's log repeated on the terminal.
const TAIL_LINES: usize = 25;

/// Where the steps keep their logs and their completion markers.
#[derive(Debug)]
pub(super) struct Steps {
    logs: PathBuf,
    markers: PathBuf,
}

/// One running step: the commands it runs append to its log.
#[derive(Debug)]
pub(super) struct Step {
    name: String,
    log: PathBuf,
    /// A command failed: its log's end is shown once the step's line is finished.
    failed: Cell<bool>,
}

/// A step's name as a file name: `build kube-apiserver` -> `build-kube-apiserver`.
fn slug(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

impl Steps {
    pub(super) fn new(logs: PathBuf, markers: PathBuf) -> anyhow::Result<Self> {
        for dir in [&logs, &markers] {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        Ok(Self { logs, markers })
    }

    /// Runs `body` unless an earlier run finished this step (its marker is there), timed.
    pub(super) fn run(
        &self,
        name: &str,
        body: impl FnOnce(&Step) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let marker = self.markers.join(slug(name));
        if marker.is_file() {
            eprintln!("xtask setup: kubernetes: {name}: done by an earlier run");
            return Ok(());
        }
        self.timed(name, body)?;
        std::fs::write(&marker, "").with_context(|| format!("writing {}", marker.display()))
    }

    /// Runs `body`, printing `xtask setup: kubernetes: <name> ... (N.N s)`.
    pub(super) fn timed<T>(
        &self,
        name: &str,
        body: impl FnOnce(&Step) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let step = Step {
            name: name.to_owned(),
            log: self.logs.join(format!("{}.log", slug(name))),
            failed: Cell::new(false),
        };
        File::create(&step.log).with_context(|| format!("creating {}", step.log.display()))?;
        eprint!("xtask setup: kubernetes: {name} ...");
        let _ = std::io::stderr().flush();
        let started = Instant::now();
        let result = body(&step).map_err(|e| {
            if step.failed.get() {
                e // already names the step, its command and its log
            } else {
                e.context(format!("kubernetes step `{name}`"))
            }
        });
        let secs = started.elapsed().as_secs_f64();
        match &result {
            Ok(_) => eprintln!(" ({secs:.1} s)"),
            Err(_) => {
                eprintln!(" failed ({secs:.1} s)");
                if step.failed.get() {
                    for line in step.tail() {
                        eprintln!("  | {line}");
                    }
                }
            }
        }
        result
    }

    /// Forgets every finished step (what they made is gone or no longer needed).
    pub(super) fn forget(&self) -> anyhow::Result<()> {
        remove_dir(&self.markers)
    }
}

impl Step {
    /// Runs `cmd` with its output appended to the step's log; a failure names the step, the
    /// command and the log, and shows the log's last lines.
    pub(super) fn command(&self, cmd: &mut Command) -> anyhow::Result<()> {
        let shown = format!("{cmd:?}");
        let log = File::options()
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        writeln!(&log, "$ {shown}")?;
        let status = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .status()
            .with_context(|| self.failure(&shown, "could not start"))?;
        if !status.success() {
            self.failed.set(true);
            bail!(self.failure(&shown, &format!("failed with {status}")));
        }
        Ok(())
    }

    fn failure(&self, shown: &str, what: &str) -> String {
        format!(
            "kubernetes step `{}`: {shown} {what}; its output is in {}",
            self.name,
            self.log.display()
        )
    }

    fn tail(&self) -> Vec<String> {
        let Ok(file) = File::open(&self.log) else {
            return Vec::new();
        };
        let lines: Vec<String> = BufReader::new(file).lines().map_while(Result::ok).collect();
        lines[lines.len().saturating_sub(TAIL_LINES)..].to_vec()
    }
}

/// Removes a directory tree if it exists.
pub(super) fn remove_dir(dir: &Path) -> anyhow::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", dir.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn slugs_are_file_names() {
        assert_eq!(super::slug("build kube-apiserver"), "build-kube-apiserver");
        assert_eq!(super::slug("apt index"), "apt-index");
        assert_eq!(super::slug("a/b"), "a-b");
    }
}
