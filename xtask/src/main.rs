//! xtask: setup, build-ebpf, lint, test, run and image; the only place that shells out to cargo/rustup/apt.
mod bench;
mod build;
mod demo;
mod image;
mod kernel;
mod kube;
mod line_width;
mod setup;
mod test;
mod util;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Project tasks. Each installs what it needs first (see `setup`).
#[derive(Debug, Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Install what building and testing need: Debian packages (llvm-N-dev matching nightly's
    /// LLVM, iproute2, bpftool, curl), rust-src for nightly, bpf-linker and cargo-deny. Idempotent.
    Setup,
    /// Build (once, cached outside the repository) or find Kubernetes v1.20.2 and etcd from
    /// Debian bookworm's packages (`setup` does it too); prints where the binaries are.
    Kube,
    /// Build the BPF object (nightly, -Z build-std=core, bpfel-unknown-none, with BTF).
    BuildEbpf,
    /// Build the upgrade test's `redirect` of the next layout (this build's + 1, from this tree) into
    /// target/debug/layout-next/redirect (`cargo xtask test` does it; never shipped).
    BuildNextLayout,
    /// Build the node image: static (musl) `redirect` and `redirect-cni` in an OCI image FROM
    /// scratch with buildah (nothing downloaded), entrypoint `redirect`, for amd64 and arm64 in
    /// one image index tagged localhost/redirect:<version> and :latest (each architecture's image
    /// also as :<version>-amd64, -arm64); also target/image/redirect-<version>.oci.tar.
    Image {
        /// Tag instead of the default ones (repeatable; the first is the archive's).
        #[arg(long, value_name = "TAG")]
        tag: Vec<String>,
        /// Architectures: `amd64`, `arm64` or `all` (one image index holding both; a node's
        /// runtime picks its own).
        #[arg(long, value_name = "ARCH", default_value = "all")]
        arch: String,
    },
    /// rustfmt check and clippy -D warnings, for the host crates and the BPF crate; cargo-deny's
    /// licences, bans and sources (deny.toml).
    Lint,
    /// Setup, lint, build, unit tests, then the root integration tests in tests/.
    Test {
        /// Instead of the host run: run a subset of the integration tests inside Debian's cloud
        /// kernel of this series under qemu (`6.1`, `6.12` or `all`; arm64 kernels under
        /// qemu-system-aarch64, the binaries built for aarch64: `arm64-6.1`, `arm64-6.12` or
        /// `arm64` for both).
        #[arg(long, value_name = "SERIES")]
        kernel: Option<String>,
        /// With --kernel: test targets of tests/tests to run, `NAME[=FILTER[+FILTER...]],...` (a
        /// test runs when its name contains any FILTER, as libtest filters). Default: amd64, the
        /// suites of xtask/src/kernel/mod.rs; arm64, the smoke set of xtask/src/kernel/arm64.rs.
        #[arg(long, value_name = "LIST", requires = "kernel")]
        kernel_tests: Option<String>,
        /// With --kernel: limit in seconds for each test binary inside the guest.
        #[arg(long, value_name = "SECS", default_value_t = 1200, requires = "kernel")]
        kernel_timeout: u64,
        /// Extra arguments passed to `cargo test` (e.g. a test name filter); with --kernel, to
        /// every test binary in the guest.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Benchmark direct, explicit proxy, eBPF and Istio's iptables (legacy, nft) side by side.
    Bench {
        /// Short run: 5 rounds and smaller workloads (about 11 minutes on a 2-vCPU machine, plus the build).
        #[arg(long)]
        quick: bool,
        /// Seconds-long run that only keeps the harness working (used by `test`).
        #[arg(long, hide = true)]
        tiny: bool,
        /// Where report.md, report.json and the SVG charts go.
        #[arg(long, default_value = "target/bench")]
        out: std::path::PathBuf,
        /// Run only these workloads (comma-separated: cps, tax, keepalive, bulk, churn, rules, load,
        /// enroll, cni, boot, namespaces, cri), e.g. `--only cni` to study enrollment alone. Such a report
        /// is for investigation, not for BENCHMARKS.md: the published run is the whole set.
        #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = bench::WORKLOADS)]
        only: Vec<String>,
        /// Also sample the kernel with `perf record -a -g` (Debian: linux-perf) during short
        /// connections of the eBPF pod and of the explicit hop, and report the capture's whole
        /// kernel cost per connection, by hook and by where it goes (dispatch, the programs'
        /// instructions, socket storage, maps, helpers, storage freed). `--only tax --profile`
        /// runs the profile with the non-meshed tax alone.
        #[arg(long)]
        profile: bool,
    },
    /// Build everything and show one real redirected request, then wait for Ctrl-C.
    Run {
        /// Exit after the demo request instead of waiting for Ctrl-C.
        #[arg(long)]
        once: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Setup => setup::setup(),
        Task::Kube => kube::show(),
        Task::BuildEbpf => setup::setup().and_then(|()| build::build_ebpf()),
        Task::BuildNextLayout => build::build_ebpf().and_then(|()| build::build_next_layout()),
        Task::Image { tag, arch } => image::image(tag, &arch),
        Task::Lint => build::lint(),
        Task::Test {
            kernel: None, args, ..
        } => test::test(&args),
        Task::Test {
            kernel: Some(kernel),
            kernel_tests,
            kernel_timeout,
            args,
        } => kernel::test(&kernel::Options {
            kernel,
            tests: kernel_tests,
            extra: args,
            per_binary: std::time::Duration::from_secs(kernel_timeout),
        }),
        Task::Run { once } => demo::run(once),
        Task::Bench {
            quick,
            tiny,
            out,
            only,
            profile,
        } => {
            let size = if tiny {
                bench::Size::Tiny
            } else if quick {
                bench::Size::Quick
            } else {
                bench::Size::Full
            };
            bench::run(size, &out, &only, profile)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
