//! Every answer the daemon sends decodes back, through the client's reader, into the same
//! answer (compared re-encoded: the answer types carry no `PartialEq`), and a refusal of every
//! kind into the same refusal.
use proptest::prelude::*;
use redirect_common::NetnsCookie;
use redirect_policy::Policy;
use redirect_testkit::fuzz;
use serde::de::DeserializeOwned;

use super::{decode_answer, encode_answer, AnswerError};
use crate::{
    Answer, Enrolled, Enrollment, EnrollmentRecord, GcDone, Listed, PodAnswer, PodOutcome, PodRef,
    Refusal, RefusalKind, Status, Unenrolled, Uninstalled, Writer,
};

fn pod() -> impl Strategy<Value = PodRef> {
    (
        fuzz::junk(20),
        fuzz::junk(20),
        fuzz::junk(36),
        fuzz::junk(64),
    )
        .prop_map(|(namespace, name, uid, container_id)| PodRef {
            namespace,
            name,
            uid,
            container_id,
        })
}

fn enrollment() -> impl Strategy<Value = Enrollment> {
    let writer = prop::sample::select(vec![
        Writer::Enroll,
        Writer::Vm,
        Writer::Cni,
        Writer::Reconcile,
    ]);
    (
        (fuzz::junk(40), any::<u64>(), fuzz::junk(40)),
        proptest::collection::vec(any::<[u8; 4]>().prop_map(std::net::IpAddr::from), 0..3),
        (
            any::<[bool; 3]>(),
            proptest::option::of(pod()),
            writer,
            any::<u16>(),
        ),
    )
        .prop_map(
            |(
                (netns, cookie, source),
                addrs,
                ([ipv6, inbound, listening], pod, writer, outside),
            )| {
                Enrollment {
                    record: EnrollmentRecord {
                        netns: netns.into(),
                        cookie: NetnsCookie::from(cookie),
                        source,
                        policy: Policy::default(),
                        addrs,
                        ipv6,
                        inbound,
                        pod,
                        writer,
                    },
                    proxy_listening: listening,
                    outside_capture: usize::from(outside),
                }
            },
        )
}

fn answer() -> impl Strategy<Value = Answer> {
    let text = || fuzz::junk(60);
    prop_oneof![
        (text(), enrollment()).prop_map(|(message, enrollment)| Answer::Enrolled(Enrolled {
            message,
            enrollment
        })),
        (text(), any::<bool>())
            .prop_map(|(message, removed)| Answer::Unenrolled(Unenrolled { message, removed })),
        proptest::collection::vec(enrollment(), 0..3)
            .prop_map(|enrollments| Answer::Listed(Listed { enrollments })),
        text().prop_map(|message| Answer::Uninstalled(Uninstalled { message })),
        (
            text(),
            any::<bool>(),
            text(),
            proptest::option::of(enrollment())
        )
            .prop_map(
                |(message, meshed, decision, enrollment)| Answer::Pod(PodAnswer {
                    message,
                    pod: PodOutcome { meshed, decision },
                    enrollment,
                })
            ),
        (text(), proptest::collection::vec(text(), 0..3))
            .prop_map(|(message, removed)| Answer::Gc(GcDone { message, removed })),
        (
            text(),
            any::<u32>(),
            any::<u16>(),
            any::<u64>(),
            proptest::option::of(text()),
            proptest::option::of(text()),
            any::<u64>()
        )
            .prop_map(
                |(message, pid, enrolled, repairs, last_problem, alarm, cni_add_unreachable)| {
                    Answer::Status(Status {
                        message,
                        pid,
                        enrolled: usize::from(enrolled),
                        repairs,
                        last_problem,
                        alarm,
                        cni_add_unreachable,
                    })
                }
            ),
    ]
}

/// `line` decoded as the answer of `op` into `A`, re-encoded as `wrap` of it.
fn again<A: DeserializeOwned>(op: &str, line: &str, wrap: fn(A) -> Answer) -> String {
    match decode_answer::<A>(op, line) {
        Ok(a) => encode_answer(&Ok(wrap(a))),
        Err(e) => panic!("{op}: {e} in {line}"),
    }
}

proptest! {
    #[test]
    fn every_answer_round_trips(a in answer()) {
        let line = encode_answer(&Ok(a.clone()));
        let back = match a {
            Answer::Enrolled(_) => again("enroll", &line, Answer::Enrolled),
            Answer::Unenrolled(_) => again("unenroll", &line, Answer::Unenrolled),
            Answer::Listed(_) => again("list", &line, Answer::Listed),
            Answer::Uninstalled(_) => again("uninstall", &line, Answer::Uninstalled),
            Answer::Pod(_) => again("pod_add", &line, Answer::Pod),
            Answer::Gc(_) => again("pod_gc", &line, Answer::Gc),
            Answer::Status(_) => again("status", &line, Answer::Status),
        };
        prop_assert_eq!(back, line);
    }

    #[test]
    fn every_refusal_round_trips(kind in prop::sample::select(RefusalKind::ALL.to_vec()), message in fuzz::junk(80)) {
        let line = encode_answer(&Err(Refusal::new(kind, message.clone())));
        match decode_answer::<Status>("status", &line) {
            Err(AnswerError::Refused(r)) => prop_assert_eq!(r, Refusal::new(kind, message)),
            other => prop_assert!(false, "{other:?}"),
        }
    }
}
