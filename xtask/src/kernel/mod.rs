//! `cargo xtask test --kernel 6.1|6.12|all|arm64-6.1|arm64-6.12|arm64`: runs a subset of the
//! root integration tests inside Debian's cloud kernels (amd64, or arm64 under
//! qemu-system-aarch64) under qemu (TCG) and reports per kernel and per test binary.
mod arm64;
mod emulator;
mod fetch;
mod guest;
mod initramfs;
mod modules;
mod qemu;
mod report;
mod select;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{bail, Context as _};

use self::select::{area_tests, listed_tests, selection, TEST_BINARY};
use crate::{build, image::arch::Arch, setup, util};

pub(crate) use self::arm64::DEFAULT_TESTS as ARM64_DEFAULT_TESTS;

/// Test modules (of the one binary) run in each kernel unless `--kernel-tests` says otherwise: the outbound, inbound
/// and daemon suites, TPROXY mode's routing and the accepted-sockets relay whole, and the
/// conformance cases for DNS (IPv4 and IPv6), inbound ports `*`,
/// owner groups with exclusions (IPv4 and IPv6 DNS) and an excluded interface. docs/developer.md lists it.
pub(crate) const DEFAULT_TESTS: &str =
    "outbound,inbound,daemon,probe_fallback,tproxy,accepted_sockets,\
    conformance=dns_uid_gid+inbound_ports_wildcard+outbound_owner_groups_exclude+basic_exclude_nic";
/// Host packages the guest is built from (qemu itself is extracted, see `emulator`).
const PACKAGES: [&str; 2] = ["busybox-static", "xz-utils"];

/// What `--kernel` runs.
#[derive(Debug)]
pub(crate) struct Options {
    /// `6.1`, `6.12` or `all`.
    pub kernel: String,
    /// `NAME[=FILTER],...`: modules of tests/tests/it, with optional name filters (`None`: the
    /// architecture's default set).
    pub tests: Option<String>,
    /// libtest arguments for every binary.
    pub extra: Vec<String>,
    /// Limit for each test binary inside the guest.
    pub per_binary: Duration,
}

/// Builds the named integration test targets (as `cargo test` would, for `target` when given)
/// and returns name -> executable.
fn test_executables(
    names: &[&str],
    target: Option<&str>,
) -> anyhow::Result<BTreeMap<String, PathBuf>> {
    let mut cmd = util::cargo(None);
    cmd.args([
        "test",
        "--workspace",
        "--exclude",
        "redirect-ebpf",
        "--no-run",
    ])
    .args(target.map(|t| ["--target", t]).into_iter().flatten())
    .args(["--message-format", "json-render-diagnostics"])
    .env("REDIRECT_EBPF_OBJECT", util::ebpf_object())
    .stdout(Stdio::piped());
    for n in names {
        cmd.args(["--test", n]);
    }
    let out = cmd.output().context("cargo test --no-run")?;
    anyhow::ensure!(out.status.success(), "cargo test --no-run failed");
    let mut exes = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_test = msg["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "test"));
        if let (true, Some(name), Some(exe)) = (
            is_test,
            msg["target"]["name"].as_str(),
            msg["executable"].as_str(),
        ) {
            exes.insert(name.to_owned(), PathBuf::from(exe));
        }
    }
    Ok(exes)
}

/// The workspace's binaries in target/debug (what `bin_path` finds), xtask excepted.
fn project_bins(profile_dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut bins = Vec::new();
    for entry in std::fs::read_dir(profile_dir)? {
        let path = entry?.path();
        let exec = std::fs::metadata(&path).is_ok_and(|m| {
            m.is_file() && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
        });
        if exec && path.extension().is_none() && path.file_name().is_some_and(|n| n != "xtask") {
            bins.push(path);
        }
    }
    Ok(bins)
}

/// Debug-stripped copies (the guest's memory holds the whole initramfs), by `objcopy` (the
/// binaries' architecture's).
fn strip_all(
    bins: &[PathBuf],
    into: &Path,
    objcopy: &str,
) -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
    std::fs::create_dir_all(into)?;
    bins.iter()
        .map(|bin| {
            let name = bin.file_name().context("binary without a name")?;
            let out = into.join(name);
            util::run(
                Command::new(objcopy)
                    .arg("--strip-debug")
                    .arg(bin)
                    .arg(&out),
            )?;
            Ok((bin.clone(), out))
        })
        .collect()
}

/// Everything `--kernel` does; fails when a test failed on any kernel.
pub(crate) fn test(opts: &Options) -> anyhow::Result<()> {
    let (arch, series) = fetch::series_list(&opts.kernel)?;
    let default_tests = match arch {
        Arch::Amd64 => DEFAULT_TESTS,
        Arch::Arm64 => ARM64_DEFAULT_TESTS,
    };
    let wanted = selection(opts.tests.as_deref().unwrap_or(default_tests))?;
    setup::setup()?;
    setup::install_missing(&PACKAGES.map(String::from), true)?;
    build::build_ebpf()?;
    let root = util::workspace_root();
    let kernels_dir = root.join("target/kernels");
    // arm64: the kernels and the guest's userland come from Debian's arm64 packages, the
    // project's binaries and the test binary are built for aarch64-unknown-linux-musl.
    let (archive, profile_dir, target, objcopy) = match arch {
        Arch::Amd64 => {
            build::build_bins(false)?;
            let debug = root.join("target/debug");
            (fetch::Archive::host(), debug, None, "objcopy")
        }
        Arch::Arm64 => {
            let archive = fetch::Archive::arm64(&kernels_dir.join("apt-arm64"))?;
            let debug = arm64::build_bins()?;
            let objcopy = "aarch64-linux-gnu-objcopy";
            (archive, debug, Some(arch.target()), objcopy)
        }
    };
    let exes = test_executables(&[TEST_BINARY], target)?;
    let exe = exes
        .get(TEST_BINARY)
        .with_context(|| format!("no integration test binary {TEST_BINARY:?} (tests/tests/it)"))?;
    let listed = match arch {
        Arch::Amd64 => listed_tests(&mut Command::new(exe), exe)?,
        Arch::Arm64 => listed_tests(&mut arm64::on_host(exe), exe)?,
    };
    let mut runs = Vec::new();
    for (area, filters) in &wanted {
        let names = area_tests(&listed, area, filters);
        if names.is_empty() {
            bail!("--kernel-tests {area}: no test of module {area} of tests/tests/it matches {filters:?}");
        }
        let mut args = vec!["--exact".to_owned()];
        args.extend(names);
        args.extend(opts.extra.iter().cloned());
        runs.push(guest::TestRun {
            name: area.clone(),
            exe: exe.clone(),
            args,
        });
    }
    let mut bins = project_bins(&profile_dir)?;
    bins.extend(runs.iter().map(|r| r.exe.clone()));
    let stripped_dir = kernels_dir.join(format!("stripped-{}", arch.oci()));
    let stripped = strip_all(&bins, &stripped_dir, objcopy)?;
    let data = [root.join("tests/data"), root.join("deploy")];
    // Paths like tests/testkit/../data need each crate's directory to exist.
    let crates = util::crate_dirs()?;
    let emulator = emulator::prepare(&kernels_dir, arch)?;
    println!(
        "xtask: {} {} from {}",
        emulator.binary(),
        emulator.version,
        emulator.root.display()
    );
    let userland = match arch {
        Arch::Amd64 => None,
        Arch::Arm64 => {
            let sysroot = arm64::sysroot(&archive, &kernels_dir)?;
            let applets = arm64::busybox_applets(&sysroot)?;
            Some((sysroot, applets))
        }
    };
    // Downloads one after the other; then the guests run side by side (each test binary in a
    // guest runs its tests one at a time, so two guests keep two host CPUs busy).
    let kernels = series
        .iter()
        .map(|s| fetch::fetch(&archive, s, &kernels_dir))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let files = GuestFiles {
        stripped: &stripped,
        data: &data,
        crates: &crates,
        cwd: &root.join("tests"),
        emulator: &emulator,
        userland: userland.as_ref(),
    };
    let results: Vec<anyhow::Result<(String, Vec<String>)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = kernels
            .iter()
            .map(|kernel| {
                let (files, runs) = (&files, &runs);
                scope.spawn(move || run_kernel(kernel, runs, files, opts))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a guest runner panicked")))
            })
            .collect()
    });
    let mut failures = Vec::new();
    let mut summaries = Vec::new();
    for r in results {
        let (summary, failed) = r?;
        summaries.push(summary);
        failures.extend(failed);
    }
    println!("\n{}", summaries.join("\n"));
    if !failures.is_empty() {
        bail!(
            "{} failure(s):\n  {}",
            failures.len(),
            failures.join("\n  ")
        );
    }
    Ok(())
}

/// Project files every guest holds.
struct GuestFiles<'a> {
    /// (binary, its debug-stripped copy).
    stripped: &'a [(PathBuf, PathBuf)],
    /// Directories copied whole (tests/data, deploy).
    data: &'a [PathBuf],
    /// The workspace's crate directories (created empty).
    crates: &'a [PathBuf],
    /// Where the test binaries run (as cargo runs them: the tests package).
    cwd: &'a Path,
    /// The qemu that boots the guest.
    emulator: &'a emulator::Emulator,
    /// arm64: the unpacked userland and its busybox's applets (amd64 guests take the host's).
    userland: Option<&'a (PathBuf, Vec<String>)>,
}

/// Builds the initramfs for one kernel, boots it and reports; returns the summary and failures.
fn run_kernel(
    kernel: &fetch::Kernel,
    runs: &[guest::TestRun],
    files: &GuestFiles<'_>,
    opts: &Options,
) -> anyhow::Result<(String, Vec<String>)> {
    let tag = match files.emulator.arch {
        Arch::Amd64 => format!("linux {}", kernel.series),
        Arch::Arm64 => format!("linux {} arm64", kernel.series),
    };
    let mut tree = initramfs::Tree::default();
    let missing_tools = match files.userland {
        None => guest::base(&mut tree, files.stripped, files.data)?,
        Some((sysroot, applets)) => {
            guest::base_arm64(&mut tree, sysroot, applets, files.stripped, files.data)?;
            Vec::new()
        }
    };
    for dir in files.crates {
        tree.dir(&dir.to_string_lossy());
    }
    if !missing_tools.is_empty() {
        eprintln!(
            "[{tag}] not on this host, so not in the guest: {}",
            missing_tools.join(" ")
        );
    }
    let (mods, absent) = modules::collect(&kernel.modules())?;
    if !absent.is_empty() {
        eprintln!(
            "[{tag}] modules neither built in nor shipped: {}",
            absent.join(" ")
        );
    }
    guest::init(
        &mut tree,
        &kernel.release,
        mods,
        runs,
        files.cwd,
        opts.per_binary.as_secs(),
    );
    let initrd = kernel.dir.join("initramfs.cpio");
    let size = tree.write_cpio(&initrd)?;
    println!(
        "[{tag}] {} {} ({}): initramfs {} MiB, booting",
        kernel.package,
        kernel.version,
        kernel.release,
        size >> 20
    );
    let console = kernel.dir.join("console.log");
    let limit = opts.per_binary * u32::try_from(runs.len()).unwrap_or(1) + Duration::from_secs(300);
    let outcome = qemu::boot(
        files.emulator,
        &kernel.vmlinuz(),
        &initrd,
        &console,
        limit,
        &tag,
    )?;
    let text = std::fs::read_to_string(&console).unwrap_or_default();
    let rep = report::parse(&text);
    Ok(summarize(kernel, runs, &rep, &outcome, &console))
}

fn summarize(
    kernel: &fetch::Kernel,
    runs: &[guest::TestRun],
    rep: &report::Report,
    outcome: &qemu::Outcome,
    console: &Path,
) -> (String, Vec<String>) {
    let k = format!(
        "linux {} ({} {})",
        kernel.series, kernel.package, kernel.version
    );
    let mut failures: Vec<String> = rep
        .init_errors
        .iter()
        .map(|e| format!("{k}: /init: {e}"))
        .collect();
    let (passed, failed): (u32, u32) = rep
        .binaries
        .iter()
        .fold((0, 0), |(p, f), b| (p + b.passed, f + b.failed));
    let mut lines = vec![format!(
        "{k}: {passed} passed, {failed} failed, wall {}{}; console {}",
        report::human(outcome.wall),
        if outcome.timed_out {
            " (killed: timeout)"
        } else {
            ""
        },
        console.display()
    )];
    for run in runs {
        let Some(b) = rep.binaries.iter().find(|b| b.name == run.name) else {
            lines.push(format!("  {:<14} never started", run.name));
            failures.push(format!("{k}: {} never started", run.name));
            continue;
        };
        lines.push(format!(
            "  {:<14} {:>3} passed {:>3} failed {:>3} ignored  {:>7}  rc={}",
            b.name,
            b.passed,
            b.failed,
            b.ignored,
            report::human(Duration::from_secs_f64(b.secs.max(0.0))),
            b.rc.map_or_else(|| "none (did not finish)".to_owned(), |r| r.to_string())
        ));
        for f in &b.failures {
            failures.push(format!("{k}: {}::{f} FAILED", b.name));
        }
        if b.rc != Some(0) && b.failures.is_empty() {
            let why = match b.rc {
                Some(124) | Some(137) => "timed out in the guest".to_owned(),
                Some(rc) => format!("exited with {rc}"),
                None => "did not finish".to_owned(),
            };
            failures.push(format!("{k}: {} {why}", b.name));
        }
    }
    if !rep.done && !outcome.timed_out {
        let qemu_err =
            std::fs::read_to_string(console.with_file_name("qemu.err")).unwrap_or_default();
        let why = match qemu_err.trim() {
            "" => String::new(),
            e => format!(" (qemu: {e})"),
        };
        failures.push(format!("{k}: the guest stopped before /init finished{why}"));
    }
    (lines.join("\n"), failures)
}
