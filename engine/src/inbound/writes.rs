//! The inbound flow's writes: a message taken in (its row, its session's origin, what its
//! chat hears), a platform's message refused, a source's batch, and a source's lease.

use crate::approvals::writes::{record_chat_answers_in, ChatAnswersRecorded};
use crate::approvals::ChatAnswer;
use crate::chat_sessions::writes::{record_requests_in, RequestsRecorded};
use crate::chat_sessions::SessionRequest;
use crate::commit::RowAhead;
use crate::error::Result;
use crate::inbound::{self, trouble, InboundMessage};
use crate::queue::Enqueued;
use crate::writes::{Write, WriteDoor, Writer};
use crate::Atomicity;

/// An inbound message (validated): its row, the session's origin, and a "your message was
/// dropped" notice to its chat when it is written expired. Answers the row and the notice's
/// ordering key (to wake its sender).
#[derive(Debug, Clone)]
pub struct EnqueueInbound(pub InboundMessage);

/// What [`EnqueueInbound`] wrote: the row, the session it is for (a chat source's message is
/// routed by its chat), and the ordering key of the notice its chat was sent, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct InboundTaken {
    pub row: Enqueued,
    pub session: String,
    pub told: Option<String>,
}

impl Write for EnqueueInbound {
    type Output = InboundTaken;

    fn atomicity(&self) -> Atomicity {
        match self.0.writes_one_statement() {
            true => Atomicity::OneStatement,
            false => Atomicity::Savepoint,
        }
    }

    fn row_ahead(&self, door: &WriteDoor) -> Option<RowAhead> {
        inbound::row_ahead(&door.inbound, &self.0)
    }

    fn apply(&self, w: &Writer<'_>) -> Result<Self::Output> {
        let (message, row) = match w.written_ahead() {
            Some(row) => (self.0.clone(), inbound::written_in(w.tx(), &self.0, row)?),
            None => inbound::enqueue_routed_in(&w.door.inbound, w.tx(), &self.0)?,
        };
        let told = tell_on_arrival(w, &message, &row)?;
        Ok(InboundTaken {
            row,
            session: message.session,
            told,
        })
    }
}

/// A platform's message the queue cannot take whole, kept expired and cut (see
/// [`InboundMessage::refused_copy`]).
#[derive(Debug, Clone)]
pub struct RecordRefused(pub InboundMessage);

impl Write for RecordRefused {
    type Output = Enqueued;

    fn apply(&self, w: &Writer<'_>) -> Result<Enqueued> {
        let q = &w.door.inbound;
        q.enqueue_expired_in(w.tx(), &self.0.to_row(), inbound::REFUSED_TOO_LARGE)
    }
}

/// A source's batch: its messages (validated), the copies of those it refused, the answers to
/// agents' questions and the session requests (`/new`, a tap in `/sessions`) it read, and its
/// new offset, all in one transaction. The requests are recorded first: a chat's messages
/// after a `/sessions` tap in the same batch go where the tap says.
#[derive(Debug, Clone)]
pub struct RecordBatch {
    pub source: String,
    pub messages: Vec<InboundMessage>,
    pub refused: Vec<InboundMessage>,
    pub answers: Vec<ChatAnswer>,
    pub requests: Vec<SessionRequest>,
    pub offset: String,
}

/// What [`RecordBatch`] wrote: per message, in order, its row with the session it is for
/// (`None`: a stranger's, not taken), the notices' ordering keys, the answers, the session
/// requests.
#[derive(Debug)]
pub struct BatchWritten {
    pub rows: Vec<Option<(String, Enqueued)>>,
    pub told: Vec<String>,
    pub answers: ChatAnswersRecorded,
    pub requests: RequestsRecorded,
}

impl Write for RecordBatch {
    type Output = BatchWritten;

    fn apply(&self, w: &Writer<'_>) -> Result<BatchWritten> {
        let q = &w.door.inbound;
        let requests = record_requests_in(w, &self.requests)?;
        // Strangers' messages go no further (see `access`).
        let admitted = crate::access::admit_in(w, &self.messages)?;
        let taken: Vec<InboundMessage> = admitted.messages.iter().flatten().cloned().collect();
        let written = crate::inbound::sources::enqueue_batch_in(
            q,
            w.tx(),
            &self.source,
            &taken,
            &self.offset,
        )?;
        let mut told = requests.outbound_keys.clone();
        told.extend(admitted.told);
        let mut written = written.into_iter();
        let mut rows = Vec::with_capacity(admitted.messages.len());
        for message in &admitted.messages {
            let Some((message, row)) = message.as_ref().and_then(|_| written.next()) else {
                rows.push(None);
                continue;
            };
            told.extend(tell_on_arrival(w, &message, &row)?);
            rows.push(Some((message.session, row)));
        }
        for copy in &self.refused {
            q.enqueue_expired_in(w.tx(), &copy.to_row(), inbound::REFUSED_TOO_LARGE)?;
        }
        let answers = record_chat_answers_in(w, &self.answers)?;
        Ok(BatchWritten {
            rows,
            told,
            answers,
            requests,
        })
    }
}

/// Takes source `name`'s lease for this node, or renews it: true while this node holds it
/// (see [`crate::storage::source_leases`]).
#[derive(Debug, Clone)]
pub struct TakeSourceLease(pub String);

impl Write for TakeSourceLease {
    type Output = bool;

    fn apply(&self, w: &Writer<'_>) -> Result<bool> {
        let engine = &w.door.engine;
        crate::storage::source_leases::take_in(w.tx(), &self.0, engine.node(), engine.owner())
    }
}

/// Lets source `name`'s lease go, so another node reads it at once.
#[derive(Debug, Clone)]
pub struct ReleaseSourceLease(pub String);

impl Write for ReleaseSourceLease {
    type Output = ();

    fn apply(&self, w: &Writer<'_>) -> Result<()> {
        let owner = w.door.engine.owner();
        crate::storage::source_leases::release_in(w.tx(), &self.0, owner)
    }
}

/// A leased message whose files were fetched: its prompt (and what became of each file) kept
/// in its row before it is pasted, fenced by the lease, and its chat told what it should know
/// (the words heard in a voice note; a file that did not reach the agent, and why), once.
#[derive(Debug, Clone)]
pub struct PrepareInbound {
    pub row: i64,
    pub token: i64,
    /// The message with its attachments' outcomes and its `prompt`.
    pub message: InboundMessage,
}

/// What [`PrepareInbound`] wrote: whether the lease was still this one, and the ordering key of
/// the notice its chat was sent, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    pub kept: bool,
    pub told: Option<String>,
}

impl Write for PrepareInbound {
    type Output = Prepared;

    fn atomicity(&self) -> Atomicity {
        Atomicity::Savepoint
    }

    fn apply(&self, w: &Writer<'_>) -> Result<Prepared> {
        let payload = self.message.to_row().payload;
        let kept = w
            .door
            .inbound
            .rewrite_leased_in(w.tx(), self.row, self.token, &payload)?;
        let told = match kept {
            true => {
                let routes = w.door.routes.read().expect("routes lock").clone();
                trouble::tell_about_files_in(
                    &w.door.outbound,
                    w.tx(),
                    &routes,
                    self.row,
                    &self.message,
                )?
            }
            false => None,
        };
        Ok(Prepared { kept, told })
    }
}

/// Forgets which album messages joined which rows, a day after: an album's messages come
/// within seconds of each other, and a platform repeats one within hours at most.
#[derive(Debug, Clone)]
pub struct ForgetAlbumParts;

/// How long an album's message is remembered.
pub const ALBUM_PARTS_KEPT_MS: i64 = 24 * 3600 * 1000;

impl Write for ForgetAlbumParts {
    type Output = usize;

    fn atomicity(&self) -> Atomicity {
        Atomicity::OneStatement
    }

    fn apply(&self, w: &Writer<'_>) -> Result<usize> {
        crate::storage::albums::prune_in(w.tx(), w.now() - ALBUM_PARTS_KEPT_MS)
    }
}

/// What a message's chat hears as it is written (dropped, or waiting behind a question), in the
/// same transaction.
fn tell_on_arrival(
    w: &Writer<'_>,
    message: &InboundMessage,
    enqueued: &Enqueued,
) -> Result<Option<String>> {
    let routes = w.door.routes.read().expect("routes lock").clone();
    trouble::tell_on_arrival_in(&w.door.outbound, w.tx(), &routes, message, enqueued)
}
