//! Property tests ("fuzz" target) of the parsers of what the kernel prints as text: listening
//! sockets (`/proc/net/tcp{,6}`, the fallback without socket diagnostics) and
//! `/proc/self/mountinfo` (routes come over rtnetlink, parsed
//! by netlink-packet-route). Random text never panics; lines printed as the kernel prints
//! them parse back. Bounded; `PROPTEST_CASES=100000 cargo test -p redirect-datapath --test
//! fuzz_proc` runs longer.
// A test target links every dependency of its package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::path::PathBuf;

use proptest::prelude::*;
use redirect_datapath::test_support as adopt;
use redirect_testkit::fuzz;

/// Random lines of whitespace-separated fields, some of them hex like the kernel's.
fn proc_text() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        fuzz::junk(6),
        "[0-9A-F]{1,34}",
        proptest::sample::select(fuzz::TRICKY).prop_map(str::to_owned),
        Just("0A".to_owned()),
        Just(" - ".to_owned()),
        Just("\\040".to_owned()),
    ];
    let line = proptest::collection::vec(field, 0..12).prop_map(|f| f.join(" "));
    prop_oneof![
        fuzz::junk(300),
        proptest::collection::vec(line, 0..6).prop_map(|l| l.join("\n")),
    ]
}

/// The kernel's mountinfo escaping of space, tab, newline and backslash.
fn escape(path: &str) -> String {
    path.chars()
        .map(|c| match c {
            ' ' => "\\040".to_owned(),
            '\t' => "\\011".to_owned(),
            '\n' => "\\012".to_owned(),
            '\\' => "\\134".to_owned(),
            c => c.to_string(),
        })
        .collect()
}

proptest! {
    #![proptest_config(fuzz::config(256))]

    #[test]
    fn random_proc_text_never_panics(text in proc_text(), port in any::<u16>(), ipv6 in any::<bool>()) {
        let _ = adopt::parse_listeners(&text, port, ipv6);
        let mounts = redirect_sys::parse_mountinfo(&text);
        let _ = redirect_sys::cgroup2_mount_in(&mounts);
        let _ = redirect_sys::unescape_mountinfo(&text);
    }

    #[test]
    fn printed_listeners_parse_back(
        sockets in proptest::collection::vec(
            (any::<u16>(), prop_oneof![Just("0A"), Just("01"), Just("06")], any::<u64>()),
            0..6,
        ),
        port in any::<u16>(),
        ipv6 in any::<bool>(),
    ) {
        let mut text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when \
            retrnsmt   uid  timeout inode\n".to_owned();
        for (i, (p, st, inode)) in sockets.iter().enumerate() {
            text.push_str(&format!(
                "{i:4}: 0100007F:{p:04X} 00000000:0000 {st} 00000000:00000000 00:00000000 00000000  \
                    1337        0 {inode} 1 0000000000000000 100 0 0 10 0\n"
            ));
        }
        let want: Vec<adopt::Listening> = sockets
            .iter()
            .filter(|(p, st, inode)| *p == port && *st == "0A" && *inode != 0)
            .map(|(_, _, inode)| adopt::Listening { inode: *inode, ipv6 })
            .collect();
        prop_assert_eq!(adopt::parse_listeners(&text, port, ipv6), want);
    }

    #[test]
    fn escaped_mount_points_parse_back(
        paths in proptest::collection::vec(fuzz::junk(20).prop_map(|p| format!("/{p}")), 1..5),
        cgroup2 in any::<proptest::sample::Index>(),
    ) {
        let pick = cgroup2.index(paths.len());
        let text: String = paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let fstype = if i == pick { "cgroup2" } else { "tmpfs" };
                format!("{} 1 0:{i} / {} rw,relatime shared:{i} - {fstype} none rw\n", 20 + i, escape(p))
            })
            .collect();
        let mounts = redirect_sys::parse_mountinfo(&text);
        let points: Vec<PathBuf> = mounts.iter().map(|m| m.mount_point.clone()).collect();
        prop_assert_eq!(points, paths.iter().map(PathBuf::from).collect::<Vec<_>>());
        let want = PathBuf::from(&paths[pick]);
        prop_assert_eq!(redirect_sys::cgroup2_mount_in(&mounts), Some(want.as_path()));
    }
}
