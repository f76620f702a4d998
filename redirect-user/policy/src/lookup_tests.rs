//! Tests of the pod-file sources: order, refusal sentences, agreement between views.
use super::lookup::*;

/// A source with fixed views per file.
struct Fixed(&'static str, Vec<(PodFile, &'static str, &'static str)>);

impl PodSource for Fixed {
    fn describe(&self) -> String {
        self.0.into()
    }
    fn views(&self, file: PodFile) -> Result<Vec<View>, LookupError> {
        Ok(self
            .1
            .iter()
            .filter(|(f, _, _)| *f == file)
            .map(|(_, text, from)| View {
                text: (*text).into(),
                from: (*from).into(),
            })
            .collect())
    }
}

fn sources(list: Vec<Fixed>) -> Sources {
    Sources::new(
        "/run/netns/pod",
        list.into_iter()
            .map(|s| Box::new(s) as Box<dyn PodSource>)
            .collect(),
    )
}

#[test]
fn the_first_source_that_sees_a_file_answers() {
    let s = sources(vec![
        Fixed("pod spec", vec![]),
        Fixed(
            "procs",
            vec![(PodFile::ResolvConf, "nameserver 10.96.0.10\n", "pid 7")],
        ),
        Fixed(
            "later",
            vec![(PodFile::ResolvConf, "nameserver 9.9.9.9\n", "x")],
        ),
    ]);
    assert_eq!(s.resolv_conf().unwrap().from, "pid 7");
}

#[test]
fn no_source_names_the_file_the_namespace_and_each_source() {
    let s = sources(vec![Fixed("no process runs in /run/netns/pod", vec![])]);
    let e = s.resolv_conf().unwrap_err().to_string();
    assert!(
        e.contains("/etc/resolv.conf")
            && e.contains("/run/netns/pod")
            && e.contains("no process runs")
            && e.contains("host's own files are never used"),
        "{e}"
    );
    assert!(matches!(
        s.user_uid("x"),
        Err(LookupError::NoSource {
            file: "/etc/passwd",
            ..
        })
    ));
}

#[test]
fn names_are_searched_in_every_view_and_must_agree() {
    let s = sources(vec![Fixed(
        "procs",
        vec![
            (PodFile::Passwd, "root:x:0:0::/:/bin/sh\n", "app"),
            (
                PodFile::Passwd,
                "istio-proxy:x:1337:1337::/:/bin/sh\n",
                "sidecar",
            ),
            (PodFile::Group, "java:x:1001:\n", "app"),
            (PodFile::Group, "java:x:2002:\n", "sidecar"),
        ],
    )]);
    assert_eq!(
        s.user_uid("istio-proxy").unwrap(),
        Id::Found {
            id: 1337,
            from: "sidecar".into()
        }
    );
    assert_eq!(
        s.user_uid("nobody").unwrap(),
        Id::NotListed {
            searched: "app, sidecar".into()
        }
    );
    let e = s.group_gid("java").unwrap_err().to_string();
    assert!(
        e.contains("1001 in app") && e.contains("2002 in sidecar"),
        "{e}"
    );
}

#[test]
fn resolv_confs_of_one_source_must_agree() {
    let s = sources(vec![Fixed(
        "procs",
        vec![
            (PodFile::ResolvConf, "nameserver 10.96.0.10\n", "a"),
            (
                PodFile::ResolvConf,
                "search x\nnameserver 10.96.0.10\n",
                "b",
            ),
        ],
    )]);
    assert_eq!(s.resolv_conf().unwrap().from, "a");
    let s = sources(vec![Fixed(
        "procs",
        vec![
            (PodFile::ResolvConf, "nameserver 10.96.0.10\n", "a"),
            (PodFile::ResolvConf, "nameserver 1.1.1.1\n", "b"),
        ],
    )]);
    let e = s.resolv_conf().unwrap_err().to_string();
    assert!(
        e.contains("[10.96.0.10] in a") && e.contains("[1.1.1.1] in b"),
        "{e}"
    );
}
