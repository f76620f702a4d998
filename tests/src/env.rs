//! Where the workspace binaries under test are.
use std::path::PathBuf;

/// Path of a workspace binary (`redirect`, `redirect-proxy`) next to the test executable's
/// profile directory. `cargo xtask test` builds them before running the tests.
pub fn bin_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binary lives in target/<profile>/deps");
    let path = profile_dir.join(name);
    assert!(
        path.is_file(),
        "{} is missing: run the tests with `cargo xtask test`, which builds the binaries with the BPF object",
        path.display()
    );
    path
}
