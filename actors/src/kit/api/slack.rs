//! Slack's Web API, as the Slack channel and source both name it.

/// Slack's Web API.
pub const API_URL: &str = "https://slack.com/api";

/// Slack, as the settings of its channel and its source name it.
#[derive(Debug, Clone, PartialEq)]
pub struct Slack;
