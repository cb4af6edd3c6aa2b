//! What the nodes sharing a database write about themselves and share: this node joining, its
//! heartbeat, its leaving, and the pacing budgets every node takes its sends from. Applied at
//! once (`WriteDoor::apply_now`) by the membership's thread and the channels' pacing.

use super::{Write, Writer};
use crate::error::Result;
use crate::storage::nodes::{beat_in, join_in, leave_in, others, Others};

/// This engine's node joins the database's nodes, served by its instance (refused while another
/// live daemon serves the name); answers how busy the others are (`Engine::note_others`).
#[derive(Debug, Clone, Copy)]
pub struct JoinNodes;

impl Write for JoinNodes {
    type Output = Others;

    fn apply(&self, w: &Writer<'_>) -> Result<Others> {
        let engine = &w.door.engine;
        join_in(w.tx(), engine.node(), engine.owner())?;
        others(w.tx(), engine.node())
    }
}

/// This node is alive, with its writer's backlog and what cannot work here (`unready`);
/// answers whether it still holds its name (false: another daemon took it meanwhile) and how
/// busy the others are.
#[derive(Debug, Clone)]
pub struct Heartbeat {
    pub backlog: u64,
    pub unready: Vec<String>,
}

impl Write for Heartbeat {
    type Output = (bool, Others);

    fn apply(&self, w: &Writer<'_>) -> Result<(bool, Others)> {
        let engine = &w.door.engine;
        let (node, owner) = (engine.node(), engine.owner());
        let kept = beat_in(w.tx(), node, owner, self.backlog, &self.unready)?;
        Ok((kept, others(w.tx(), node)?))
    }
}

/// This node stops cleanly.
#[derive(Debug, Clone, Copy)]
pub struct LeaveNodes;

impl Write for LeaveNodes {
    type Output = ();

    fn apply(&self, w: &Writer<'_>) -> Result<()> {
        let engine = &w.door.engine;
        leave_in(w.tx(), engine.node(), engine.owner())
    }
}

/// Takes one send from each shared budget (a key, and microseconds between sends; see
/// `storage::budgets`), or from none: over a budget, the write fails with
/// `EngineError::OverBudget { wait_us }` and is rolled back, so the budgets taken before the
/// spent one are not spent either.
#[derive(Debug, Clone)]
pub struct TakeBudgets(pub Vec<(String, i64)>);

impl Write for TakeBudgets {
    type Output = ();

    fn apply(&self, w: &Writer<'_>) -> Result<()> {
        let budgets: Vec<(&str, i64)> = self.0.iter().map(|(k, us)| (k.as_str(), *us)).collect();
        match crate::storage::budgets::take_in(w.tx(), &budgets)? {
            None => Ok(()),
            Some(wait_us) => Err(crate::EngineError::OverBudget { wait_us }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Engine, EngineError, ManualClock, WriteDoor};
    use std::time::Duration;

    /// A send over one of its budgets spends none of them: the write fails whole, so the
    /// chat's budget it took before finding the bot's spent is free for the chat's next send.
    #[test]
    fn a_send_over_one_budget_spends_none() {
        let (_dir, db) = crate::storage::db::temp_database();
        let clock = std::sync::Arc::new(ManualClock::new(1_000));
        let engine = Engine::with_clock(db, clock.clone());
        let door = WriteDoor::new(engine.queues(&Default::default()), Default::default());
        let take = |chat: &str| {
            let budgets = vec![(chat.to_string(), 1_000_000), ("bot".to_string(), 33_333)];
            door.apply_now(TakeBudgets(budgets))
        };
        take("chat-1").unwrap();
        let spent = take("chat-2");
        assert!(
            matches!(spent, Err(EngineError::OverBudget { wait_us: 33_333 })),
            "the bot's budget is spent for 33 ms: {spent:?}"
        );
        clock.advance(Duration::from_millis(40));
        take("chat-2").expect("chat-2's budget was not spent by the send that failed");
    }
}
