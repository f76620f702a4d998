//! The JSON contract (issue 32, item 4): every `--json` output of the CLI and every answer
//! frame of the daemon socket is checked against the schemas in `docs/schema`, on a node with
//! a daemon enrollment, an `istio-iptables` policy and a `vm`, real decisions traced both ways.
use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use redirect_testkit::{privileged, reference::INJECT_MANIFESTS, Netns};
use redirect_tests::{
    bin_path,
    conformance::{inbound_at, reach, World},
    node::Node,
};
use serde_json::Value;

fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/schema")
}

fn read(name: &str) -> Value {
    let path = schema_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// Serves the schemas' references to each other (`https://redirect.dev/schema/NAME`) from
/// `docs/schema`, never from the network.
struct FromDocs;

impl jsonschema::Retrieve for FromDocs {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let name = uri
            .as_str()
            .strip_prefix("https://redirect.dev/schema/")
            .ok_or_else(|| format!("{} is not one of ours", uri.as_str()))?;
        Ok(read(name))
    }
}

/// The validator of `name`, its references to the other schemas resolved from the directory.
fn schema(name: &str) -> jsonschema::Validator {
    jsonschema::options()
        .with_retriever(FromDocs)
        .build(&read(&format!("{name}.schema.json")))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn check(name: &str, what: &str, value: &Value) {
    let v = schema(name);
    let errors: Vec<String> = v
        .iter_errors(value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not match {name}.schema.json:\n{}\n{value:#}",
        errors.join("\n")
    );
}

fn json(node: &Node, args: &[&str]) -> Value {
    let out = node.ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

/// One raw request frame to the daemon's socket, its answer frame.
fn frame(socket: &Path, request: &str) -> Value {
    let mut s = UnixStream::connect(socket).expect("connect to the daemon");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    BufReader::new(&s)
        .read_line(&mut answer)
        .expect("an answer");
    serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{answer:?}: {e}"))
}

#[test]
fn every_json_output_and_answer_frame_matches_its_schema() {
    privileged!();
    let node = Node::new();
    let w = World::new("rjc", false);
    let pod = w.pod.path().display().to_string();
    let vm_ns = Netns::new("rjv").expect("netns");
    let vm = vm_ns.path().display().to_string();
    let other = Netns::new("rje").expect("netns");
    let enrolled = other.path().display().to_string();
    let env = concat!(env!("CARGO_MANIFEST_DIR"), "/data/istio/vm-cluster.env");

    check("probe", "probe --json", &json(&node, &["probe", "--json"]));
    node.apply(
        w.pod.path().as_path(),
        &["-u", "1337", "-i", "*", "-b", "*"],
    );
    node.ok(&[
        "vm",
        "--cluster-env",
        env,
        "--netns",
        &vm,
        "--args",
        "-u 1337 --dns-servers 192.0.2.53",
    ]);
    let (_daemon, _) = node.daemon_with(&[]);
    node.ok(&[
        "enroll",
        "--netns",
        &enrolled,
        "--istio-args",
        "-u 1337 -i '*'",
    ]);

    let list = json(&node, &["list", "--json"]);
    assert_eq!(list.as_array().map(Vec::len), Some(3), "{list}");
    check("list", "list --json", &list);

    // Real decisions, both ways, traced while they happen.
    let trace = redirect_tests::trace::start(&node, &pod, 2);
    let _ = reach(&w, node.cgroup.path(), (1000, 1000), "192.0.2.10:80");
    let _ = inbound_at(&w, &[8080]);
    let events = redirect_tests::trace::events(&trace, 2);
    let mut directions = Vec::new();
    for event in &events {
        check("trace-event", "trace --json", event);
        directions.push(event["direction"].as_str().unwrap_or_default().to_owned());
    }
    directions.sort();
    assert_eq!(directions, ["inbound", "outbound"]);

    let stats = json(&node, &["stats", "--json"]);
    check("stats", "stats --json", &stats);
    let status = json(&node, &["status", "--json"]);
    check("status", "status --json", &status);
    // The schema names every counter the code has (status lists them all, zeros included).
    let mut counted: Vec<&str> = status["node"]["counters"]
        .as_object()
        .expect("counters")
        .keys()
        .map(String::as_str)
        .collect();
    let stats_schema = read("stats.schema.json");
    let mut required: Vec<&str> = stats_schema["$defs"]["NsStats"]["properties"]["counters"]
        ["required"]
        .as_array()
        .expect("required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    counted.sort_unstable();
    required.sort_unstable();
    assert_eq!(counted, required, "stats.schema.json names every counter");

    for args in [
        vec![
            "explain",
            "--netns",
            &pod,
            "--uid",
            "1000",
            "--dst",
            "10.1.1.1:80",
            "--json",
        ],
        vec![
            "explain",
            "--inbound",
            "--netns",
            &pod,
            "--src",
            "10.200.0.1:4000",
            "--dst",
            "10.200.0.2:8080",
            "--json",
        ],
    ] {
        check("explain", &args.join(" "), &json(&node, &args));
    }
    let cgroup = node.cgroup.path().display().to_string();
    let out = node.run(&[
        "validate",
        "--netns",
        &pod,
        "--cgroup",
        &cgroup,
        "--json",
        "--timeout-ms",
        "2000",
    ]);
    let report: Value = serde_json::from_slice(&out.stdout).expect("validate --json");
    check("validate", "validate --json", &report);

    // The daemon socket's frames: answers and a refusal.
    let socket = node.dir.join("daemon.sock");
    for (request, ok) in [
        ("{\"v\":2,\"call\":\"list\"}\n", true),
        ("{\"v\":2,\"call\":\"status\"}\n", true),
        (
            "{\"v\":2,\"call\":\"unenroll\",\"netns\":\"/run/netns/nothing-here-rjc\"}\n",
            true,
        ),
        ("{\"v\":2,\"call\":\"frobnicate\"}\n", false),
    ] {
        let answer = frame(&socket, request);
        assert_eq!(answer["ok"], ok, "{request}: {answer}");
        check("daemon-answer", request.trim(), &answer);
    }
    node.ok(&["uninstall"]);
}

#[test]
fn pod_policy_json_matches_its_schema_for_every_manifest() {
    for name in INJECT_MANIFESTS {
        let file = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("data/istio/inject/{name}.injected"));
        let out = Command::new(bin_path("redirect"))
            .arg("pod-policy")
            .arg(&file)
            .arg("--json")
            .output()
            .expect("pod-policy");
        assert!(out.status.success(), "{name}: {out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        check("pod-policy", name, &v);
    }
}
