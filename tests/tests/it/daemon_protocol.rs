//! The daemon's socket under hostile frames: an over-long line, bytes that are not JSON,
//! every truncation of a valid request, and a policy the istio-iptables parser would refuse
//! (over the socket and through `enroll --policy`). Each is refused naming what is wrong,
//! nothing is enrolled, and the daemon goes on answering.
use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::Path,
    time::Duration,
};

use redirect_testkit::{privileged, Netns};
use redirect_tests::node::Node;
use serde_json::{json, Value};

/// Sends `frame` as is and returns the daemon's answer.
fn send(socket: &Path, frame: &[u8]) -> Value {
    let mut s = UnixStream::connect(socket).expect("connect to the daemon");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    // The daemon may answer (and close) before it has read an over-long frame to the end.
    let _ = s.write_all(frame);
    let mut answer = String::new();
    BufReader::new(&s)
        .read_line(&mut answer)
        .expect("an answer");
    serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{answer:?}: {e}"))
}

fn refused(answer: &Value, expect: &str) {
    assert_eq!(answer["ok"], false, "{answer}");
    let error = answer["error"].as_str().unwrap_or_default();
    assert!(error.contains(expect), "{expect:?} not in {error:?}");
}

/// The default policy with `proxy_uids` emptied: the proxy's own traffic would be captured.
fn no_proxy_uid() -> Value {
    let mut policy = redirect_policy_default();
    policy["proxy_uids"] = json!([]);
    policy
}

/// istio-iptables' defaults, as `redirect istio-iptables --dry-run` would resolve them.
fn redirect_policy_default() -> Value {
    json!({
        "proxy_port": 15001, "inbound_capture_port": 15006, "tunnel_port": 15008,
        "proxy_uids": [1337], "proxy_gids": [1337], "mode": "Redirect",
        "include_cidrs": {"List": []}, "exclude_cidrs": [], "include_ports": [],
        "exclude_ports": [], "inbound_ports": {"List": []}, "inbound_exclude_ports": [],
        "exclude_interfaces": [], "kube_virt_interfaces": [], "redirect_dns": false,
        "capture_all_dns": false, "dns_servers": [], "owner_groups": "All",
        "ipv4_loopback_cidr": "127.0.0.1/32", "dual_stack": false, "drop_invalid": false
    })
}

#[test]
fn hostile_frames_are_refused_by_name_and_the_daemon_goes_on() {
    privileged!();
    let node = Node::new();
    let pod = Netns::new("rdf").expect("pod namespace");
    let _daemon = node.daemon();
    let socket = node.dir.join("daemon.sock");

    let mut long = vec![b' '; (1 << 20) + 16];
    long.push(b'\n');
    refused(&send(&socket, &long), "longer than 1048576 bytes");
    refused(&send(&socket, b"\xff\xfe{\n"), "request is not JSON");
    refused(
        &send(&socket, b"[1,2]\n"),
        "request is an array, not an object",
    );
    refused(
        &send(&socket, b"{\"v\":2,\"call\":\"enrol\"}\n"),
        "unknown call \"enrol\"",
    );
    // A client of another protocol version (or of none: before versions) is told so.
    refused(
        &send(&socket, b"{\"op\":\"list\"}\n"),
        "request of protocol version 1, this daemon speaks 2",
    );
    refused(
        &send(&socket, b"{\"v\":3,\"call\":\"list\"}\n"),
        "request of protocol version 3, this daemon speaks 2",
    );

    let netns = pod.path().display().to_string();
    let request = json!({"v": 2, "call": "enroll", "netns": netns, "policy": no_proxy_uid(), "source": "test"});
    refused(
        &send(&socket, format!("{request}\n").as_bytes()),
        "policy.proxy_uids",
    );
    let mut valid = json!({"v": 2, "call": "enroll", "netns": netns, "policy": redirect_policy_default(), "source": "test"})
        .to_string()
        .into_bytes();
    for cut in (0..valid.len()).step_by(9) {
        let mut frame = valid[..cut].to_vec();
        frame.push(b'\n');
        assert_eq!(
            send(&socket, &frame)["ok"],
            false,
            "{}",
            String::from_utf8_lossy(&frame)
        );
    }

    // `enroll --policy FILE` refuses it before asking the daemon.
    let file = node.dir.join("no-proxy-uid.json");
    std::fs::write(&file, no_proxy_uid().to_string()).expect("write the policy file");
    let out = node.run(&[
        "enroll",
        "--netns",
        &netns,
        "--policy",
        &file.display().to_string(),
    ]);
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("policy.proxy_uids") && stderr.contains("names no uid"),
        "{stderr}"
    );

    // Nothing was enrolled, and the daemon still answers.
    let list = send(&socket, b"{\"v\":2,\"call\":\"list\"}\n");
    assert_eq!(
        (list["v"].as_u64(), &list["ok"]),
        (Some(2), &json!(true)),
        "{list}"
    );
    assert_eq!(list["answer"]["enrollments"], json!([]), "{list}");
    valid.push(b'\n');
    assert_eq!(
        send(&socket, &valid)["ok"],
        true,
        "the valid request enrolls"
    );
    node.ok(&["uninstall"]);
}
