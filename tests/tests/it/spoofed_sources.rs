//! Finding 11b: sk_lookup's exemptions for the proxy's passthrough source (`::6`) and for the
//! pod's own addresses hold only for connects made inside the pod (recorded by sock_ops before
//! the SYN leaves); a SYN from the wire claiming those sources is steered to the proxy like any
//! other. IPv4 wire packets with such sources never reach sk_lookup (martians).
use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    os::fd::AsRawFd,
    path::Path,
    time::Duration,
};

use nix::sys::{
    socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrStorage},
    time::TimeVal,
};
use redirect_testkit::{eventually, ip, netns::in_netns, privileged, Cgroup, Topology};
use redirect_tests::{client, Attach, ClientOpts, EchoServer, Proxy};

const POD6: &str = "2001:db8::1";
const WIRE6: &str = "2001:db8::2";

/// A TCP connect inside `ns` from `src` (which need not be local there when the namespace
/// allows non-local binds) to `dst`, each step bounded by `timeout`; the reply's first bytes,
/// or the error.
fn connect_from(ns: &Path, src: &str, dst: &str, timeout: Duration) -> Result<String, String> {
    let parse = |a: &str| {
        a.parse::<SocketAddr>()
            .unwrap_or_else(|e| panic!("{a}: {e}"))
    };
    let (src, dst) = (parse(src), parse(dst));
    in_netns(ns, move || {
        let family = if dst.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        let fd = socket::socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)
            .map_err(|e| format!("socket: {e}"))?;
        if dst.is_ipv4() {
            // IPv4's output route refuses a source that is not local without IP_TRANSPARENT.
            socket::setsockopt(&fd, sockopt::IpTransparent, &true).map_err(|e| e.to_string())?;
        }
        let tv = TimeVal::new(timeout.as_secs() as _, timeout.subsec_micros() as _);
        socket::setsockopt(&fd, sockopt::SendTimeout, &tv).map_err(|e| e.to_string())?;
        socket::setsockopt(&fd, sockopt::ReceiveTimeout, &tv).map_err(|e| e.to_string())?;
        socket::bind(fd.as_raw_fd(), &SockaddrStorage::from(src))
            .map_err(|e| format!("bind {src}: {e}"))?;
        // A blocking connect gives up after SO_SNDTIMEO.
        socket::connect(fd.as_raw_fd(), &SockaddrStorage::from(dst))
            .map_err(|e| format!("connect {src} -> {dst}: {e}"))?;
        let mut stream = TcpStream::from(fd);
        stream
            .write_all(b"hi\n")
            .map_err(|e| format!("send: {e}"))?;
        let mut reply = String::new();
        let _ = stream.read_to_string(&mut reply);
        Ok(reply)
    })
    .expect("enter the wire namespace")
}

fn ip_ok(args: &[&str]) {
    ip(args).expect("ip");
}

#[test]
fn wire_syns_claiming_passthrough_or_own_sources_are_steered() {
    privileged!();
    let topo = Topology::with_addresses("198.18.0.1", "198.18.0.2").expect("topology");
    let (pod, wire) = (topo.pod.name(), topo.server.name());
    ip_ok(&[
        "-n",
        pod,
        "addr",
        "add",
        &format!("{POD6}/64"),
        "dev",
        "eth0",
        "nodad",
    ]);
    ip_ok(&[
        "-n",
        wire,
        "addr",
        "add",
        &format!("{WIRE6}/64"),
        "dev",
        "eth0",
        "nodad",
    ]);
    // The wire may send from addresses it does not own; 127/8 sources may leave its eth0.
    topo.server
        .sysctl(&[
            "net.ipv4.ip_nonlocal_bind=1",
            "net.ipv6.ip_nonlocal_bind=1",
            "net.ipv4.conf.all.route_localnet=1",
            "net.ipv4.conf.eth0.route_localnet=1",
        ])
        .expect("sysctl");
    // `::6` lives on the wire's lo, and the pod (which has no ::6 of its own here) routes it
    // back over the veth: a wire SYN from ::6 then completes its handshake with whoever
    // takes it in the pod.
    ip_ok(&["-n", wire, "addr", "add", "::6/128", "dev", "lo", "nodad"]);
    ip_ok(&[
        "-n", pod, "route", "add", "::6/128", "via", WIRE6, "dev", "eth0",
    ]);

    let cgroup = Cgroup::new("rts").expect("cgroup");
    let _app4 = EchoServer::start(&topo.pod, "0.0.0.0:9080", "app4");
    let _app6 = EchoServer::start(&topo.pod, "[::]:9081", "app6");
    let spec = topo.pod.path().display().to_string();
    let attach = Attach::start(cgroup.path(), &["--inbound", &spec]);
    let _proxy = Proxy::start_with(&topo.pod, Some(cgroup.path()), &["--inbound", "[::]:15006"]);
    let wait = Duration::from_secs(2);

    // 1. From the wire, source ::6: captured (before the fix the app answered it directly).
    // Tried until one SYN is seen: the veth's link-local addresses may still be in DAD, and
    // neighbour discovery waits for them (seconds on a loaded machine).
    let dst6 = format!("[{POD6}]:9081");
    eventually("a wire SYN from ::6 to be steered", wait * 10, || {
        let r = connect_from(&topo.server.path(), "[::6]:0", &dst6, wait);
        assert!(
            !r.as_ref().is_ok_and(|reply| reply.contains("app6")),
            "a wire SYN from ::6 reached the app uncaptured: {r:?}"
        );
        match attach.counter("inbound_steered") {
            0 => Err(format!("not seen yet: {r:?}")),
            _ => Ok(()),
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(attach.counter("inbound_passthrough_source"), 0);
    let steered = attach.counter("inbound_steered");

    // 2. From the wire, source the pod's own address: captured (its SYN-ACK goes to the pod
    // itself, so the handshake never completes; the decision is what counts).
    let wire = topo.server.path();
    let spoof = std::thread::spawn(move || {
        connect_from(
            &wire,
            &format!("[{POD6}]:0"),
            &format!("[{POD6}]:9081"),
            wait,
        )
    });
    eventually(
        "a wire SYN from the pod's own address to be steered",
        wait * 3,
        || {
            let n = attach.counter("inbound_steered");
            if n > steered {
                Ok(())
            } else {
                Err(format!(
                    "inbound_steered={n} inbound_local={}",
                    attach.counter("inbound_local")
                ))
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let _ = spoof.join();
    assert_eq!(
        attach.counter("inbound_local"),
        0,
        "the wire is not the pod"
    );

    // 3. IPv4: the pod's kernel drops wire packets from 127.0.0.6 or its own address as
    // martians before any socket lookup: sk_lookup never sees them. A genuine connection
    // first (it also teaches the wire the pod's MAC address).
    let earlier = attach.counter("inbound_steered");
    let genuine = client(
        "198.18.0.1:9080",
        "hi",
        &ClientOpts {
            netns: Some(&topo.server),
            ..ClientOpts::default()
        },
    );
    assert!(genuine.ok, "{genuine:?}");
    let steered = attach.counter("inbound_steered");
    assert_eq!(
        steered,
        earlier + 1,
        "the genuine IPv4 connection is steered"
    );
    let hops = attach.counter("inbound_passthrough_source");
    assert_eq!(
        hops, 1,
        "and the proxy's own 127.0.0.6 hop to the app is not"
    );
    let pod_ns = topo.pod.path();
    let received = || snmp(&pod_ns, "Ip:InReceives");
    let before = received();
    for src in ["127.0.0.6:0", "198.18.0.1:0"] {
        let r = connect_from(
            &topo.server.path(),
            src,
            "198.18.0.1:9080",
            Duration::from_millis(500),
        );
        assert!(r.is_err(), "a wire SYN from {src} was answered: {r:?}");
    }
    eventually("the spoofed SYNs to reach the pod's IP layer", wait, || {
        let n = received();
        if n >= before + 2 {
            Ok(())
        } else {
            Err(format!("Ip:InReceives {before} -> {n}"))
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        attach.counter("inbound_steered"),
        steered,
        "no spoofed IPv4 SYN reached sk_lookup"
    );
    assert_eq!(attach.counter("inbound_local"), 0);
    assert_eq!(attach.counter("inbound_passthrough_source"), hops);
}

/// One counter (`Ip:InReceives`, `Tcp:InSegs`) of the IPv4 MIB of the namespace at `ns`.
fn snmp(ns: &Path, name: &str) -> u64 {
    let (table, field) = name.split_once(':').expect("TABLE:FIELD");
    let text = in_netns(ns, || std::fs::read_to_string("/proc/thread-self/net/snmp"))
        .expect("enter the pod")
        .expect("read snmp");
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{table}:")))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let at = rows[0].iter().position(|h| *h == field).expect("field");
    rows[1][at].parse().expect("number")
}
