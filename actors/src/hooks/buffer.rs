//! A session's bounded buffer of leased hook rows waiting for their turn (hook-outbox design,
//! "bounded burst handling"). Critical events are never dropped and keep their order. Bursty
//! events (tool_use, tool_done) are coalesced latest-wins within the current segment — the rows
//! after the last critical one — and under pressure the oldest bursty row is evicted first. A
//! critical row with no room goes back to the store, and so does every row after it.

use std::collections::VecDeque;

use relayq_engine::{EventType, Lease};

/// A leased row and its event type (`None`: its payload cannot be read; it is kept and run, so
/// the handler records the error, like a critical row).
#[derive(Debug, Clone, PartialEq)]
pub struct Buffered {
    pub lease: Lease,
    pub event: Option<EventType>,
}

impl Buffered {
    fn is_bursty(&self) -> bool {
        self.event.is_some_and(|e| !e.is_critical())
    }
}

/// Why a row left the buffer without being run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// A newer row of the same bursty type in the same segment replaced it: done, `coalesced`.
    Coalesced,
    /// No room for bursty rows: done, `evicted`.
    Evicted,
    /// No room, and it must not be lost: back to the store, to be claimed again later.
    Deferred,
}

pub use crate::claiming::Limits;

#[derive(Debug, Default)]
pub struct HookBuffer {
    rows: VecDeque<Buffered>,
    limits: Limits,
}

impl HookBuffer {
    pub fn new(limits: Limits) -> Self {
        HookBuffer {
            rows: VecDeque::new(),
            limits,
        }
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The next row to run, oldest first.
    pub fn pop(&mut self) -> Option<Buffered> {
        self.rows.pop_front()
    }

    /// Puts a row taken with `pop` back first (it could not run yet).
    pub fn push_front(&mut self, row: Buffered) {
        self.rows.push_front(row);
    }

    /// Empties the buffer (the rows go back to the store).
    pub fn take_all(&mut self) -> Vec<Lease> {
        self.rows.drain(..).map(|b| b.lease).collect()
    }

    /// Adds a claimed batch of this session's rows, in order. Returns the rows that left
    /// without running, and why. Once one row is deferred, every later row of the batch is too,
    /// so nothing runs ahead of it.
    pub fn push_batch(&mut self, batch: Vec<Buffered>) -> Vec<(Lease, Dropped)> {
        let mut dropped = Vec::new();
        let mut deferring = false;
        for row in batch {
            if deferring {
                dropped.push((row.lease, Dropped::Deferred));
                continue;
            }
            let out = self.push(row);
            deferring = out.iter().any(|(_, d)| *d == Dropped::Deferred);
            dropped.extend(out);
        }
        dropped
    }

    fn push(&mut self, row: Buffered) -> Vec<(Lease, Dropped)> {
        // The same row leased again (its lease had expired): keep its place, take the new token.
        if let Some(held) = self.rows.iter_mut().find(|b| b.lease.id == row.lease.id) {
            held.lease = row.lease;
            return Vec::new();
        }
        let mut dropped = Vec::new();
        // Whether the row needs a slot freed, and what becomes of it when only critical rows
        // hold the slots: a bursty row is the one to go, a critical one waits for room.
        let (full, without_room) = if row.is_bursty() {
            let segment_start = self
                .rows
                .iter()
                .rposition(|b| !b.is_bursty())
                .map_or(0, |i| i + 1);
            let same = (segment_start..self.rows.len()).find(|&i| self.rows[i].event == row.event);
            if let Some(i) = same {
                let old = self.rows.remove(i).expect("index in range");
                dropped.push((old.lease, Dropped::Coalesced));
            }
            let bursty = self.rows.iter().filter(|b| b.is_bursty()).count();
            let bursty_room = self
                .limits
                .capacity
                .saturating_sub(self.limits.reserved_critical);
            let full = bursty >= bursty_room || self.rows.len() >= self.limits.capacity;
            (full, Dropped::Evicted)
        } else {
            (self.rows.len() >= self.limits.capacity, Dropped::Deferred)
        };
        if full {
            match self.evict_oldest_bursty() {
                Some(old) => dropped.push((old, Dropped::Evicted)),
                None => {
                    dropped.push((row.lease, without_room));
                    return dropped;
                }
            }
        }
        self.rows.push_back(row);
        dropped
    }

    fn evict_oldest_bursty(&mut self) -> Option<Lease> {
        let i = self.rows.iter().position(Buffered::is_bursty)?;
        self.rows.remove(i).map(|b| b.lease)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use EventType::*;

    /// A buffer of `capacity` rows, `reserved_critical` of them kept for critical events.
    fn buffer(capacity: usize, reserved_critical: usize) -> HookBuffer {
        HookBuffer::new(Limits {
            capacity,
            reserved_critical,
        })
    }

    fn row(id: i64, event: EventType) -> Buffered {
        Buffered {
            lease: Lease {
                id,
                key: "s".into(),
                payload: String::new(),
                attempts: 1,
                token: 1,
                expires_at: 0,
                created_at: 0,
                send_started: None,
                run: None,
            },
            event: Some(event),
        }
    }

    fn ids(b: &HookBuffer) -> Vec<i64> {
        b.rows.iter().map(|r| r.lease.id).collect()
    }

    fn dropped(d: &[(Lease, Dropped)]) -> Vec<(i64, Dropped)> {
        d.iter().map(|(l, why)| (l.id, *why)).collect()
    }

    #[test]
    fn bursty_rows_coalesce_latest_wins_within_a_segment_but_not_across_critical_rows() {
        let mut b = HookBuffer::new(Limits::default());
        let d = b.push_batch(vec![
            row(1, ToolUse),
            row(2, ToolDone),
            row(3, ToolUse),
            row(4, AgentStop),
            row(5, ToolUse),
            row(6, ToolDone),
            row(7, ToolDone),
        ]);
        assert_eq!(
            dropped(&d),
            vec![(1, Dropped::Coalesced), (6, Dropped::Coalesced)]
        );
        // 3 replaced 1 and moved to the end of its segment; 5 is in the next segment, so it
        // does not replace 3.
        assert_eq!(ids(&b), vec![2, 3, 4, 5, 7]);
    }

    #[test]
    fn a_full_buffer_evicts_the_oldest_bursty_row_and_keeps_every_critical_one() {
        let mut b = buffer(4, 1);
        // Alternating segments, so nothing coalesces: bursty rows may fill 3 of 4 slots.
        let d = b.push_batch(vec![
            row(1, ToolUse),
            row(2, Notification),
            row(3, ToolUse),
            row(4, Notification),
            row(5, ToolUse),
        ]);
        assert_eq!(dropped(&d), vec![(1, Dropped::Evicted)]);
        assert_eq!(ids(&b), vec![2, 3, 4, 5]);
        let d = b.push_batch(vec![row(6, AgentStop)]);
        assert_eq!(dropped(&d), vec![(3, Dropped::Evicted)]);
        assert_eq!(ids(&b), vec![2, 4, 5, 6]);
    }

    #[test]
    fn a_critical_row_without_room_goes_back_with_everything_after_it() {
        let mut b = buffer(2, 1);
        let d = b.push_batch(vec![
            row(1, UserPromptSubmit),
            row(2, Notification),
            row(3, AgentStop),
            row(4, ToolUse),
            row(5, SessionEnd),
        ]);
        assert_eq!(
            dropped(&d),
            vec![
                (3, Dropped::Deferred),
                (4, Dropped::Deferred),
                (5, Dropped::Deferred)
            ]
        );
        assert_eq!(ids(&b), vec![1, 2]);
        // A bursty row arriving at a buffer full of critical rows is the one evicted.
        assert_eq!(
            dropped(&b.push_batch(vec![row(6, ToolDone)])),
            vec![(6, Dropped::Evicted)]
        );
    }

    #[test]
    fn a_row_leased_again_keeps_its_place_with_the_new_token() {
        let mut b = HookBuffer::new(Limits::default());
        b.push_batch(vec![row(1, AgentStop), row(2, ToolUse)]);
        let mut again = row(1, AgentStop);
        again.lease.token = 9;
        assert!(b.push_batch(vec![again]).is_empty());
        assert_eq!(ids(&b), vec![1, 2]);
        assert_eq!(b.pop().unwrap().lease.token, 9);
    }
}
