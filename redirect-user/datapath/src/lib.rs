//! The datapath of redirect: the BPF object loaded and attached (process-owned or pinned for
//! the node), the maps each namespace's policy is written into, and the views of them.
//!
//! Rooms, each a folder:
//! - `load`: the embedded object, feature probes, preflight, per-program kernel stats;
//! - `attach`: the one attach plan, the per-process datapath of `redirect attach`, its state files;
//! - `node`: the pinned node datapath (creation, layout and owner record, the per-namespace
//!   apply and index, the upgrade in place);
//! - `sizing`: map sizes and per-namespace quotas, shared by both datapaths (the node's pinned
//!   beside it as `DIR/sizing`);
//! - `netns`: `NetnsHandle` (a namespace opened once) and what is read through it: addresses
//!   and routes over rtnetlink, listeners over sock_diag (and `/proc/net/tcp`), the pod's own
//!   files, a running proxy's listener to adopt;
//! - `maps`: typed map access, counters, one namespace's outbound and inbound entries;
//! - `views`: status, explain, stats, trace, metrics, validate (read only);
//! - `sys`: the bpf(2) commands aya lacks.
//!
//! Beside them: `cgroup` (cgroup v2 discovery and checks), `phases` (where an operation's time
//! went) and `error`.
//!
//! Every room is the crate's own: other crates come in only through the doors below, so none
//! can write a map or call bpf(2) past `apply`'s order and rollback. With feature
//! `test-support`, `test_support` opens what the integration tests reach under the doors.
// Every dependency of the product build is used (the test build has dev-dependencies too).
#![cfg_attr(test, allow(unused_crate_dependencies))]
mod attach;
mod cgroup;
mod error;
mod load;
mod maps;
mod netns;
mod node;
mod phases;
mod sizing;
mod sys;
#[cfg(feature = "test-support")]
pub mod test_support;
mod views;

// What went wrong, and where an operation's time went.
pub use error::{Error, Result};
pub use phases::{Phases, ThreadCpu};

// `redirect attach`: the datapath its process holds, and the instance state files it leaves.
pub use attach::datapath::{AttachDatapath, AttachOptions};
pub use attach::state::{
    read_all as read_instances, remove_stale as remove_stale_instances, InstanceState, StateFile,
    DEFAULT_STATE_DIR,
};

// The pinned node datapath: opened or created, applied (`NodeDatapath::apply`), locked,
// removed and upgraded in place.
pub use node::upgrade::needed as upgrade_needed;
pub use node::{
    ipv6_follows, lock as lock_node, open_to_all as bpffs_open_to_all,
    remove_dir as remove_node_dir, remove_tproxy_logged, Applied, AppliedAt, AttachScope,
    KernelPolicy, NodeAttach, NodeDatapath, Opened, SkLookupKey, DEFAULT_DIR as DEFAULT_NODE_DIR,
};

// The node datapath's layout and owner record.
pub use node::layout::{
    attached_near, check as check_layout, daemon_up, hold_as_daemon, read as read_layout,
    write as write_layout, Owner, LAYOUT_VERSION, UPGRADES_FROM,
};
pub use node::PinsHeld;

// Map sizes and per-namespace quotas.
pub use sizing::{Quotas, DEFAULT_MAX_CONNECTIONS};

// Network namespaces: opened once, named, and the pod's own files read through them.
pub use netns::names::by_inode as netns_names_by_inode;
pub use netns::pod_files::{sources as pod_file_sources, vm_sources as vm_file_sources};
pub use netns::{
    cookie as netns_cookie, resolve as resolve_netns, socket_cookie_of_netns, NetnsHandle,
};

// Cgroup v2: found, checked, entered.
pub use cgroup::{
    cgroup2_root, contains as cgroup_contains, enter as enter_cgroup,
    path_of_id as cgroup_path_of_id, validate as validate_cgroup,
};

// Loading: the embedded object's build id, the kernel feature probes, the root check.
pub use load::object::build_id;
pub use load::preflight::require_root;
pub use load::probe::{
    assume_missing, detail as probe_detail, kernel_release, missing as missing_feature,
    probe as probe_feature, probe_all, ASSUME_MISSING_ENV, NONEXISTENT as NONEXISTENT_FEATURE,
};

// The counters of `redirect attach`'s maps, by kernel map id.
pub use maps::counters::{read_counters_by_id, tracked_len_by_id};

// The read-only views: captured, explain, status, metrics, stats and trace, validate, outside.
pub use views::captured::{captured, tproxy_mode, Captured, Labels};
pub use views::explain::{explain, Query as ExplainQuery};
pub use views::explain_inbound::{explain_inbound, InboundQuery};
pub use views::metrics::{render as render_metrics, write_atomically, Exposition};
pub use views::node_status::{collect as collect_node_status, EnrolledNs, NodeStatus};
pub use views::observe::{ns_counters, Tracer};
pub use views::outside::{outside_capture, Outside};
pub use views::status::{instances as attach_instances, render as render_status, Status};
pub use views::validate::run as run_validation;
// What the views' `--json` outputs are made of, for the CLI's own output types.
pub use load::probe::Probed;
pub use views::explain::Explained;
pub use views::observe::{Caller, Decision};
pub use views::validate::{Check, Report as ValidationReport};
// The JSON Schema pieces the types do not say (the tests package's feature only).
#[cfg(feature = "schema")]
pub use views::schema;
