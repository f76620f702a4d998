//! Where a redirected connect goes, shared by connect4/6 and `redirect explain` so both say the
//! same: the port; the address, loopback or (TPROXY's own redirect) the one dialled; and
//! whether the socket is first bound to the address it dialled.
use super::{decide::is_loopback, Conn, OutboundPolicy, Verdict, OUT_TPROXY};
use crate::{types::PASSTHROUGH_V6, Counter, AF_INET6};

/// Where a redirected connect goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// The port, host order.
    pub port: u16,
    /// Keep the destination address, only the port changes: TPROXY mode's mangle step
    /// ([`Counter::TproxyLocal`]), which TPROXY delivers with its address intact to the proxy's
    /// transparent listener. Else loopback (127.0.0.1, `::1`, `::ffff:127.0.0.1`), where nat's
    /// `REDIRECT` sends it in either mode, so a listener on loopback alone (Istio's validator)
    /// takes it.
    pub keep_addr: bool,
    /// Bind the (unbound) socket to the address it dialled before it goes to loopback: nat's
    /// `REDIRECT` keeps the source the route chose for the original destination, which for one
    /// of the pod's own addresses is that address. Only in TPROXY mode, whose proxy connects
    /// to the application from the peer it accepted (the application sees it); the kernel
    /// may refuse (a port-only bind before, a link-local address), and the connect then
    /// leaves from loopback.
    pub bind_dst: bool,
}

/// Where `v` sends `conn`, `None` when it leaves it alone.
#[inline(always)]
pub fn target(p: &OutboundPolicy, v: Verdict, conn: &Conn) -> Option<Target> {
    let Verdict::Redirect(port, counter) = v else {
        return None;
    };
    let tproxy = p.flags & OUT_TPROXY != 0;
    Some(Target {
        port,
        keep_addr: tproxy && counter == Counter::TproxyLocal,
        bind_dst: tproxy
            && counter == Counter::InboundRedirectLocal
            && !conn.bound
            && !is_loopback(conn.family, &conn.dst)
            && !(conn.family == AF_INET6 && conn.dst == PASSTHROUGH_V6),
    })
}
