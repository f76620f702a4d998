//! Who wrote a namespace's policy (`Writer`): in its record, on the wire, in every table.
use serde::{Deserialize, Serialize};

/// The command that wrote a namespace's policy: shown by `list`, `stats` and `trace` beside
/// whether the daemon follows it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Writer {
    /// `redirect enroll` (through the daemon).
    #[default]
    Enroll,
    /// `redirect istio-iptables` (through the daemon, or straight into the pinned maps).
    IstioIptables,
    /// `redirect vm` (through the daemon, or straight into the pinned maps).
    Vm,
    /// The CNI plugin's ADD, through the daemon.
    Cni,
    /// The daemon's reconcile of a pod already running (enrolled in place).
    Reconcile,
    /// `redirect attach` (its own datapath, held by its process: a cgroup, no namespace).
    Attach,
    /// Nothing on record says (a policy in the kernel's maps with no record beside it).
    Unknown,
}

impl Writer {
    /// The name shown in tables: the command's own spelling.
    pub fn name(self) -> &'static str {
        match self {
            Writer::Enroll => "enroll",
            Writer::IstioIptables => "istio-iptables",
            Writer::Vm => "vm",
            Writer::Cni => "cni",
            Writer::Reconcile => "reconcile",
            Writer::Attach => "attach",
            Writer::Unknown => "unknown",
        }
    }
}

impl Writer {
    /// The name in JSON (snake_case): `istio_iptables`, ...
    pub fn key(self) -> &'static str {
        match self {
            Writer::IstioIptables => "istio_iptables",
            other => other.name(),
        }
    }
}

impl std::fmt::Display for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writers_key_is_its_json_name() {
        for w in [
            Writer::Enroll,
            Writer::IstioIptables,
            Writer::Vm,
            Writer::Cni,
            Writer::Reconcile,
            Writer::Attach,
            Writer::Unknown,
        ] {
            assert_eq!(serde_json::to_value(w).expect("json"), w.key());
            assert_eq!(w.name().replace('-', "_"), w.key());
        }
    }
}
