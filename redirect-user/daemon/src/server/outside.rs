//! Connections outside capture (issue 31, finding 13): a namespace enrolled in place (a pod
//! that ran before its capture) or whose policy now captures more keeps every connection it
//! opened before, outside the proxy and its mTLS. The daemon counts them when it enrolls a
//! namespace in place, at the tick after an `enroll`, and every 10 s while any are left; `list` shows the count
//! (`outside_capture`). Asked to (`--reset-uncaptured`, or the pod annotation
//! `redirect.dev/reset-uncaptured: "true"`; off by default: a reset is visible to the
//! application), it resets them (`SOCK_DESTROY`), so the application's reconnect goes through
//! the proxy; where the kernel cannot (no CONFIG_INET_DIAG_DESTROY) it says so and only counts.
use redirect_common::NetnsCookie;
use redirect_datapath::{outside_capture, Outside};

use super::Daemon;

impl Daemon {
    /// Counts enrollment `cookie`'s connections outside capture again, and resets them with
    /// `reset`; the count is kept for `list`.
    pub(super) fn check_outside(&mut self, cookie: NetnsCookie, reset: bool) {
        let Some(f) = self.enrollments.get_mut(&cookie) else {
            return;
        };
        let Some(ns) = &f.ns else { return };
        let proxy = (
            f.record.policy.proxy_uids.as_slice(),
            f.record.policy.proxy_gids.as_slice(),
        );
        let count =
            |dp: &mut redirect_datapath::NodeDatapath| outside_capture(dp.maps(), ns, proxy);
        let mut found = match count(&mut self.dp) {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(netns = %f.record.netns.display(), %cookie, %error,
                    "counting the connections outside capture");
                return;
            }
        };
        let before = f.outside;
        if reset && !found.is_empty() {
            let mut done = 0;
            for o in &found {
                match ns.destroy(&o.connection) {
                    Ok(()) => done += 1,
                    // Closed meanwhile: nothing to reset.
                    Err(redirect_datapath::Error::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::NotFound => {}
                    Err(error) => {
                        tracing::error!(netns = %f.record.netns.display(), %cookie, %error,
                            "cannot reset connections outside capture (the kernel needs \
                            CONFIG_INET_DIAG_DESTROY): they are only counted");
                        break;
                    }
                }
            }
            tracing::warn!(netns = %f.record.netns.display(), %cookie, reset = done,
                connections = %describe(&found),
                "connections outside capture reset: their applications reconnect through the proxy");
            found = count(&mut self.dp).unwrap_or_default();
        } else if found.len() != before && !found.is_empty() {
            tracing::warn!(netns = %f.record.netns.display(), %cookie, count = found.len(),
                connections = %describe(&found),
                "connections opened before capture bypass the proxy (and its mTLS) until they \
                close: reset them with --reset-uncaptured or the pod annotation \
                redirect.dev/reset-uncaptured: \"true\"");
        }
        f.outside = found.len();
    }

    /// The enrollments whose count is due (enrolled by request), no longer due.
    pub(super) fn outside_due(&mut self) -> Vec<NetnsCookie> {
        self.enrollments
            .values_mut()
            .filter_map(|f| std::mem::take(&mut f.outside_due).then_some(f.record.cookie))
            .collect()
    }

    /// The cookies of enrollments with connections outside capture left.
    pub(super) fn with_outside(&self) -> Vec<NetnsCookie> {
        self.enrollments
            .values()
            .filter(|f| f.outside > 0)
            .map(|f| f.record.cookie)
            .collect()
    }
}

/// `local->remote (uid U, pid P)` for each, comma-separated.
fn describe(found: &[Outside]) -> String {
    found
        .iter()
        .map(|o| {
            let c = &o.connection;
            let pid = o.pid.map_or_else(|| "?".to_owned(), |p| p.to_string());
            format!("{}->{} (uid {}, pid {pid})", c.local, c.remote, c.uid)
        })
        .collect::<Vec<_>>()
        .join(", ")
}
