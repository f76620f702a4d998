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
//!
//! Every module is the crate's own: the CLI and the daemon come in only through the doors below.
// Every dependency of the product build is used (the test build has dev-dependencies too).
#![cfg_attr(test, allow(unused_crate_dependencies))]
mod atomic;
mod check;
mod confdir;
mod conflist;
mod error;
mod fight;
mod install;
mod plugin;
mod state;
mod watch;

#[cfg(test)]
mod stand_by_tests;

// What went wrong.
pub use error::{Error, Result};

// `install-cni` and `uninstall-cni`: install, check, uninstall, and the watcher that puts our
// entry back within the rule against fighting another writer.
pub use check::check;
pub use fight::Rule as FightRule;
pub use install::{install, uninstall, Change, Installed, Options};
pub use watch::{watch, Wake};

// The names install-cni writes: the plugin binary, the state file.
pub use plugin::NAME as PLUGIN_NAME;
pub use state::FILE as STATE_FILE;

// The runtime's configuration as libcni finds it, and our entry in it.
pub use confdir::{find as find_config, Found as FoundConfig};
pub use conflist::{
    entry as conflist_entry, has_any as has_our_entry, istio_cni_chained, our_entry,
};
