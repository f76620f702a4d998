//! `redirect explain | stats | trace | validate`: read-only views of the pinned datapath.
use redirect_common::NetnsCookie;
use std::{
    net::{IpAddr, SocketAddr},
    os::fd::AsFd as _,
    path::{Path, PathBuf},
    sync::{atomic::AtomicBool, Arc},
};

use anyhow::{bail, Context as _};
// nix: rustix has no safe signal mask (sigprocmask, sigwait).
use nix::sys::signal::{SigSet, Signal};
use redirect_datapath::{
    netns_cookie, resolve_netns, ExplainQuery, InboundQuery, NetnsHandle, NodeDatapath,
};
use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};

use crate::{
    dir_args::Dirs,
    json_views::{
        Answer, ExplainCaller, ExplainInbound, ExplainOutbound, Explanation, NsStats, TraceLine,
    },
};

/// What `redirect explain` asks about one outbound connect.
#[derive(Debug)]
pub(crate) struct ExplainOptions<'a> {
    /// The namespace (a name in /run/netns or a path).
    pub netns: &'a str,
    /// The caller's uid.
    pub uid: u32,
    /// The caller's gid.
    pub gid: u32,
    /// The destination.
    pub dst: SocketAddr,
    /// TCP (else UDP).
    pub tcp: bool,
    /// The socket's bound source, if any.
    pub src: Option<IpAddr>,
    /// The caller's cgroup, if any.
    pub cgroup: Option<&'a Path>,
    /// The socket's mark (0: none).
    pub mark: u32,
    /// The pin directory.
    pub bpffs: PathBuf,
    /// JSON instead of prose.
    pub json: bool,
}

/// Explains one connection from the pinned maps.
pub(crate) fn explain(opts: ExplainOptions<'_>) -> anyhow::Result<()> {
    let ExplainOptions {
        netns: netns_name,
        uid,
        gid,
        dst,
        tcp,
        src,
        cgroup,
        mark,
        bpffs,
        json,
    } = opts;
    let dir = bpffs;
    if !NodeDatapath::exists(&dir) {
        bail!("no datapath is pinned at {} (start `redirect daemon` or run `redirect istio-iptables`)", dir.display());
    }
    let path = resolve_netns(Some(netns_name));
    let cookie = netns_cookie(&path)?;
    let mut dp = NodeDatapath::open(&dir)?;
    let query = ExplainQuery {
        uid,
        gid,
        dst,
        tcp,
        src,
        caller_cgroup: cgroup,
        mark,
    };
    let e = redirect_datapath::explain(dp.maps(), cookie, &query)?;
    if json {
        // The keys `trace --json` uses for the same meanings; the asked caller under `caller`.
        let out = Explanation::Outbound(ExplainOutbound {
            direction: "outbound",
            netns: path.display().to_string(),
            cookie,
            caller: ExplainCaller {
                uid,
                gid,
                cgroup: cgroup.map(|c| c.display().to_string()),
                mark,
            },
            protocol: if tcp { "tcp" } else { "udp" },
            bound: src.map(|s| s.to_string()),
            dst: dst.to_string(),
            explained: Answer::from(&e),
            own_policy: e.own_policy,
            tproxy: e.tproxy,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "{} {dst} from uid {uid} gid {gid}{} in {}: {} ({}; rule: {}){}{}",
            if tcp { "TCP" } else { "UDP" },
            if mark == 0 {
                String::new()
            } else {
                format!(" mark {mark}")
            },
            path.display(),
            e.shown(),
            e.counter,
            e.rule,
            if e.own_policy {
                ""
            } else {
                " [the namespace has no policy of its own]"
            },
            mode_note(e.tproxy)
        );
    }
    Ok(())
}

/// Explains one connection arriving at a namespace from the pinned maps.
pub(crate) fn explain_inbound(
    netns_name: &str,
    src: &str,
    dst: SocketAddr,
    iface: Option<&str>,
    bpffs: PathBuf,
    json: bool,
) -> anyhow::Result<()> {
    // Without a port the client's port is any (the decision does not read it): shown as the
    // address alone, never as port 0.
    let (src, src_shown): (SocketAddr, String) = match src.parse::<SocketAddr>() {
        Ok(a) => (a, a.to_string()),
        Err(_) => {
            let ip = src
                .parse::<IpAddr>()
                .with_context(|| format!("--src {src:?}: not IP or IP:PORT"))?;
            (SocketAddr::new(ip, 0), ip.to_string())
        }
    };
    let mut dp = open_pinned(&bpffs)?;
    let path = resolve_netns(Some(netns_name));
    let ns = NetnsHandle::open(&path)?;
    let cookie = ns.cookie();
    let ifindex = match iface {
        Some(name) => ns
            .ifindex(name)?
            .with_context(|| format!("--iface {name}: no such interface in {}", path.display()))?,
        None => 0,
    };
    let q = InboundQuery { src, dst, ifindex };
    let e = redirect_datapath::explain_inbound(dp.maps(), cookie, &q)?;
    if json {
        let out = Explanation::Inbound(ExplainInbound {
            direction: "inbound",
            netns: path.display().to_string(),
            cookie,
            protocol: "tcp",
            src: src_shown,
            dst: dst.to_string(),
            iface,
            explained: Answer::from(&e),
            tproxy: e.tproxy,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "TCP {src_shown} -> {dst}{} arriving in {}: {} ({}; rule: {}){}",
            iface.map(|i| format!(" on {i}")).unwrap_or_default(),
            path.display(),
            e.shown(),
            e.counter,
            e.rule,
            mode_note(e.tproxy)
        );
    }
    Ok(())
}

/// What the text views add for a namespace in TPROXY mode (REDIRECT mode, the default, says
/// nothing).
fn mode_note(tproxy: bool) -> &'static str {
    if tproxy {
        " [TPROXY mode]"
    } else {
        ""
    }
}

fn open_pinned(dir: &Path) -> anyhow::Result<NodeDatapath> {
    if !NodeDatapath::exists(dir) {
        bail!("no datapath is pinned at {} (start `redirect daemon` or run `redirect istio-iptables`)", dir.display());
    }
    Ok(NodeDatapath::open(dir)?)
}

fn cookie_filter(netns_name: Option<&str>) -> anyhow::Result<Option<NetnsCookie>> {
    netns_name
        .map(|n| netns_cookie(&resolve_netns(Some(n))).map_err(anyhow::Error::from))
        .transpose()
}

/// Validates capture in a namespace; exits 1 when a check fails.
pub(crate) fn validate(
    netns_name: &str,
    cgroup: Option<&Path>,
    timeout_ms: u64,
    bpffs: PathBuf,
    json: bool,
) -> anyhow::Result<()> {
    let mut dp = open_pinned(&bpffs)?;
    let path = resolve_netns(Some(netns_name));
    if let Some(cg) = cgroup {
        redirect_datapath::enter_cgroup(cg)?;
    }
    let file = std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
    move_into_link_name_space(file.as_fd(), Some(LinkNameSpaceType::Network))
        .with_context(|| format!("entering {}", path.display()))?;
    let report = redirect_datapath::run_validation(
        dp.maps(),
        &path,
        std::time::Duration::from_millis(timeout_ms),
    )?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for c in &report.checks {
            println!(
                "{:<9} {}  {}",
                c.name,
                if c.ok { "OK  " } else { "FAIL" },
                c.detail
            );
        }
    }
    if !report.ok {
        if cgroup.is_none() {
            if let Some(hint) = validate_hint(&mut dp) {
                eprintln!("{hint}");
            }
        }
        std::process::exit(1);
    }
    Ok(())
}

/// Why a check run without `--cgroup` can fail: capture applies only to processes under the
/// cgroup the datapath is attached at; this process runs outside it. Names the cgroup to pass.
fn validate_hint(dp: &mut NodeDatapath) -> Option<String> {
    let attached = redirect_datapath::cgroup_path_of_id(dp.layout().ok()?.app_cgroup)?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let own = redirect_datapath::cgroup2_root()
        .ok()?
        .join(own.trim_start_matches('/'));
    if redirect_datapath::cgroup_contains(&attached, &own) {
        return None;
    }
    Some(format!(
        "hint: capture applies to processes under cgroup {}, where this datapath is attached; this \
            check ran in {}, outside it: rerun with --cgroup {} (or the pod's own cgroup below it)",
        attached.display(),
        own.display(),
        attached.display()
    ))
}

/// Per-namespace decision counters: every namespace with a policy (whoever wrote it) or a
/// count, by path ("path unknown" when nothing names it) and cookie. JSON lists every counter,
/// zeros included; the table only those that counted.
pub(crate) fn stats(
    dirs: &Dirs,
    netns_name: Option<&str>,
    bpffs: PathBuf,
    json: bool,
) -> anyhow::Result<()> {
    let only = cookie_filter(netns_name)?;
    let dir = bpffs;
    let mut dp = open_pinned(&dir)?;
    let all = redirect_datapath::ns_counters(dp.maps())?;
    let view = crate::captured::node_view(dirs, &dir)?;
    let mut labels = view.labels();
    let mut cookies: Vec<NetnsCookie> = view
        .captured
        .iter()
        .map(|c| c.cookie)
        .chain(all.keys().copied())
        .filter(|c| only.is_none_or(|o| o == *c))
        .collect();
    cookies.sort_unstable();
    cookies.dedup();
    let counted = |c: &NetnsCookie| all.get(c).cloned().unwrap_or_default();
    if json {
        let v: Vec<NsStats> = cookies
            .iter()
            .map(|c| {
                let got = counted(c);
                let counters = redirect_common::Counter::ALL
                    .iter()
                    .map(|k| {
                        let n = got.iter().find(|(n, _)| *n == k.name()).map_or(0, |x| x.1);
                        (k.name(), n)
                    })
                    .collect();
                NsStats {
                    netns: labels.path(*c).map(|p| p.display().to_string()),
                    cookie: *c,
                    counters,
                }
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if cookies.is_empty() {
        println!(
            "no namespace has a policy or a count{}",
            netns_name.map_or(String::new(), |n| format!(" in {n}"))
        );
        return Ok(());
    }
    for ns in cookies {
        println!("netns {} (cookie {ns})", labels.shown(ns));
        let got = counted(&ns);
        if got.is_empty() {
            println!("  no decision counted yet");
        }
        for (counter, n) in got {
            let rule = redirect_common::Counter::ALL
                .iter()
                .find(|c| c.name() == counter)
                .map_or("-", |c| c.rule());
            println!("  {n:>10}  {counter:<24} {rule}");
        }
    }
    Ok(())
}

/// Streams decisions until Ctrl-C, `count` or `seconds`.
pub(crate) fn trace(
    dirs: &Dirs,
    netns_name: Option<&str>,
    count: Option<usize>,
    seconds: Option<u64>,
    bpffs: PathBuf,
    json: bool,
) -> anyhow::Result<()> {
    let only = cookie_filter(netns_name)?;
    let dir = bpffs;
    let mut dp = open_pinned(&dir)?;
    let mut signals = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM] {
        signals.add(s);
    }
    signals.thread_block().context("blocking SIGINT/SIGTERM")?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    std::thread::spawn(move || {
        let _ = signals.wait();
        flag.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let mut tracer = redirect_datapath::Tracer::start(
        dp.take_map(redirect_common::map_names::TRACE)?,
        dp.take_map(redirect_common::map_names::TRACE_ON)?,
    )?;
    let mut labels = crate::captured::node_view(dirs, &dir)
        .map(|v| v.labels())
        .unwrap_or_default();
    let deadline = seconds.map(|s| std::time::Instant::now() + std::time::Duration::from_secs(s));
    let mut seen = 0;
    eprintln!("tracing decisions (Ctrl-C to stop)");
    while !stop.load(std::sync::atomic::Ordering::Relaxed)
        && deadline.is_none_or(|d| std::time::Instant::now() < d)
        && count.is_none_or(|n| seen < n)
    {
        for d in tracer.next_batch(200)? {
            if only.is_some_and(|c| c != d.netns) || count.is_some_and(|n| seen >= n) {
                continue;
            }
            seen += 1;
            let path = labels.path(d.netns);
            // Read when the decision is shown (a re-apply may change it): `None` once the
            // namespace's policy is gone.
            let tproxy = redirect_datapath::tproxy_mode(dp.maps(), d.netns).unwrap_or(None);
            if json {
                // One shape: `netns` is the namespace's path (null when nothing names it),
                // `cookie` beside it, then the decision's own keys, then the mode when the
                // namespace still has a policy.
                let line = TraceLine {
                    netns: path.as_ref().map(|p| p.display().to_string()),
                    cookie: d.netns.get(),
                    decision: &d,
                    tproxy,
                };
                println!("{}", serde_json::to_string(&line)?);
            } else {
                let ns =
                    path.map_or_else(|| "(path unknown)".to_owned(), |p| p.display().to_string());
                let who = match (&d.caller, d.src) {
                    (Some(c), _) => {
                        format!("pid={} comm={} uid={} gid={}", c.pid, c.comm, c.uid, c.gid)
                    }
                    (None, Some(src)) => format!("inbound from {src}"),
                    (None, None) => "inbound".to_owned(),
                };
                let mode = match tproxy {
                    Some(true) => " mode=TPROXY",
                    Some(false) => " mode=REDIRECT",
                    None => "",
                };
                println!(
                    "{who} netns={ns} cookie={}{mode} {} {} -> {} ({}: {})",
                    d.netns, d.protocol, d.dst, d.outcome, d.counter, d.rule
                );
            }
        }
    }
    Ok(())
}
