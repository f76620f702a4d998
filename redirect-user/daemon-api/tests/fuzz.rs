//! Property tests ("fuzz" target) of the daemon socket protocol and its enrollment files:
//! frames of random length and bytes, random JSON, valid requests with one field replaced or
//! removed, and every request and enrollment round-tripped. Bounded by default;
//! `PROPTEST_CASES=100000 cargo test -p redirect-daemon-api --test fuzz` runs longer.
// A test target links every dependency of its package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::io::Cursor;
use std::path::PathBuf;

use proptest::prelude::*;
use redirect_daemon_api::{
    decode_enrollment, decode_request, encode_request, read_frame, DecodeError,
    EnrollmentRecord as Enrollment, PodRef, Request, MAX_REQUEST_BYTES,
};
use redirect_policy::{Cidrs, Policy};
use redirect_testkit::fuzz;
use serde_json::Value;

fn policy() -> impl Strategy<Value = Policy> {
    (
        1..=u16::MAX,
        proptest::collection::vec(any::<u32>(), 1..=redirect_policy::MAX_OWNER_IDS),
        any::<bool>(),
        proptest::collection::vec("[a-z][a-z0-9]{0,14}", 0..3),
    )
        .prop_map(|(proxy_port, proxy_uids, all, exclude_interfaces)| Policy {
            proxy_port,
            proxy_gids: proxy_uids.clone(),
            proxy_uids,
            include_cidrs: if all {
                Cidrs::All
            } else {
                Cidrs::List(Vec::new())
            },
            exclude_interfaces,
            ..Policy::default()
        })
}

fn path() -> impl Strategy<Value = PathBuf> {
    fuzz::junk(16).prop_map(PathBuf::from)
}

/// Every kind of request (the match keeps this in step with [`Request`]).
fn request() -> impl Strategy<Value = Request> {
    (0u8..9, path(), policy(), fuzz::junk(16)).prop_map(|(kind, netns, policy, source)| {
        let pod = PodRef {
            namespace: source.clone(),
            name: source.clone(),
            uid: source.clone(),
            container_id: source.clone(),
        };
        let ips = vec![std::net::IpAddr::from([10, 0, 0, 2])];
        let r = match kind {
            0 => Request::Enroll {
                netns,
                policy: Box::new(policy),
                source,
                writer: redirect_daemon_api::Writer::IstioIptables,
            },
            1 => Request::Unenroll { netns },
            2 => Request::List,
            3 => Request::PodAdd { pod, netns, ips },
            4 => Request::PodDel {
                pod,
                netns: Some(netns),
            },
            5 => Request::PodCheck { pod, netns, ips },
            6 => Request::PodGc {
                valid: vec![source],
            },
            7 => Request::Status,
            _ => Request::Uninstall,
        };
        match &r {
            Request::Enroll { .. }
            | Request::Unenroll { .. }
            | Request::List
            | Request::PodAdd { .. }
            | Request::PodDel { .. }
            | Request::PodCheck { .. }
            | Request::PodGc { .. }
            | Request::Status
            | Request::Uninstall => r,
        }
    })
}

fn enrollment() -> impl Strategy<Value = Enrollment> {
    let addr = prop_oneof![
        any::<[u8; 4]>().prop_map(std::net::IpAddr::from),
        any::<[u16; 8]>().prop_map(std::net::IpAddr::from),
    ];
    (
        path(),
        any::<u64>(),
        fuzz::junk(16),
        policy(),
        proptest::collection::vec(addr, 0..3),
        any::<[bool; 2]>(),
    )
        .prop_map(
            |(netns, cookie, source, policy, addrs, [ipv6, inbound])| Enrollment {
                netns,
                cookie: cookie.into(),
                source,
                policy,
                addrs,
                ipv6,
                inbound,
                pod: None,
                writer: redirect_daemon_api::Writer::Vm,
            },
        )
}

fn json() -> impl Strategy<Value = Value> {
    let calls = &[
        "enroll",
        "unenroll",
        "list",
        "uninstall",
        "pod_add",
        "pod_del",
        "status",
    ];
    fuzz::json(calls, &["v", "call", "netns", "policy", "source"])
}

fn as_object(v: &impl serde::Serialize) -> serde_json::Map<String, Value> {
    match serde_json::to_value(v).expect("serializes") {
        Value::Object(o) => o,
        other => panic!("not an object: {other}"),
    }
}

/// A refusal that names `field` (or, for a replaced policy, a field inside it).
fn names_field(e: &DecodeError, field: &str) -> bool {
    let msg = e.to_string();
    match e {
        DecodeError::UnknownOp(op) => field == "call" && fuzz::names(&msg, op),
        DecodeError::Version { .. } => field == "v",
        // A replaced op asks for its own fields, naming the first one missing.
        DecodeError::Missing { field: f, .. } => *f == field || field == "call",
        DecodeError::Field { field: f, .. } => f.split(['.', '[']).next() == Some(field),
        DecodeError::Policy { .. } => field == "policy" && msg.contains("policy"),
        _ => false,
    }
}

proptest! {
    #![proptest_config(fuzz::config(256))]

    #[test]
    fn random_frames_never_panic(bytes in prop_oneof![fuzz::bytes(300),
        json().prop_map(|v| v.to_string().into_bytes())]) {
        let mut framed = bytes.clone();
        framed.push(b'\n');
        let line = read_frame(Cursor::new(framed)).expect("a line");
        prop_assert_eq!(&line, &bytes[..bytes.iter().position(|b| *b == b'\n').unwrap_or(bytes.len())]);
        if let Err(e) = decode_request(&line) {
            prop_assert!(!e.to_string().is_empty());
        }
        let _ = decode_enrollment(&bytes);
    }

    #[test]
    fn frames_longer_than_the_limit_are_refused(extra in 1usize..64, newline in any::<bool>()) {
        let mut frame = vec![b' '; MAX_REQUEST_BYTES + extra];
        if newline {
            frame.push(b'\n');
        }
        let e = read_frame(Cursor::new(frame)).expect_err("too long");
        prop_assert!(e.to_string().contains(&MAX_REQUEST_BYTES.to_string()), "{}", e);
    }

    #[test]
    fn requests_round_trip(req in request()) {
        let line = encode_request(&req).expect("serializes");
        let back = decode_request(line.trim_end().as_bytes()).map_err(|e| e.to_string());
        prop_assert_eq!(
            back.map(|b| serde_json::to_value(b).expect("serializes")),
            Ok(serde_json::to_value(&req).expect("serializes"))
        );
    }

    #[test]
    fn a_request_with_one_field_replaced_or_removed_names_it(
        req in request(),
        which in any::<proptest::sample::Index>(),
        replacement in proptest::option::of(json()),
    ) {
        let mut obj: serde_json::Map<String, Value> =
            serde_json::from_str(&encode_request(&req).expect("serializes")).expect("an object");
        let field = obj.keys().nth(which.index(obj.len())).expect("a field").clone();
        match replacement {
            Some(v) => obj.insert(field.clone(), v),
            None => obj.remove(&field),
        };
        let line = serde_json::to_vec(&Value::Object(obj)).expect("serializes");
        if let Err(e) = decode_request(&line) {
            prop_assert!(names_field(&e, &field), "{:?} {}: {}", field, e, String::from_utf8_lossy(&line));
        }
    }

    #[test]
    fn enrollments_round_trip_and_a_replaced_field_is_named(
        e in enrollment(),
        which in any::<proptest::sample::Index>(),
        replacement in json(),
    ) {
        let text = serde_json::to_vec_pretty(&e).expect("serializes");
        prop_assert_eq!(decode_enrollment(&text).map_err(|e| e.to_string()), Ok(e.clone()));
        let mut obj = as_object(&e);
        let field = obj.keys().nth(which.index(obj.len())).expect("a field").clone();
        obj.insert(field.clone(), replacement);
        let text = serde_json::to_vec(&Value::Object(obj)).expect("serializes");
        if let Err(err) = decode_enrollment(&text) {
            prop_assert!(names_field(&err, &field), "{:?}: {}", field, err);
        }
    }
}

/// A policy that would capture the proxy's own traffic (no proxy uid) or send to port 0 was
/// enrolled as given: the daemon now holds requests to what the istio-iptables parser checks.
#[test]
fn an_enroll_request_with_an_invalid_policy_is_refused_naming_the_field() {
    for (field, value) in [
        ("proxy_uids", serde_json::json!([])),
        ("proxy_port", serde_json::json!(0)),
    ] {
        let mut policy = as_object(&Policy::default());
        policy.insert(field.to_owned(), value);
        let line = serde_json::json!({"v": redirect_daemon_api::PROTOCOL_VERSION, "call": "enroll",
            "netns": "/run/netns/x", "policy": policy, "source": "test"});
        let e = decode_request(line.to_string().as_bytes()).expect_err("refused");
        assert!(e.to_string().contains(&format!("policy.{field}")), "{e}");
    }
}
