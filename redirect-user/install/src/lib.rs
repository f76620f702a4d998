//! Installs the chained `redirect-cni` plugin on a node (`redirect install-cni`): the binary
//! into the CNI bin directory, our entry at the end of the highest-priority conflist the
//! runtime reads (a `.conf` turned into a `.conflist`), every write atomic and none made when
//! nothing changed; a state file so `redirect uninstall-cni` undoes exactly that; a watcher
//! that puts the entry back when another writer drops it, without fighting forever.
//!
//! No standalone `02-redirect.conflist` is ever written: a chained plugin has no result of its
//! own (ADD without `prevResult` fails), and a conflist holding only it would sort before the
//! primary's (`10-...`) and take every new pod's network away. With no configuration the
//! install fails naming the directory, or waits for one (`--watch`).
// Every dependency of the product build is used (the test build has dev-dependencies too).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
pub mod atomic;
pub mod confdir;
pub mod conflist;
pub mod error;
pub mod fight;
pub mod install;
pub mod plugin;
pub mod state;
pub mod watch;

pub use error::{Error, Result};
pub use install::{check, install, install_gated, uninstall, Change, Installed, Options};
