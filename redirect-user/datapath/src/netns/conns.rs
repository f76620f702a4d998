//! A namespace's established TCP connections and their end, from the kernel's socket
//! diagnostics: every ESTABLISHED socket of both families with its owner's uid, inode and
//! cookie, the ports something listens on (an accepted connection is not an outbound one), and
//! `SOCK_DESTROY` of one connection (`ss -K`: the kernel resets it, its application sees
//! ECONNABORTED; needs CONFIG_INET_DIAG_DESTROY, else EOPNOTSUPP). The one dump loop of
//! `NETLINK_SOCK_DIAG` inet requests is here too.
use std::net::SocketAddr;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::{
    constants::{AF_INET, AF_INET6, IPPROTO_TCP},
    inet::{ExtensionFlags, InetRequest, InetResponse, SocketId, StateFlags},
    SockDiagMessage, SOCK_DESTROY,
};
use netlink_sys::Socket;
use serde::Serialize;

use super::sockdiag::DiagSocket;

/// One established TCP connection of the namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Connection {
    /// Its local end.
    pub local: SocketAddr,
    /// Its remote end.
    pub remote: SocketAddr,
    /// The uid that owns the socket.
    pub uid: u32,
    /// The socket's inode (`/proc/PID/fd/N -> socket:[INODE]`).
    pub(crate) inode: u64,
    /// The kernel's id of the socket, which `SOCK_DESTROY` names.
    #[serde(skip)]
    id: SocketId,
    #[serde(skip)]
    family: u8,
}

/// A request of `states` in `family`, for `socket_id` (all zeros: every socket).
fn request(family: u8, states: StateFlags, socket_id: SocketId) -> InetRequest {
    InetRequest {
        family,
        protocol: IPPROTO_TCP,
        extensions: ExtensionFlags::empty(),
        states,
        socket_id,
    }
}

fn any_socket(family: u8) -> SocketId {
    if family == AF_INET {
        SocketId::new_v4()
    } else {
        SocketId::new_v6()
    }
}

/// Sends `req` as a `message_type` message with `flags` and hands every answer of sequence
/// `seq` to `each` until the dump is done (or, for a single request, its acknowledgement).
pub(crate) fn exchange(
    socket: &Socket,
    seq: u32,
    (req, message_type, flags): (InetRequest, u16, u16),
    mut each: impl FnMut(InetResponse),
) -> std::io::Result<()> {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = seq;
    let mut packet = NetlinkMessage::new(header, SockDiagMessage::InetRequest(req).into());
    packet.finalize();
    packet.header.message_type = message_type;
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
            if msg.header.sequence_number == seq {
                match msg.payload {
                    NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => each(*r),
                    // A dump that failed (e.g. no `tcp_diag` behind `inet_diag`) says so here.
                    NetlinkPayload::Done(d) if d.code < 0 => {
                        return Err(std::io::Error::from_raw_os_error(-d.code));
                    }
                    NetlinkPayload::Done(_) => return Ok(()),
                    NetlinkPayload::Error(e) if e.code.is_none() => return Ok(()),
                    NetlinkPayload::Error(e) => return Err(e.to_io()),
                    _ => {}
                }
            }
            if len == 0 {
                break;
            }
            offset += len;
        }
    }
}

impl DiagSocket {
    /// Every ESTABLISHED TCP connection of the namespace, IPv4 then IPv6, and the ports of
    /// its listening sockets.
    pub(crate) fn connections(&self) -> std::io::Result<(Vec<Connection>, Vec<u16>)> {
        let mut conns = Vec::new();
        let mut listening = Vec::new();
        for family in [AF_INET, AF_INET6] {
            let states = StateFlags::ESTABLISHED | StateFlags::LISTEN;
            let req = request(family, states, any_socket(family));
            let dump = (
                req,
                netlink_packet_sock_diag::SOCK_DIAG_BY_FAMILY,
                NLM_F_REQUEST | NLM_F_DUMP,
            );
            exchange(self.socket(), self.next_seq(), dump, |r| {
                let id = &r.header.socket_id;
                // TCP_LISTEN is 10.
                if r.header.state == 10 {
                    listening.push(id.source_port);
                    return;
                }
                conns.push(Connection {
                    local: SocketAddr::new(id.source_address, id.source_port),
                    remote: SocketAddr::new(id.destination_address, id.destination_port),
                    uid: r.header.uid,
                    inode: u64::from(r.header.inode),
                    id: id.clone(),
                    family,
                });
            })?;
        }
        listening.sort_unstable();
        listening.dedup();
        Ok((conns, listening))
    }

    /// Resets `conn` (`SOCK_DESTROY`).
    pub(crate) fn destroy(&self, conn: &Connection) -> std::io::Result<()> {
        let req = request(conn.family, StateFlags::all(), conn.id.clone());
        let one = (req, SOCK_DESTROY, NLM_F_REQUEST | NLM_F_ACK);
        exchange(self.socket(), self.next_seq(), one, |_| {})
    }
}

/// The request for `family` of LISTEN sockets on `port`, as [`exchange`] sends a dump.
pub(crate) fn listeners_dump(family: u8, port: u16) -> (InetRequest, u16, u16) {
    let mut id = any_socket(family);
    id.source_port = port;
    (
        request(family, StateFlags::LISTEN, id),
        netlink_packet_sock_diag::SOCK_DIAG_BY_FAMILY,
        NLM_F_REQUEST | NLM_F_DUMP,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_destroy_names_one_socket_and_asks_for_an_acknowledgement() {
        let mut id = SocketId::new_v4();
        id.source_port = 40000;
        id.destination_port = 80;
        id.cookie = [1, 2, 3, 4, 5, 6, 7, 8];
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_ACK;
        let req = request(AF_INET, StateFlags::all(), id);
        let mut packet = NetlinkMessage::new(header, SockDiagMessage::InetRequest(req).into());
        packet.finalize();
        packet.header.message_type = SOCK_DESTROY;
        let mut buf = vec![0; packet.buffer_len()];
        packet.serialize(&mut buf[..]);
        assert_eq!(u16::from_ne_bytes([buf[4], buf[5]]), SOCK_DESTROY);
        assert_eq!(
            u16::from_ne_bytes([buf[6], buf[7]]),
            NLM_F_REQUEST | NLM_F_ACK
        );
        // inet_diag_req_v2 after the header: family, protocol, ext, pad, states, then the id:
        // sport and dport big-endian, the cookie at its end.
        assert_eq!(buf[16], AF_INET);
        assert_eq!(u16::from_be_bytes([buf[24], buf[25]]), 40000);
        assert_eq!(u16::from_be_bytes([buf[26], buf[27]]), 80);
        assert_eq!(&buf[buf.len() - 8..], &[1, 2, 3, 4, 5, 6, 7, 8]);
    }
}
