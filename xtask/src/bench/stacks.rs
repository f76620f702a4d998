//! `perf script` call chains, and the sorting of a sample into the hook it ran under and where
//! in it the time went (the kernel's dispatch, the programs, storage, maps, helpers).
use std::collections::BTreeMap;

use serde_json::Value;

use super::{
    profile::{us, HZ, PREFIX, ROUNDS, RUN_MS},
    stats::median,
};

/// One sample: its command and its call chain, leaf first.
#[derive(Debug)]
pub(super) struct Stack {
    comm: String,
    frames: Vec<String>,
}

impl Stack {
    /// A CPU halted in its idle loop (perf's own samples count as idle too).
    pub(super) fn idle(&self) -> bool {
        let leaf = self.frames.first().map_or("", String::as_str);
        self.comm == "perf"
            || (self.comm.starts_with("swapper")
                && (leaf.contains("idle") || leaf.contains("halt")))
    }
}

/// `perf script -F comm,tid,ip,sym` text: blank-line separated samples, a header line then one
/// `ADDRESS SYMBOL` line per frame.
pub(super) fn parse(text: &str) -> Vec<Stack> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut lines = block.lines().filter(|l| !l.trim().is_empty());
        let Some(header) = lines.next() else { continue };
        let comm = header
            .trim()
            .rsplit_once(char::is_whitespace)
            .map_or(header.trim(), |(c, _)| c.trim())
            .to_owned();
        let frames = lines
            .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
            .collect();
        out.push(Stack { comm, frames });
    }
    out
}

/// Where a capture sample was: the kernel's dispatch around a run, the programs' instructions,
/// the socket storage helpers, map helpers, other helpers, or the release of socket storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Place {
    Dispatch,
    Instructions,
    Storage,
    Maps,
    Helpers,
    StorageFreed,
}

impl Place {
    const fn name(self) -> &'static str {
        match self {
            Place::Dispatch => "the kernel's dispatch around the run (lookup of the cgroup's programs, locks, copies)",
            Place::Instructions => "the programs' own instructions",
            Place::Storage => "socket storage (created, read)",
            Place::Maps => "hash and LPM maps, counters",
            Place::Helpers => "other helpers (cookies, uid)",
            Place::StorageFreed => "socket storage freed with the socket (bpf_sk_storage_free)",
        }
    }
}

/// A bpf program frame (`bpf_prog_<tag>_<name>`) that is one of `ours` (names are cut to 15
/// characters in the kernel's symbols).
fn is_ours(frame: &str, ours: &[String]) -> bool {
    let Some(rest) = frame.strip_prefix("bpf_prog_") else {
        return false;
    };
    let name = rest.split_once('_').map_or("", |(_, n)| n);
    !name.is_empty() && ours.iter().any(|o| o.starts_with(name))
}

/// The hook a capture sample ran under and where in it, or `None` when it is not the capture's.
fn classify(s: &Stack, ours: &[String]) -> Option<(&'static str, Place)> {
    let has = |f: &str| s.frames.iter().any(|x| x == f);
    let dispatcher = s
        .frames
        .iter()
        .position(|f| f.starts_with("__cgroup_bpf_run_filter_") || f == "bpf_sk_storage_free");
    let prog = s.frames.iter().position(|f| is_ours(f, ours));
    let hook = match dispatcher.map(|i| s.frames[i].as_str()) {
        Some("bpf_sk_storage_free") => return Some(("socket release", Place::StorageFreed)),
        Some("__cgroup_bpf_run_filter_sock_ops") => "sock_ops",
        Some("__cgroup_bpf_run_filter_getsockopt") => "getsockopt",
        Some("__cgroup_bpf_run_filter_sock_addr") if has("__sys_connect") => "connect4/6",
        Some("__cgroup_bpf_run_filter_sock_addr") => "getpeername and other sock_addr",
        Some(_) => "other cgroup hooks",
        None if prog.is_some() => "a program whose hook frame was lost",
        None => return None,
    };
    if let (Some(d), Some(p)) = (dispatcher, prog) {
        if p > d {
            // A program frame only above the dispatcher is some other program's caller.
            return Some((hook, Place::Dispatch));
        }
    }
    let place = match prog {
        None => Place::Dispatch,
        Some(0) => Place::Instructions,
        Some(p) => {
            let helpers = &s.frames[..p];
            if helpers
                .iter()
                .any(|f| f.contains("storage") || f.contains("selem"))
            {
                Place::Storage
            } else if helpers.iter().any(|f| {
                f.contains("htab")
                    || f.contains("trie_")
                    || f.contains("lookup_nulls")
                    || f.contains("map")
            }) {
                Place::Maps
            } else {
                Place::Helpers
            }
        }
    };
    Some((hook, place))
}

/// Capture samples by place and by hook.
#[derive(Debug, Default)]
pub(super) struct Sorted {
    by_place: BTreeMap<Place, u64>,
    by_hook: BTreeMap<&'static str, u64>,
}

impl Sorted {
    /// Samples in our hooks.
    pub(super) fn total(&self) -> u64 {
        self.by_place.values().sum()
    }

    pub(super) fn add(&mut self, s: &Stack, ours: &[String]) {
        if let Some((hook, place)) = classify(s, ours) {
            *self.by_place.entry(place).or_default() += 1;
            *self.by_hook.entry(hook).or_default() += 1;
        }
    }

    pub(super) fn report(
        &self,
        busy: &[Vec<f64>; 2],
        conns: u64,
        c: usize,
    ) -> BTreeMap<String, Value> {
        let mut m = BTreeMap::new();
        let total: u64 = self.by_place.values().sum();
        let per_conn = |n: u64| us(n) / conns.max(1) as f64;
        let mut put = |k: String, v: String| {
            m.insert(format!("{PREFIX}{k}"), Value::from(v));
        };
        if let (Some(e), Some(x)) = (median(&busy[1]), median(&busy[0])) {
            put(
                format!("busy CPU per connection at c={c}, eBPF / explicit (us; {ROUNDS} rounds of {RUN_MS} ms each, {HZ} Hz)"),
                format!("{e:.1} / {x:.1}; the difference {:.2}; floor {:.3}", e - x, x / e),
            );
        }
        put(
            "samples in our hooks per eBPF connection (us)".into(),
            format!(
                "{:.2} ({total} samples over {conns} connections)",
                per_conn(total)
            ),
        );
        for (place, n) in &self.by_place {
            let share = 100.0 * *n as f64 / total.max(1) as f64;
            put(
                format!("where: {}", place.name()),
                format!("{:.2} us ({share:.0}%)", per_conn(*n)),
            );
        }
        for (hook, n) in &self.by_hook {
            let share = 100.0 * *n as f64 / total.max(1) as f64;
            put(
                format!("hook: {hook}"),
                format!("{:.2} us ({share:.0}%)", per_conn(*n)),
            );
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: [&str; 2] = ["redirect_sock_ops", "redirect_connect4"];

    fn stack(comm: &str, frames: &[&str]) -> Stack {
        Stack {
            comm: comm.into(),
            frames: frames.iter().map(|f| (*f).to_owned()).collect(),
        }
    }

    #[test]
    fn perf_script_blocks_become_stacks() {
        let text = "probe-load 12\n\tffff1 leaf_fn\n\tffff2 caller\n\nswapper 0\n\tffff3 pv_native_safe_halt\n\n";
        let s = parse(text);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].comm, "probe-load");
        assert_eq!(s[0].frames, ["leaf_fn", "caller"]);
        assert!(!s[0].idle());
        assert!(s[1].idle());
    }

    #[test]
    fn samples_sort_by_hook_and_place() {
        let ours: Vec<String> = OURS.iter().map(|o| (*o).to_owned()).collect();
        let dispatch = stack(
            "a",
            &[
                "_raw_spin_lock",
                "__cgroup_bpf_run_filter_sock_ops",
                "tcp_connect",
            ],
        );
        assert_eq!(
            classify(&dispatch, &ours),
            Some(("sock_ops", Place::Dispatch))
        );
        let own = stack(
            "a",
            &[
                "bpf_prog_0123456789abcdef_redirect_sock_o",
                "__cgroup_bpf_run_filter_sock_ops",
            ],
        );
        assert_eq!(
            classify(&own, &ours),
            Some(("sock_ops", Place::Instructions))
        );
        let storage = stack(
            "a",
            &[
                "bpf_selem_alloc",
                "bpf_sk_storage_get",
                "bpf_prog_0123456789abcdef_redirect_conne",
                "__cgroup_bpf_run_filter_sock_addr",
                "__sys_connect",
            ],
        );
        assert_eq!(
            classify(&storage, &ours),
            Some(("connect4/6", Place::Storage))
        );
        let map = stack(
            "a",
            &[
                "htab_map_hash",
                "bpf_prog_0123456789abcdef_redirect_sock_o",
                "__cgroup_bpf_run_filter_sock_ops",
            ],
        );
        assert_eq!(classify(&map, &ours), Some(("sock_ops", Place::Maps)));
        let freed = stack("a", &["kfree", "bpf_sk_storage_free", "__sk_destruct"]);
        assert_eq!(
            classify(&freed, &ours),
            Some(("socket release", Place::StorageFreed))
        );
        let foreign = stack(
            "a",
            &["bpf_prog_0123456789abcdef_sd_fw_ingress", "__sock_create"],
        );
        assert_eq!(classify(&foreign, &ours), None);
        assert_eq!(classify(&stack("a", &["tcp_v4_rcv"]), &ours), None);
    }
}
