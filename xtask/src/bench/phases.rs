//! Where a pod's enrollment goes: the CNI workload's daemon logs (to a file) every ADD it
//! serves with its phases (`pod enrolled ... phases=resolve=US open=US ...`, microseconds
//! since the previous mark, from the decoded request to the enrollment's record; the socket's
//! read and reply are outside them); each phase of each ADD is a sample, so the report's table
//! gives each phase's median and p99 beside their total, and how much of it the daemon's thread
//! ran (`cpu`) and waited (`off-cpu`).
use super::{stats::Sample, Bench};

const WORKLOAD: &str = "enrollment phases";
const VARIANT: &str = "the daemon's own account of each CNI ADD";

/// The number after ` key=` in a log line (`cpu_us=`: the thread's own CPU time).
pub(super) fn field_of(line: &str, key: &str) -> Option<u64> {
    let (_, rest) = line.split_once(&format!(" {key}="))?;
    rest.split_whitespace().next()?.parse().ok()
}

/// The `name=us` pairs of a log line's `phases` field (the line's last field).
pub(super) fn phases_of(line: &str) -> Vec<(&str, u64)> {
    let Some((_, rest)) = line.split_once(" phases=") else {
        return Vec::new();
    };
    rest.split_whitespace()
        .map_while(|kv| {
            let (name, us) = kv.split_once('=')?;
            Some((name, us.parse().ok()?))
        })
        .collect()
}

impl Bench {
    /// One sample per phase per ADD the CNI workload's daemon served, and its total.
    pub(super) fn enrollment_phases(&mut self) -> anyhow::Result<()> {
        let lines = self.cni_daemon_lines()?;
        let mut adds = 0;
        for line in lines.iter().filter(|l| l.contains("pod enrolled")) {
            let phases = phases_of(line);
            if phases.is_empty() {
                continue;
            }
            let total: u64 = phases.iter().map(|(_, us)| us).sum();
            // Of the total, what the daemon's thread ran, and what it waited (for a CPU, a
            // lock, I/O): a slow ADD says whether it worked longer or was kept from working.
            let cpu = field_of(line, "cpu_us")
                .map(|cpu| [("cpu", cpu), ("off-cpu", total.saturating_sub(cpu))])
                .into_iter()
                .flatten();
            for (name, us) in phases.into_iter().chain([("total", total)]).chain(cpu) {
                self.samples.push(Sample::new(
                    WORKLOAD,
                    VARIANT,
                    &format!("phase: {name}"),
                    adds,
                    us as f64,
                    "us",
                    false,
                ));
            }
            adds += 1;
        }
        anyhow::ensure!(
            adds > 0,
            "the CNI workload's daemon logged no \"pod enrolled\" line with its phases"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::phases_of;

    #[test]
    fn the_phases_field_is_read_in_order_up_to_its_end() {
        let line = "2026-12-02T16:38:53Z  INFO redirect_daemon::server::pods: pod enrolled \
                    pod=pod bench/pod-0 (uid uid-pod-0) netns=/run/netns/x cookie=1 us=30 \
                    phases=resolve=12 open=8 record=10";
        assert_eq!(
            phases_of(line),
            [("resolve", 12), ("open", 8), ("record", 10)]
        );
        assert!(phases_of("pod enrolled us=3").is_empty());
        assert_eq!(phases_of("x phases=a=1 b=oops c=2"), [("a", 1)]);
        assert_eq!(super::field_of(line, "cpu_us"), None);
        assert_eq!(
            super::field_of("us=30 cpu_us=21 phases=a=1", "cpu_us"),
            Some(21)
        );
    }
}
