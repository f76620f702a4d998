//! A client that asks for a large answer and never reads it cannot stop the daemon answering
//! others (issue 31, finding 9): with many enrollments of large policies `list` is megabytes,
//! more than a socket holds; what does not fit waits for its client in that connection's task.
//! Another `redirect list` is answered while the first client is still connected and reading
//! nothing, and the first client, when it finally reads, gets the whole answer.
use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    time::Duration,
};

use redirect_testkit::{eventually, privileged, Netns};
use redirect_tests::node::Node;

/// Enrollments, and the ports and CIDRs of each one's policy (within the daemon's quotas).
const NAMESPACES: usize = 24;
const EACH: usize = 900;

fn big_args(i: usize) -> String {
    let cidrs: Vec<String> = (0..EACH)
        .map(|j| format!("10.{i}.{}.{}/32", j / 256, j % 256))
        .collect();
    let ports: Vec<String> = (0..EACH).map(|j| (20_000 + j).to_string()).collect();
    format!(
        "-u 1337 -i '*' -x {} -d {} -o {}",
        cidrs.join(","),
        ports.join(","),
        ports.join(",")
    )
}

#[test]
fn a_client_that_never_reads_a_large_answer_holds_no_other_request() {
    privileged!();
    let node = Node::new();
    let quotas = [
        "--max-pods",
        "30",
        "--quota-cidrs",
        "1000",
        "--quota-ports",
        "1000",
    ];
    let (_daemon, _) = node.daemon_with(&quotas);
    let namespaces: Vec<Netns> = (0..NAMESPACES)
        .map(|_| Netns::new("rsr").expect("netns"))
        .collect();
    for (i, ns) in namespaces.iter().enumerate() {
        let netns = ns.path().display().to_string();
        node.ok(&["enroll", "--netns", &netns, "--istio-args", &big_args(i)]);
    }
    let size = node.ok(&["list", "--json"]).len();
    assert!(
        size > 1 << 20,
        "the answer ({size} bytes) fits a socket: no test"
    );

    // Asks and reads nothing.
    let mut stuck = UnixStream::connect(node.dir.join("daemon.sock")).expect("connect");
    stuck
        .write_all(b"{\"v\":2,\"call\":\"list\"}\n")
        .expect("ask");
    let mut other = node
        .cmd(&["list"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redirect list");
    let answered = eventually(
        "another list to be answered while the first client reads nothing",
        Duration::from_secs(30),
        || match other.try_wait() {
            Ok(Some(status)) => Ok(status),
            _ => Err("still waiting"),
        },
    );
    if answered.is_err() {
        let _ = other.kill();
        let _ = other.wait();
    }
    let status = answered.unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success(), "the other list: {status}");

    // The first client reads at last: all of it.
    stuck
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut line = String::new();
    BufReader::new(&stuck).read_line(&mut line).expect("read");
    assert!(
        line.len() > 1 << 20 && line.ends_with('\n'),
        "{} bytes",
        line.len()
    );
    for ns in &namespaces {
        let netns = ns.path().display().to_string();
        node.ok(&["unenroll", "--netns", &netns]);
    }
}
