//! `NetnsHandle` enters a namespace on the calling thread (no thread is spawned) and must put
//! the thread back every time: after an open, a lookup or a closure that panics inside the
//! namespace, the thread's own sockets are made in its own namespace again, while the
//! handle's sockets still answer for the namespace it opened.
use std::{
    os::{fd::AsFd as _, unix::fs::MetadataExt as _},
    panic::AssertUnwindSafe,
};

use redirect_datapath::{socket_cookie_of_netns, NetnsHandle};
use redirect_testkit::{ip, privileged, Netns};

/// The inode of the calling thread's network namespace.
fn own_inode() -> u64 {
    std::fs::metadata("/proc/thread-self/ns/net")
        .expect("own netns")
        .ino()
}

/// The netns cookie of a socket this thread makes now.
fn cookie_of_new_socket() -> u64 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("socket");
    socket_cookie_of_netns(s.as_fd())
        .expect("SO_NETNS_COOKIE")
        .get()
}

#[test]
fn the_calling_thread_comes_back_to_its_own_namespace() {
    privileged!();
    let ns = Netns::new("rnr").expect("netns");
    ip(&[
        "-n",
        ns.name(),
        "addr",
        "add",
        "198.18.203.1/32",
        "dev",
        "lo",
    ])
    .expect("address");
    let (home, home_cookie) = (own_inode(), cookie_of_new_socket());

    let h = NetnsHandle::open(&ns.path()).expect("open");
    assert_eq!(
        own_inode(),
        home,
        "open left the thread in the pod's namespace"
    );
    assert_ne!(h.inode(), home);
    assert_ne!(h.cookie(), home_cookie);
    assert_eq!(cookie_of_new_socket(), home_cookie);

    // Its lookups answer for the namespace it opened, from this thread.
    let addrs = h.addresses().expect("addresses");
    assert_eq!(
        addrs,
        vec!["198.18.203.1".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(h.read_cookie().expect("cookie"), h.cookie());
    assert_eq!(
        own_inode(),
        home,
        "a lookup left the thread in the pod's namespace"
    );

    // Inside `run` the thread is in the namespace; after it, home again.
    let inside = h.run(|| Ok(cookie_of_new_socket())).expect("run");
    assert_eq!(inside, h.cookie());
    assert_eq!(cookie_of_new_socket(), home_cookie);

    // A closure that panics inside the namespace still brings the thread back.
    let unwound = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let _ = h.run(|| -> std::io::Result<()> { panic!("inside the namespace") });
    }));
    assert!(unwound.is_err());
    assert_eq!(
        own_inode(),
        home,
        "an unwind left the thread in the pod's namespace"
    );
    assert_eq!(cookie_of_new_socket(), home_cookie);
}
