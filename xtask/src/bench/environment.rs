//! The report's environment block: machine, kernel, command, steal, duration, date.
use std::collections::BTreeMap;

use super::Size;
use crate::util;

/// What the report says about the run that made it.
pub(super) fn environment(
    size: Size,
    only: &[String],
    steal_pct: f64,
    elapsed: f64,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let cmd = |c: &str, a: &[&str]| {
        util::output(c, a)
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    env.insert("kernel".into(), cmd("uname", &["-r"]));
    env.insert("cpus".into(), cmd("nproc", &[]));
    let model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|c| {
        c.lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
    });
    env.insert("cpu model".into(), model.unwrap_or_default());
    env.insert(
        "command".into(),
        match size {
            Size::Full => "cargo xtask bench".into(),
            Size::Quick => "cargo xtask bench --quick".into(),
            Size::Tiny => "cargo xtask bench --tiny".into(),
        },
    );
    env.insert("steal during the run".into(), format!("{steal_pct:.1}%"));
    env.insert("duration".into(), format!("{elapsed:.0} s"));
    if !only.is_empty() {
        env.insert("workloads".into(), format!("only {}", only.join(", ")));
    }
    env.insert("date".into(), cmd("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]));
    env
}
