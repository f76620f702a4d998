//! The BPF object embedded at build time (empty when built without `cargo xtask build-ebpf`)
//! and its build id, which the layout record keeps to tell whose programs run.

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/redirect-ebpf.o"));

/// The embedded BPF ELF object, or `None` for a stub build.
pub(crate) fn bpf_object() -> Option<&'static [u8]> {
    (!OBJECT.is_empty()).then_some(OBJECT)
}

/// The build id of the embedded object: its 64-bit FNV-1a hash, never 0 (0 in a layout record
/// means "not recorded"). Two builds share an id only when their programs are the same bytes.
pub fn build_id() -> u64 {
    static ID: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *ID.get_or_init(|| fnv1a(OBJECT).max(1))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn fnv1a_of_known_inputs() {
        assert_eq!(super::fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
