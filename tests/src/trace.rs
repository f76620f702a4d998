//! `redirect trace --json` as the tests read it: started on a node until its stream is on, then
//! its first decisions as JSON objects.
use std::{process::Command, time::Duration};

use redirect_testkit::{eventually, Child};
use serde_json::Value;

use crate::node::Node;

/// A running `redirect trace --netns NETNS --count COUNT --json` whose stream is switched on.
pub fn start(node: &Node, netns: &str, count: usize) -> Child {
    let count = count.to_string();
    spawn(node.cmd(&["trace", "--netns", netns, "--count", &count, "--json"]))
}

/// `cmd` (a `redirect trace ... --json`) started and waited for until its stream is on.
pub fn spawn(mut cmd: Command) -> Child {
    cmd.env("RUST_LOG", "warn");
    let mut trace = Child::spawn("redirect trace", cmd).expect("start redirect trace");
    // It says so on stderr once the stream is switched on.
    trace
        .wait_stderr_line("the stream switched on", Duration::from_secs(10), |l| {
            l.starts_with("tracing decisions")
        })
        .expect("redirect trace running");
    trace
}

/// The first `n` decisions `trace` printed, waited for.
pub fn events(trace: &Child, n: usize) -> Vec<Value> {
    let lines = eventually(
        format!("{n} traced decisions"),
        Duration::from_secs(10),
        || {
            let lines = trace.lines();
            if lines.len() >= n {
                Ok(lines)
            } else {
                Err(lines)
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    lines
        .iter()
        .take(n)
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}
