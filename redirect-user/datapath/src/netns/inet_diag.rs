//! The one dump loop of `NETLINK_SOCK_DIAG` inet requests, and the requests it sends: what
//! `conns.rs` (a namespace's connections, their reset) and `sockdiag.rs` (the listeners on a
//! port) both ask the kernel through.
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::{
    constants::{AF_INET, IPPROTO_TCP},
    inet::{ExtensionFlags, InetRequest, InetResponse, SocketId, StateFlags},
    SockDiagMessage,
};
use netlink_sys::Socket;

/// A request of `states` in `family`, for `socket_id` (all zeros: every socket).
pub(super) fn request(family: u8, states: StateFlags, socket_id: SocketId) -> InetRequest {
    InetRequest {
        family,
        protocol: IPPROTO_TCP,
        extensions: ExtensionFlags::empty(),
        states,
        socket_id,
    }
}

pub(super) fn any_socket(family: u8) -> SocketId {
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
