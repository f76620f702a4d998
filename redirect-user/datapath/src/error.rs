//! Error type of the library: each variant names the failing call and the value involved.
use redirect_common::NetnsCookie;
use std::{io, path::PathBuf};

/// Everything that can go wrong while validating, loading, attaching or inspecting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cgroup directory does not exist.
    #[error(
        "cgroup {path} does not exist: create it (mkdir {suggest}) or pass an existing \
        directory under the cgroup v2 mount {mount}"
    )]
    CgroupMissing {
        /// The path given.
        path: PathBuf,
        /// A cgroup v2 directory to create: the path itself when it is under the mount, else
        /// its last component under the mount.
        suggest: PathBuf,
        /// Where cgroup v2 is mounted on this host.
        mount: PathBuf,
    },
    /// The path exists but is not a cgroup v2 directory.
    #[error(
        "{path} is not a cgroup v2 directory (its filesystem is {fstype}); BPF programs attach \
        only to cgroup v2, which is mounted at {mount} here: pass a directory under it"
    )]
    NotCgroup2 {
        /// The path given.
        path: PathBuf,
        /// The filesystem the path is on, from /proc/self/mountinfo.
        fstype: String,
        /// Where cgroup v2 is mounted on this host.
        mount: PathBuf,
    },
    /// No cgroup2 filesystem is mounted.
    #[error(
        "no cgroup v2 filesystem is mounted (none in /proc/self/mountinfo); mount one, e.g. \
        `mkdir -p /sys/fs/cgroup/unified && mount -t cgroup2 none /sys/fs/cgroup/unified`"
    )]
    NoCgroup2Mount,
    /// Not running with the privileges BPF needs.
    #[error(
        "redirect must run as root (effective uid is {euid}): loading and attaching BPF \
        programs needs CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN; rerun it with sudo"
    )]
    NotRoot {
        /// The effective uid we run as.
        euid: u32,
    },
    /// The binary was built with the empty stub object.
    #[error(
        "this build of redirect has no BPF object embedded: run `cargo xtask build-ebpf` and \
        rebuild (or use `cargo xtask run`)"
    )]
    NoObject,
    /// Parsing or loading the BPF object failed.
    #[error("loading the BPF object")]
    Load(#[source] Box<aya::EbpfError>),
    /// The object lacks a program or map we expect.
    #[error("the BPF object has no {kind} named {name}: rebuild with `cargo xtask build-ebpf`")]
    Missing {
        /// "program" or "map".
        kind: &'static str,
        /// Its name.
        name: &'static str,
    },
    /// Loading (verifying) a program failed.
    #[error("the kernel rejected program {name}")]
    Verify {
        /// Program name.
        name: &'static str,
        /// The loader's error, including the verifier log.
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    /// A map operation failed.
    #[error("{op} on map {name}")]
    Map {
        /// What was being done.
        op: &'static str,
        /// Map name or id.
        name: String,
        /// The loader's error.
        #[source]
        source: Box<aya::maps::MapError>,
    },
    /// A program or link query failed.
    #[error("{op}")]
    Query {
        /// What was being queried.
        op: String,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file operation failed.
    #[error("{op} {path}")]
    Io {
        /// What was being done ("reading", "writing", ...).
        op: &'static str,
        /// The file involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A state file could not be parsed.
    #[error("parsing state file {path}")]
    State {
        /// The file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// Two enrolled namespaces claim the same address (sk_lookup finds a pod by address).
    #[error(
        "address {addr} of network namespace {netns} is already enrolled for another namespace: \
        pod addresses must be unique within one datapath"
    )]
    AddressConflict {
        /// The address.
        addr: std::net::IpAddr,
        /// The namespace being enrolled.
        netns: PathBuf,
    },
    /// The path named another namespace (or none) by the end of an apply than the one it
    /// opened at the start (a reused pid, a remounted name): the apply was rolled back.
    #[error(
        "network namespace {path} changed during the apply: it was opened as netns cookie \
        {cookie} (inode {inode}), and the path now names {found}; everything written for cookie \
        {cookie} was removed: apply again"
    )]
    NetnsChanged {
        /// The path given.
        path: PathBuf,
        /// The cookie of the namespace it opened first.
        cookie: NetnsCookie,
        /// That namespace's inode.
        inode: u64,
        /// What the path names now (its cookie and inode, or nothing).
        found: String,
    },
    /// A policy list is longer than the kernel-side policy can hold.
    #[error(transparent)]
    PolicyLimit(#[from] redirect_policy::PolicyLimit),
    /// An enrollment would use more of a shared map than the node's per-namespace quota.
    #[error(
        "{netns}: {count} {what} is over the per-namespace quota of {limit}, so nothing was \
        written (the node datapath was created with {flag} {limit}; recreate it with a larger \
        {flag} to allow more)"
    )]
    Quota {
        /// The namespace being enrolled.
        netns: PathBuf,
        /// What is counted.
        what: &'static str,
        /// How many the enrollment has.
        count: usize,
        /// The quota.
        limit: u32,
        /// The flag that sets it when the datapath is created.
        flag: &'static str,
    },
    /// A node sizing whose connection maps cannot hold every namespace's hand-off quota.
    #[error("node sizing: {why}")]
    Sizing {
        /// What does not fit, naming the flags.
        why: String,
    },
    /// The pin directory's parent is not a bpf filesystem (none is mounted on its behalf).
    #[error(
        "{mount} is not a bpf filesystem, so the datapath cannot be pinned at {dir}: run where \
        the host's bpffs is mounted (a container needs -v /sys/fs/bpf:/sys/fs/bpf, or pass --bpffs \
        inside a mounted bpffs); mounting a new one here would be private to this mount namespace \
        and the capture would die with it"
    )]
    NoBpffs {
        /// The pin directory asked for.
        dir: PathBuf,
        /// Its parent, which must be a bpffs mount.
        mount: PathBuf,
    },
    /// The lock directory or the pin directory was made by another user, or others may write
    /// it (a bpffs of mode 1777 lets any user create entries beside the pins).
    #[error("{} is owned by uid {uid} with mode {mode:o}, where only root may write: refused, as \
        another user could hold the datapath's lock or change its pins; remove it as root (`rm -r \
        {}`) and mount the bpf filesystem so only root may create entries there (`mount -t bpf -o \
        mode=700 bpf {}`)", path.display(), path.display(), mount.display())]
    NotRootsOwn {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        uid: u32,
        /// Its permission bits.
        mode: u32,
        /// The bpffs it is in.
        mount: PathBuf,
    },
    /// A bpffs operation on the pinned datapath failed.
    #[error("{op} {path}")]
    Pin {
        /// What was being done.
        op: &'static str,
        /// The pin path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The pinned datapath has another layout than this build reads and writes.
    #[error(
        "the datapath pinned at {dir} has layout v{found}, this redirect reads and writes \
        layout v{expected}: upgrade it in place with `redirect upgrade --bpffs {dir}` (or start \
        the new daemon) when this build upgrades from v{found} (`redirect upgrade --check` lists \
        the layouts it does); otherwise remove it with `redirect uninstall --bpffs {dir}` (every \
        namespace loses capture until it is enrolled again) or use the redirect that created it"
    )]
    Layout {
        /// The pin directory.
        dir: PathBuf,
        /// The version found (0: no layout record).
        found: u32,
        /// This build's version.
        expected: u32,
    },
    /// An upgrade in place that cannot be done; nothing was changed.
    #[error("cannot upgrade the datapath pinned at {dir} in place: {why}; nothing was changed")]
    NotUpgradable {
        /// The pin directory.
        dir: PathBuf,
        /// Why, naming the map, link or version.
        why: String,
    },
    /// An upgrade step failed after it started; every link runs its old program again.
    #[error("upgrading the datapath pinned at {dir}: {op} {what} failed, every link was put back on its old program")]
    UpgradeFailed {
        /// The pin directory.
        dir: PathBuf,
        /// The step.
        op: &'static str,
        /// The pin or map it was for.
        what: String,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// A running daemon owns the pinned datapath.
    #[error(
        "the datapath pinned at {dir} is owned by the redirect daemon pid {pid}, which is \
        running: one owner per datapath; stop it first, or talk to it (`redirect list`, `redirect \
        enroll` with its REDIRECT_DAEMON_DIR)"
    )]
    OwnedByDaemon {
        /// The pin directory.
        dir: PathBuf,
        /// The owner's pid.
        pid: u32,
    },
    /// The pinned datapath is attached at another cgroup than the one asked for.
    #[error(
        "the datapath pinned at {dir} is attached at {recorded} (cgroup id {recorded_id}), not \
        at {asked} as --cgroup asks: it is never moved silently; run `redirect uninstall --bpffs \
        {dir}` first to attach it elsewhere"
    )]
    AttachedElsewhere {
        /// The pin directory.
        dir: PathBuf,
        /// Where it is attached (a path when found under the cgroup v2 mount).
        recorded: String,
        /// The recorded cgroup id.
        recorded_id: u64,
        /// The cgroup asked for.
        asked: PathBuf,
    },
    /// The datapath's attach scope (`redirect daemon --attach-scope`) does not allow the call.
    #[error("the datapath at {dir} links its cgroup programs with attach scope {scope}: {why}")]
    Scope {
        /// The pin directory.
        dir: PathBuf,
        /// Its scope.
        scope: crate::AttachScope,
        /// Why the call cannot go on.
        why: &'static str,
    },
    /// The kernel lacks a feature the datapath uses.
    #[error(
        "this kernel ({kernel}) lacks {feature}, which {needed_by} needs (first in Linux: \
        {since}){detail}; `redirect probe` lists every feature and what this kernel has"
    )]
    MissingFeature {
        /// The feature.
        feature: &'static str,
        /// What needs it.
        needed_by: &'static str,
        /// The kernel release that added it.
        since: &'static str,
        /// This kernel's release.
        kernel: String,
        /// Why the probe failed, when it did.
        detail: String,
    },
    /// A policy needs a feature the pinned datapath was loaded without.
    #[error(
        "this kernel ({kernel}) lacks {feature}{why}, which {flag} needs with inbound capture \
        (first in Linux: {since}): the node datapath runs sk_lookup without the arrival interface, \
        so this policy is refused and nothing was written; drop {flag}, or turn inbound capture \
        off for this namespace (-b '')"
    )]
    FeatureNeeded {
        /// The feature.
        feature: &'static str,
        /// The flag (and its value) that needs it.
        flag: String,
        /// The kernel release that added it.
        since: &'static str,
        /// This kernel's release.
        kernel: String,
        /// Why it counts as missing when the kernel has it (assumed missing, or the datapath
        /// was created while it was), else empty.
        why: String,
    },
    /// The feature override names an unknown feature.
    #[error(
        "{var} names {id:?}, which is no probed feature: name one or more of {known} \
        (comma-separated), or unset it"
    )]
    UnknownFeatureId {
        /// The environment variable.
        var: &'static str,
        /// The id given.
        id: String,
        /// Every feature id.
        known: String,
    },
    /// [`crate::assume_missing`] was called again with other features.
    #[error(
        "the features assumed missing were set to {was:?} already; {now:?} is refused (set \
        REDIRECT_PROBE_ASSUME_MISSING once, before the process probes)"
    )]
    AssumedMissingTwice {
        /// The features set first.
        was: String,
        /// The features asked for now.
        now: String,
    },
    /// Another `redirect trace` reads the decision stream.
    #[error(
        "another `redirect trace` (pid {pid}) is reading the decision stream, which has one \
        reader: stop it, or filter its output (`--netns`, `--json`)"
    )]
    TraceBusy {
        /// The reading process.
        pid: u32,
    },
    /// The istio-iptables arguments, environment or cluster.env were invalid.
    #[error(transparent)]
    Policy(#[from] redirect_policy::PolicyError),
}

/// Result alias for the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// The error of a map operation on the record pinned at `DIR/pin` (layout, sizing).
pub(crate) fn record_err(
    op: &'static str,
    dir: &std::path::Path,
    pin: &str,
) -> impl FnOnce(aya::maps::MapError) -> Error {
    let name = dir.join(pin).display().to_string();
    move |source| Error::Map {
        op,
        name,
        source: Box::new(source),
    }
}
