//! The answers of the requests that are not about pods: enroll (its answer) and unenroll a
//! namespace by hand, status, list, uninstall. `Daemon::handle` dispatches each request to
//! one call, here or in `pods`, under the node lock.
use std::path::Path;

use redirect_daemon_api::{Enrolled, Listed, Status, Unenrolled, Uninstalled};
use redirect_datapath::{netns_cookie, remove_node_dir};

use super::{followed, netns_in, Daemon};
use crate::{error::Result, state::Record as Enrollment};

impl Daemon {
    /// The answer to `enroll` of `netns`, once enrollment `e` (replacing `was`) is in place.
    pub(super) fn enrolled(
        &mut self,
        netns: &Path,
        e: Enrollment,
        was: Option<Enrollment>,
    ) -> Enrolled {
        let proxy_listening = self.dp.proxy_listening(e.cookie);
        // Its connections outside capture are counted at the next tick, off this request's
        // path.
        if let Some(f) = self.enrollments.get_mut(&e.cookie) {
            f.outside_due = true;
        }
        Enrolled {
            message: format!(
                "enrolled {} (netns cookie {}){}",
                netns.display(),
                e.cookie,
                followed::replaced(was.as_ref(), &e)
            ),
            enrollment: e.to_wire(proxy_listening),
        }
    }

    /// `unenroll`: the enrollment the path names (as recorded, else by its cookie now).
    /// Idempotent, like CNI DEL: what is not enrolled is already as asked.
    pub(super) fn unenroll_path(&mut self, netns: &Path) -> Result<Unenrolled> {
        let netns = netns_in::seen_path(netns);
        let found = self
            .enrollments
            .values()
            .find(|f| f.record.netns == netns)
            .map(|f| f.record.cookie)
            .or_else(|| {
                netns_cookie(&netns)
                    .ok()
                    .filter(|c| self.enrollments.contains_key(c))
            });
        match found {
            Some(cookie) => self.unenroll_cookie(cookie),
            None => Ok(Unenrolled {
                message: format!("nothing to do: {} is not enrolled", netns.display()),
                removed: false,
            }),
        }
    }

    /// `status`: that the daemon answers, its enrollments, repairs and alarms.
    pub(super) fn status(&self) -> Status {
        let pid = std::process::id();
        Status {
            message: format!(
                "the redirect daemon (pid {pid}) answers; {} namespace(s) enrolled",
                self.enrollments.len()
            ),
            pid,
            enrolled: self.enrollments.len(),
            repairs: self.health.repairs,
            last_problem: self.health.last_problem.clone(),
            alarm: self.health.alarm.clone(),
            cni_add_unreachable: redirect_daemon_api::read_cni_unreachable(&self.opts.dir)
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "reading the CNI ADD failure count");
                    0
                }),
        }
    }

    /// `list`: every enrollment as on the wire, with its connections outside capture.
    pub(super) fn list(&mut self) -> Listed {
        Listed {
            enrollments: self
                .enrollments
                .values()
                .map(|f| {
                    let mut e = f.record.to_wire(self.dp.proxy_listening(f.record.cookie));
                    e.outside_capture = f.outside;
                    e
                })
                .collect(),
        }
    }

    /// `uninstall`: unpins the datapath (every program detached once the daemon lets the
    /// sk_lookup switch go), forgets every enrollment and stops the daemon.
    pub(super) fn uninstall(&mut self) -> Result<Uninstalled> {
        remove_node_dir(&self.opts.bpffs)?;
        // The last reference to the program: nothing of the datapath stays loaded.
        self.lookup_key = None;
        self.enrollments.forget_all();
        self.uninstalled = true;
        Ok(Uninstalled {
            message: format!(
                "uninstalled: {} unpinned, every program detached; the daemon (pid {}) stops",
                self.opts.bpffs.display(),
                std::process::id()
            ),
        })
    }
}
