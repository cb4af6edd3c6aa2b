//! What an inbound session and an outbound destination share: a run of its leased rows
//! delivered one after the other while each answer is a delivery that came fast, and the
//! answers recorded together, in one write that also gives back what was not tried and leases
//! the next run. Each caller sets its window and its lease (a session: 5 ms, rows for its
//! agent; a destination: 20 ms, rows marked started).
//!
//! ```text
//!   run leased ─▶ deliver a row ─▶ RunAnswers::push ─▶ due()? no ─▶ deliver the next row
//!                                                       │ yes (failed, or the window passed)
//!                                                       ▼
//!        record_run: RecordRun { answers in order, give back, lease next } ⇒ one commit
//!                    ─▶ each answer logged and counted ─▶ the next run
//! ```

use std::time::{Duration, Instant};

use relayq_engine::writes::runs::{GiveBack, LeaseNext, RecordRun, RunRecorded};
use relayq_engine::{Lease, QueueName};

use crate::delivery::AnswerToRecord;
use crate::store::Store;

/// A run's answers not recorded yet, in delivery order, and the window they may wait in.
#[derive(Debug)]
pub struct RunAnswers {
    answers: Vec<AnswerToRecord>,
    /// When the first of them came.
    since: Option<Instant>,
    window: Duration,
}

impl RunAnswers {
    pub fn new(window: Duration) -> Self {
        RunAnswers {
            answers: Vec::new(),
            since: None,
            window,
        }
    }

    pub fn push(&mut self, answer: AnswerToRecord) {
        self.since.get_or_insert_with(Instant::now);
        self.answers.push(answer);
    }

    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }

    /// They must be recorded before another row goes: the last one is not a delivery (the
    /// rows after it must wait), or the window has passed since the first.
    pub fn due(&self) -> bool {
        match (self.answers.last(), self.since) {
            (Some(last), Some(since)) => {
                !last.tried.outcome.is_delivered() || since.elapsed() >= self.window
            }
            _ => false,
        }
    }

    /// Whether any of them is not a delivery.
    pub fn failed(&self) -> bool {
        self.answers.iter().any(|a| !a.tried.outcome.is_delivered())
    }

    /// Takes them, to record, with when the first came; [`RunAnswers::restore`] puts them
    /// back when the write fails.
    pub fn take(&mut self) -> (Vec<AnswerToRecord>, Option<Instant>) {
        (std::mem::take(&mut self.answers), self.since.take())
    }

    /// Puts back answers whose write failed (nothing of it committed), before any newer ones.
    pub fn restore(&mut self, answers: Vec<AnswerToRecord>, since: Option<Instant>) {
        let newer = std::mem::replace(&mut self.answers, answers);
        self.answers.extend(newer);
        self.since = since.or(self.since);
    }
}

/// A run's write that did not commit: nothing of it is recorded; its answers come back, to
/// record again.
#[derive(Debug)]
pub struct NotRecorded {
    pub error: crate::error::ActorError,
    pub answers: Vec<AnswerToRecord>,
}

/// One write of a run: records `answers` in order, gives back `give_back` (as `give_back_as`
/// says), leases `next`; once committed, logs and counts each answer's outcome. The answers
/// are copied once: for the log, or to come back when the write fails.
pub fn record_run(
    store: &Store,
    queue: QueueName,
    answers: Vec<AnswerToRecord>,
    give_back: Vec<Lease>,
    give_back_as: GiveBack,
    next: LeaseNext,
) -> impl std::future::Future<Output = std::result::Result<RunRecorded, NotRecorded>> + 'static {
    let kept = answers.clone();
    let write = store.apply(RecordRun {
        queue,
        answers: answers
            .into_iter()
            .map(AnswerToRecord::into_record)
            .collect(),
        give_back,
        give_back_as,
        next,
    });
    let store = store.clone();
    async move {
        let recorded = match write.await {
            Ok(recorded) => recorded,
            Err(error) => {
                return Err(NotRecorded {
                    error,
                    answers: kept,
                })
            }
        };
        let handle = store.named(queue);
        for (answer, row) in kept.iter().zip(&recorded.recorded) {
            answer.tried.log(&store.metrics, handle, &answer.lease, row);
        }
        Ok(recorded)
    }
}
