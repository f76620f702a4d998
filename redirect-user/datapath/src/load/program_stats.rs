//! The datapath's programs as the kernel reports them: id, instructions the verifier walked
//! to accept each (its load cost) and, while `kernel.bpf_stats_enabled` is 1, how often each
//! ran and for how long (its cost per run).
use std::collections::BTreeMap;

use serde::Serialize;

/// One loaded program.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ProgramStat {
    /// Kernel program id.
    pub(crate) id: u32,
    /// Its name as the kernel keeps it (at most 15 bytes).
    pub(crate) name: String,
    /// Instructions the verifier processed to accept it (kernel 5.16+).
    pub(crate) verified_insns: Option<u32>,
    /// Runs counted while `kernel.bpf_stats_enabled` was 1.
    pub(crate) runs: u64,
    /// Time spent in those runs, nanoseconds.
    pub(crate) run_time_ns: u64,
}

/// The programs with ids `ids` that are loaded, by id.
pub(crate) fn of_ids(ids: &[u32]) -> BTreeMap<u32, ProgramStat> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|p| ids.contains(&p.id()))
        .map(|p| {
            let stat = ProgramStat {
                id: p.id(),
                name: p.name_as_str().unwrap_or("").to_owned(),
                verified_insns: p.verified_instruction_count(),
                runs: p.run_count(),
                run_time_ns: u64::try_from(p.run_time().as_nanos()).unwrap_or(u64::MAX),
            };
            (stat.id, stat)
        })
        .collect()
}

/// The programs of the links pinned under `dir` (each `links/NAME` and `netns/COOKIE`), and
/// of the programs pinned under `dir/progs`: `(pin name, stat)`, in pin order.
pub(crate) fn of_pins(dir: &std::path::Path) -> Vec<(String, ProgramStat)> {
    let mut pinned: Vec<(String, u32)> = Vec::new();
    for sub in ["links", "progs"] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let id = if sub == "links" {
                // BPF_OBJ_GET, then BPF_OBJ_GET_INFO_BY_FD of the link (aya's `LinkInfo`).
                aya::programs::links::PinnedLink::from_pin(e.path())
                    .ok()
                    .and_then(|link| aya::programs::links::FdLink::from(link).info().ok())
                    .map(|info| info.program_id())
            } else {
                let Ok(_fd) = crate::sys::bpfsys::obj_get(&e.path()) else {
                    continue;
                };
                aya::programs::ProgramInfo::from_pin(e.path())
                    .ok()
                    .map(|i| i.id())
            };
            if let Some(id) = id {
                pinned.push((name, id));
            }
        }
    }
    pinned.sort();
    let ids: Vec<u32> = pinned.iter().map(|(_, id)| *id).collect();
    let stats = of_ids(&ids);
    pinned
        .into_iter()
        .filter_map(|(name, id)| stats.get(&id).map(|s| (name, s.clone())))
        .collect()
}
