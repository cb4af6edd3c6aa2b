//! Each platform's API vocabulary (its answer envelope, its error text, its ids), in one place
//! for the platform's channel and its source.

pub mod discord;
pub mod slack;
pub mod telegram;
