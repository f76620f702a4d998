//! The TCP listeners of the calling thread's network namespace on one port, from the kernel's
//! socket diagnostics (`NETLINK_SOCK_DIAG`, LISTEN state only): the kernel then walks only its
//! listening table. `/proc/net/tcp` walks every bucket of the node-wide established table
//! (262,144 here: milliseconds per read even for an empty namespace), on the pod-start path.
//! The listening table is node-wide too (every bucket is read whatever the port asked), so one
//! walk answers both families: the kernel's original request (`TCPDIAG_GETSOCK`, which it
//! serves for every family at once) is sent first, and the per-family requests only where a
//! kernel refuses it.
use netlink_packet_core::{NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6};
use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};

/// A listening socket: its inode and whether it is IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub struct Listening {
    /// Socket inode, as in `/proc/PID/fd/N -> socket:[INODE]`.
    pub inode: u64,
    /// An `AF_INET6` socket (a `[::]` listener also takes IPv4).
    pub ipv6: bool,
}

/// A `NETLINK_SOCK_DIAG` socket of one namespace (made inside it, then used from any thread).
#[derive(Debug)]
pub(crate) struct DiagSocket {
    socket: Socket,
    seq: std::sync::atomic::AtomicU32,
    /// The kernel refused `TCPDIAG_GETSOCK` once: one dump per family from then on.
    no_compat: std::sync::atomic::AtomicBool,
}

impl DiagSocket {
    /// A socket in the calling thread's namespace, connected to the kernel (port id 0), so no
    /// process of the namespace can send into it.
    pub(crate) fn open() -> std::io::Result<Self> {
        let mut socket = Socket::new(NETLINK_SOCK_DIAG)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        Ok(Self {
            socket,
            seq: std::sync::atomic::AtomicU32::new(1),
            no_compat: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The netlink socket.
    pub(crate) fn socket(&self) -> &Socket {
        &self.socket
    }

    /// The next request's sequence number.
    pub(crate) fn next_seq(&self) -> u32 {
        self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The TCP sockets listening on `port` in its namespace, IPv4 then IPv6. Each dump has
    /// its own sequence number; answers to another (a dump that failed half-way) are skipped.
    pub(crate) fn listening(&self, port: u16) -> std::io::Result<Vec<Listening>> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut out = Vec::new();
        if !self.no_compat.load(Relaxed) {
            let seq = self.seq.fetch_add(1, Relaxed);
            match dump_both(&self.socket, seq, port, &mut out) {
                Ok(()) => {
                    // IPv4 first, as the per-family dumps give them.
                    out.sort_by_key(|l| l.ipv6);
                    return Ok(out);
                }
                // The kernel refused the request itself: one dump per family from now on.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINVAL | libc::EOPNOTSUPP | libc::EPROTONOSUPPORT)
                    ) =>
                {
                    tracing::debug!(error = %e, "no TCPDIAG_GETSOCK dump: one dump per family");
                    self.no_compat.store(true, Relaxed);
                    out.clear();
                }
                // Anything else (a dump that failed, a torn answer) is the caller's error: it
                // reads `/proc/net/tcp` instead, never a short list.
                Err(e) => return Err(e),
            }
        }
        for family in [AF_INET, AF_INET6] {
            let seq = self.seq.fetch_add(1, Relaxed);
            dump(&self.socket, seq, family, port, &mut out)?;
        }
        Ok(out)
    }
}

/// `TCPDIAG_GETSOCK`: the original inet_diag request, which the kernel answers for every
/// address family (it sets `AF_UNSPEC`) in one walk.
const TCPDIAG_GETSOCK: u16 = 18;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// `struct inet_diag_req`: family, src_len, dst_len, ext, `inet_diag_sockid` (48), states, dbs.
const REQ_LEN: usize = 60;
/// `struct inet_diag_msg` up to and with `idiag_inode` (offset 68).
const MSG_LEN: usize = 72;

/// The request: a netlink header and `struct inet_diag_req` for LISTEN sockets on `port`.
fn both_request(seq: u32, port: u16) -> Vec<u8> {
    let len = 16 + REQ_LEN;
    let mut buf = Vec::with_capacity(len);
    buf.extend_from_slice(&(len as u32).to_ne_bytes());
    buf.extend_from_slice(&TCPDIAG_GETSOCK.to_ne_bytes());
    buf.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    // family (ignored by the kernel for this request), src_len, dst_len, ext.
    buf.extend_from_slice(&[AF_INET, 0, 0, 0]);
    // inet_diag_sockid: sport (big-endian), then zeros.
    let mut id = [0u8; 48];
    id[..2].copy_from_slice(&port.to_be_bytes());
    buf.extend_from_slice(&id);
    buf.extend_from_slice(&(1u32 << 10).to_ne_bytes()); // TCPF_LISTEN
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf
}

/// What one netlink message of the answer says.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Listener(Listening),
    Done,
    Skip,
}

/// Reads one message at the start of `buf` (of sequence `seq`): its length and meaning.
fn parse_both(buf: &[u8], seq: u32, port: u16) -> std::io::Result<(usize, Answer)> {
    let word = |at: usize| u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap_or_default());
    if buf.len() < 16 {
        return Err(std::io::Error::other(
            "sock_diag answer: a short netlink header",
        ));
    }
    let len = word(0) as usize;
    let kind = u16::from_ne_bytes([buf[4], buf[5]]);
    if len < 16 || len > buf.len() {
        return Err(std::io::Error::other(format!(
            "sock_diag answer: a message of {len} bytes in {}",
            buf.len()
        )));
    }
    // Netlink messages are 4-byte aligned within a datagram.
    let next = len.next_multiple_of(4).min(buf.len());
    if word(8) != seq {
        return Ok((next, Answer::Skip));
    }
    let answer = match kind {
        // A dump that failed (e.g. no `tcp_diag` behind `inet_diag`) says so in its DONE.
        NLMSG_DONE
            if len >= 20 && i32::from_ne_bytes(buf[16..20].try_into().unwrap_or_default()) < 0 =>
        {
            let errno = i32::from_ne_bytes(buf[16..20].try_into().unwrap_or_default());
            return Err(std::io::Error::from_raw_os_error(-errno));
        }
        NLMSG_DONE => Answer::Done,
        NLMSG_ERROR if len >= 20 => {
            let errno = i32::from_ne_bytes(buf[16..20].try_into().unwrap_or_default());
            return Err(std::io::Error::from_raw_os_error(-errno));
        }
        TCPDIAG_GETSOCK if len >= 16 + MSG_LEN => {
            let msg = &buf[16..len];
            let family = msg[0];
            let sport = u16::from_be_bytes([msg[4], msg[5]]);
            let inode = u64::from(u32::from_ne_bytes(
                msg[68..72].try_into().unwrap_or_default(),
            ));
            // The kernel filters by the request's port; checked again here all the same.
            if sport == port && inode != 0 && (family == AF_INET || family == AF_INET6) {
                Answer::Listener(Listening {
                    inode,
                    ipv6: family == AF_INET6,
                })
            } else {
                Answer::Skip
            }
        }
        _ => Answer::Skip,
    };
    Ok((next, answer))
}

/// One dump of both families' listeners on `port`.
fn dump_both(
    socket: &Socket,
    seq: u32,
    port: u16,
    out: &mut Vec<Listening>,
) -> std::io::Result<()> {
    socket.send(&both_request(seq, port), 0)?;
    let mut recv = vec![0u8; 64 * 1024];
    loop {
        let size = socket.recv(&mut &mut recv[..], 0)?;
        let mut offset = 0;
        while offset < size {
            let (len, answer) = parse_both(&recv[offset..size], seq, port)?;
            match answer {
                Answer::Listener(l) => out.push(l),
                Answer::Done => return Ok(()),
                Answer::Skip => {}
            }
            offset += len;
        }
    }
}

fn dump(
    socket: &Socket,
    seq: u32,
    family: u8,
    port: u16,
    out: &mut Vec<Listening>,
) -> std::io::Result<()> {
    let req = super::inet_diag::listeners_dump(family, port);
    super::inet_diag::exchange(socket, seq, req, |r| {
        // The kernel filters listeners by the request's source port; checked again here all
        // the same.
        if r.header.socket_id.source_port == port && r.header.inode != 0 {
            out.push(Listening {
                inode: u64::from(r.header.inode),
                ipv6: family == AF_INET6,
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A netlink message of `kind` and `seq` with `body`, padded to 4 bytes.
    fn message(kind: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(body);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    fn listener(family: u8, port: u16, inode: u32) -> Vec<u8> {
        let mut msg = vec![0u8; MSG_LEN];
        msg[0] = family;
        msg[1] = 10; // TCP_LISTEN
        msg[4..6].copy_from_slice(&port.to_be_bytes());
        msg[68..72].copy_from_slice(&inode.to_ne_bytes());
        msg
    }

    #[test]
    fn the_request_is_inet_diag_req_for_listeners_on_the_port() {
        let req = both_request(7, 15006);
        assert_eq!(req.len(), 76);
        assert_eq!(u32::from_ne_bytes(req[0..4].try_into().unwrap()), 76);
        assert_eq!(u16::from_ne_bytes([req[4], req[5]]), TCPDIAG_GETSOCK);
        assert_eq!(u32::from_ne_bytes(req[8..12].try_into().unwrap()), 7);
        assert_eq!(u16::from_be_bytes([req[20], req[21]]), 15006);
        assert_eq!(u32::from_ne_bytes(req[68..72].try_into().unwrap()), 1 << 10);
    }

    #[test]
    fn one_answer_gives_both_families_and_skips_others() {
        let mut buf = message(TCPDIAG_GETSOCK, 9, &listener(AF_INET6, 15006, 42));
        buf.extend(message(TCPDIAG_GETSOCK, 8, &listener(AF_INET, 15006, 41)));
        buf.extend(message(TCPDIAG_GETSOCK, 9, &listener(AF_INET, 15001, 40)));
        buf.extend(message(TCPDIAG_GETSOCK, 9, &listener(AF_INET, 15006, 43)));
        buf.extend(message(NLMSG_DONE, 9, &0i32.to_ne_bytes()));
        let mut found = Vec::new();
        let mut offset = 0;
        loop {
            let (len, answer) = parse_both(&buf[offset..], 9, 15006).unwrap();
            offset += len;
            match answer {
                Answer::Listener(l) => found.push(l),
                Answer::Done => break,
                Answer::Skip => {}
            }
        }
        assert_eq!(
            found,
            [
                Listening {
                    inode: 42,
                    ipv6: true
                },
                Listening {
                    inode: 43,
                    ipv6: false
                }
            ]
        );
    }

    #[test]
    fn a_refusal_is_the_kernels_errno_and_a_torn_message_an_error() {
        let refused = message(NLMSG_ERROR, 3, &(-libc::EINVAL).to_ne_bytes());
        let e = parse_both(&refused, 3, 1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        // A dump that failed is an error, not an empty answer.
        let failed = message(NLMSG_DONE, 3, &(-libc::ENOENT).to_ne_bytes());
        let e = parse_both(&failed, 3, 1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
        let done = message(NLMSG_DONE, 3, &0i32.to_ne_bytes());
        assert_eq!(parse_both(&done, 3, 1).unwrap().1, Answer::Done);
        let mut torn = message(TCPDIAG_GETSOCK, 3, &listener(AF_INET, 1, 1));
        torn.truncate(40);
        assert!(parse_both(&torn, 3, 1).is_err());
    }
}
