//! The SQLite backend: one file, one daemon (the embedded default).

pub(crate) mod checkpoint;
pub mod db;
