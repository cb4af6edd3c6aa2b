//! Where each session's notices go (`[routes]` in config.toml): the routes, and how a route
//! to the session's origin finds its chat.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::hooks::EventType;
use crate::sessions;
use crate::settings::SettingError;

/// One place a session's notices go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoticeRoute {
    /// A configured channel; left out with `to = "origin"`: the channel that answers the
    /// session's origin (its source's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The destination on it, or [`ORIGIN`]: the chat (and thread) the session's last message
    /// that named its chat came from.
    pub to: String,
    /// Which events are sent here; the default is all three that relay.
    #[serde(default = "relayed_events")]
    pub events: Vec<EventType>,
}

/// The events that create outbound messages.
pub fn relayed_events() -> Vec<EventType> {
    vec![
        EventType::AgentStop,
        EventType::Notification,
        EventType::Error,
    ]
}

/// The channel notices go to unless routes say otherwise: relayq's built-in `notices` file.
pub const NOTICES_CHANNEL: &str = "notices";

/// `to = "origin"`: the session's [origin](crate::sessions::Origin).
pub const ORIGIN: &str = "origin";

/// Where each session's notices go: its own routes, else the default ones (`[routes]` in
/// config.toml).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NoticeRoutes {
    /// For sessions without their own routes.
    pub default: Vec<NoticeRoute>,
    /// Per-session routes (replacing the default ones): session key → routes.
    pub sessions: BTreeMap<String, Vec<NoticeRoute>>,
    /// Which channel answers each origin (`telegram:mybot` → the bot's channel), from the
    /// sources that declare one; not written in `[routes]`.
    #[serde(skip)]
    pub replies: BTreeMap<String, String>,
    /// Each channel's text limit, from its settings: a notice longer than it is written in
    /// parts (see [`Notice::parts`]); not written in `[routes]`.
    #[serde(skip)]
    pub limits: BTreeMap<String, crate::TextLimit>,
    /// What each source's chats see while their agent works (`progress` in its settings), by
    /// origin; a chat's `/progress` overrides it. A source not here shows nothing; not written
    /// in `[routes]`.
    #[serde(skip)]
    pub progress: BTreeMap<String, crate::storage::progress::ProgressMode>,
    /// Relay an agent's idle reminder (Claude Code's `idle_prompt`, a minute after every
    /// answer) as a "needs you"; off by default: the chat already has the answer.
    pub idle_reminders: bool,
}

/// Every relayed event of every session back to its origin, when a source answers it, and to
/// the `notices` channel.
impl Default for NoticeRoutes {
    fn default() -> Self {
        NoticeRoutes {
            default: vec![
                NoticeRoute {
                    channel: None,
                    to: ORIGIN.into(),
                    events: relayed_events(),
                },
                NoticeRoute {
                    channel: Some(NOTICES_CHANNEL.into()),
                    to: "log".into(),
                    events: relayed_events(),
                },
            ],
            sessions: BTreeMap::new(),
            replies: BTreeMap::new(),
            limits: BTreeMap::new(),
            progress: BTreeMap::new(),
            idle_reminders: false,
        }
    }
}

/// NoticeRoutes that a config reload can replace while handlers read them.
pub type SharedNoticeRoutes = Arc<RwLock<Arc<NoticeRoutes>>>;

impl NoticeRoutes {
    /// What the file alone can tell; keys within `[routes]`. `channel_named(key, name)` checks
    /// that a channel a route names is configured.
    pub fn check(
        &self,
        channel_named: impl Fn(&str, &str) -> std::result::Result<(), SettingError>,
    ) -> std::result::Result<(), SettingError> {
        let routes = self.default.iter().map(|r| ("default".to_string(), r));
        let session_routes = self.sessions.iter().flat_map(|(session, list)| {
            list.iter().map(move |r| (format!("sessions.{session}"), r))
        });
        for (key, route) in routes.chain(session_routes) {
            if let Some(e) = route.events.iter().find(|e| !relayed_events().contains(e)) {
                return Err(SettingError::new(key, format!("event {e:?} is not relayed; routes take agent_stop, notification and error")));
            }
            let channel = match &route.channel {
                Some(channel) => channel,
                None if route.to == ORIGIN => continue,
                None => return Err(SettingError::new(key, format!("the route to '{}' names no channel: add channel = \"NAME\", or write to = \"origin\" for the chat the session's messages come from", route.to))),
            };
            channel_named(&key, channel)?;
            if route.to.trim().is_empty() {
                return Err(SettingError::new(key, format!("the route to channel '{channel}' has an empty `to`: say where on the channel to send")));
            }
        }
        Ok(())
    }

    /// These routes, replaceable (see [`SharedNoticeRoutes`]).
    pub fn shared(self) -> SharedNoticeRoutes {
        Arc::new(RwLock::new(Arc::new(self)))
    }

    /// No notices at all.
    pub fn none() -> Self {
        NoticeRoutes {
            default: Vec::new(),
            sessions: BTreeMap::new(),
            replies: BTreeMap::new(),
            limits: BTreeMap::new(),
            progress: BTreeMap::new(),
            idle_reminders: false,
        }
    }

    pub fn for_session(&self, session: &str) -> &[NoticeRoute] {
        self.sessions.get(session).unwrap_or(&self.default)
    }

    /// Where `route` sends a notice of `session` now, as (channel, destination, thread); `None`
    /// for an origin route while the session has no origin, or none this relayq answers.
    pub(crate) fn resolve(
        &self,
        route: &NoticeRoute,
        conn: &dyn crate::storage::sql::Executor,
        session: &str,
    ) -> Result<Option<(String, String, Option<String>)>> {
        if route.to != ORIGIN {
            let channel = route.channel.clone().unwrap_or_default();
            return Ok(Some((channel, route.to.clone(), None)));
        }
        let Some(origin) = sessions::origin(conn, session)? else {
            return Ok(None);
        };
        let channel = match &route.channel {
            Some(channel) => Some(channel.clone()),
            None => self.replies.get(&origin.origin).cloned(),
        };
        Ok(channel.map(|channel| (channel, origin.chat, origin.thread)))
    }
}
