//! The README's quickstart, run (issue 32, item 6): each `$` line of its first code block is
//! run as written (the namespace name swapped for the test's own, the daemon attached at the
//! test's cgroup), and every output line shown under it must match a line the command printed
//! in shape: the same words, numbers (cookies, pids, ports) aside.
use std::{path::PathBuf, time::Duration};

use redirect_testkit::{privileged, Child, Topology};
use redirect_tests::{bin_path, node::Node};

/// One `$` line of the quickstart and the lines shown under it.
struct Step {
    command: String,
    shown: Vec<String>,
}

fn quickstart() -> (String, Vec<Step>) {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let section = readme
        .split("\n## Quickstart")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a Quickstart section");
    let mut steps: Vec<Step> = Vec::new();
    for line in section.lines().filter_map(|l| l.strip_prefix("    ")) {
        match line.strip_prefix("$ ") {
            Some(cmd) => steps.push(Step {
                command: cmd.split("  #").next().unwrap_or(cmd).trim().to_owned(),
                shown: Vec::new(),
            }),
            None => steps
                .last_mut()
                .expect("output after a command")
                .shown
                .push(line.to_owned()),
        }
    }
    let name = steps
        .iter()
        .find_map(|s| s.command.split("--netns ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("a --netns in the quickstart")
        .to_owned();
    (name, steps)
}

/// A line's shape: runs of digits as `N`, whitespace collapsed.
fn shape(line: &str) -> String {
    let mut out = String::new();
    let mut digits = false;
    for c in line
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
    {
        if c.is_ascii_digit() {
            if !digits {
                out.push('N');
            }
            digits = true;
        } else {
            out.push(c);
            digits = false;
        }
    }
    out
}

fn assert_shown(step: &Step, printed: &str) {
    for want in &step.shown {
        assert!(
            printed.lines().any(|l| shape(l) == shape(want)),
            "`{}` printed no line shaped like the README's\n  {want}\nit printed:\n{printed}",
            step.command
        );
    }
}

#[test]
fn the_readme_quickstart_runs_and_prints_what_it_shows() {
    privileged!();
    let (readme_name, steps) = quickstart();
    assert!(steps.len() >= 6, "the quickstart lost its steps");
    let node = Node::new();
    let topo = Topology::build(("rdev-pod-", "198.18.0.1"), ("rdev-srv-", "198.18.0.2"))
        .expect("pod and server namespaces");
    let pod = topo.pod.name().to_owned();
    let mut server = topo.server.exec(bin_path("probe-server"));
    server.args(["--listen", "198.18.0.2:8080", "--tag", "demo", "--http"]);
    let mut server = Child::spawn("server", server).expect("server");
    server
        .wait_line("listening", Duration::from_secs(10), |l| {
            l.starts_with("listening")
        })
        .expect("server listening");
    let bins: PathBuf = bin_path("redirect").parent().expect("bin dir").to_owned();
    let path = format!(
        "{}:{}",
        bins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let cgroup = node.cgroup.path().display().to_string();
    // The README's lines, run by a shell as an operator types them, in the test's cgroup.
    let shell = |line: &str| {
        let mut c = node.cmd(&["exec", "--cgroup", &cgroup, "--", "sh", "-c"]);
        c.arg(format!("exec {line}")).env("PATH", &path);
        c
    };
    let mut children = Vec::new();
    for step in &steps {
        let line = step.command.replace(&readme_name, &pod);
        if line == "redirect daemon &" {
            children.push(node.daemon_with(&[]).0);
        } else if let Some(background) = line.strip_suffix('&') {
            let mut proxy = Child::spawn("proxy", shell(background.trim())).expect("proxy");
            proxy
                .wait_line("ready", Duration::from_secs(10), |l| {
                    l.contains("redirect-proxy ready")
                })
                .expect("proxy ready");
            children.push(proxy);
        } else if line.starts_with("redirect trace ") {
            let mut trace = Child::spawn("trace", shell(&format!("{line} --count 1 --seconds 10")))
                .expect("trace");
            trace
                .wait_stderr_line("on", Duration::from_secs(10), |l| {
                    l.starts_with("tracing decisions")
                })
                .expect("trace on");
            let curl = shell(&format!(
                "ip netns exec {pod} curl -sS -m 5 http://198.18.0.2:8080/"
            ))
            .output()
            .expect("curl");
            assert!(curl.status.success(), "{curl:?}");
            let got = trace
                .wait_line("the decision", Duration::from_secs(10), |l| {
                    l.starts_with("pid=")
                })
                .expect("a traced decision");
            assert_shown(step, &got);
        } else {
            let out = shell(&line).output().expect("run the README's line");
            let printed = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(out.status.success(), "`{line}` failed: {out:?}");
            assert_shown(step, &printed);
        }
    }
    node.ok(&["uninstall"]);
    drop(children);
}
