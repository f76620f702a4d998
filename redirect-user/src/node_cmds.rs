//! `redirect daemon | enroll | unenroll | list | uninstall | explain`: the node daemon and the
//! commands that talk to it or read its pinned maps.
use std::{
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    sync::{atomic::AtomicBool, Arc},
};

use anyhow::{bail, Context as _};
use nix::sys::signal::{SigSet, Signal};
use redirect_user::{
    daemon::{
        self, client,
        proto::{Request, Response},
        server::{self, Daemon, Options},
    },
    explain, netns,
    node::{self, NodeAttach, NodeDatapath},
    policy::Policy,
};

fn bpffs_or_default(bpffs: Option<PathBuf>) -> PathBuf {
    bpffs.unwrap_or_else(daemon::default_bpffs)
}

fn socket() -> PathBuf {
    server::socket(&daemon::daemon_dir())
}

/// Runs the daemon until SIGINT/SIGTERM (capture stays pinned) or an uninstall.
pub fn daemon(bpffs: Option<PathBuf>, cgroup: Option<PathBuf>) -> anyhow::Result<()> {
    let mut signals = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        signals.add(s);
    }
    signals.thread_block().context("blocking SIGINT/SIGTERM")?;
    let d = Daemon::start(Options {
        bpffs: bpffs_or_default(bpffs),
        dir: daemon::daemon_dir(),
        attach: NodeAttach {
            cgroup,
            proxy_cgroup: None,
        },
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    std::thread::spawn(move || {
        if let Ok(sig) = signals.wait() {
            tracing::info!(signal = %sig, "stopping");
        }
        flag.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    println!(
        "ready pid={} socket={}",
        std::process::id(),
        socket().display()
    );
    d.run(&stop)?;
    Ok(())
}

fn ask(req: &Request) -> anyhow::Result<Response> {
    let r = client::call(&socket(), req)?;
    if !r.ok {
        bail!("{}", r.error.unwrap_or_else(|| "the daemon refused".into()));
    }
    Ok(r)
}

/// Splits `ARGS` like a shell would for simple quoting: whitespace, '...' and "...".
fn split_args(s: &str) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                cur.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => out.extend(cur.take()),
            (None, c) => cur.get_or_insert_with(String::new).push(c),
        }
    }
    if quote.is_some() {
        bail!("--istio-args: unterminated quote in {s:?}");
    }
    out.extend(cur);
    Ok(out)
}

/// Enrolls a namespace with a policy from istio-iptables args, a cluster.env or a JSON file.
pub fn enroll(
    netns_name: &str,
    istio_args: Option<&str>,
    cluster_env: Option<&Path>,
    policy: Option<&Path>,
) -> anyhow::Result<()> {
    let (policy, source): (Policy, String) = match (istio_args, cluster_env, policy) {
        (Some(args), None, None) => {
            let mut argv = split_args(args)?;
            argv.extend(["--netns".to_owned(), netns_name.to_owned()]);
            (
                crate::istio::parse(&argv)?.policy,
                format!("--istio-args {args}"),
            )
        }
        (None, Some(file), None) => {
            let argv = vec![
                "--cluster-env".to_owned(),
                file.display().to_string(),
                "--netns".to_owned(),
                netns_name.to_owned(),
            ];
            (
                crate::istio::parse(&argv)?.policy,
                format!("--cluster-env {}", file.display()),
            )
        }
        (None, None, Some(file)) => {
            let text = std::fs::read(file)
                .with_context(|| format!("--policy: reading {}", file.display()))?;
            let p = serde_json::from_slice(&text)
                .with_context(|| format!("--policy {}: not a policy", file.display()))?;
            (p, format!("--policy {}", file.display()))
        }
        _ => bail!("give exactly one of --istio-args, --cluster-env or --policy"),
    };
    let r = ask(&Request::Enroll {
        netns: netns::resolve(Some(netns_name)),
        policy: Box::new(policy),
        source,
    })?;
    println!("{}", r.message);
    Ok(())
}

/// Removes a namespace's policy.
pub fn unenroll(netns_name: &str) -> anyhow::Result<()> {
    let r = ask(&Request::Unenroll {
        netns: netns::resolve(Some(netns_name)),
    })?;
    println!("{}", r.message);
    Ok(())
}

/// Lists enrollments.
pub fn list(json: bool) -> anyhow::Result<()> {
    let r = ask(&Request::List)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r.enrollments)?);
        return Ok(());
    }
    println!(
        "{:<28} {:>8} {:<24} {:<8} source",
        "netns", "cookie", "addresses", "inbound"
    );
    for e in &r.enrollments {
        let addrs: Vec<String> = e.addrs.iter().map(ToString::to_string).collect();
        println!(
            "{:<28} {:>8} {:<24} {:<8} {}",
            e.netns.display(),
            e.cookie,
            addrs.join(","),
            if e.inbound { "yes" } else { "no" },
            e.source
        );
    }
    Ok(())
}

/// Removes every pin, attachment and enrollment.
pub fn uninstall(bpffs: Option<PathBuf>) -> anyhow::Result<()> {
    let dir = bpffs_or_default(bpffs);
    if socket().exists() {
        if let Ok(r) = client::call(&socket(), &Request::Uninstall) {
            if r.ok {
                println!("{}", r.message);
                return Ok(());
            }
        }
    }
    let _lock = node::lock(&dir)?;
    node::remove_dir(&dir)?;
    let _ = std::fs::remove_dir_all(daemon::daemon_dir().join("enrollments"));
    println!(
        "uninstalled: {} unpinned, every program detached",
        dir.display()
    );
    Ok(())
}

/// Explains one connection from the pinned maps.
#[allow(clippy::too_many_arguments)]
pub fn explain(
    netns_name: &str,
    uid: u32,
    gid: u32,
    dst: SocketAddr,
    tcp: bool,
    src: Option<IpAddr>,
    bpffs: Option<PathBuf>,
    json: bool,
) -> anyhow::Result<()> {
    let dir = bpffs_or_default(bpffs);
    if !NodeDatapath::exists(&dir) {
        bail!("no datapath is pinned at {} (start `redirect daemon` or run `redirect istio-iptables`)", dir.display());
    }
    let path = netns::resolve(Some(netns_name));
    let cookie = netns::cookie(&path)?;
    let mut dp = NodeDatapath::open(&dir)?;
    let e = explain::explain(dp.maps(), cookie, uid, gid, dst, tcp, src)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&e)?);
    } else {
        println!(
            "{} {dst} from uid {uid} gid {gid} in {}: {} ({}; rule: {}){}",
            if tcp { "TCP" } else { "UDP" },
            path.display(),
            e.outcome,
            e.counter,
            e.rule,
            if e.own_policy {
                ""
            } else {
                " [the namespace has no policy of its own]"
            }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::split_args;

    #[test]
    fn splits_like_a_shell() {
        let v = split_args(r#"-i '*' -x "" -b '*' -d 15090,15021"#).expect("split");
        assert_eq!(v, ["-i", "*", "-x", "", "-b", "*", "-d", "15090,15021"]);
        assert!(split_args("-i '*").is_err());
    }
}
