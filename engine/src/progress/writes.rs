//! The writes of progress on the phone: what became of a reaction the actors sent, and a
//! chat's own setting.

use crate::error::Result;
use crate::storage::progress::{self as store, ProgressMode, ReactionState};
use crate::writes::{Write, Writer};
use crate::Atomicity;

/// A reaction was sent as `state` for the message of inbound row `row_id`: `shown` when the
/// platform confirmed it, else it was given up on (a reaction is tried at most twice). Nothing
/// changes when the message wants another state since (it is sent in turn).
#[derive(Debug, Clone, Copy)]
pub struct ReactionTried {
    pub row_id: i64,
    pub state: ReactionState,
    pub shown: bool,
}

impl Write for ReactionTried {
    type Output = ();

    fn atomicity(&self) -> Atomicity {
        Atomicity::OneStatement
    }

    fn apply(&self, w: &Writer<'_>) -> Result<()> {
        store::tried_in(w.tx(), self.row_id, self.state, self.shown)
    }
}

/// Reactions unchanged for a day are forgotten (their messages scrolled away long ago; the
/// actors stop setting them after an hour), and progress lanes an hour after they ran out.
/// How many.
#[derive(Debug, Clone, Copy)]
pub struct PruneReactions;

/// How long a reaction's row is kept after its last change.
pub const REACTIONS_KEPT_MS: i64 = 24 * 3600 * 1000;

/// How long a progress lane is kept after it ran out (a holder's record, for `status`).
const LANES_KEPT_MS: i64 = 3600 * 1000;

impl Write for PruneReactions {
    type Output = usize;

    fn atomicity(&self) -> Atomicity {
        Atomicity::OneStatement
    }

    fn apply(&self, w: &Writer<'_>) -> Result<usize> {
        let lanes = store::prune_lanes_in(w.tx(), w.now() - LANES_KEPT_MS)?;
        Ok(store::prune_in(w.tx(), w.now() - REACTIONS_KEPT_MS)? + lanes)
    }
}

/// What chat `chat` of `origin` sees while its agent works, over its source's setting.
#[derive(Debug, Clone)]
pub struct SetChatProgress {
    pub origin: String,
    pub chat: String,
    pub mode: ProgressMode,
}

impl Write for SetChatProgress {
    type Output = ();

    fn atomicity(&self) -> Atomicity {
        Atomicity::OneStatement
    }

    fn apply(&self, w: &Writer<'_>) -> Result<()> {
        store::set_chat_progress_in(w.tx(), &self.origin, &self.chat, self.mode)
    }
}

/// Takes or renews chat `chat` of `channel`'s progress lane for this daemon, for `for_ms`:
/// where several daemons share a database, the holder alone sends the chat's progress.
/// Who holds it after.
#[derive(Debug, Clone)]
pub struct HoldProgressLane {
    pub channel: String,
    pub chat: String,
    pub for_ms: i64,
}

impl Write for HoldProgressLane {
    type Output = store::LaneHolder;

    fn apply(&self, w: &Writer<'_>) -> Result<store::LaneHolder> {
        let owner = w.door.engine.owner();
        store::hold_lane_in(w.tx(), &self.channel, &self.chat, owner, self.for_ms)
    }
}
