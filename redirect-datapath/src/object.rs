//! The BPF object embedded at build time (empty when built without `cargo xtask build-ebpf`).

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/redirect-ebpf.o"));

/// The embedded BPF ELF object, or `None` for a stub build.
pub fn bpf_object() -> Option<&'static [u8]> {
    (!OBJECT.is_empty()).then_some(OBJECT)
}
