//! The daemon's hold on its pinned datapath: the pins checked on every tick and recreated when
//! they are gone (every enrollment re-applied), and the sk_lookup static key held on.
use super::Daemon;
use crate::files::take_ownership;
use redirect_datapath::{hold_as_daemon, NodeDatapath};

impl Daemon {
    /// Holds sk_lookup's static key on through the current datapath's program (replacing a
    /// hold of a previous one). Without it capture is the same, only a node going from no
    /// enrolled pod to one (and back) pays the kernel's text rewrite: so a warning, not an
    /// error.
    pub(super) fn hold_lookup_key(&mut self) {
        match self.dp.hold_sk_lookup_key() {
            Ok(key) => {
                tracing::debug!("holding the kernel's sk_lookup static key on (one link in a private, empty netns)");
                self.lookup_key = Some(key);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot hold sk_lookup's static key on: each first \
                    enrollment on an empty node pays the kernel's switch");
                self.lookup_key = None;
            }
        }
    }

    /// Checks the pins and every enrollment's policy (see `repair`); repairs what it can and
    /// records the rest as an alarm.
    pub(super) fn check_datapath(&mut self) {
        use crate::repair::{pin_state, write_health, PinState};
        let before = self.health.clone();
        let mut alarm = None;
        match pin_state(&self.opts.bpffs, std::process::id()) {
            Ok(PinState::Ours) => {}
            Ok(PinState::Gone) => self.recreate(&mut alarm),
            Ok(PinState::Other(owner)) => {
                alarm = Some(format!(
                    "the pinned datapath at {} is recorded as owned by {owner}, not this daemon",
                    self.opts.bpffs.display()
                ));
            }
            Err(e) => alarm = Some(format!("checking the pinned datapath: {e}")),
        }
        if alarm.is_none() {
            let recreated = self.health.repairs > before.repairs;
            let why = self.health.last_problem.clone();
            self.reapply_missing(&mut alarm);
            if recreated {
                // Every policy was re-applied because the pins went: say that, not the last one.
                self.health.last_problem = why;
            }
        }
        if alarm.is_some() && alarm != before.alarm {
            tracing::error!(
                alarm = alarm.as_deref().unwrap_or("-"),
                "the daemon's datapath needs an operator"
            );
            self.health.last_problem.clone_from(&alarm);
        }
        self.health.alarm = alarm;
        if self.health != before {
            write_health(&self.opts.dir, &self.health);
        }
    }

    /// The pins are gone: creates the datapath again and re-applies every enrollment.
    fn recreate(&mut self, alarm: &mut Option<String>) {
        tracing::error!(
            "the pinned datapath is gone (unpinned behind the daemon's back): \
            recreating it and re-applying every enrollment"
        );
        let recreated = NodeDatapath::open_or_create(&self.opts.bpffs, &self.opts.attach)
            .map_err(crate::Error::from)
            .and_then(|o| take_ownership(&o.datapath, &self.opts.dir).map(|()| o.datapath))
            .and_then(|dp| Ok((dp, hold_as_daemon(&self.opts.bpffs)?)));
        match recreated {
            Ok((dp, pins)) => {
                self.dp = dp;
                self.dp.sweep_on_apply(false);
                self._pins = pins;
                self.hold_lookup_key();
                self.health.repairs += 1;
                self.health.last_problem = Some(format!(
                    "the pinned datapath at {} was unpinned behind the daemon's back; recreated",
                    self.opts.bpffs.display()
                ));
            }
            Err(e) => *alarm = Some(format!("recreating the unpinned datapath: {e}")),
        }
    }
}
