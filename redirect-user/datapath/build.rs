//! Embeds the BPF object built by `cargo xtask build-ebpf`, or an empty stub when it is absent.
//! With feature `layout-next` (the upgrade test's next layout) the object of target/ebpf-next.
use std::{env, fs, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let (var, dir) = if env::var_os("CARGO_FEATURE_LAYOUT_NEXT").is_some() {
        ("REDIRECT_EBPF_OBJECT_NEXT", "ebpf-next")
    } else {
        ("REDIRECT_EBPF_OBJECT", "ebpf")
    };
    let object = env::var_os(var).map_or_else(
        || {
            manifest.join(format!(
                "../../target/{dir}/bpfel-unknown-none/release/redirect-ebpf"
            ))
        },
        PathBuf::from,
    );
    println!("cargo:rerun-if-env-changed={var}");
    println!("cargo:rerun-if-changed={}", object.display());
    let dest = out.join("redirect-ebpf.o");
    if object.is_file() {
        fs::copy(&object, &dest).expect("copy the BPF object into OUT_DIR");
    } else {
        fs::write(&dest, []).expect("write the empty stub object");
        println!(
            "cargo:warning=no BPF object at {}: embedding a stub (run `cargo xtask build-ebpf` for \
                a working `redirect`)",
            object.display()
        );
    }
}
