//! A network namespace handed to the daemon: the path as the caller names it and a descriptor
//! the caller opened itself, sent beside the request (`SCM_RIGHTS`). The daemon enrolls the
//! namespace behind the descriptor, so a runtime's path (containerd's `/var/run/netns/cni-...`,
//! a pod's `/proc/PID/ns/net`) never has to mean the same thing in the daemon's mount
//! namespace.
use std::{
    fs::File,
    io::{IoSlice, Write as _},
    mem::MaybeUninit,
    os::{
        fd::{AsFd, BorrowedFd},
        unix::net::UnixStream,
    },
    path::{Path, PathBuf},
};

use rustix::{
    io::Errno,
    net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags},
};

/// A namespace opened by its caller: what goes with an enroll, ADD or CHECK request.
#[derive(Debug)]
pub struct NetnsFd {
    path: PathBuf,
    file: File,
}

impl NetnsFd {
    /// Opens `path` (read-only, close-on-exec) in the caller's own mount namespace.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        Ok(Self {
            path: path.to_owned(),
            file: File::open(path)?,
        })
    }

    /// The same descriptor named `path` in the request (the name the daemon knows it by, such
    /// as an enrollment's, where the caller opened it by another).
    #[must_use]
    pub fn named(mut self, path: PathBuf) -> Self {
        self.path = path;
        self
    }

    /// The path as the caller named it.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl AsFd for NetnsFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// Writes `frame` to `stream`, with `fd` as `SCM_RIGHTS` on its first bytes when given (the
/// daemon's first read receives it); the rest as plain writes.
pub(crate) fn send(
    mut stream: &UnixStream,
    frame: &[u8],
    fd: Option<BorrowedFd<'_>>,
) -> std::io::Result<()> {
    let Some(fd) = fd else {
        return stream.write_all(frame);
    };
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other(
            "SCM_RIGHTS does not fit its control buffer",
        ));
    }
    let sent = loop {
        match sendmsg(
            stream,
            &[IoSlice::new(frame)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Err(Errno::INTR) => {}
            other => break other?,
        }
    };
    stream.write_all(&frame[sent..])
}
