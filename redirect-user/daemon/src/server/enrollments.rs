//! The daemon's registry of enrollments and the files that record them (`DIR/enrollments/
//! COOKIE.json`): within the daemon the one owner of both, so an enrollment is listed exactly
//! while its file says a restart adopts it (a command that writes the pinned maps itself
//! leaves its record through `files::record_direct`, for the next daemon to adopt). Records
//! change through [`Enrollments::record`], [`Enrollments::amend`] and [`Enrollments::forget`],
//! which write or remove the file in the same step; the rest of an entry (its namespace handle,
//! its outside-capture count) is the daemon's to change in place.
use std::{
    collections::{btree_map, BTreeMap},
    path::{Path, PathBuf},
};

use redirect_common::NetnsCookie;

use super::followed::Followed;
use crate::{
    error::Result,
    files::{enrollment_dir, remove_enrollment, write_enrollment},
    state::Record,
};

/// Every enrollment this daemon follows, by its namespace's cookie, and their files.
#[derive(Debug)]
pub(crate) struct Enrollments {
    /// The daemon's directory (the records are in its `enrollments/`).
    dir: PathBuf,
    by_cookie: BTreeMap<NetnsCookie, Followed>,
}

impl Enrollments {
    /// No enrollment yet; the records go under daemon directory `dir`.
    pub(crate) fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            by_cookie: BTreeMap::new(),
        }
    }

    /// Writes `f`'s record, then lists it (replacing what its cookie had). Nothing is listed
    /// when the file cannot be written.
    pub(crate) fn record(&mut self, f: Followed) -> Result<()> {
        write_enrollment(&self.dir, &f.record)?;
        self.by_cookie.insert(f.record.cookie, f);
        Ok(())
    }

    /// Lists `f` whose record is already on disk (re-adopted at the start) without writing it.
    pub(crate) fn adopt(&mut self, f: Followed) {
        self.by_cookie.insert(f.record.cookie, f);
    }

    /// Changes the record of enrollment `cookie` and writes it again; `Ok(false)` when it is
    /// not enrolled. The change stays in memory even if the write fails (the maps hold it).
    pub(crate) fn amend(
        &mut self,
        cookie: NetnsCookie,
        change: impl FnOnce(&mut Record),
    ) -> Result<bool> {
        let Some(f) = self.by_cookie.get_mut(&cookie) else {
            return Ok(false);
        };
        change(&mut f.record);
        write_enrollment(&self.dir, &f.record)?;
        Ok(true)
    }

    /// Forgets enrollment `cookie` and removes its file (there whether it was listed or not).
    pub(crate) fn forget(&mut self, cookie: NetnsCookie) -> Option<Followed> {
        remove_enrollment(&self.dir, cookie);
        self.by_cookie.remove(&cookie)
    }

    /// Forgets every enrollment and removes their directory (the node is uninstalled).
    pub(crate) fn forget_all(&mut self) {
        let _ = std::fs::remove_dir_all(enrollment_dir(&self.dir));
        self.by_cookie.clear();
    }

    pub(crate) fn get(&self, cookie: &NetnsCookie) -> Option<&Followed> {
        self.by_cookie.get(cookie)
    }

    /// The entry to change in place: its namespace handle and counts (its record through
    /// [`Enrollments::amend`]).
    pub(crate) fn get_mut(&mut self, cookie: &NetnsCookie) -> Option<&mut Followed> {
        self.by_cookie.get_mut(cookie)
    }

    pub(crate) fn contains_key(&self, cookie: &NetnsCookie) -> bool {
        self.by_cookie.contains_key(cookie)
    }

    pub(crate) fn len(&self) -> usize {
        self.by_cookie.len()
    }

    pub(crate) fn values(&self) -> btree_map::Values<'_, NetnsCookie, Followed> {
        self.by_cookie.values()
    }

    pub(crate) fn values_mut(&mut self) -> btree_map::ValuesMut<'_, NetnsCookie, Followed> {
        self.by_cookie.values_mut()
    }

    /// The enrolled cookies, in order (a copy: the caller may change the registry meanwhile).
    pub(crate) fn cookies(&self) -> Vec<NetnsCookie> {
        self.by_cookie.keys().copied().collect()
    }
}
