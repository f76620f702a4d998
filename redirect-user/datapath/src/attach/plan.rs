//! The one attach plan of the datapath: which program attaches where, in which order, and the
//! bpf_links that do it. `redirect attach` holds the links in its process (closing them
//! detaches); the node datapath pins them. Nothing else differs between the two.
use std::{
    fs::File,
    os::fd::{AsFd as _, BorrowedFd, OwnedFd},
    path::{Path, PathBuf},
};

use aya::{
    programs::{CgroupSockAddr, CgroupSockopt, Program, SkLookup, SockOps},
    Ebpf,
};
use redirect_common::prog_names;
use serde::{Deserialize, Serialize};

use crate::{
    cgroup,
    error::{Error, Result},
    sys::bpfsys::{self, attach_type},
};

/// The UDP and peer-address hooks: (program, hook name, bpf attach type).
pub(crate) const PEER_HOOKS: [(&str, &str, u32); 6] = [
    (prog_names::SENDMSG4, "sendmsg4", attach_type::SENDMSG4),
    (prog_names::SENDMSG6, "sendmsg6", attach_type::SENDMSG6),
    (prog_names::RECVMSG4, "recvmsg4", attach_type::RECVMSG4),
    (prog_names::RECVMSG6, "recvmsg6", attach_type::RECVMSG6),
    (
        prog_names::GETPEERNAME4,
        "getpeername4",
        attach_type::GETPEERNAME4,
    ),
    (
        prog_names::GETPEERNAME6,
        "getpeername6",
        attach_type::GETPEERNAME6,
    ),
];

/// One program attached at one cgroup or network namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// Program name in the object.
    pub program: String,
    /// Attach type as bpftool names it.
    pub attach_type: String,
    /// Canonical cgroup directory, or network namespace file for sk_lookup.
    pub target: PathBuf,
    /// Kernel program id.
    pub program_id: u32,
}

/// One step of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    /// Program name in the object.
    pub(crate) program: &'static str,
    /// Hook name, as bpftool prints it.
    pub(crate) hook: &'static str,
    /// `enum bpf_attach_type`.
    pub(crate) attach_type: u32,
    /// The cgroup it attaches at.
    pub(crate) target: PathBuf,
}

/// The cgroup links, in attach order: tracking first (getsockopt and sock_ops where the
/// proxy's listeners live, and sock_ops at the application's cgroup when it is not below),
/// the bind hooks that mark the proxy's outbound listener (where the proxy lives), then the
/// peer and UDP hooks, capture last (connect4/6): a connect is only rewritten once
/// its answer can be found. Detaching goes in the reverse order.
pub(crate) fn cgroup_plan(app: &Path, proxy: &Path) -> Vec<Step> {
    let step = |program, hook, attach_type, target: &Path| Step {
        program,
        hook,
        attach_type,
        target: target.to_path_buf(),
    };
    let mut plan = vec![
        step(
            prog_names::GETSOCKOPT,
            "getsockopt",
            attach_type::GETSOCKOPT,
            proxy,
        ),
        step(
            prog_names::SOCK_OPS,
            "sock_ops",
            attach_type::SOCK_OPS,
            proxy,
        ),
    ];
    if !cgroup::contains(proxy, app) {
        plan.push(step(
            prog_names::SOCK_OPS,
            "sock_ops",
            attach_type::SOCK_OPS,
            app,
        ));
    }
    // Where the proxy binds: its outbound listener is marked there before it listens.
    plan.push(step(prog_names::BIND4, "bind4", attach_type::BIND4, proxy));
    plan.push(step(prog_names::BIND6, "bind6", attach_type::BIND6, proxy));
    for (program, hook, at) in PEER_HOOKS {
        plan.push(step(program, hook, at, app));
    }
    plan.push(step(
        prog_names::CONNECT4,
        "connect4",
        attach_type::CONNECT4,
        app,
    ));
    plan.push(step(
        prog_names::CONNECT6,
        "connect6",
        attach_type::CONNECT6,
        app,
    ));
    plan
}

/// A bpf_link held by this process, with what it attaches.
#[derive(Debug)]
pub(crate) struct Link {
    /// What it attaches where.
    pub(crate) attachment: Attachment,
    /// The link: closing the last reference (unless pinned) detaches the program.
    pub(crate) fd: OwnedFd,
}

/// Loads program `name` of `ebpf` (once) and returns it.
pub(crate) fn loaded<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut Program> {
    let prog = ebpf.program_mut(name).ok_or(Error::Missing {
        kind: "program",
        name,
    })?;
    load_one(name, prog)?;
    Ok(prog)
}

fn load_one(name: &'static str, prog: &mut Program) -> Result<()> {
    if prog.fd().is_ok() {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let r = match prog {
        Program::CgroupSockAddr(p) => CgroupSockAddr::load(p),
        Program::CgroupSockopt(p) => CgroupSockopt::load(p),
        Program::SockOps(p) => SockOps::load(p),
        Program::SkLookup(p) => SkLookup::load(p),
        _ => {
            return Err(Error::Missing {
                kind: "program",
                name,
            })
        }
    };
    r.map_err(|source| Error::Verify {
        name,
        source: Box::new(source),
    })?;
    // The bench's per-program load table reads this line.
    tracing::debug!(
        program = name,
        elapsed_us = started.elapsed().as_micros() as u64,
        "program verified and loaded"
    );
    Ok(())
}

/// Loads (verifies) programs `names` of `ebpf` at once, one thread each: the kernel verifies
/// them in parallel, so a datapath's load takes about its longest program, not their sum.
pub(crate) fn load_all(ebpf: &mut Ebpf, names: &[&'static str]) -> Result<()> {
    let mut progs: Vec<(&'static str, &mut Program)> = Vec::new();
    for (n, p) in ebpf.programs_mut() {
        if let Some(name) = names.iter().find(|w| **w == n) {
            progs.push((name, p));
        }
    }
    if let Some(missing) = names.iter().find(|w| !progs.iter().any(|(n, _)| n == *w)) {
        return Err(Error::Missing {
            kind: "program",
            name: missing,
        });
    }
    std::thread::scope(|s| {
        let running: Vec<_> = progs
            .into_iter()
            .map(|(name, p)| (name, s.spawn(move || load_one(name, p))))
            .collect();
        running
            .into_iter()
            .map(|(name, t)| {
                t.join().unwrap_or(Err(Error::Missing {
                    kind: "program (its loader thread panicked)",
                    name,
                }))
            })
            .collect::<Result<Vec<()>>>()
    })?;
    Ok(())
}

/// The programs of the node datapath: [`cgroup_plan`]'s and the sk_lookup program `sk_lookup`.
pub(crate) fn programs(sk_lookup: &'static str) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = cgroup_plan(Path::new("/"), Path::new("/"))
        .into_iter()
        .map(|s| s.program)
        .collect();
    names.dedup();
    names.push(sk_lookup);
    names
}

/// Attaches program `program` at `target` (a cgroup directory or a netns file) by bpf_link.
pub(crate) fn link(
    ebpf: &mut Ebpf,
    program: &'static str,
    hook: &'static str,
    attach: u32,
    target: &Path,
) -> Result<Link> {
    let file = File::open(target).map_err(|e| Error::io("opening", target, e))?;
    link_fd(ebpf, program, hook, attach, file.as_fd(), target)
}

/// Attaches program `program` at the open `target` (named `shown`) by bpf_link.
fn link_fd(
    ebpf: &mut Ebpf,
    program: &'static str,
    hook: &'static str,
    attach: u32,
    target: BorrowedFd<'_>,
    shown: &Path,
) -> Result<Link> {
    let prog = loaded(ebpf, program)?;
    let program_id = prog.info().map_or(0, |i| i.id());
    let fd = prog.fd().map_err(|source| Error::Verify {
        name: program,
        source: Box::new(source),
    })?;
    let fd = bpfsys::link_create(fd.as_fd(), target, attach).map_err(|e| Error::Pin {
        op: "attaching (bpf_link_create) at",
        path: shown.to_path_buf(),
        source: e,
    })?;
    Ok(Link {
        attachment: Attachment {
            program: program.to_owned(),
            attach_type: hook.to_owned(),
            target: shown.to_path_buf(),
            program_id,
        },
        fd,
    })
}

/// Creates every link of [`cgroup_plan`], in order. On an error the links made so far are
/// closed again (detached), so nothing stays half-attached.
pub(crate) fn link_cgroups(ebpf: &mut Ebpf, app: &Path, proxy: &Path) -> Result<Vec<Link>> {
    cgroup_plan(app, proxy)
        .into_iter()
        .map(|s| link(ebpf, s.program, s.hook, s.attach_type, &s.target))
        .collect()
}

/// Attaches the sk_lookup program `program` ([`crate::load::probe::sk_lookup_program`]: with or
/// without `ingress_ifindex`) to network namespace `ns` (through its descriptor).
pub(crate) fn link_sk_lookup(
    ebpf: &mut Ebpf,
    program: &'static str,
    ns: &crate::netns::NetnsHandle,
) -> Result<Link> {
    link_fd(
        ebpf,
        program,
        "sk_lookup",
        attach_type::SK_LOOKUP,
        ns.as_fd(),
        ns.path(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracking_first_capture_last() {
        let names = |app: &str, proxy: &str| -> Vec<(&'static str, PathBuf)> {
            cgroup_plan(Path::new(app), Path::new(proxy))
                .into_iter()
                .map(|s| (s.program, s.target))
                .collect()
        };
        let below = names("/cg/pod", "/cg");
        assert_eq!(below.len(), 12);
        assert_eq!(below[0].0, prog_names::GETSOCKOPT);
        assert_eq!(below[1], (prog_names::SOCK_OPS, PathBuf::from("/cg")));
        assert_eq!(below[2], (prog_names::BIND4, PathBuf::from("/cg")));
        assert_eq!(below[3], (prog_names::BIND6, PathBuf::from("/cg")));
        assert_eq!(below[10].0, prog_names::CONNECT4);
        assert_eq!(below[11].0, prog_names::CONNECT6);
        // A sibling proxy cgroup: sock_ops at both, the bind hooks where the proxy is.
        let sibling = names("/cg/app", "/cg/proxy");
        assert_eq!(sibling.len(), 13);
        assert_eq!(sibling[2], (prog_names::SOCK_OPS, PathBuf::from("/cg/app")));
        assert_eq!(sibling[3], (prog_names::BIND4, PathBuf::from("/cg/proxy")));
    }
}
