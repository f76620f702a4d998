//! The sockmap question, part (a) (issue 34, item 5): a socket accepted from a listener the
//! datapath keeps in its `LISTENERS` sockhash (the proxy's inbound listener, which sk_lookup
//! steers to) behaves as any other socket: FIONREAD answers at every read wake-up,
//! edge-triggered epoll wakes reads and writes, and `splice(2)` moves 1 GiB from it to another
//! TCP socket, the SHA-256 of both streams compared end to end. Run on every kernel of the
//! matrix (`cargo xtask test --kernel`).
use std::time::Duration;

use redirect_testkit::{privileged, Child};
use redirect_tests::{bin_path, conformance::World, node::Node};
use serde_json::Value;

const GIB: u64 = 1 << 30;
const REPLY: u64 = 64 << 20;

fn probe(name: &str, args: &[String]) -> Child {
    let mut c = std::process::Command::new(bin_path("probe-splice"));
    c.args(args);
    Child::spawn(name, c).expect("probe-splice")
}

fn result(child: &mut Child, what: &str) -> Value {
    let line = child
        .wait_line(what, Duration::from_secs(600), |l| l.starts_with('{'))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    serde_json::from_str(&line).expect("one JSON line")
}

#[test]
fn a_socket_accepted_from_a_listener_in_listeners_splices_a_gib_and_wakes_as_any_other() {
    privileged!();
    let node = Node::new();
    let w = World::new("ras", false);
    node.apply(
        w.pod.path().as_path(),
        &["-u", "1337", "-i", "*", "-b", "*"],
    );
    let (pod, world) = (
        w.pod.path().display().to_string(),
        w.world.path().display().to_string(),
    );
    let cgroup = node.cgroup.path().display().to_string();
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    let mut sink = probe(
        "sink",
        &s(&["sink", "--netns", &world, "--listen", "192.0.2.10:9000"]),
    );
    sink.wait_line("sink", Duration::from_secs(10), |l| {
        l.starts_with("listening")
    })
    .expect("sink listening");
    // The pod's proxy: uid 1337 in the pod's cgroup, its inbound listener on 15006.
    let reply = REPLY.to_string();
    let mut relay = probe(
        "relay",
        &s(&[
            "relay",
            "--netns",
            &pod,
            "--cgroup",
            &cgroup,
            "--uid",
            "1337",
            "--gid",
            "1337",
            "--listen",
            "[::]:15006",
            "--forward",
            "192.0.2.10:9000",
            "--reply",
            &reply,
        ]),
    );
    relay
        .wait_line("relay", Duration::from_secs(10), |l| {
            l.starts_with("listening")
        })
        .expect("relay listening");
    // A client of the world connects to the pod's application port: steered to 15006.
    let bytes = GIB.to_string();
    let mut send = probe(
        "send",
        &s(&[
            "send",
            "--netns",
            &world,
            "--connect",
            "10.200.0.2:8080",
            "--bytes",
            &bytes,
        ]),
    );
    let sent = result(&mut send, "the sender's result");
    let relayed = result(&mut relay, "the relay's result");
    let received = result(&mut sink, "the sink's result");

    assert_eq!(sent["sent"], GIB, "{sent}");
    assert_eq!(relayed["relayed"], GIB, "{relayed}");
    assert_eq!(received["received"], GIB, "{received}");
    assert_eq!(
        received["sha256"], sent["sha256"],
        "the spliced stream arrived whole"
    );
    assert_eq!(sent["reply_received"], REPLY, "{sent}");
    assert_eq!(
        sent["reply_sha256"], relayed["reply_sha256"],
        "the reply arrived whole"
    );
    assert_eq!(
        relayed["fionread_zero_on_wakeup"], 0,
        "every read wake-up had bytes to read (or was the end): {relayed}"
    );
    assert!(
        relayed["read_wakeups"].as_u64().unwrap_or(0) > 0,
        "{relayed}"
    );
    assert!(
        relayed["peer"]
            .as_str()
            .is_some_and(|p| p.contains("10.200.0.1")),
        "the accepted socket is the client's own connection: {relayed}"
    );
    // Through sk_lookup to the listener in LISTENERS, not a direct accept.
    let stats: Value =
        serde_json::from_str(&node.ok(&["stats", "--netns", &pod, "--json"])).expect("stats");
    assert_eq!(stats[0]["counters"]["inbound_steered"], 1, "{stats}");
    eprintln!("sent {sent}\nrelayed {relayed}\nreceived {received}");
    node.ok(&["istio-iptables", "--netns", &pod, "--cleanup-only"]);
}
