//! `redirect validate`: proves capture works in one namespace before its proxy starts, like
//! istio-validation: listeners on the proxy's ports, a dial the policy must capture, and the
//! original destination checked on arrival.
use redirect_common::NetnsCookie;
use std::{
    io::Read as _,
    net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    path::Path,
    thread::JoinHandle,
    time::Duration,
};

use redirect_common::{map_names, outbound::OutboundPolicy};
use serde::Serialize;

use crate::{
    error::{Error, Result},
    maps::store::{hash, MapStore},
    netns,
};

/// Where validation dials for the outbound check (TEST-NET-1: never a real service).
pub(crate) const PROBE_DST: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 9);
/// Uid and gid of the dialling "application" (nobody).
pub(crate) const APP_ID: u32 = 65534;

/// One check.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// "outbound" or "inbound".
    #[cfg_attr(
        feature = "schema",
        schemars(schema_with = "crate::views::schema::direction")
    )]
    pub name: &'static str,
    /// Passed.
    pub ok: bool,
    /// What happened.
    pub detail: String,
}

/// The result of a validation.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Every check passed.
    pub ok: bool,
    /// The checks.
    pub checks: Vec<Check>,
}

/// The namespace's policy from the pinned maps.
pub(crate) fn policy_of(
    store: &mut dyn MapStore,
    cookie: NetnsCookie,
) -> Result<Option<OutboundPolicy>> {
    Ok(
        hash::<NetnsCookie, OutboundPolicy>(store, map_names::NETNS_OUTBOUND)?
            .get(&cookie, 0)
            .ok(),
    )
}

/// Switches only the calling thread to `id` (uid and gid): the capture hooks read the
/// thread's credentials, and the rest of the process keeps its own.
fn become_on_this_thread(id: u32) -> std::io::Result<()> {
    // SAFETY: syscall edge: setresgid/setresuid take integers only; the raw syscalls change
    // the calling thread's credentials alone (libc's wrappers would change every thread).
    let rc = unsafe { libc::syscall(libc::SYS_setresgid, id, id, id) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    let rc = unsafe { libc::syscall(libc::SYS_setresuid, id, id, id) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Dials `dst` as `id` from a thread of its own (in this process's namespace), then waits for
/// the far end to close (at most `timeout`): the caller accepts meanwhile, see [`dial_and_accept`].
fn dial_as(id: u32, dst: SocketAddr, timeout: Duration) -> JoinHandle<std::io::Result<()>> {
    std::thread::spawn(move || {
        become_on_this_thread(id)?;
        let mut s = TcpStream::connect_timeout(&dst, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        let mut b = [0u8; 1];
        let _ = s.read(&mut b);
        Ok(())
    })
}

/// Dials `dst` as `id` and accepts on `listener` at the same time: a captured dial is accepted
/// (its original destination read) and closed at once, so a passing check returns as soon as the
/// connection arrives, not after `timeout`. Returns what arrived and how the dial ended.
fn dial_and_accept(
    id: u32,
    dst: SocketAddr,
    listener: &TcpListener,
    timeout: Duration,
) -> (Option<SocketAddr>, std::io::Result<()>) {
    let dialling = dial_as(id, dst, timeout);
    let got = arrival(listener, timeout);
    let dialled = dialling
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("dial thread panicked")));
    (got, dialled)
}

/// Accepts one connection within `timeout` and returns its original destination (the accepted
/// socket is closed on return, which ends the dialler's read).
fn arrival(listener: &TcpListener, timeout: Duration) -> Option<SocketAddr> {
    listener.set_nonblocking(true).ok()?;
    let start = std::time::Instant::now();
    while start.elapsed() < timeout {
        if let Ok((s, _)) = listener.accept() {
            return redirect_sys::original_dst(&s)
                .ok()
                .or_else(|| s.local_addr().ok());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

fn listen_on(port: u16) -> std::io::Result<TcpListener> {
    TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port))
}

/// Runs the checks. The caller has already moved this process into the pod's cgroup and
/// network namespace (`netns_path` is only used for its addresses and cookie).
pub fn run(store: &mut dyn MapStore, netns_path: &Path, timeout: Duration) -> Result<Report> {
    let ns = netns::NetnsHandle::open(netns_path)?;
    let cookie = ns.cookie();
    let Some(policy) = policy_of(store, cookie)? else {
        return Ok(Report {
            ok: false,
            checks: vec![Check {
                name: "policy",
                ok: false,
                detail: format!(
                    "{} has no capture policy (enroll it first)",
                    netns_path.display()
                ),
            }],
        });
    };
    let busy = |port: u16, e: std::io::Error| {
        Error::io(
        "binding the validation listener (validate runs before the proxy starts; is it already running?) on port",
        port.to_string(),
        e,
    )
    };
    let out_l = listen_on(policy.proxy_port).map_err(|e| busy(policy.proxy_port, e))?;
    let in_l = listen_on(policy.inbound_port).map_err(|e| busy(policy.inbound_port, e))?;
    let mut checks = Vec::new();

    let (got, dialled) = dial_and_accept(APP_ID, PROBE_DST, &out_l, timeout);
    checks.push(Check {
        name: "outbound",
        ok: got == Some(PROBE_DST),
        detail: match (got, dialled) {
            (Some(orig), _) => format!(
                "uid {APP_ID} dialled {PROBE_DST}: arrived on :{} with original destination {orig}",
                policy.proxy_port
            ),
            (None, Err(e)) => format!("uid {APP_ID} dialled {PROBE_DST}: not captured ({e})"),
            (None, Ok(())) => {
                format!("uid {APP_ID} dialled {PROBE_DST}: not captured (reached something else)")
            }
        },
    });

    let addrs = ns.addresses()?;
    let pod_ip = addrs.iter().find(|a| a.is_ipv4()).copied();
    let proxy_uid = policy.uids[0];
    match pod_ip {
        Some(ip) if policy.n_uids > 0 => {
            let dst = SocketAddr::new(ip, 15099);
            let (got, dialled) = dial_and_accept(proxy_uid, dst, &in_l, timeout);
            checks.push(Check {
                name: "inbound",
                ok: got == Some(dst),
                detail: match (got, dialled) {
                    (Some(orig), _) => format!(
                        "proxy uid {proxy_uid} dialled its own pod at {dst}: arrived on :{} with \
                            original destination {orig}",
                        policy.inbound_port
                    ),
                    (None, Err(e)) => format!(
                        "proxy uid {proxy_uid} dialled {dst}: not sent to :{} ({e})",
                        policy.inbound_port
                    ),
                    (None, Ok(())) => format!(
                        "proxy uid {proxy_uid} dialled {dst}: not sent to :{}",
                        policy.inbound_port
                    ),
                },
            });
        }
        _ => checks.push(Check {
            name: "inbound",
            ok: false,
            detail: "the namespace has no IPv4 address (or the policy no proxy uid) to dial".into(),
        }),
    }
    Ok(Report {
        ok: checks.iter().all(|c| c.ok),
        checks,
    })
}
