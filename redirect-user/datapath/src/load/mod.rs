//! Loading: the embedded BPF object and its build id, the kernel feature probes (what each
//! feature is for and the release that added it), the checks before anything is loaded, and
//! what the kernel reports of each loaded program.
pub(crate) mod object;
pub(crate) mod preflight;
pub(crate) mod probe;
pub(crate) mod program_stats;
