//! The daemon's enrollments: a namespace path is opened once per enrollment, the policy is
//! applied through that descriptor, and the descriptor is held for the enrollment's life. The
//! follower and a re-apply go through it; the path is only looked up (never opened again) to
//! tell whether it still names the namespace.
use redirect_common::NetnsCookie;
use std::path::Path;

use redirect_daemon_api::{PodRef, Unenrolled, Writer};
use redirect_datapath::{NetnsHandle, NodeDatapath, Phases};

use super::Daemon;
use crate::{
    error::{Error, Result},
    state::Record as Enrollment,
};

/// One enrollment and the descriptor of its namespace (`None` only for a recorded enrollment
/// whose path could not be opened at the daemon's start; it is listed, not followed).
#[derive(Debug)]
pub(crate) struct Followed {
    /// What is listed and stored in its file.
    pub record: Enrollment,
    /// The namespace, opened once.
    pub ns: Option<NetnsHandle>,
    /// Its connections outside capture, as last counted (`server::outside`).
    pub outside: usize,
    /// To be counted at the next tick (enrolled by request: not on the request's path).
    pub outside_due: bool,
}

/// Where an enrollment's policy came from: its source text and the command that wrote it.
pub(crate) struct Origin {
    /// `--istio-args ...`, the pod, ...
    pub source: String,
    /// The command.
    pub writer: Writer,
}

/// Whether the enrollment's namespace is gone: the kernel detached its sk_lookup link, or its
/// path names another namespace (a reused pid, a remounted name) or nothing. Holding the
/// descriptor keeps the namespace itself alive; the path is what says it left.
pub(crate) fn gone(dp: &NodeDatapath, f: &Followed) -> bool {
    if dp.namespace_gone(f.record.cookie) {
        return true;
    }
    match &f.ns {
        Some(ns) => match ns.at_path() {
            Ok(Some(same)) => !same,
            Ok(None) => true,
            Err(e) => {
                tracing::warn!(netns = %ns.path().display(), error = %e,
                    "cannot look the enrolled namespace's path up");
                false
            }
        },
        // Not reachable by its path: only the kernel's word removes it while the link can
        // tell (a live namespace keeps its policy).
        None => match dp.namespace_inode(f.record.cookie) {
            Some(ino) => ino == 0,
            None => !f.record.netns.exists(),
        },
    }
}

/// The namespace of enrollment `e` found by its inode `ino` under the name the machine gives
/// it now (a `/run/netns` name, else a process inside), if that name opens to its cookie.
fn relocate(e: &Enrollment, ino: u64) -> Option<NetnsHandle> {
    let path = redirect_datapath::netns_names_by_inode().remove(&ino)?;
    NetnsHandle::open(&path)
        .ok()
        .filter(|ns| ns.cookie() == e.cookie)
}

/// Opens a recorded enrollment's namespace at the daemon's start: `Ok(None)` when its path
/// is gone or now names another namespace than the recorded cookie.
pub(crate) fn reopen(e: &Enrollment) -> Result<Option<NetnsHandle>> {
    match NetnsHandle::open(&e.netns) {
        Ok(ns) if ns.cookie() == e.cookie => Ok(Some(ns)),
        Ok(ns) => {
            tracing::info!(netns = %e.netns.display(), recorded = %e.cookie, now = %ns.cookie(),
                "the enrolled path names another namespace now");
            Ok(None)
        }
        Err(_) if !Path::new(&e.netns).exists() => Ok(None),
        Err(err) => Err(err.into()),
    }
}

impl Daemon {
    /// Names, at the start, each policy the pinned maps hold that no record lets this daemon
    /// adopt (written by an older version, or a record lost): captured still, not followed.
    pub(super) fn say_unadopted(&mut self) {
        let Ok(captured) = redirect_datapath::captured(self.dp.maps()) else {
            return;
        };
        let strays: Vec<_> = captured
            .iter()
            .filter(|c| !self.enrollments.contains_key(&c.cookie))
            .collect();
        if strays.is_empty() {
            return;
        }
        let names = redirect_datapath::netns_names_by_inode();
        for c in strays {
            let path = names
                .get(&c.netns_ino)
                .map_or_else(|| "path unknown".to_owned(), |p| p.display().to_string());
            tracing::warn!(cookie = %c.cookie, netns = %path, "a policy in the pinned maps has no \
                record to adopt: it stays (capture goes on) but this daemon does not follow it; \
                `redirect enroll` the namespace to hand it over");
        }
    }

    /// Re-applies every enrollment whose policy is not in the maps.
    pub(super) fn reapply_missing(&mut self, alarm: &mut Option<String>) {
        let mut missing = self.enrollments.cookies();
        missing.retain(|cookie| !self.dp.kernel_policy(*cookie).is_ok_and(|k| k.outbound));
        for cookie in missing {
            let Some(f) = self.enrollments.get(&cookie) else {
                continue;
            };
            let e = f.record.clone();
            tracing::error!(netns = %e.netns.display(), cookie = %e.cookie,
                "an enrolled namespace's policy is missing from the maps: re-applying it");
            // Through the descriptor it was enrolled with, not its path again.
            let ns = match &f.ns {
                Some(ns) => ns.try_clone(),
                None => NetnsHandle::open(&e.netns),
            };
            match ns.map_err(Error::from).and_then(|ns| self.reapply(ns, &e)) {
                Ok(_) => {
                    self.health.repairs += 1;
                    self.health.last_problem = Some(format!(
                        "the policy of {} was removed behind the daemon's back; re-applied",
                        e.netns.display()
                    ));
                }
                Err(err) => *alarm = Some(format!("re-applying {}: {err}", e.netns.display())),
            }
        }
    }

    /// Applies enrollment record `e` again through `ns`.
    fn reapply(&mut self, ns: NetnsHandle, e: &Enrollment) -> Result<Enrollment> {
        let (policy, source, pod) = (e.policy.clone(), e.source.clone(), e.pod.clone());
        let origin = Origin {
            source,
            writer: e.writer,
        };
        self.enroll_ns(ns, policy, origin, pod, None, &mut Phases::start())
    }

    /// A pod's enrollment whose recorded path no longer names its namespace while something
    /// else still does (its sandbox runs: a `/proc/PID/ns/net` path whose process exited, with
    /// the pause process or a runtime's name left): followed under that name from now on, its
    /// record rewritten. The namespace of a pod lives as long as its sandbox, not as one
    /// process (issue 31, finding 7). `false` when nothing changed.
    pub(super) fn rehome(&mut self, cookie: NetnsCookie) -> bool {
        let Some(f) = self.enrollments.get_mut(&cookie) else {
            return false;
        };
        let Some(ns) = &f.ns else { return false };
        if f.record.pod.is_none() || !matches!(ns.at_path(), Ok(None | Some(false))) {
            return false;
        }
        let Some(renamed) = super::netns_in::renamed(ns) else {
            return false;
        };
        if renamed.cookie() != f.record.cookie {
            return false;
        }
        let now = renamed.path().to_path_buf();
        let pod = f
            .record
            .pod
            .as_ref()
            .map_or_else(|| "-".to_owned(), ToString::to_string);
        tracing::info!(%pod, %cookie, was = %f.record.netns.display(), now = %now.display(),
            "the pod's enrolled path no longer names its namespace, which still runs: followed \
            under its other name");
        f.ns = Some(renamed);
        if let Err(error) = self.enrollments.amend(cookie, |r| r.netns = now) {
            tracing::warn!(%cookie, %error, "recording the enrollment's new path");
        }
        true
    }

    pub(super) fn reconcile(&mut self, mut e: Enrollment) {
        let opened = match reopen(&e) {
            Ok(Some(ns)) if !self.dp.namespace_gone(e.cookie) => Ok(ns),
            Ok(Some(_)) => {
                self.forget_gone(&e);
                return;
            }
            // The recorded path names nothing or another namespace. Only the kernel says
            // whether the namespace itself is gone: a live one keeps its policy (fail closed),
            // followed under the name the machine gives it now if it has one.
            Ok(None) => match self.dp.namespace_inode(e.cookie) {
                Some(0) => {
                    self.forget_gone(&e);
                    return;
                }
                Some(ino) => match relocate(&e, ino) {
                    Some(ns) => {
                        tracing::info!(cookie = %e.cookie, was = %e.netns.display(),
                            now = %ns.path().display(),
                            "the recorded path no longer names the namespace, which still runs: \
                            followed under its other name");
                        e.netns = ns.path().to_path_buf();
                        Ok(ns)
                    }
                    None => {
                        self.keep_unfollowed(e, "nothing on this machine names it now");
                        return;
                    }
                },
                None if self.dp.kernel_policy(e.cookie).is_ok_and(|k| k.outbound) => {
                    self.keep_unfollowed(e, "its namespace link cannot tell whether it lives");
                    return;
                }
                None => {
                    self.forget_gone(&e);
                    return;
                }
            },
            Err(err) => Err(err),
        };
        // One descriptor for the re-apply; a second (dup) kept to follow it if that fails.
        let (ns, applied) = match opened {
            Ok(ns) => (ns.try_clone().ok(), self.reapply(ns, &e)),
            Err(err) => (None, Err(err)),
        };
        match applied {
            Ok(_) => tracing::info!(netns = %e.netns.display(), "enrollment re-adopted"),
            Err(err) => {
                // Its previous policy is still in the maps: keep it listed and followed, so
                // `unenroll` and the namespace-gone check still reach it.
                tracing::warn!(netns = %e.netns.display(), error = %err,
                    "re-applying an enrollment failed; the previous policy stays");
                self.enrollments.adopt(Followed {
                    record: e,
                    ns,
                    outside: 0,
                    outside_due: false,
                });
            }
        }
    }

    /// An enrollment whose namespace is gone: its policy and record removed.
    fn forget_gone(&mut self, e: &Enrollment) {
        tracing::info!(netns = %e.netns.display(), cookie = %e.cookie,
            "enrolled namespace is gone: removing its policy");
        // Gone: no handle, and its path is not reopened (it may name another namespace now).
        if let Err(err) = self.dp.remove_policy(e.cookie, None, &e.netns) {
            tracing::warn!(error = %err, "removing a stale policy");
        }
        self.enrollments.forget(e.cookie);
    }

    /// A live namespace's enrollment the daemon cannot reach by any name: its policy stays in
    /// the maps (capture goes on), listed, not followed, until the kernel says it is gone.
    fn keep_unfollowed(&mut self, e: Enrollment, why: &str) {
        tracing::warn!(netns = %e.netns.display(), cookie = %e.cookie, why,
            "the recorded path no longer names this enrolled namespace, which still runs: its \
            policy stays (capture goes on), not followed");
        self.enrollments.adopt(Followed {
            record: e,
            ns: None,
            outside: 0,
            outside_due: false,
        });
    }

    pub(super) fn enroll(
        &mut self,
        netns: &Path,
        fd: Option<std::os::fd::OwnedFd>,
        policy: redirect_policy::Policy,
        source: String,
        writer: Writer,
    ) -> Result<(Enrollment, Option<Enrollment>)> {
        // A path alone must name the namespace in the daemon's view; a descriptor names it
        // itself, whatever the caller's path (its own `/proc/self/ns/net` inside a pod).
        let own_view = netns.starts_with("/proc/self") || netns.starts_with("/proc/thread-self");
        if !netns.is_absolute() || (own_view && fd.is_none()) {
            return Err(Error::NetnsPath {
                path: netns.to_path_buf(),
            });
        }
        let mut phases = Phases::start();
        let ns = match super::netns_in::open(netns, fd) {
            // Handed over from inside with no name the daemon sees: the old advice holds.
            Err(Error::NetnsNotVisible { .. }) if own_view => {
                return Err(Error::NetnsPath {
                    path: netns.to_path_buf(),
                })
            }
            other => other?,
        };
        // By inode, whatever path names it (/proc/1/ns/net, a bind mount, a descriptor).
        if writer != Writer::Vm && super::netns_in::is_host(ns.cookie()) {
            return Err(Error::EnrollHostNetns {
                netns: netns.to_path_buf(),
            });
        }
        phases.mark("open");
        let was = self.enrollments.get(&ns.cookie()).map(|f| f.record.clone());
        let e = self.enroll_ns(
            ns,
            policy,
            Origin { source, writer },
            None,
            None,
            &mut phases,
        )?;
        tracing::info!(netns = %netns.display(), cookie = %e.cookie, us = phases.total_us(),
            %phases, "namespace enrolled");
        Ok((e, was))
    }

    /// Applies `policy` through `ns` (opened once for this enrollment) and keeps `ns` for
    /// following it; `pod` is recorded beside it (CNI enrollments). `read`: the namespace's
    /// addresses when the caller has just read them through `ns` (not read again). The
    /// apply's phases and the record's are added to `phases`.
    pub(super) fn enroll_ns(
        &mut self,
        ns: NetnsHandle,
        policy: redirect_policy::Policy,
        origin: Origin,
        pod: Option<PodRef>,
        read: Option<Vec<std::net::IpAddr>>,
        phases: &mut Phases,
    ) -> Result<Enrollment> {
        // Per-pod scope: the pod's cgroup linked first (capture before the policy is whole).
        let linked = self.link_for(pod.as_ref(), ns.path(), phases)?;
        let applied = self
            .dp
            .apply_with_addresses(&ns, &policy, read)
            .inspect_err(|_| self.unlink_failed(linked, pod.as_ref()))?;
        phases.extend(applied.phases);
        let e = Enrollment {
            netns: ns.path().to_path_buf(),
            cookie: applied.cookie,
            source: origin.source,
            policy,
            addrs: applied.addrs,
            ipv6: applied.ipv6,
            inbound: applied.inbound,
            pod,
            writer: origin.writer,
        };
        self.enrollments.record(Followed {
            record: e.clone(),
            ns: Some(ns),
            outside: 0,
            outside_due: false,
        })?;
        phases.mark("record");
        Ok(e)
    }

    /// Removes the policy of the enrollment `cookie` and forgets it.
    pub(super) fn unenroll_cookie(&mut self, cookie: NetnsCookie) -> Result<Unenrolled> {
        let Some(netns) = self
            .enrollments
            .get(&cookie)
            .map(|f| f.record.netns.clone())
        else {
            return Ok(Unenrolled {
                message: format!("nothing to do: netns cookie {cookie} is not enrolled"),
                removed: false,
            });
        };
        // Through the namespace the enrollment holds (TPROXY's routing too, once): its recorded
        // path may name another now.
        let ns = self.enrollments.get(&cookie).and_then(|f| f.ns.as_ref());
        self.dp.remove_policy(cookie, ns, &netns)?;
        if let Some(pod) = self.enrollments.forget(cookie).and_then(|f| f.record.pod) {
            self.unlink_pod_cgroup(&pod);
        }
        Ok(Unenrolled {
            message: format!("unenrolled {}", netns.display()),
            removed: true,
        })
    }
}

/// What an enrollment replaced, for its answer: nothing, the same policy, or the lines that
/// changed (a re-enroll with a typo must not turn a pod's capture off without a word).
pub(super) fn replaced(was: Option<&Enrollment>, now: &Enrollment) -> String {
    let Some(was) = was else {
        return String::new();
    };
    let lines = redirect_policy::describe_changes(&was.policy, &now.policy, now.ipv6);
    if lines.is_empty() {
        return format!("; its policy is unchanged ({}: {})", was.writer, was.source);
    }
    format!(
        "; replaced its policy from {} ({}):\n  {}",
        was.writer,
        was.source,
        lines.join("\n  ")
    )
}
