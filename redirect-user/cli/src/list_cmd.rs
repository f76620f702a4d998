//! `redirect list`: everything the node captures, one row per namespace with a policy in the
//! kernel's maps (whoever wrote it) and per running `redirect attach`, labelled by its writer
//! and by whether the daemon follows it. Works with or without a daemon.
use std::net::IpAddr;

use crate::{
    captured::{node_view, Followed, Row},
    dir_args::Dirs,
    json_views::Listed,
};

/// The empty list's line.
pub(crate) const NOTHING: &str =
    "nothing is captured: no namespace has a policy in the kernel's maps and no `redirect attach` runs";

/// Prints the list (a table, or `--json`: one object per row).
pub(crate) fn list(dirs: &Dirs, json: bool) -> anyhow::Result<()> {
    let view = node_view(dirs, &dirs.bpffs)?;
    if let Some(note) = &view.records_note {
        eprintln!("WARNING: {note}");
    }
    if json {
        // Each row's keys, then its record's own (policy, pod, ...) beside them.
        let rows: Vec<Listed> = view.rows.iter().map(Listed::of).collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if view.rows.is_empty() {
        println!("{NOTHING}");
        return Ok(());
    }
    println!(
        "{:<30} {:>8} {:<24} {:<7} {:<5} {:<15} {:<14} {:<9} source",
        "netns", "cookie", "addresses", "inbound", "proxy", "kernel", "writer", "followed"
    );
    for r in &view.rows {
        println!(
            "{:<30} {:>8} {:<24} {:<7} {:<5} {:<15} {:<14} {:<9} {}",
            shown_place(r),
            r.cookie.map_or_else(|| "-".to_owned(), |c| c.to_string()),
            shown_addrs(&r.addrs),
            match (r.inbound, r.tproxy) {
                (true, true) => "tproxy",
                (true, false) => "yes",
                (false, _) => "no",
            },
            match (r.cookie, r.proxy_listening) {
                (None, _) => "-",
                (_, true) => "up",
                (_, false) => "down",
            },
            r.kernel,
            r.writer.name(),
            r.followed.shown(),
            r.source
        );
    }
    warnings(&view.rows, view.daemon);
    Ok(())
}

fn shown_place(r: &Row) -> String {
    match (&r.netns, &r.cgroup) {
        (Some(p), _) => p.display().to_string(),
        (None, Some(cg)) => format!("cgroup:{}", cg.display()),
        (None, None) => "(path unknown)".to_owned(),
    }
}

/// Routable addresses (link-local ones are in `--json`), `-` for none.
fn shown_addrs(addrs: &[IpAddr]) -> String {
    let shown: Vec<String> = addrs
        .iter()
        .filter(|a| !matches!(a, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80))
        .map(ToString::to_string)
        .collect();
    if shown.is_empty() {
        "-".to_owned()
    } else {
        shown.join(",")
    }
}

fn warnings(rows: &[Row], daemon: Option<u32>) {
    for r in rows {
        let outside = r.record.as_ref().map_or(0, |e| e.outside_capture);
        if outside > 0 {
            eprintln!(
                "WARNING: {outside} connection(s) of {} were opened before its capture and bypass \
                    the proxy until they close (the daemon's --reset-uncaptured, or the pod \
                    annotation redirect.dev/reset-uncaptured: \"true\", resets them)",
                shown_place(r)
            );
        }
    }
    let drifted = rows
        .iter()
        .filter(|r| r.record.is_some() && r.kernel != "ok")
        .count();
    if drifted > 0 {
        eprintln!(
            "WARNING: {drifted} recorded policy(ies) differ from what the kernel's maps hold \
            (kernel column): re-enroll them (`redirect enroll`) or restart the daemon, which \
            re-applies its enrollments"
        );
    }
    let unfollowed = rows
        .iter()
        .filter(|r| r.followed == Followed::NotByTheDaemon)
        .count();
    if let (Some(pid), true) = (daemon, unfollowed > 0) {
        eprintln!(
            "WARNING: {unfollowed} namespace(s) are captured but not followed by the daemon \
            (pid {pid}): their addresses are not kept up to date; `redirect enroll` them, or \
            `redirect istio-iptables --cleanup-only` them"
        );
    }
    if daemon.is_none() && rows.iter().any(|r| r.followed == Followed::NoDaemon) {
        eprintln!(
            "note: no daemon runs: captured namespaces are not followed (addresses, repair) \
            until `redirect daemon` starts and adopts the recorded ones"
        );
    }
}
