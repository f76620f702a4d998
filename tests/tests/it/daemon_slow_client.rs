//! No client can hold the thread that serves pods (issue 46, finding 2): requests are read off
//! it, each whole before one deadline. A client that sends a byte of its request every 300 ms,
//! and 20 that connect and send nothing, are refused at the deadline, each by its own task,
//! while `redirect list` and an enrollment are answered meanwhile (before this, one byte every
//! few seconds kept every other request waiting for as long as the client liked).
use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    time::{Duration, Instant},
};

use redirect_testkit::{privileged, Netns};
use redirect_tests::node::Node;

/// What a client that trickles `{"v":2,"call":"list"}` a byte every 300 ms is answered.
fn trickle(socket: std::path::PathBuf) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let stream = UnixStream::connect(socket).expect("connect");
        for byte in br#"{"v":2,"call":"list"}"# {
            if (&stream).write_all(&[*byte]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut answer = String::new();
        let _ = BufReader::new(&stream).read_line(&mut answer);
        answer
    })
}

#[test]
fn a_trickling_client_and_idle_connections_hold_no_other_request() {
    privileged!();
    let node = Node::new();
    let _daemon = node.daemon();
    let socket = node.dir.join("daemon.sock");
    let slow = trickle(socket.clone());
    let idle: Vec<UnixStream> = (0..20)
        .map(|_| UnixStream::connect(&socket).expect("an idle connection"))
        .collect();

    let start = Instant::now();
    node.ok(&["list", "--json"]);
    let ns = Netns::new("rslow").expect("netns");
    let netns = ns.path().display().to_string();
    node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-u 1337 -i '*'",
    ]);
    let served = start.elapsed();

    let answer = slow.join().expect("the trickling client");
    for stream in &idle {
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut line = String::new();
        let _ = BufReader::new(stream).read_line(&mut line);
        assert!(
            line.contains("did not arrive whole"),
            "an idle connection: {line}"
        );
    }
    // A liveness bound, not a performance figure: the clients above take 6 s or more.
    assert!(
        served < Duration::from_secs(5),
        "list and enroll waited {served:?} on the slow clients"
    );
    assert!(
        answer.contains("did not arrive whole within 1000 ms"),
        "the trickling client: {answer}"
    );
    node.ok(&["unenroll", "--netns", &netns]);
}
