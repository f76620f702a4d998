//! The getsockopt hook answers SO_ORIGINAL_DST and leaves every other option as the kernel answered.
use std::{
    net::{SocketAddrV4, TcpStream},
    os::fd::{AsFd, AsRawFd as _},
    time::Duration,
};

use nix::sys::socket::{getsockopt, setsockopt, sockopt};
use redirect_testkit::{privileged, Cgroup, Listen, Topology};
use redirect_tests::{spawn_client, Attach, ClientOpts, EchoServer};

/// TCP_INFO read with a buffer larger than a page (the case that broke other eBPF hooks).
fn tcp_info(stream: &TcpStream) -> (i32, Vec<u8>) {
    let mut buf = vec![0u8; 8192];
    let mut len = libc::socklen_t::try_from(buf.len()).expect("len");
    // SAFETY: a documented spot: getsockopt writes at most `len` bytes into `buf`, which is
    // valid for that many bytes, and updates `len`.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "TCP_INFO: {}", std::io::Error::last_os_error());
    buf.truncate(len as usize);
    (rc, buf)
}

/// Options whose value must not change while the connection is idle, rendered for comparison.
fn snapshot(stream: &TcpStream) -> Vec<(&'static str, String)> {
    let fd = stream.as_fd();
    let (_, info) = tcp_info(stream);
    vec![
        (
            "SO_RCVBUF",
            format!("{:?}", getsockopt(&fd, sockopt::RcvBuf)),
        ),
        (
            "SO_SNDBUF",
            format!("{:?}", getsockopt(&fd, sockopt::SndBuf)),
        ),
        (
            "SO_TYPE",
            format!("{:?}", getsockopt(&fd, sockopt::SockType)),
        ),
        (
            "SO_KEEPALIVE",
            format!("{:?}", getsockopt(&fd, sockopt::KeepAlive)),
        ),
        ("IP_TTL", format!("{:?}", getsockopt(&fd, sockopt::Ipv4Ttl))),
        ("IP_TOS", format!("{:?}", getsockopt(&fd, sockopt::IpTos))),
        (
            "TCP_NODELAY",
            format!("{:?}", getsockopt(&fd, sockopt::TcpNoDelay)),
        ),
        (
            "TCP_CONGESTION",
            format!("{:?}", getsockopt(&fd, sockopt::TcpCongestion)),
        ),
        ("TCP_INFO.len", info.len().to_string()),
        ("TCP_INFO.state", info[0].to_string()),
    ]
}

/// `getsockopt(SOL_IP, SO_ORIGINAL_DST)`, or the kernel's errno.
fn orig_dst(stream: &TcpStream) -> Result<SocketAddrV4, Option<i32>> {
    redirect_sys::original_dst_v4(stream).map_err(|e| e.raw_os_error())
}

#[test]
fn original_dst_is_answered_and_other_options_pass_through() {
    privileged!();
    let topo = Topology::new().expect("topology");
    let cgroup = Cgroup::new("rtx").expect("cgroup");
    let _server = EchoServer::start(&topo.server, "198.18.0.2:7031", "srv");
    // The test plays the proxy: its listener is in the pod namespace and the root cgroup.
    let listener = Listen::on("127.0.0.1:15001")
        .netns(&topo.pod)
        .tcp()
        .expect("bind 15001");
    let mut attach = Attach::start(cgroup.path(), &[]);

    let opts = ClientOpts {
        netns: Some(&topo.pod),
        cgroup: Some(cgroup.path()),
        hold_ms: Some(3000),
        ..ClientOpts::default()
    };
    let _captured = spawn_client("198.18.0.2:7031", "x", &opts);
    let (redirected, _) = listener.accept().expect("accept captured");
    // A connection that was not redirected, on the same listener.
    let _direct_client = topo
        .pod
        .run(|| TcpStream::connect("127.0.0.1:15001").expect("direct connect"))
        .expect("enter the pod");
    let (direct, _) = listener.accept().expect("accept direct");
    for s in [&redirected, &direct] {
        setsockopt(&s.as_fd(), sockopt::RcvBuf, &100_000).expect("set SO_RCVBUF");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
    }

    assert_eq!(
        orig_dst(&redirected),
        Ok("198.18.0.2:7031".parse().expect("addr"))
    );
    let direct_answer_attached = orig_dst(&direct);
    assert!(
        direct_answer_attached.is_err(),
        "no original destination for a direct connection"
    );
    let attached = [snapshot(&redirected), snapshot(&direct)];
    assert!(
        attached[0]
            .iter()
            .any(|(k, v)| *k == "TCP_INFO.state" && v == "1"),
        "ESTABLISHED: {attached:?}"
    );
    assert_eq!(attach.counter("orig_dst_hit"), 1);
    assert!(attach.counter("orig_dst_miss") >= 1);

    assert!(attach.stop(), "attach exits 0 on SIGTERM");
    // Same sockets, no program: the kernel's own answers.
    let detached = [snapshot(&redirected), snapshot(&direct)];
    assert_eq!(attached, detached, "options changed by the getsockopt hook");
    assert_eq!(
        orig_dst(&direct),
        direct_answer_attached,
        "miss must return the kernel's error unchanged"
    );
    assert!(
        orig_dst(&redirected).is_err(),
        "without the hook the kernel has no original destination"
    );
}
