//! Boots a kernel and initramfs under qemu (TCG only: KVM here crashes stock kernels), with no
//! network device and the serial console in a file; killed by its PID when it outlives the timeout.
use std::{
    io::{Read as _, Seek as _, SeekFrom},
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::Context as _;

/// How the guest ended.
#[derive(Debug)]
pub(super) struct Outcome {
    pub wall: Duration,
    pub timed_out: bool,
}

/// Lines the guest's /init prints start with this; only they and what follows the first one are
/// echoed live (the kernel's boot messages stay in the log).
pub(super) const MARK: &str = "@@@";

/// Runs qemu until the guest powers off (or `timeout`), echoing the console from /init's first
/// line on, each line prefixed with `tag`.
pub(super) fn boot(
    emulator: &super::emulator::Emulator,
    vmlinuz: &Path,
    initrd: &Path,
    console: &Path,
    timeout: Duration,
    tag: &str,
) -> anyhow::Result<Outcome> {
    let _ = std::fs::remove_file(console);
    let qemu_log = console.with_file_name("qemu.log");
    let mut cmd = emulator.command();
    cmd.args(emulator.machine())
        .args(["-m", "2048", "-smp", "2", "-nic", "none", "-no-reboot"])
        .args(["-display", "none", "-monitor", "none"])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(format!("console={} panic=-1 quiet", emulator.console()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&qemu_log)?)
        .stderr(std::fs::File::create(qemu_log.with_extension("err"))?);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", emulator.binary()))?;
    let mut echo = Echo::default();
    let timed_out = loop {
        if child.try_wait()?.is_some() {
            break false;
        }
        if start.elapsed() > timeout {
            eprintln!(
                "[{tag}] guest still running after {}s: killing qemu (pid {})",
                timeout.as_secs(),
                child.id()
            );
            // Child::kill signals this child's PID only.
            child.kill().context("killing qemu")?;
            child.wait()?;
            break true;
        }
        std::thread::sleep(Duration::from_millis(500));
        echo.poll(console, tag);
    };
    echo.poll(console, tag);
    echo.flush(tag);
    Ok(Outcome {
        wall: start.elapsed(),
        timed_out,
    })
}

#[derive(Debug, Default)]
struct Echo {
    offset: u64,
    partial: String,
    started: bool,
}

impl Echo {
    fn poll(&mut self, console: &Path, tag: &str) {
        let Ok(mut f) = std::fs::File::open(console) else {
            return;
        };
        let mut buf = Vec::new();
        if f.seek(SeekFrom::Start(self.offset)).is_err() || f.read_to_end(&mut buf).is_err() {
            return;
        }
        self.offset += buf.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&buf));
        while let Some(nl) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=nl).collect();
            self.line(line.trim_end(), tag);
        }
    }

    fn line(&mut self, line: &str, tag: &str) {
        self.started |= line.starts_with(MARK);
        if self.started {
            println!("[{tag}] {line}");
        }
    }

    fn flush(&mut self, tag: &str) {
        let rest = std::mem::take(&mut self.partial);
        if !rest.is_empty() {
            self.line(rest.trim_end(), tag);
        }
    }
}
