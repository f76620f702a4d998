//! A hostile pod cannot feed the daemon's view of its namespace: the daemon keeps an rtnetlink
//! socket inside each enrolled namespace (its addresses and routes are read through it for the
//! enrollment's life), and a root process of the pod, which can list that socket's port id in
//! its own `/proc/net/netlink`, is refused when it sends to it (the socket is connected to the
//! kernel), so it cannot forge the addresses the daemon would claim for it.
use redirect_testkit::privileged;
use redirect_tests::{conformance::World, node::Node};

/// Port ids of the NETLINK_ROUTE sockets `/proc/net/netlink` lists (the kernel's, 0, left out).
fn route_socket_ports(table: &str) -> Vec<u32> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (eth, pid) = (
                f.get(1)?.parse::<u32>().ok()?,
                f.get(2)?.parse::<u32>().ok()?,
            );
            (eth == 0 && pid != 0).then_some(pid)
        })
        .collect()
}

/// From inside the pod's namespace: what sending an RTM_NEWADDR-shaped datagram to each of the
/// namespace's other NETLINK_ROUTE sockets returns (port id, result).
fn send_to_route_sockets() -> Vec<(u32, Result<usize, nix::Error>)> {
    use nix::sys::socket::{
        getsockname, sendto, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol,
        SockType,
    };
    use std::os::fd::AsRawFd as _;
    let own = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )
    .expect("netlink socket");
    nix::sys::socket::bind(own.as_raw_fd(), &NetlinkAddr::new(0, 0)).expect("bind");
    let me = getsockname::<NetlinkAddr>(own.as_raw_fd())
        .expect("getsockname")
        .pid();
    let table = std::fs::read_to_string("/proc/thread-self/net/netlink").expect("netlink table");
    // nlmsghdr: length 16, type RTM_NEWADDR (20), flags NLM_F_MULTI (2), sequence 1, port 0.
    let mut forged = Vec::new();
    for v in [
        16u32.to_ne_bytes(),
        [20, 0, 2, 0],
        1u32.to_ne_bytes(),
        [0; 4],
    ] {
        forged.extend_from_slice(&v);
    }
    route_socket_ports(&table)
        .into_iter()
        .filter(|p| *p != me)
        .map(|port| {
            let to = NetlinkAddr::new(port, 0);
            (
                port,
                sendto(own.as_raw_fd(), &forged, &to, MsgFlags::empty()),
            )
        })
        .collect()
}

#[test]
fn a_pod_cannot_send_into_the_daemons_socket_in_its_namespace() {
    privileged!();
    let node = Node::new();
    let w = World::new("rhn", false);
    let _daemon = node.daemon();
    let netns = w.pod.path().display().to_string();
    node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-u 1337 -i '*'",
    ]);
    // The daemon's socket is in the pod's namespace (made before the enrollment answered),
    // found as the pod would find it.
    let tries = w.pod.run(send_to_route_sockets).expect("run in the pod");
    assert!(
        !tries.is_empty(),
        "no rtnetlink socket of the daemon in the pod's namespace"
    );
    for (port, result) in &tries {
        assert_eq!(
            *result,
            Err(nix::Error::ECONNREFUSED),
            "a root process of the pod sent into the daemon's socket (port id {port})"
        );
    }
    node.ok(&["unenroll", "--netns", &netns]);
    node.ok(&["uninstall"]);
}

#[test]
fn netlink_table_ports_are_read() {
    let table = "sk               Eth Pid        Groups   Rmem     Wmem     Dump  Locks    Drops    Inode\n\
                 0000000000000000 0   0          00000000 0        0        0     2        0        10\n\
                 0000000000000001 0   4294960001 00000000 0        0        0     2        0        11\n\
                 0000000000000002 4   4294960002 00000000 0        0        0     2        0        12\n";
    assert_eq!(route_socket_ports(table), vec![4_294_960_001]);
}
