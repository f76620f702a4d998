//! The `redirect-proxy` binary: outbound listener on 15001 with one log line per connection.
use std::{net::SocketAddr, process::ExitCode};

use anyhow::{bail, Context as _};
use clap::{Parser, ValueEnum};
use redirect_proxy::{serve_outbound, OutboundConfig};

/// Log line format.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// A small sidecar proxy: forwards each connection captured by `redirect` (or by istio-iptables
/// rules) to its original destination, read with getsockopt(SO_ORIGINAL_DST).
///
/// Run it as the proxy uid (1337 by default) so its own upstream connections are not captured:
///
///   setpriv --reuid 1337 --regid 1337 --clear-groups redirect-proxy
#[derive(Debug, Parser)]
#[command(name = "redirect-proxy", version)]
struct Args {
    /// Address of the outbound (virtualOutbound) listener.
    #[arg(long, default_value = "127.0.0.1:15001", value_name = "ADDR")]
    outbound: SocketAddr,
    /// Log format; each finished connection is logged once (target "access").
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Allow running as root. As root, the proxy's own connections are captured again unless
    /// root is the configured proxy uid, which is almost always a mistake.
    #[arg(long)]
    allow_root: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_writer(std::io::stdout);
    match args.log_format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    if nix::unistd::geteuid().is_root() && !args.allow_root {
        bail!("refusing to run as root: run as the proxy uid (e.g. `setpriv --reuid 1337 --regid 1337 --clear-groups redirect-proxy`) or pass --allow-root");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.outbound)
            .await
            .with_context(|| format!("binding the outbound listener on {} (is another proxy running?)", args.outbound))?;
        tracing::info!(addr = %args.outbound, uid = nix::unistd::getuid().as_raw(), "outbound listener ready");
        tokio::select! {
            r = serve_outbound(listener, OutboundConfig::default()) => r.context("outbound listener failed"),
            _ = shutdown() => { tracing::info!("shutting down"); Ok(()) }
        }
    })
}

async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
}
