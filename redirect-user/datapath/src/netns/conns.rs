//! A namespace's established TCP connections and their end, from the kernel's socket
//! diagnostics: every ESTABLISHED socket of both families with its owner's uid, inode and
//! cookie, the ports something listens on (an accepted connection is not an outbound one), and
//! `SOCK_DESTROY` of one connection (`ss -K`: the kernel resets it, its application sees
//! ECONNABORTED; needs CONFIG_INET_DIAG_DESTROY, else EOPNOTSUPP). The requests go through
//! `inet_diag.rs`'s dump loop.
use std::net::SocketAddr;

use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_sock_diag::{
    constants::{AF_INET, AF_INET6},
    inet::{SocketId, StateFlags},
    SOCK_DESTROY,
};
use serde::Serialize;

use super::{
    inet_diag::{any_socket, exchange, request},
    sockdiag::DiagSocket,
};

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

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{NetlinkHeader, NetlinkMessage};
    use netlink_packet_sock_diag::SockDiagMessage;

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
