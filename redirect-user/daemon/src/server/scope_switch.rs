//! The attach scope switched in place at the daemon's start (issue 48): a DaemonSet whose
//! `--attach-scope` changed takes the pinned datapath to the new scope before it re-applies
//! the enrollments, with no capture gap (`redirect_datapath`'s `switch_to_per_pod` and
//! `switch_to_root`). To the per-pod scope, every enrolled namespace must be a pod whose cgroup
//! is found (a namespace enrolled by hand has no cgroup to link at): otherwise nothing changes
//! and the daemon does not start, naming it.
use std::path::PathBuf;

use redirect_daemon_api::EnrollmentRecord;
use redirect_datapath::AttachScope;

use super::Daemon;
use crate::error::{Error, Result};

impl Daemon {
    /// Takes the datapath to the scope the daemon was started with, when it is pinned with
    /// the other one; `records`: the enrollments it will re-apply.
    pub(super) fn switch_scope(&mut self, records: &[EnrollmentRecord]) -> Result<()> {
        let (from, to) = (self.dp.scope(), self.opts.attach.scope);
        if from == to {
            return Ok(());
        }
        let dir = self.opts.bpffs.clone();
        let refuse = |why: String| Error::ScopeSwitch {
            dir: dir.clone(),
            from,
            to,
            why,
        };
        let done = match to {
            AttachScope::PerPod => {
                self.refuse_strays(records).map_err(refuse)?;
                let mut dirs: Vec<PathBuf> = Vec::new();
                for r in records {
                    let Some(pod) = &r.pod else {
                        return Err(refuse(format!(
                            "netns {} was enrolled by `{}`, not for a pod: it has no pod cgroup to \\
                            link at (unenroll it first)",
                            r.netns.display(),
                            r.writer
                        )));
                    };
                    let roots = &self.opts.pod_cgroup_roots;
                    match crate::pod_cgroups::pod_dir_of(roots, &pod.uid) {
                        Ok(dir) => dirs.push(dir),
                        // The pod is gone with its namespace: the reconcile drops it.
                        Err(_) if self.namespace_gone(r) => {}
                        Err(why) => match crate::pod_cgroup_twin::make(roots, &pod.uid) {
                            Ok(twin) => {
                                self.pods.twins.insert(twin.clone());
                                dirs.push(twin);
                            }
                            Err(also) => {
                                return Err(refuse(format!("{pod}: {why}; {also}")));
                            }
                        },
                    }
                }
                let dirs: Vec<&std::path::Path> = dirs.iter().map(PathBuf::as_path).collect();
                self.dp.switch_to_per_pod(&dirs)
            }
            AttachScope::Root => self.dp.switch_to_root(),
        };
        let n = done.map_err(|e| {
            // The whole chain: the datapath's error names the step, its source the errno.
            let mut why = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                why = format!("{why}: {s}");
                source = s.source();
            }
            refuse(why)
        })?;
        tracing::info!(dir = %self.opts.bpffs.display(), %from, %to, linked = n,
            "switched the attach scope in place");
        Ok(())
    }

    /// Whether `r`'s namespace is gone: the kernel says so (its sk_lookup link), or, with no
    /// link to ask, its path is gone too.
    fn namespace_gone(&self, r: &EnrollmentRecord) -> bool {
        match self.dp.namespace_inode(r.cookie) {
            Some(ino) => ino == 0,
            None => !r.netns.exists(),
        }
    }

    /// A policy in the pinned maps with no enrollment record (one `say_unadopted` warns of) has
    /// no pod cgroup either: the per-pod scope would leave it with no program.
    fn refuse_strays(&mut self, records: &[EnrollmentRecord]) -> std::result::Result<(), String> {
        let captured = redirect_datapath::captured(self.dp.maps())
            .map_err(|e| format!("reading the pinned policies: {e}"))?;
        let stray = captured.iter().find(|c| {
            !records.iter().any(|r| r.cookie == c.cookie) && !self.dp.namespace_gone(c.cookie)
        });
        match stray {
            Some(c) => Err(format!(
                "the pinned maps hold a policy for netns cookie {} (inode {}) with no enrollment \
                record to find its pod by (`redirect unenroll` it, or enroll it through the daemon)",
                c.cookie, c.netns_ino
            )),
            None => Ok(()),
        }
    }
}
