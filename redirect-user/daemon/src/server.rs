//! The daemon's loop: single-instance lock, adopt-or-create the datapath, reconcile enrollment
//! files, serve the socket, follow addresses every second.
use std::{
    fs::File,
    os::unix::net::UnixListener,
    path::PathBuf,
    time::{Duration, Instant},
};

mod datapath;
mod enrollments;
mod followed;
mod gone;
mod hand_back;
mod intake;
mod netns_in;
mod outside;
mod peer;
mod pod_links;
mod pod_state;
mod pods;
mod proxy_binding;
mod receive;
mod reconcile;
mod reply;
mod requests;
mod resolver;
mod scope_switch;
mod serve;
mod work;

use self::{enrollments::Enrollments, followed::gone};
use crate::{
    error::Result,
    files::{bind, read_enrollments, single_instance, take_ownership},
};
use redirect_daemon_api::{Answer, Request};
use redirect_datapath::{
    bpffs_open_to_all, hold_as_daemon, lock_node, NodeAttach, NodeDatapath, Opened, SkLookupKey,
};

/// How the daemon was started.
#[derive(Debug, Clone)]
pub struct Options {
    /// Pin directory of the datapath.
    pub bpffs: PathBuf,
    /// Socket, lock and enrollment files.
    pub dir: PathBuf,
    /// Where to attach if the datapath has to be created.
    pub attach: NodeAttach,
    /// The kubelet's pod cgroup roots: where the per-pod attach scope finds a pod's cgroup by
    /// its uid (`KubeOptions::pod_cgroup_roots`).
    pub pod_cgroup_roots: Vec<std::path::PathBuf>,
}

/// How often the daemon checks its pins, follows addresses and routes, and drops namespaces
/// that are gone.
const TICK: Duration = Duration::from_secs(1);
/// How often the daemon reads what each namespace owns in the maps again (another process may
/// have written between two of its locks; its own writes keep the index true meanwhile).
const REINDEX: Duration = Duration::from_secs(10);
/// Longest wait before the stop flag is looked at again.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// A running daemon.
#[derive(Debug)]
pub struct Daemon {
    opts: Options,
    dp: NodeDatapath,
    /// The enrollments and their files.
    enrollments: Enrollments,
    listener: UnixListener,
    /// The single-instance lock (`flock` on `DIR/lock`), released when the file closes.
    _lock: File,
    uninstalled: bool,
    health: crate::repair::Health,
    /// Held for the daemon's lifetime: how a process in another PID namespace tells it runs.
    _pins: redirect_datapath::PinsHeld,
    /// The apiserver client and the reconcile's state.
    pods: pod_state::Pods,
    reindexed: Instant,
    /// Holds the kernel's sk_lookup switch on while the daemon runs (see `SkLookupKey`).
    lookup_key: Option<SkLookupKey>,
}

impl Daemon {
    /// Takes the single-instance lock, adopts (or creates) the pinned datapath, re-applies the
    /// enrollments found on disk and binds the root-only socket.
    pub fn start(opts: Options) -> Result<Self> {
        redirect_datapath::require_root()?;
        crate::private_dir::make_private(&opts.dir)?;
        let lock = single_instance(&opts.dir)?;
        if let Some((mount, mode)) = bpffs_open_to_all(&opts.bpffs) {
            tracing::warn!(mount = %mount.display(), mode = format!("{mode:o}"),
                fix = format!("mount -t bpf -o mode=700 bpf {}", mount.display()),
                "any user may create entries in the bpf filesystem holding the pins: another user \
                could make the pin directory or the lock before the daemon (it then refuses to \
                start, naming them)");
        }
        let guard = lock_node(&opts.bpffs)?;
        if NodeDatapath::exists(&opts.bpffs) {
            NodeDatapath::finish_switch(&opts.bpffs, opts.attach.scope)?;
        }
        if NodeDatapath::exists(&opts.bpffs) {
            // A new daemon is how a node is upgraded: it takes the pinned datapath over in
            // place (no capture gap), or refuses to start naming the layout it cannot take.
            if let Some(u) = NodeDatapath::upgrade(&opts.bpffs)? {
                let carried: Vec<String> =
                    u.carried.iter().map(|(m, n)| format!("{m}:{n}")).collect();
                tracing::info!(dir = %opts.bpffs.display(), from = u.from.0, to = u.to.0,
                    links = u.links, namespaces = u.namespaces, completed = u.completed,
                    carried = %redirect_policy::Comma(&carried), "upgraded the pinned datapath in place");
            }
        }
        // A datapath pinned with the other scope is opened as it is, then switched in place
        // (below, once the enrollments are known).
        let mut attach = opts.attach.clone();
        if NodeDatapath::exists(&opts.bpffs) {
            attach.scope = NodeDatapath::pinned_scope(&opts.bpffs);
        }
        let Opened {
            datapath: mut dp,
            created,
        } = NodeDatapath::open_or_create(&opts.bpffs, &attach)?;
        // Gone namespaces are swept on the tick, not on every enrollment.
        dp.sweep_on_apply(false);
        take_ownership(&dp, &opts.dir)?;
        let pins = hold_as_daemon(&opts.bpffs)?;
        let links = std::fs::read_dir(opts.bpffs.join("links")).map_or(0, |d| d.count());
        let scope = dp.scope();
        if created {
            tracing::info!(dir = %opts.bpffs.display(), links, %scope, "created and pinned the node datapath");
        } else {
            tracing::info!(dir = %opts.bpffs.display(), links, %scope, "adopted the pinned node datapath \
                (nothing attached again)");
        }
        let mut daemon = Self {
            listener: bind(&opts.dir)?,
            enrollments: Enrollments::new(&opts.dir),
            opts,
            dp,
            _lock: lock,
            uninstalled: false,
            health: crate::repair::Health::default(),
            _pins: pins,
            pods: pod_state::Pods::new(),
            reindexed: Instant::now(),
            lookup_key: None,
        };
        daemon.hold_lookup_key();
        crate::repair::write_health(&daemon.opts.dir, &daemon.health);
        let records = read_enrollments(&daemon.opts.dir);
        daemon.switch_scope(&records)?;
        for e in records {
            daemon.reconcile(e);
        }
        daemon.say_unadopted();
        // What was outside capture before the restart is counted again at the first tick.
        for f in daemon.enrollments.values_mut() {
            f.outside_due = true;
        }
        drop(guard);
        Ok(daemon)
    }

    /// Carries out one request (with the namespace descriptor that came with it, if any): its
    /// typed answer, or what went wrong. `found` is the pod of a pod request when its task read
    /// it from the apiserver, so nothing here waits on the apiserver.
    fn handle_with(
        &mut self,
        req: Request,
        fd: Option<std::os::fd::OwnedFd>,
        found: Option<pods::Found>,
    ) -> Result<Answer> {
        let _guard = lock_node(&self.opts.bpffs)?;
        Ok(match req {
            Request::Enroll {
                netns,
                policy,
                source,
                writer,
            } => {
                let (e, was) = self.enroll(&netns, fd, *policy, source, writer)?;
                Answer::Enrolled(self.enrolled(&netns, e, was))
            }
            Request::Unenroll { netns } => Answer::Unenrolled(self.unenroll_path(&netns)?),
            Request::PodAdd { pod, netns, ips } => {
                Answer::Pod(self.pod_add(pod, &netns, fd, &ips, found)?)
            }
            Request::PodDel { pod, netns } => {
                let netns = netns.map(|n| netns_in::seen_path(&n));
                Answer::Pod(self.pod_del(&pod, netns.as_deref())?)
            }
            Request::PodCheck { pod, netns, ips } => {
                Answer::Pod(self.pod_check(&pod, &netns, fd, &ips, found)?)
            }
            Request::PodGc { valid } => Answer::Gc(self.pod_gc(&valid)?),
            Request::Status => Answer::Status(self.status()),
            Request::List => Answer::Listed(self.list()),
            Request::Uninstall => Answer::Uninstalled(self.uninstall()?),
        })
    }

    /// Follows every enrolled namespace's addresses (and, with `-c`, its routes and rules);
    /// drops namespaces that are gone.
    pub(crate) fn tick(&mut self) {
        let Ok(_guard) = lock_node(&self.opts.bpffs) else {
            return;
        };
        let mut phases = redirect_datapath::Phases::start();
        self.check_datapath();
        phases.mark("check");
        // Policies of namespaces that are gone, enrolled here or not (the kernel says which).
        match self.dp.remove_stale() {
            Ok(gone) if !gone.is_empty() => {
                tracing::info!(cookies = %redirect_policy::Comma(&gone),
                    "removed the policies of namespaces that are gone");
                for cookie in gone {
                    if self.enrollments.contains_key(&cookie) {
                        self.enrollments.forget(cookie);
                    }
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "removing the policies of namespaces that are gone")
            }
        }
        self.sweep_pod_cgroups();
        phases.mark("stale");
        if self.reindexed.elapsed() >= REINDEX {
            if let Err(e) = self.dp.reindex() {
                tracing::warn!(error = %e, "reading the namespaces' map entries again");
            }
            for cookie in self.with_outside() {
                self.check_outside(cookie, false);
            }
            self.reindexed = Instant::now();
            phases.mark("reindex");
        }
        for cookie in self.outside_due() {
            self.check_outside(cookie, false);
        }
        for cookie in self.enrollments.cookies() {
            self.rehome(cookie);
            let Some(f) = self.enrollments.get(&cookie) else {
                continue;
            };
            let e = f.record.clone();
            if gone(&self.dp, f) {
                tracing::info!(netns = %e.netns.display(), %cookie, "enrolled namespace is gone: removing its policy");
                let _ = self.dp.remove_policy(cookie, None, &e.netns);
                self.enrollments.forget(cookie);
                continue;
            }
            // Through the descriptor held since the enrollment: never the path again.
            let Some(ns) = &f.ns else { continue };
            match self.dp.refresh(ns, &e.policy) {
                Ok(addrs) if addrs != e.addrs => {
                    if let Err(err) = self.enrollments.amend(cookie, |r| r.addrs = addrs) {
                        tracing::warn!(netns = %e.netns.display(), error = %err,
                            "recording the enrollment's addresses");
                    }
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(netns = %e.netns.display(), error = %err, "following addresses and routes")
                }
            }
        }
        phases.mark("follow");
        self.reconcile_pods();
        if let Some(kube) = &self.pods.kube {
            kube.tick_untaint();
        }
        phases.mark("reconcile");
        tracing::debug!(enrolled = self.enrollments.len(), us = phases.total_us(), %phases, "tick");
    }
}
