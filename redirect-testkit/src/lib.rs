//! Test support shared by unit tests, integration tests and xtask.
pub mod reference;
