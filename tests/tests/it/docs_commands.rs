//! Every `redirect` command line the docs show names a subcommand that exists and only flags
//! that subcommand takes (its `--help` lists them): README.md, docs/*.md and deploy/README.md.
use std::{collections::BTreeMap, path::Path, process::Command};

use redirect_tests::bin_path;

/// The long flags of `redirect SUB --help` (and the subcommand's existence).
fn flags_of(sub: &str) -> Option<String> {
    let out = Command::new(bin_path("redirect"))
        .args([sub, "--help"])
        .output()
        .expect("redirect --help");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `redirect SUB ...` command lines in `text`: in code blocks and in backticks.
fn command_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim_start().trim_start_matches("$ ");
        if line.starts_with("    ") && t.starts_with("redirect ") {
            out.push(t.to_owned());
        }
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 1 && part.starts_with("redirect ") {
                out.push(part.to_owned());
            }
        }
    }
    out
}

/// Whether `help` names `flag` itself (`--proxy-cgroup` is not named by `--bind-proxy-cgroup`).
fn names_flag(help: &str, flag: &str) -> bool {
    let part = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    help.match_indices(flag).any(|(i, _)| {
        let before = help[..i].chars().next_back();
        let after = help[i + flag.len()..].chars().next();
        !before.is_some_and(part) && !after.is_some_and(part)
    })
}

#[test]
fn every_documented_command_names_real_flags() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![root.join("README.md"), root.join("deploy/README.md")];
    for entry in std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .flatten()
    {
        if entry.path().extension().is_some_and(|x| x == "md") {
            files.push(entry.path());
        }
    }
    let mut helps: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("doc");
        for line in command_lines(&text) {
            let line = line.split("  #").next().unwrap_or(&line).to_owned();
            let mut words = line.split_whitespace().skip(1);
            let Some(sub) = words
                .next()
                .filter(|s| s.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
                .filter(|s| !s.starts_with('-'))
            else {
                continue;
            };
            let help = helps
                .entry(sub.to_owned())
                .or_insert_with(|| flags_of(sub))
                .clone();
            let Some(help) = help else {
                wrong.push(format!("{}: `{line}`: no subcommand {sub}", file.display()));
                continue;
            };
            // Flags inside an argument string (--istio-args "...", --args "...") are istio-iptables'.
            let ours = line
                .split(['"', '\''])
                .step_by(2)
                .collect::<Vec<_>>()
                .join(" ");
            for flag in ours
                .split_whitespace()
                .filter(|w| w.starts_with("--") && w.len() > 2)
            {
                let flag = flag.split(['=', ',', ')', '`', '[']).next().unwrap_or(flag);
                checked += 1;
                // istio-iptables' help lists its logging flags as one family.
                let family = flag.starts_with("--log_") && help.contains("--log_*");
                if !names_flag(&help, flag) && !family {
                    wrong.push(format!(
                        "{}: `{line}`: redirect {sub} has no {flag}",
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} flags found in the docs");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
