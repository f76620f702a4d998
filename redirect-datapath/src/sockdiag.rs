//! The TCP listeners of the calling thread's network namespace on one port, from the kernel's
//! socket diagnostics (`NETLINK_SOCK_DIAG`, LISTEN state only): the kernel then walks only its
//! listening table. `/proc/net/tcp` walks every bucket of the node-wide established table
//! (262,144 here: milliseconds per read even for an empty namespace), on the pod-start path.
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::{
    constants::{AF_INET, AF_INET6, IPPROTO_TCP},
    inet::{ExtensionFlags, InetRequest, SocketId, StateFlags},
    SockDiagMessage,
};
use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};

/// A listening socket: its inode and whether it is IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listening {
    /// Socket inode, as in `/proc/PID/fd/N -> socket:[INODE]`.
    pub inode: u64,
    /// An `AF_INET6` socket (a `[::]` listener also takes IPv4).
    pub ipv6: bool,
}

/// A `NETLINK_SOCK_DIAG` socket of one namespace (made inside it, then used from any thread).
#[derive(Debug)]
pub struct DiagSocket {
    socket: Socket,
    seq: std::sync::atomic::AtomicU32,
}

impl DiagSocket {
    /// A socket in the calling thread's namespace, connected to the kernel (port id 0), so no
    /// process of the namespace can send into it.
    pub fn open() -> std::io::Result<Self> {
        let mut socket = Socket::new(NETLINK_SOCK_DIAG)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        Ok(Self {
            socket,
            seq: std::sync::atomic::AtomicU32::new(1),
        })
    }

    /// The TCP sockets listening on `port` in its namespace, IPv4 then IPv6. Each dump has
    /// its own sequence number; answers to another (a dump that failed half-way) are skipped.
    pub fn listening(&self, port: u16) -> std::io::Result<Vec<Listening>> {
        let mut out = Vec::new();
        for family in [AF_INET, AF_INET6] {
            let seq = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            dump(&self.socket, seq, family, port, &mut out)?;
        }
        Ok(out)
    }
}

/// The TCP sockets listening on `port` in this thread's namespace, IPv4 then IPv6.
pub fn listening(port: u16) -> std::io::Result<Vec<Listening>> {
    DiagSocket::open()?.listening(port)
}

fn dump(
    socket: &Socket,
    seq: u32,
    family: u8,
    port: u16,
    out: &mut Vec<Listening>,
) -> std::io::Result<()> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    header.sequence_number = seq;
    let mut socket_id = if family == AF_INET {
        SocketId::new_v4()
    } else {
        SocketId::new_v6()
    };
    socket_id.source_port = port;
    let mut packet = NetlinkMessage::new(
        header,
        SockDiagMessage::InetRequest(InetRequest {
            family,
            protocol: IPPROTO_TCP,
            extensions: ExtensionFlags::empty(),
            states: StateFlags::LISTEN,
            socket_id,
        })
        .into(),
    );
    packet.finalize();
    let mut buf = vec![0; packet.buffer_len()];
    packet.serialize(&mut buf[..]);
    socket.send(&buf, 0)?;
    let mut recv = vec![0u8; 64 * 1024];
    loop {
        let size = socket.recv(&mut &mut recv[..], 0)?;
        let mut offset = 0;
        while offset < size {
            let msg = <NetlinkMessage<SockDiagMessage>>::deserialize(&recv[offset..size])
                .map_err(|e| std::io::Error::other(format!("sock_diag answer: {e}")))?;
            let len = msg.header.length as usize;
            if msg.header.sequence_number != seq {
                if len == 0 {
                    break;
                }
                offset += len;
                continue;
            }
            match msg.payload {
                // The kernel filters listeners by the request's source port; checked again
                // here all the same.
                NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r))
                    if r.header.socket_id.source_port == port && r.header.inode != 0 =>
                {
                    out.push(Listening {
                        inode: u64::from(r.header.inode),
                        ipv6: family == AF_INET6,
                    });
                }
                NetlinkPayload::Done(_) => return Ok(()),
                NetlinkPayload::Error(e) => {
                    return Err(e.to_io());
                }
                _ => {}
            }
            if len == 0 {
                break;
            }
            offset += len;
        }
    }
}
