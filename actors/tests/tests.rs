//! The actors crate's integration tests, one binary (see the workspace's tests/tests.rs).

mod hooks;
mod runtime;
