//! install-cni writes only inside the CNI directories (issue 31, finding 11). A state file
//! naming a file elsewhere is refused and nothing is undone, whatever it claims. And a conflist
//! that is a symlink: a ConfigMap-mounted
//! CNI directory names each file through a link into `..data`; the entry is written through
//! the link (the link stays, its target gets the entry, uninstall restores the target's bytes).
//! A link that leaves the CNI directory is refused by name and its target is not touched (a
//! writable conf dir must not let anyone have install-cni rewrite any file of the host).
use redirect_tests::install_dirs::{read, Dirs, BRIDGE};

#[test]
fn a_conflist_linked_inside_the_directory_is_written_through_its_link() {
    let d = Dirs::new();
    let data = d.file("..data");
    std::fs::create_dir_all(&data).expect("..data");
    std::fs::write(data.join("10-bridge.conflist"), BRIDGE).expect("write");
    let link = d.file("10-bridge.conflist");
    std::os::unix::fs::symlink("..data/10-bridge.conflist", &link).expect("link");
    let said = d.ok("install-cni", &[]);
    assert!(said.contains("10-bridge.conflist"), "{said}");
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("the link")
            .file_type()
            .is_symlink(),
        "the link was replaced by a regular file"
    );
    assert!(read(&link).contains("redirect-cni"), "{}", read(&link));
    d.ok("uninstall-cni", &[]);
    assert!(std::fs::symlink_metadata(&link)
        .expect("the link")
        .file_type()
        .is_symlink());
    assert_eq!(read(&data.join("10-bridge.conflist")), BRIDGE);
}

#[test]
fn a_conflist_linked_out_of_the_directory_is_refused_and_its_target_untouched() {
    let d = Dirs::new();
    let outside = d.bin.join("..").join("elsewhere.conflist");
    std::fs::write(&outside, BRIDGE).expect("write");
    let link = d.file("10-bridge.conflist");
    std::os::unix::fs::symlink(&outside, &link).expect("link");
    let out = d.redirect("install-cni", &[]);
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("10-bridge.conflist") && err.contains("symlink"),
        "{err}"
    );
    assert_eq!(
        read(&outside),
        BRIDGE,
        "the link's target outside was rewritten"
    );
    assert!(std::fs::symlink_metadata(&link)
        .expect("the link")
        .file_type()
        .is_symlink());
}

#[test]
fn a_state_file_naming_a_file_outside_the_directories_undoes_nothing() {
    let d = Dirs::new();
    std::fs::write(d.file("10-bridge.conflist"), BRIDGE).expect("write");
    d.ok("install-cni", &[]);
    // Someone who can write the state file (it lives in the conf dir) names a file of the
    // host, claiming install-cni wrote it and what it held before.
    let victim = d.bin.join("..").join("victim.conf");
    std::fs::write(&victim, "precious\n").expect("write");
    let state = d.file(".redirect-cni-install.state");
    let mut st: serde_json::Value = serde_json::from_str(&read(&state)).expect("state");
    st["config"]["path"] = victim.display().to_string().into();
    st["config"]["written"] = "precious\n".into();
    st["config"]["original"] = "overwritten by install-cni\n".into();
    std::fs::write(&state, st.to_string()).expect("write");
    let out = d.redirect("uninstall-cni", &[]);
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("victim.conf") && err.contains("outside"),
        "{err}"
    );
    assert_eq!(read(&victim), "precious\n", "a file outside was rewritten");
    assert!(read(&d.file("10-bridge.conflist")).contains("redirect-cni"));
}
