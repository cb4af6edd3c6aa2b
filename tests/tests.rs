//! relayq from the outside, as a user runs it: the built binary on real SQLite files, real
//! processes, real HTTP on loopback and real tmux. One test binary (ripgrep's layout), so the
//! helpers in `common` are compiled and linked once.

mod common;

mod access;
mod agents;
mod approvals;
mod bad_input;
mod chat_sessions;
mod config;
mod dashboard;
mod delivery;
mod discord;
mod docs;
mod files;
mod hook;
mod hook_processing;
mod http;
mod imports;
mod nodes;
mod openapi;
mod outbound;
mod platforms;
mod progress;
mod real_agents;
mod recovery;
mod regression;
mod service;
mod source_conformance;
mod sources;
mod telegram;
