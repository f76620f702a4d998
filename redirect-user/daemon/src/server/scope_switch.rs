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
        let refuse = |why: String| Error::ScopeSwitch {
            dir: self.opts.bpffs.clone(),
            from,
            to,
            why,
        };
        let done = match to {
            AttachScope::PerPod => {
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
                        Err(_) if !r.netns.exists() => {}
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
}
