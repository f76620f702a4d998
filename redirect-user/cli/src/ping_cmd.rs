//! `redirect ping`: the DaemonSet's readiness and liveness probes. The daemon serves when it
//! answers on its socket within the timeout (a refusal, busy or another protocol version, is an
//! answer); with `--no-alarm` a standing alarm (a datapath it cannot repair, a namespace it
//! cannot re-apply) fails the check too.
use std::time::Duration;

use anyhow::bail;

use crate::{
    dir_args::Dirs,
    node_cmds::{client, socket},
};

/// `ping`: whether the daemon answers within `timeout` (and, with `no_alarm`, has no standing
/// alarm); an error (exit 1) says which it is not.
pub(crate) fn ping(dirs: &Dirs, timeout: Duration, no_alarm: bool) -> anyhow::Result<()> {
    let socket = socket(dirs);
    let answer = match client(dirs).timeout(timeout).status() {
        Ok(answer) => answer,
        Err(e) if e.answered() => {
            println!("the redirect daemon at {} answers: {e}", socket.display());
            return Ok(());
        }
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!(
                "the redirect daemon at {} does not answer within {} ms",
                socket.display(),
                timeout.as_millis()
            )))
        }
    };
    match answer.alarm {
        Some(alarm) if no_alarm => bail!(
            "the redirect daemon (pid {}) answers but has a standing alarm: {alarm}",
            answer.pid
        ),
        alarm => {
            println!(
                "the redirect daemon (pid {}) answers: {} namespace(s) enrolled{}",
                answer.pid,
                answer.enrolled,
                alarm.map_or_else(String::new, |a| format!("; alarm: {a}"))
            );
            Ok(())
        }
    }
}
