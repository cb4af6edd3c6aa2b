//! The engine crate's integration tests, one binary (see the workspace's tests/tests.rs).

mod group_commit;
mod hook_handlers;
mod queue_ops;
