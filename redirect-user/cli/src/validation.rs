//! `redirect istio-iptables --run-validation`: the check Istio's `istio-validation` init container
//! makes (istio-iptables' validator), made against our capture, applying nothing. It listens
//! on the proxy's ports on loopback (`127.0.0.1:<-p>` and `127.0.0.1:<-z>`; `[::1]` when the
//! pod's first address is IPv6), dials `127.0.0.6:<--iptables-probe-port>` (`[::6]`) from a
//! socket bound to loopback once a second, and passes when a connection accepted on one of
//! them reads that port as its `SO_ORIGINAL_DST`: behind capture, the proxy uid's dial to a
//! loopback address other than 127.0.0.1 goes to the inbound port with its original
//! destination kept. Without that by `--probe-timeout`, it fails with istio-iptables' exit code
//! (126), the one istio-cni's repair controller looks for.
use std::{
    io::{self, Write as _},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener},
    os::fd::AsFd as _,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use redirect_policy::Invocation;
use rustix::{
    event::{poll, PollFd, PollFlags, Timespec},
    thread::{move_into_link_name_space, LinkNameSpaceType},
};
use socket2::{Domain, Protocol, Socket, Type};

/// istio-iptables' exit code when the validation fails (its `ValidationErrorCode`).
pub(crate) const FAILED_EXIT: i32 = 126;
/// How often the probe is dialled, as Istio's validator dials it.
const DIAL_EVERY: Duration = Duration::from_secs(1);

/// What the validation listens on and dials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The proxy's outbound and inbound ports on loopback.
    pub(crate) listen: Vec<SocketAddr>,
    /// Where the dialling socket is bound first (loopback, any port).
    pub(crate) from: SocketAddr,
    /// The probe: the proxy's passthrough source address on the probe port.
    pub(crate) probe: SocketAddr,
    /// How long it tries.
    pub(crate) timeout: Duration,
}

impl Plan {
    /// The plan for `inv`, in the pod's IPv6 family when `ipv6`.
    pub(crate) fn new(inv: &Invocation, ipv6: bool) -> Self {
        let (lo, passthrough): (IpAddr, IpAddr) = if ipv6 {
            (
                Ipv6Addr::LOCALHOST.into(),
                Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6).into(),
            )
        } else {
            (
                Ipv4Addr::LOCALHOST.into(),
                Ipv4Addr::new(127, 0, 0, 6).into(),
            )
        };
        let p = &inv.policy;
        Self {
            listen: vec![
                SocketAddr::new(lo, p.proxy_port),
                SocketAddr::new(lo, p.inbound_capture_port),
            ],
            from: SocketAddr::new(lo, 0),
            probe: SocketAddr::new(passthrough, inv.probe_port),
            timeout: inv.probe_timeout,
        }
    }
}

/// The address Istio's validator takes for the pod's: the first of the namespace's addresses
/// that is neither loopback nor link-local (a v4-mapped one as the IPv4 it maps). Its family is
/// the validation's.
pub(crate) fn pod_address(addrs: impl IntoIterator<Item = IpAddr>) -> Option<IpAddr> {
    addrs
        .into_iter()
        .map(|a| a.to_canonical())
        .find(|a| !a.is_loopback() && !link_local(a))
}

/// Link-local unicast (169.254/16, fe80::/10) or link-local multicast (224.0.0/24, ff02::/16).
fn link_local(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => v4.is_link_local() || v4.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            first & 0xffc0 == 0xfe80 || first & 0xff0f == 0xff02
        }
    }
}

/// What one accepted connection says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// The probe, captured: its original destination.
    Probe(SocketAddr),
    /// Another connection (not the probe's port): its original destination.
    Other(SocketAddr),
    /// No original destination could be read: why.
    Unknown(String),
}

/// Judges an accepted connection by its original destination, as Istio's validator does: by
/// its port alone.
pub(crate) fn judge(orig: Result<SocketAddr, String>, probe_port: u16) -> Arrival {
    match orig {
        Ok(o) if o.port() == probe_port => Arrival::Probe(o),
        Ok(o) => Arrival::Other(o),
        Err(why) => Arrival::Unknown(why),
    }
}

/// Why one dial of `probe` failed, in the operator's words.
pub(crate) fn dial_failure(e: &io::Error, probe: SocketAddr) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => format!(
            "the dial was refused: it went to {probe} itself, where nothing listens, so capture did not take it"
        ),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
            format!("the dial to {probe} timed out")
        }
        _ => format!("dialling {probe}: {e}"),
    }
}

/// The failure's text: what was tried, the last thing seen, and what it means.
pub(crate) fn failure(plan: &Plan, last: Option<&str>, uid: u32, proxy_uids: &[u32]) -> String {
    let listen: Vec<String> = plan.listen.iter().map(ToString::to_string).collect();
    let last = last.map_or_else(String::new, |l| format!(" (last: {l})"));
    let not_proxy = if proxy_uids.contains(&uid) {
        String::new()
    } else {
        let uids: Vec<String> = proxy_uids.iter().map(ToString::to_string).collect();
        format!(
            ", which is not a proxy uid (-u {}): istio-validation runs as the proxy's uid, whose \
                dial capture sends to the inbound port",
            uids.join(",")
        )
    };
    format!(
        "validation failed: in {:?} no connection dialled to {} arrived at {} with original \
            destination port {}{last}. Capture is not in place for this process (uid \
            {uid}{not_proxy}): the workload is not ready for the mesh; with a CNI plugin \
            (redirect-cni, istio-cni) this happens when the pod started before the node captured \
            it: delete the pod so that it starts again on a node that does",
        plan.timeout,
        plan.probe,
        listen.join(" or "),
        plan.probe.port(),
    )
}

/// How the validation ended: the probe arrived at a listener (the first address) with an
/// original destination (the second), or why it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Passed(SocketAddr, SocketAddr),
    Failed(String),
}

/// Runs the validation in this process's network namespace (or `--netns`'s, entered first).
pub(crate) fn run(inv: &Invocation) -> anyhow::Result<Verdict> {
    if let Some(name) = &inv.netns {
        enter(name)?;
    }
    let addrs = local_addresses()?;
    let pod = pod_address(addrs.iter().copied()).with_context(|| {
        format!(
            "no valid local IP address found (the namespace holds only loopback or link-local \
            ones: {addrs:?}): the validation's family is the pod address's, as istio-iptables \
            takes it"
        )
    })?;
    let plan = Plan::new(inv, pod.is_ipv6());
    tracing::info!(pod_address = %pod, probe = %plan.probe, timeout = ?plan.timeout,
        "starting the capture validation (istio-validation's check): it verifies that capture is in \
        place for the pod's network");
    let listeners = listen(&plan.listen);
    if listeners.is_empty() {
        let all: Vec<String> = plan.listen.iter().map(ToString::to_string).collect();
        let why = format!(
            "validation failed: no listener available: {}",
            all.join(",")
        );
        return Ok(Verdict::Failed(why));
    }
    let uid = rustix::process::geteuid().as_raw();
    let deadline = Instant::now() + plan.timeout;
    let mut next_dial = Instant::now();
    let mut last: Option<String> = None;
    loop {
        let now = Instant::now();
        if now >= deadline {
            let why = failure(&plan, last.as_deref(), uid, &inv.policy.proxy_uids);
            return Ok(Verdict::Failed(why));
        }
        if now >= next_dial {
            last = Some(match dial(&plan, (deadline - now).min(DIAL_EVERY)) {
                Ok(()) => format!(
                    "the dial to {} connected, but nothing arrived at the \
                    validation's listeners: something else answers there",
                    plan.probe
                ),
                Err(e) => {
                    let why = dial_failure(&e, plan.probe);
                    tracing::warn!("{why}");
                    why
                }
            });
            next_dial = Instant::now() + DIAL_EVERY;
        }
        for (at, listener) in &listeners {
            while let Ok((mut conn, peer)) = listener.accept() {
                let orig = redirect_sys::original_dst(&conn).map_err(|e| format!("{e}"));
                // Its original port back, as Istio's validator echoes it.
                if let Ok(o) = &orig {
                    let _ = conn.write_all(o.port().to_string().as_bytes());
                }
                match judge(orig, plan.probe.port()) {
                    Arrival::Probe(orig) => return Ok(Verdict::Passed(*at, orig)),
                    Arrival::Other(orig) => {
                        tracing::info!(%peer, listener = %at, %orig, "a connection that is not the \
                            probe (another original destination port)");
                        last = Some(format!(
                            "a connection from {peer} arrived at {at} with original \
                            destination {orig}, not the probe's port"
                        ));
                    }
                    Arrival::Unknown(why) => {
                        tracing::warn!(%peer, listener = %at, "error getting the original destination: {why}");
                        last = Some(format!(
                            "a connection from {peer} arrived at {at} without an \
                            original destination ({why})"
                        ));
                    }
                }
            }
        }
        let until = next_dial.min(deadline);
        wait_readable(&listeners, until.saturating_duration_since(Instant::now()));
    }
}

/// The listeners of `addrs` that could be bound (SO_REUSEADDR, as Istio's); a failure is
/// logged, as Istio logs it, and the others are kept.
fn listen(addrs: &[SocketAddr]) -> Vec<(SocketAddr, TcpListener)> {
    let bind = |addr: SocketAddr| -> io::Result<TcpListener> {
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        s.set_reuse_address(true)?;
        s.bind(&addr.into())?;
        s.listen(128)?;
        s.set_nonblocking(true)?;
        Ok(s.into())
    };
    addrs
        .iter()
        .filter_map(|&addr| match bind(addr) {
            Ok(l) => {
                tracing::info!(%addr, "listening");
                Some((addr, l))
            }
            Err(error) => {
                tracing::error!(%addr, %error, "error on listening");
                None
            }
        })
        .collect()
}

/// One dial of the probe from a socket bound to loopback; closed at once.
fn dial(plan: &Plan, timeout: Duration) -> io::Result<()> {
    let s = Socket::new(
        Domain::for_address(plan.probe),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    s.bind(&plan.from.into())?;
    s.connect_timeout(&plan.probe.into(), timeout.max(Duration::from_millis(1)))
}

/// Waits until a listener has a connection, or `timeout`.
fn wait_readable(listeners: &[(SocketAddr, TcpListener)], timeout: Duration) {
    let mut fds: Vec<PollFd<'_>> = listeners
        .iter()
        .map(|(_, l)| PollFd::new(l, PollFlags::IN))
        .collect();
    // EINTR or an error: the loop looks again (no timeout only past i64::MAX seconds).
    let _ = poll(&mut fds, Timespec::try_from(timeout).ok().as_ref());
}

/// This namespace's addresses, in the kernel's order (IPv4 before IPv6), as Go lists them.
fn local_addresses() -> anyhow::Result<Vec<IpAddr>> {
    // nix: rustix has no getifaddrs.
    let addrs = nix::ifaddrs::getifaddrs()
        .context("listing the network namespace's addresses (getifaddrs)")?;
    Ok(addrs
        .filter_map(|i| {
            let a = i.address?;
            a.as_sockaddr_in()
                .map(|s| IpAddr::V4(s.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())))
        })
        .collect())
}

/// Enters the network namespace `--netns` names (root only; istio-validation runs in the pod).
fn enter(name: &str) -> anyhow::Result<()> {
    let path = redirect_datapath::resolve_netns(Some(name));
    let file = std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
    move_into_link_name_space(file.as_fd(), Some(LinkNameSpaceType::Network)).with_context(|| {
        format!(
            "entering the network namespace {} for the validation (istio-validation runs inside the \
                pod, without --netns)",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(args: &[&str]) -> Invocation {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        redirect_policy::parse_invocation(
            &args,
            &std::collections::HashMap::new(),
            &redirect_policy::Sources::new("test", vec![Box::new(redirect_policy::OwnFiles)]),
        )
        .expect("parse")
    }

    #[test]
    fn the_plan_is_istios_in_the_pods_family() {
        let default = inv(&["-u", "1337", "--run-validation", "--skip-rule-apply"]);
        let v4 = Plan::new(&default, false);
        assert_eq!(
            v4.listen,
            [
                "127.0.0.1:15001".parse().unwrap(),
                "127.0.0.1:15006".parse().unwrap()
            ]
        );
        assert_eq!(v4.from, "127.0.0.1:0".parse().unwrap());
        assert_eq!(v4.probe, "127.0.0.6:15002".parse().unwrap());
        assert_eq!(v4.timeout, Duration::from_secs(5));
        let given = inv(&[
            "-u",
            "1337",
            "-p",
            "16001",
            "-z",
            "16006",
            "--iptables-probe-port",
            "16002",
            "--probe-timeout",
            "2s",
        ]);
        let v6 = Plan::new(&given, true);
        assert_eq!(
            v6.listen,
            [
                "[::1]:16001".parse().unwrap(),
                "[::1]:16006".parse().unwrap()
            ]
        );
        assert_eq!(v6.from, "[::1]:0".parse().unwrap());
        assert_eq!(v6.probe, "[::6]:16002".parse().unwrap());
        assert_eq!(v6.timeout, Duration::from_secs(2));
    }

    #[test]
    fn the_pod_address_is_the_first_neither_loopback_nor_link_local() {
        let ips = |s: &[&str]| -> Vec<IpAddr> { s.iter().map(|a| a.parse().unwrap()).collect() };
        let first = |s: &[&str]| pod_address(ips(s));
        assert_eq!(first(&["127.0.0.1", "::1"]), None);
        assert_eq!(
            first(&["127.0.0.1", "169.254.1.1", "10.0.0.2", "fd00::2"]),
            Some("10.0.0.2".parse().unwrap())
        );
        assert_eq!(
            first(&["::1", "fe80::1", "ff02::1", "fd00::2", "10.0.0.2"]),
            Some("fd00::2".parse().unwrap())
        );
        assert_eq!(
            first(&["::ffff:10.0.0.3"]),
            Some("10.0.0.3".parse().unwrap())
        );
    }

    #[test]
    fn an_arrival_is_the_probe_by_its_original_port() {
        let probe: SocketAddr = "127.0.0.6:15002".parse().unwrap();
        assert_eq!(judge(Ok(probe), 15002), Arrival::Probe(probe));
        let other: SocketAddr = "10.0.0.9:80".parse().unwrap();
        assert_eq!(judge(Ok(other), 15002), Arrival::Other(other));
        assert_eq!(
            judge(Err("no original destination".into()), 15002),
            Arrival::Unknown("no original destination".into())
        );
    }

    #[test]
    fn failures_say_what_was_tried_and_why() {
        let plan = Plan::new(&inv(&["-u", "1337"]), false);
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let why = dial_failure(&refused, plan.probe);
        assert!(
            why.contains("refused") && why.contains("127.0.0.6:15002"),
            "{why}"
        );
        let text = failure(&plan, Some(&why), 1337, &[1337]);
        assert!(
            text.starts_with(
                "validation failed: in 5s no connection dialled to 127.0.0.6:15002 \
                arrived at 127.0.0.1:15001 or 127.0.0.1:15006 with original destination port 15002 \
                (last: the dial was refused"
            ),
            "{text}"
        );
        assert!(!text.contains("not a proxy uid"), "{text}");
        let text = failure(&plan, None, 0, &[1337]);
        assert!(
            text.contains("(uid 0, which is not a proxy uid (-u 1337)"),
            "{text}"
        );
    }
}
