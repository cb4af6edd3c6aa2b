//! What a chat source shows while its agents work (`progress`, `reactions`,
//! `progress_every`, `progress_every_in_groups` in its settings), resolved with its platform's
//! defaults.

use std::time::Duration;

use relayq_engine::progress::{ProgressMode, ReactionState};
use serde::{Deserialize, Serialize};

/// The reactions that say what became of a person's message.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Reactions {
    /// The agent took it.
    pub taken: String,
    /// The agent's turn on it ended.
    pub done: String,
    /// It was dropped, or the turn failed.
    pub failed: String,
}

impl Reactions {
    /// From the platform's three, in the order taken, done, failed.
    pub fn of(three: [&str; 3]) -> Reactions {
        let [taken, done, failed] = three.map(str::to_string);
        Reactions {
            taken,
            done,
            failed,
        }
    }

    /// The reaction that shows `state`.
    pub fn of_state(&self, state: ReactionState) -> &str {
        match state {
            ReactionState::Taken => &self.taken,
            ReactionState::Done => &self.done,
            ReactionState::Failed => &self.failed,
        }
    }
}

/// One source's progress settings, its platform's defaults filled in.
#[derive(Debug, Clone)]
pub struct ProgressSettings {
    pub mode: ProgressMode,
    pub reactions: Reactions,
    /// At most one progress call per this to a chat, and to a group chat.
    pub every: Duration,
    pub every_in_groups: Duration,
    /// Whether a chat of the source is a group (edits are paced slower there).
    pub is_group: fn(&str) -> bool,
}

/// Settings are equal when what they say is: `is_group` is the platform's, which the source
/// they come with fixes.
impl PartialEq for ProgressSettings {
    fn eq(&self, other: &Self) -> bool {
        (self.mode, &self.reactions, self.every, self.every_in_groups)
            == (
                other.mode,
                &other.reactions,
                other.every,
                other.every_in_groups,
            )
    }
}

impl ProgressSettings {
    /// How often a progress message in chat `chat` may change.
    pub fn pace_for(&self, chat: &str) -> Duration {
        match (self.is_group)(chat) {
            true => self.every_in_groups,
            false => self.every,
        }
    }
}

/// The default pace of progress edits: one per 1.5 s in a chat, one per 3 s in a group.
pub const EVERY: Duration = Duration::from_millis(1500);
pub const EVERY_IN_GROUPS: Duration = Duration::from_secs(3);

/// The range both paces may take.
pub const EVERY_RANGE: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(60));
