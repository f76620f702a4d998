//! What the kernel reports after the workloads: the memory of the proxies, the loader and the
//! maps, and each hook's runs and run time (`bpf_stats`), from `redirect status --json`.
use std::{collections::BTreeMap, process::Command};

use serde_json::Value;

use super::{scene, Bench};

impl Bench {
    pub(super) fn memory(&self) -> BTreeMap<String, Value> {
        let mut m = BTreeMap::new();
        for pod in &self.pods {
            if let Some(p) = &pod.proxy {
                m.insert(
                    format!("redirect-proxy RSS ({}), KiB", pod.mode.name()),
                    Value::from(scene::rss_kib(p.pid())),
                );
            }
            if let Some(a) = &pod.attach {
                m.insert(
                    "redirect attach (loader) RSS, KiB".into(),
                    Value::from(scene::rss_kib(a.pid())),
                );
            }
        }
        let status = self.attach_status();
        let mut total = 0u64;
        for (name, id) in self.attach_map_ids() {
            let info = Command::new("bpftool")
                .args(["-j", "map", "show", "id", &id.to_string()])
                .output()
                .ok();
            let info: Option<Value> = info.and_then(|o| serde_json::from_slice(&o.stdout).ok());
            if let Some(info) = info {
                let memlock = info["bytes_memlock"].as_u64().unwrap_or(0);
                total += memlock;
                let kv = info["bytes_key"].as_u64().unwrap_or(0)
                    + info["bytes_value"].as_u64().unwrap_or(0);
                let per = match name.as_str() {
                    "TRACKED" | "INBOUND" => Some("per connection in hand-off"),
                    "NETNS_INBOUND" => Some("per enrolled namespace"),
                    "INBOUND_PORTS" => Some("per listed port of an enrolled namespace"),
                    "POD_ADDRS" => Some("per address of an enrolled namespace"),
                    _ => None,
                };
                if let Some(per) = per {
                    m.insert(format!("{name}: key+value bytes {per}"), Value::from(kv));
                }
            }
        }
        m.insert(
            "BPF maps memlock, all maps of one datapath, bytes".into(),
            Value::from(total),
        );
        if let Some(s) = status {
            m.insert(
                "tracked connections at the end (must be 0)".into(),
                s["instances"][0]["tracked_entries"].clone(),
            );
        }
        m
    }

    /// The per-hook table (see [`hook_costs`]), read while `kernel.bpf_stats_enabled` is on.
    pub(super) fn hook_table(&self) -> BTreeMap<String, Value> {
        let mut m = BTreeMap::new();
        if let Some(s) = self.attach_status() {
            hook_costs(&s, &mut m);
        }
        m
    }

    /// `redirect status --json` of the bench's `redirect attach` instances.
    pub(super) fn attach_status(&self) -> Option<Value> {
        Command::new(self.bin.join("redirect"))
            .args(["status", "--json"])
            .env("REDIRECT_STATE_DIR", &self.state_dir)
            .output()
            .ok()
            .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
    }
}

/// The per-hook table, from `redirect status --json` of the eBPF pod's `redirect attach`: for
/// each program, the instructions the verifier walked to load it and (with
/// `kernel.bpf_stats_enabled`, which the bench switches on for the churn workload only) its
/// runs and mean time per run over that churn.
fn hook_costs(status: &Value, m: &mut BTreeMap<String, Value>) {
    let mut verified = 0u64;
    for a in status["instances"][0]["attachments"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let (Some(program), Some(target)) = (a["program"].as_str(), a["target"].as_str()) else {
            continue;
        };
        let stat = &a["stat"];
        let insns = stat["verified_insns"].as_u64().unwrap_or(0);
        verified += insns;
        let runs = stat["runs"].as_u64().unwrap_or(0);
        let ns = stat["run_time_ns"].as_u64().unwrap_or(0);
        let per_run = if runs > 0 {
            ns as f64 / runs as f64
        } else {
            0.0
        };
        let at = target.rsplit('/').next().unwrap_or(target);
        m.insert(
            format!("hook {program} at {at}: runs, ns per run, verified instructions"),
            Value::from(format!("{runs}, {per_run:.0}, {insns}")),
        );
    }
    m.insert(
        "verified instructions, every attached program".into(),
        Value::from(verified),
    );
}

/// Each attached program in a `redirect status --json`: (runs, run time ns) so far. A program
/// attached at two cgroups is one program: its counts once.
pub(super) fn runs_of(status: &Value) -> BTreeMap<String, (u64, u64)> {
    let mut runs = BTreeMap::new();
    for a in status["instances"][0]["attachments"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let Some(program) = a["program"].as_str() else {
            continue;
        };
        runs.entry(program.to_owned()).or_insert((
            a["stat"]["runs"].as_u64().unwrap_or(0),
            a["stat"]["run_time_ns"].as_u64().unwrap_or(0),
        ));
    }
    runs
}
