//! A namespace's rtnetlink socket ([`RouteSocket`]): made once inside the namespace, then used
//! from any thread (a socket stays in the namespace it was created in), so its addresses,
//! interfaces, routes and rules are read without entering it again.
use std::{
    io,
    net::IpAddr,
    sync::atomic::{AtomicU32, Ordering},
};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_DUMP_INTR,
    NLM_F_REQUEST,
};
use netlink_packet_route::{
    address::{AddressAttribute, AddressMessage},
    link::{LinkAttribute, LinkMessage},
    RouteNetlinkMessage,
};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// The first type of a data message (below it: `NLMSG_NOOP`, `_ERROR`, `_DONE`, `_OVERRUN`).
const NLMSG_MIN_TYPE: u16 = 16;

/// A netlink message's length, type and sequence number, read from its header's bytes
/// (native order); `None` when fewer than a header's 16 bytes are left.
fn raw_header(bytes: &[u8]) -> Option<(usize, u16, u32)> {
    let len = u32::from_ne_bytes(bytes.get(0..4)?.try_into().ok()?);
    let kind = u16::from_ne_bytes(bytes.get(4..6)?.try_into().ok()?);
    let seq = u32::from_ne_bytes(bytes.get(8..12)?.try_into().ok()?);
    bytes.get(15)?;
    Some((usize::try_from(len).ok()?, kind, seq))
}

/// `::6`, the proxy's IPv6 passthrough source.
const PASSTHROUGH_V6: IpAddr = IpAddr::V6(std::net::Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6));

/// An rtnetlink socket of one namespace. Each dump carries its own sequence number and
/// answers to another (left by a dump that failed half-way) are skipped, so one socket
/// serves every read of the namespace's life.
#[derive(Debug)]
pub(crate) struct RouteSocket {
    socket: Socket,
    seq: AtomicU32,
}

impl RouteSocket {
    /// A socket in the calling thread's namespace, connected to the kernel (port id 0): the
    /// kernel then refuses unicasts from any other sender, so a process of the namespace (the
    /// pod's own, with NET_ADMIN or not) cannot put answers into it.
    pub(crate) fn open() -> io::Result<Self> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        Ok(Self {
            socket,
            seq: AtomicU32::new(1),
        })
    }

    /// Sends `request` with `flags` (beyond `NLM_F_REQUEST`); returns its sequence number.
    fn send(&self, request: RouteNetlinkMessage, flags: u16) -> io::Result<u32> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(request));
        packet.finalize();
        let mut buf = vec![0; packet.buffer_len()];
        packet.serialize(&mut buf);
        self.socket.send(&buf, 0)?;
        Ok(seq)
    }

    /// Reads the kernel's answers to request `seq`, each given to `on` (answers to another
    /// request are skipped), until `on` returns the result. A data message (not `NLMSG_ERROR`
    /// or `NLMSG_DONE`) for which `skip` says so is stepped over by its header alone, never
    /// decoded: what a dump holds past its cap costs only the copy.
    fn answers<T>(
        &self,
        seq: u32,
        what: &str,
        mut skip: impl FnMut() -> bool,
        mut on: impl FnMut(NetlinkMessage<RouteNetlinkMessage>) -> Option<io::Result<T>>,
    ) -> io::Result<T> {
        loop {
            let (datagram, from) = self.socket.recv_from_full()?;
            if from.port_number() != 0 {
                // Not the kernel's (the connect already refuses these): never read.
                continue;
            }
            let mut offset = 0;
            while offset < datagram.len() {
                if let Some((len, kind, their_seq)) = raw_header(&datagram[offset..]) {
                    if their_seq != seq || (kind >= NLMSG_MIN_TYPE && skip()) {
                        if len == 0 {
                            break;
                        }
                        offset += (len + 3) & !3;
                        continue;
                    }
                }
                let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&datagram[offset..])
                    .map_err(|e| {
                    io::Error::other(format!("{what}: decoding an answer: {e}"))
                })?;
                let len = msg.header.length as usize;
                if let Some(done) = on(msg) {
                    return done;
                }
                if len == 0 {
                    break;
                }
                offset += (len + 3) & !3;
            }
        }
    }

    /// Sends one dump request and collects its answers up to `NLMSG_DONE`; a dump the kernel
    /// marks inconsistent (`NLM_F_DUMP_INTR`: changed meanwhile) is an `Interrupted` error.
    pub(crate) fn dump(
        &self,
        request: RouteNetlinkMessage,
        what: &'static str,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
        Ok(self.dump_at_most(request, what, usize::MAX)?.0)
    }

    /// [`RouteSocket::dump`] decoding at most `cap` answers; the rest is read to its end (the
    /// socket serves the next dump) but not decoded. Returns the answers and whether any was
    /// left out: what a namespace's owner can grow (its addresses, its routes) costs the
    /// reader no more than the cap.
    pub(crate) fn dump_at_most(
        &self,
        request: RouteNetlinkMessage,
        what: &'static str,
        cap: usize,
    ) -> io::Result<(Vec<RouteNetlinkMessage>, bool)> {
        let seq = self.send(request, NLM_F_DUMP)?;
        let mut out = Vec::new();
        let mut torn = false;
        let kept = std::cell::Cell::new(0usize);
        let left_out = std::cell::Cell::new(false);
        let skip = || {
            let over = kept.get() >= cap;
            if over {
                left_out.set(true);
            }
            over
        };
        self.answers(seq, what, skip, |msg| {
            torn |= msg.header.flags & NLM_F_DUMP_INTR != 0;
            match msg.payload {
                NetlinkPayload::Done(_) if torn => Some(Err(io::Error::new(
                    io::ErrorKind::Interrupted,
                    format!("{what}: the tables changed during the dump"),
                ))),
                NetlinkPayload::Done(_) => Some(Ok((std::mem::take(&mut out), left_out.get()))),
                NetlinkPayload::Error(e) if e.code.is_some() => {
                    let err = e.to_io();
                    Some(Err(io::Error::new(err.kind(), format!("{what}: {err}"))))
                }
                NetlinkPayload::InnerMessage(m) => {
                    kept.set(kept.get() + 1);
                    out.push(m);
                    None
                }
                _ => None,
            }
        })
    }

    /// Sends one change (`RTM_NEW*` / `RTM_DEL*`, `flags` beyond `NLM_F_REQUEST | NLM_F_ACK`)
    /// and waits for the kernel's acknowledgement; its error is returned with `what`.
    pub(crate) fn change(
        &self,
        request: RouteNetlinkMessage,
        flags: u16,
        what: &str,
    ) -> io::Result<()> {
        let seq = self.send(request, NLM_F_ACK | flags)?;
        self.answers(
            seq,
            what,
            || false,
            |msg| match msg.payload {
                NetlinkPayload::Error(e) => Some(match e.code {
                    None => Ok(()),
                    Some(_) => {
                        let err = e.to_io();
                        Err(io::Error::new(err.kind(), format!("{what}: {err}")))
                    }
                }),
                _ => None,
            },
        )
    }

    /// The namespace's own addresses, loopback, unspecified and `::6` excluded, sorted: `::6` is the
    /// proxy's IPv6 passthrough source that istio-proxy puts on every dual-stack pod's lo (the
    /// outbound decision treats it as loopback), so it names no pod in `POD_ADDRS`. The
    /// local address where the kernel gives one (`IFA_LOCAL`: point-to-point links), as
    /// `getifaddrs` reports it.
    pub(crate) fn addresses(&self) -> io::Result<Vec<IpAddr>> {
        Ok(self.addresses_at_most(usize::MAX)?.0)
    }

    /// [`RouteSocket::addresses`] from at most `cap` of the kernel's address messages, and
    /// whether the namespace held more (a pod with NET_ADMIN adds what it likes).
    pub(crate) fn addresses_at_most(&self, cap: usize) -> io::Result<(Vec<IpAddr>, bool)> {
        let mut out = Vec::new();
        let (answers, left_out) = retry_torn(|| {
            self.dump_at_most(
                RouteNetlinkMessage::GetAddress(AddressMessage::default()),
                "RTM_GETADDR dump",
                cap,
            )
        })?;
        for msg in answers {
            let RouteNetlinkMessage::NewAddress(m) = msg else {
                continue;
            };
            let local = m.attributes.iter().find_map(|a| match a {
                AddressAttribute::Local(ip) => Some(*ip),
                _ => None,
            });
            let address = m.attributes.iter().find_map(|a| match a {
                AddressAttribute::Address(ip) => Some(*ip),
                _ => None,
            });
            let Some(ip) = local.or(address) else {
                continue;
            };
            // Never loopback or unspecified: sock_ops relies on it to skip the local-connect
            // record of every connect to loopback (`tracking::may_hold_local_record`).
            if !ip.is_loopback() && !ip.is_unspecified() && ip != PASSTHROUGH_V6 {
                out.push(ip);
            }
        }
        // Sorted, then duplicates dropped: O(n log n) however many a pod with NET_ADMIN puts
        // on its interfaces (a search per address was seconds at 60,000).
        out.sort_unstable();
        out.dedup();
        Ok((out, left_out))
    }

    /// Every interface of the namespace: (index, name).
    pub(crate) fn links(&self) -> io::Result<Vec<(u32, String)>> {
        let answers = retry_torn(|| {
            self.dump(
                RouteNetlinkMessage::GetLink(LinkMessage::default()),
                "RTM_GETLINK dump",
            )
        })?;
        Ok(answers
            .into_iter()
            .filter_map(|msg| match msg {
                RouteNetlinkMessage::NewLink(m) => {
                    let name = m.attributes.iter().find_map(|a| match a {
                        LinkAttribute::IfName(n) => Some(n.clone()),
                        _ => None,
                    })?;
                    Some((m.header.index, name))
                }
                _ => None,
            })
            .collect())
    }

    /// The index of each of `names`, `None` for a name the namespace has no interface of.
    pub(crate) fn indexes(&self, names: &[&str]) -> io::Result<Vec<Option<u32>>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let links = self.links()?;
        Ok(names
            .iter()
            .map(|n| links.iter().find(|(_, l)| l == n).map(|(i, _)| *i))
            .collect())
    }
}

/// Runs `read` again (up to four times) while the kernel reports the dump torn.
pub(crate) fn retry_torn<T>(mut read: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let mut tries = 0;
    loop {
        match read() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted && tries < 4 => tries += 1,
            other => return other,
        }
    }
}
