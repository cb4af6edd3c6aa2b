//! Who may write to the agents and which chat feeds which session: the settings every chat
//! source has (`allowed_users`, `chats`, `session_template`, `reply_channel`), in one type a
//! source's settings take in whole (`#[serde(flatten)]`), with its checks and its lookups.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::progress::settings::{ProgressSettings, Reactions};
use crate::settings::SettingError;
pub use relayq_engine::access::Role;
use relayq_engine::progress::ProgressMode;
use std::time::Duration;

/// A chat platform, as its routing needs it: its people's ids and how its chats are named.
pub trait ChatPlatform {
    /// A person's id (Telegram: a number; Slack: `U0123ABCD`).
    type User: Clone + Debug + PartialEq + Serialize + DeserializeOwned;
    /// Where a chat's id goes in `session_template`: `{chat}`.
    const PLACEHOLDER: &'static str;
    /// A template to suggest: `tg{chat}`.
    const TEMPLATE_EXAMPLE: &'static str;
    /// A `chats` table to suggest: `{ "123456789" = "my-agent" }`.
    const CHATS_EXAMPLE: &'static str;
    /// How to write and find one's id, for the error when nobody is allowed.
    const USERS_EXAMPLE: &'static str;

    /// Whether `id` is a chat id as the platform writes them; why not, when it is not.
    fn check_chat(_id: &str) -> Result<(), String> {
        Ok(())
    }

    /// The reactions a person's message gets by default: taken, done, failed.
    const REACTIONS: [&'static str; 3];

    /// Whether the platform takes `emoji` as a bot's reaction; why not, when it does not.
    fn check_reaction(_emoji: &str) -> Result<(), String> {
        Ok(())
    }

    /// Whether chat `id` is a group, where progress is edited more slowly.
    fn is_group(_id: &str) -> bool {
        false
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(bound = "")]
pub struct ChatRouting<P: ChatPlatform> {
    /// The people whose messages are taken (and, when `approvers` is not set, whose taps
    /// answer agents' questions and who start, stop and resume sessions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_users: Vec<P::User>,
    /// The people who answer agents' questions, start, stop and resume sessions, and let
    /// others in (`/approve`); they write to the agents too. Not set: `allowed_users` do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvers: Option<Vec<P::User>>,
    /// Chat id → the session its messages go to. Slack's settings call it `channels`.
    #[serde(
        default,
        alias = "channels",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub chats: BTreeMap<String, String>,
    /// For chats not in `chats`: one session per chat, named from this (the placeholder is
    /// the chat's id), e.g. `"tg{chat}"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_template: Option<String>,
    /// The channel that answers these chats (`to = "origin"` notices); the default is the
    /// channel named like the source, made from its bot settings if config.toml has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_channel: Option<String>,
    /// How many sessions started from one chat (`/new`, `/resume`) may run at once.
    #[serde(default = "default_max_sessions")]
    pub max_sessions: u32,
    /// What the chats see while their agent works: `off`, `receipts` (a reaction on each
    /// message), `steps` (the default: and one message per turn with the agent's steps) or
    /// `stream`. A chat changes it for itself with `/progress`.
    #[serde(default)]
    pub progress: ProgressMode,
    /// The reactions that say a message was taken, done, or failed; the platform's when left
    /// out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reactions: Option<Reactions>,
    /// At most one progress edit per this in a chat, and in a group chat.
    #[serde(default = "default_every", with = "humantime_serde")]
    pub progress_every: Duration,
    #[serde(default = "default_every_in_groups", with = "humantime_serde")]
    pub progress_every_in_groups: Duration,
    #[serde(skip)]
    pub platform: PhantomData<P>,
}

fn default_max_sessions() -> u32 {
    10
}

fn default_every() -> Duration {
    crate::progress::settings::EVERY
}

fn default_every_in_groups() -> Duration {
    crate::progress::settings::EVERY_IN_GROUPS
}

/// The range `max_sessions` may take.
pub const MAX_SESSIONS_RANGE: (u32, u32) = (1, 1000);

impl<P: ChatPlatform> Default for ChatRouting<P> {
    fn default() -> Self {
        ChatRouting {
            allowed_users: Vec::new(),
            approvers: None,
            chats: BTreeMap::new(),
            session_template: None,
            reply_channel: None,
            max_sessions: default_max_sessions(),
            progress: ProgressMode::default(),
            reactions: None,
            progress_every: default_every(),
            progress_every_in_groups: default_every_in_groups(),
            platform: PhantomData,
        }
    }
}

impl<P: ChatPlatform> ChatRouting<P> {
    /// `user` may write; chat `chat` feeds `session`.
    pub fn new(user: P::User, chat: &str, session: &str) -> Self {
        ChatRouting {
            allowed_users: vec![user],
            chats: BTreeMap::from([(chat.to_string(), session.to_string())]),
            ..ChatRouting::default()
        }
    }

    /// Whether `user` is one of the people named (a writer or an approver).
    pub fn allows(&self, user: &P::User) -> bool {
        self.role_of(user) >= Role::Writer
    }

    /// What the settings let `user` do: approvers approve, `allowed_users` write (and approve
    /// when no `approvers` are set); anyone else is a stranger, unless pairing added them.
    pub fn role_of(&self, user: &P::User) -> Role {
        let writes = self.allowed_users.contains(user);
        match &self.approvers {
            Some(approvers) if approvers.contains(user) => Role::Approver,
            Some(_) if writes => Role::Writer,
            None if writes => Role::Approver,
            _ => Role::Stranger,
        }
    }

    /// The session chat `chat` feeds: its `chats` entry, or one made from the template.
    pub fn session_for(&self, chat: &str) -> Option<String> {
        if let Some((_, session)) = self.chats.iter().find(|(id, _)| id.trim() == chat) {
            return Some(session.clone());
        }
        let template = self.session_template.as_ref()?;
        Some(template.replace(P::PLACEHOLDER, chat))
    }

    /// The reply channel: the one named, or the source's own name.
    pub fn reply_channel_or(&self, source: &str) -> String {
        self.reply_channel
            .clone()
            .unwrap_or_else(|| source.to_string())
    }

    /// The source's progress settings, its platform's defaults filled in.
    pub fn progress_settings(&self) -> ProgressSettings {
        ProgressSettings {
            mode: self.progress,
            reactions: self
                .reactions
                .clone()
                .unwrap_or_else(|| Reactions::of(P::REACTIONS)),
            every: self.progress_every,
            every_in_groups: self.progress_every_in_groups,
            is_group: P::is_group,
        }
    }

    /// What the file alone can tell. `others_allowed`: the source lets people in another way
    /// (Telegram's `allowed_chats`), so `allowed_users` may be empty.
    pub fn check(&self, others_allowed: bool) -> Result<(), SettingError> {
        let approvers = self.approvers.as_ref().map_or(0, Vec::len);
        if self.allowed_users.is_empty() && approvers == 0 && !others_allowed {
            return Err(SettingError::new(
                "allowed_users",
                format!(
                    "is required: the agent behind a session can run commands, so relayq reads \
                     only the people you name. {}",
                    P::USERS_EXAMPLE
                ),
            ));
        }
        let (min, max) = MAX_SESSIONS_RANGE;
        if !(min..=max).contains(&self.max_sessions) {
            return Err(SettingError::new(
                "max_sessions",
                format!("is {}: it takes {min} to {max}", self.max_sessions),
            ));
        }
        let (min, max) = crate::progress::settings::EVERY_RANGE;
        for (key, every) in [
            ("progress_every", self.progress_every),
            ("progress_every_in_groups", self.progress_every_in_groups),
        ] {
            if !(min..=max).contains(&every) {
                return Err(SettingError::new(
                    key,
                    format!("is {every:?}: it takes {min:?} to {max:?}"),
                ));
            }
        }
        if let Some(r) = &self.reactions {
            for (which, emoji) in [
                ("taken", &r.taken),
                ("done", &r.done),
                ("failed", &r.failed),
            ] {
                P::check_reaction(emoji)
                    .map_err(|why| SettingError::new(format!("reactions.{which}"), why))?;
            }
        }
        for (chat, session) in &self.chats {
            P::check_chat(chat.trim())
                .map_err(|why| SettingError::new(format!("chats.{chat}"), why))?;
            if session.trim().is_empty() {
                return Err(SettingError::new(
                    format!("chats.{chat}"),
                    "names no session",
                ));
            }
        }
        let (placeholder, example) = (P::PLACEHOLDER, P::TEMPLATE_EXAMPLE);
        match &self.session_template {
            Some(t) if !t.contains(placeholder) => Err(SettingError::new(
                "session_template",
                format!(
                    "{t:?} has no {placeholder}: write e.g. \"{example}\" for one session per chat"
                ),
            )),
            None if self.chats.is_empty() => Err(SettingError::new(
                "chats",
                format!(
                    "is required: say which session each chat feeds (chats = {}), or set \
                     session_template = \"{example}\" for one session per chat",
                    P::CHATS_EXAMPLE
                ),
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Numbered;

    impl ChatPlatform for Numbered {
        type User = i64;
        const PLACEHOLDER: &'static str = "{chat}";
        const TEMPLATE_EXAMPLE: &'static str = "n{chat}";
        const CHATS_EXAMPLE: &'static str = "{ \"1\" = \"agent\" }";
        const USERS_EXAMPLE: &'static str = "List ids.";
        const REACTIONS: [&'static str; 3] = ["a", "b", "c"];

        fn check_chat(id: &str) -> Result<(), String> {
            id.parse::<i64>()
                .map(|_| ())
                .map_err(|_| "is not a chat id".to_string())
        }
    }

    #[test]
    fn a_chat_goes_to_its_named_session_else_to_one_made_from_the_template() {
        let mut routing = ChatRouting::<Numbered>::new(7, " 5 ", "agent");
        assert_eq!(routing.session_for("5").as_deref(), Some("agent"));
        assert_eq!(routing.session_for("6"), None);
        routing.session_template = Some("n{chat}".into());
        assert_eq!(routing.session_for("6").as_deref(), Some("n6"));
        assert!(routing.allows(&7) && !routing.allows(&8));
    }

    #[test]
    fn allowed_users_approve_until_approvers_are_named_then_only_approvers_do() {
        let mut routing = ChatRouting::<Numbered>::new(7, "5", "agent");
        assert_eq!(routing.role_of(&7), Role::Approver, "today's meaning kept");
        assert_eq!(routing.role_of(&8), Role::Stranger);
        routing.approvers = Some(vec![9]);
        assert_eq!(routing.role_of(&7), Role::Writer);
        assert_eq!(routing.role_of(&9), Role::Approver);
        assert!(routing.allows(&9), "an approver writes too");
        let only_approvers = ChatRouting::<Numbered> {
            allowed_users: vec![],
            approvers: Some(vec![9]),
            ..ChatRouting::new(1, "5", "agent")
        };
        assert!(only_approvers.check(false).is_ok());
    }

    #[test]
    fn routing_that_lets_nobody_in_or_feeds_no_session_names_the_key_to_fix() {
        let nobody = ChatRouting::<Numbered> {
            allowed_users: vec![],
            ..ChatRouting::new(1, "5", "agent")
        };
        assert_eq!(nobody.check(false).unwrap_err().key, "allowed_users");
        assert!(nobody.check(true).is_ok());

        let nowhere = ChatRouting::<Numbered> {
            allowed_users: vec![1],
            ..ChatRouting::default()
        };
        assert_eq!(nowhere.check(false).unwrap_err().key, "chats");

        let one_for_all = ChatRouting::<Numbered> {
            session_template: Some("shared".into()),
            ..nowhere.clone()
        };
        assert_eq!(
            one_for_all.check(false).unwrap_err().key,
            "session_template"
        );

        let named = ChatRouting::<Numbered>::new(1, "general", "agent");
        assert_eq!(named.check(false).unwrap_err().key, "chats.general");
        let empty = ChatRouting::<Numbered>::new(1, "5", " ");
        assert!(empty
            .check(false)
            .unwrap_err()
            .message
            .contains("names no session"));
    }
}
