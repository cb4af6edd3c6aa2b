//! Discord's REST API, as the Discord channel (and a gateway source) name it.

/// Discord's REST API, version 10.
pub const API_URL: &str = "https://discord.com/api/v10";

/// Discord, as the settings of its channel name it.
#[derive(Debug, Clone, PartialEq)]
pub struct Discord;
