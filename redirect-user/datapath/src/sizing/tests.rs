//! Unit tests of the node's sizing: quotas, map sizes and their checks.
use super::*;

#[test]
fn default_sizing_follows_the_quotas() {
    let q = Quotas::default();
    assert_eq!(Quotas::decode(&q.encode()), Some(q));
    assert_eq!(q.handshakes, (16_384 - 1024) / 111);
    assert_eq!(
        q.to_string(),
        "max-pods=110,ports=1024,cidrs=1024,addresses=64,interfaces=16,routes=4096,handshakes=138,max-connections=16384,inbound=8192"
    );
    q.validate().expect("the defaults hold every quota at once");
    let sizes = q.map_sizes();
    let size = |name| sizes.iter().find(|(n, _)| *n == name).map(|(_, s)| *s);
    assert_eq!(size(map_names::NETNS_OUTBOUND), Some(111));
    assert_eq!(size(map_names::INBOUND_PORTS), Some(111 * 2048));
    assert_eq!(size(map_names::POD_ADDRS), Some(111 * 64));
    assert_eq!(size(map_names::TRACKED), Some(16_384));
    assert_eq!(size(map_names::LOCAL_CONNECTS), Some(16_384));
    assert_eq!(size(map_names::INBOUND), Some(Quotas::inbound_for(16_384)));
    assert!((8192..=65_536).contains(&q.inbound));
    assert!(sizes.iter().all(|(_, s)| *s > 0));
}

#[test]
fn a_quota_the_connection_maps_cannot_hold_for_every_namespace_is_refused() {
    let q = Quotas {
        handshakes: 2048,
        ..Quotas::default()
    };
    let e = q.validate().expect_err("111 x 2048 + 1024 > 16384");
    assert!(
        e.contains("--quota-handshakes 2048")
            && e.contains("at least 228352")
            && e.contains("not 16384")
            && e.contains("--max-connections"),
        "{e}"
    );
    q.with_connections(228_352)
        .validate()
        .expect("exactly enough");
    // A node of many pods gets a default that holds 16 hand-offs for each.
    let big = Quotas {
        max_pods: 20_000,
        ..Quotas::default()
    };
    let m = Quotas::default_max_connections(20_000);
    let big = Quotas {
        handshakes: Quotas::handshakes_for(20_000, m),
        ..big
    }
    .with_connections(m);
    assert_eq!(big.handshakes, 16);
    big.validate().expect("the default fits");
}

#[test]
fn an_old_record_sizes_the_connection_maps_as_they_were() {
    for (pods, quota) in [(110, 2048), (4, 32)] {
        let old: RawV1 = [MAGIC, pods, 1024, 1024, 64, 16, 4096, quota];
        let q = Quotas::decode_v1(&old).expect("v1 record");
        let sizes = q.map_sizes();
        let size = |name| sizes.iter().find(|(n, _)| *n == name).map(|(_, s)| *s);
        assert_eq!(size(map_names::TRACKED), Some((pods + 1) * quota + 1024));
        assert_eq!(size(map_names::INBOUND), Some(65_536), "the old fixed LRU");
        assert_eq!(Quotas::decode(&q.encode()), Some(q), "kept as it was");
    }
    assert_eq!(Quotas::decode(&[0; 10]), None);
}
