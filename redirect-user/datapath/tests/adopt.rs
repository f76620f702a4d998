//! Listener adoption takes only the enrolled namespace's TCP listener on its inbound port:
//! real sockets in namespaces of the test's own; a socket of another namespace, on the same
//! port, that a socket inode leads to (sockfs numbers wrap; a table can be stale) is refused.
// A test target links every dependency of its package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::{
    net::{TcpStream, UdpSocket},
    os::fd::AsFd as _,
};

use redirect_common::AF_INET;
use redirect_datapath::{
    netns_cookie, socket_cookie_of_netns,
    test_support::{self as adopt, check_listener, Listening, NotAdoptable},
    NetnsHandle,
};
use redirect_testkit::{privileged_or_skip, Listen, Netns};

const PORT: u16 = 15006;

/// The one listener the namespace's table lists on `port`.
fn listed(ns: &Netns, port: u16) -> Listening {
    let handle = NetnsHandle::open(&ns.path()).expect("open the namespace");
    let found = adopt::listeners(&handle, port).expect("read the namespace's table");
    assert_eq!(found.len(), 1, "one listener on {port}: {found:?}");
    found[0]
}

#[test]
fn only_the_namespaces_own_tcp_listener_on_the_port_is_taken() {
    if !privileged_or_skip("only_the_namespaces_own_tcp_listener_on_the_port_is_taken") {
        return;
    }
    let pod = Netns::new("rap").expect("pod netns");
    let other = Netns::new("rao").expect("other netns");
    let pod_ns = NetnsHandle::open(&pod.path()).expect("open the pod namespace");
    let cookie = pod_ns.cookie();
    let addr = format!("0.0.0.0:{PORT}");
    // The same port in another namespace, open first.
    let theirs = Listen::on(&addr)
        .netns(&other)
        .tcp()
        .expect("other listener");
    let ours = Listen::on(&addr).netns(&pod).tcp().expect("pod listener");

    // A socket inode that names the other namespace's listener is not taken for the pod.
    let wrong = listed(&other, PORT);
    assert!(
        adopt::take_listener(&wrong, &pod_ns, PORT).is_none(),
        "another namespace's listener on the same port was taken"
    );
    let (taken, family) = adopt::take_listener(&listed(&pod, PORT), &pod_ns, PORT)
        .expect("the pod's own listener is taken");
    assert_eq!(family, AF_INET);
    assert_eq!(
        socket_cookie_of_netns(taken.as_fd()).expect("cookie"),
        cookie
    );

    // Each check on a real socket.
    let other_cookie = netns_cookie(&other.path()).expect("other cookie");
    assert_eq!(
        check_listener(theirs.as_fd(), cookie, PORT),
        Err(NotAdoptable::OtherNamespace {
            found: other_cookie,
            want: cookie
        })
    );
    let elsewhere = Listen::on("0.0.0.0:15007")
        .netns(&pod)
        .tcp()
        .expect("listener on another port");
    assert_eq!(
        check_listener(elsewhere.as_fd(), cookie, PORT),
        Err(NotAdoptable::OtherPort(15007))
    );
    let udp: UdpSocket = Listen::on(&addr)
        .netns(&pod)
        .udp()
        .expect("udp on the port");
    assert!(matches!(
        check_listener(udp.as_fd(), cookie, PORT),
        Err(NotAdoptable::NotTcp { .. })
    ));
    let connected = pod
        .run(move || TcpStream::connect(("127.0.0.1", PORT)))
        .expect("in the pod")
        .expect("connect to the pod's listener");
    assert_eq!(
        check_listener(connected.as_fd(), cookie, PORT),
        Err(NotAdoptable::NotListening)
    );
    assert_eq!(check_listener(ours.as_fd(), cookie, PORT), Ok(AF_INET));
}

#[test]
fn the_namespaces_listeners_on_the_port_are_found_by_socket_diagnostics() {
    if !privileged_or_skip("the_namespaces_listeners_on_the_port_are_found_by_socket_diagnostics") {
        return;
    }
    let pod = Netns::new("rad").expect("pod netns");
    let other = Netns::new("rae").expect("other netns");
    let handle = NetnsHandle::open(&pod.path()).expect("open the pod namespace");
    assert!(adopt::listeners(&handle, PORT).expect("dump").is_empty());
    let _theirs = Listen::on("0.0.0.0:15006")
        .netns(&other)
        .tcp()
        .expect("other");
    let _udp = Listen::on("0.0.0.0:15006").netns(&pod).udp().expect("udp");
    let v4 = Listen::on("127.0.0.1:15006")
        .netns(&pod)
        .tcp()
        .expect("v4 listener");
    let v6 = Listen::on("[::1]:15006")
        .netns(&pod)
        .tcp()
        .expect("v6 listener");
    let _elsewhere = Listen::on("0.0.0.0:15007")
        .netns(&pod)
        .tcp()
        .expect("other port");
    // An established socket on the port (the accepted end) is not a listener.
    let _client = pod
        .run(move || TcpStream::connect(("127.0.0.1", PORT)))
        .expect("in the pod")
        .expect("connect");
    let _accepted = v4.accept().expect("accept");
    let inode = |fd: std::os::fd::BorrowedFd<'_>| {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&fd)
        ))
        .expect("fd")
        .ino()
    };
    let found = adopt::listeners(&handle, PORT).expect("dump");
    assert_eq!(
        found,
        [
            Listening {
                inode: inode(v4.as_fd()),
                ipv6: false
            },
            Listening {
                inode: inode(v6.as_fd()),
                ipv6: true
            }
        ],
        "the pod's two TCP listeners on {PORT}, nothing else"
    );
}
