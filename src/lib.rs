//! The `relayq` binary as a library: configuration, the command line, and the commands, so
//! tests and examples can start relayq the way the binary does.
//!
//! The layers: `relayq-engine` (storage, no async) ← `relayq-actors` (actors and channels)
//! ← this crate (config file, CLI).

pub mod cli;
pub mod commands;
pub mod config;
pub mod dead_letters;
pub mod http;
pub mod invocation;
pub mod logging;
pub mod operator;
pub mod output;
pub mod pid_file;
pub mod views;

pub use config::Config;
