//! OutboundSender: leases the outbound queue's destination heads (one row per destination, so
//! each destination's messages go in order) up to a bound in flight, and sends each through its
//! channel; the lease is extended while the send runs (see [`delivery`](crate::delivery)).
//!
//! No polling: a claim runs when a row is written (a wake), when a send frees room, and at the
//! next row's due time.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use relayq_engine::writes::claims::{BacklogShare, DueClaimed, LeaseDue};
use relayq_engine::writes::runs::{
    GiveBack, GiveBackUnsent, LeaseNext, MarkSendStarted, RunRecorded,
};
use relayq_engine::{Lease, OutboundMessage, QueueName};
use tokio::sync::oneshot;

use crate::channels::{ChannelDirectory, Content};
use crate::claiming::{delay_until, ClaimLoop, ClaimOutbound, ClaimSettings};
use crate::delivery::{deliver, try_delivery, AnswerToRecord, RowRecorded, Taken, Then};
use crate::lifecycle::Shutdown;
use crate::outbound::send_threads::{SendThread, SendThreads};
use crate::runs::{record_run, RunAnswers};
use crate::store::Store;

pub struct OutboundSender {
    store: Store,
    channels: ChannelDirectory,
    /// Most sends at once.
    in_flight: usize,
    sending: usize,
    claims: ClaimLoop,
    /// The backlog left from before this start, while some of it is unfinished.
    drain: Option<Drain>,
    /// Shared with the runs being sent, which stop at their next row.
    stopping: Arc<AtomicBool>,
    drained: Vec<oneshot::Sender<()>>,
    /// Where runs are sent (see [`send_threads`](crate::outbound::send_threads)).
    threads: SendThreads,
    /// Mark each send started before the platform call (see [`mark_send_started`]).
    mark: bool,
}

/// The rows written before this sender started (an outage's backlog): sent beside the rows
/// written since, within their own budget, and summed up in the log once all are finished.
struct Drain {
    /// Rows written before this (unix ms) are the backlog.
    before: i64,
    /// Most backlog sends at once.
    budget: usize,
    sending: usize,
    began: std::time::Instant,
    /// When a claim that leased nothing last asked whether the backlog is left (see
    /// [`ask_if_backlog_left`]).
    asked: Option<std::time::Instant>,
    /// When the last of its sends here ended: the summary's duration ends there, not when a
    /// claim found the backlog gone.
    last_done: Option<std::time::Instant>,
    attempted: u64,
    delivered: u64,
    failed: u64,
    deferred: u64,
}

/// What became of one send, for the drain's summary.
#[derive(Debug, Clone, Copy)]
enum Sent {
    Delivered,
    Failed,
    /// Given back uncounted (paced, paused) or throttled by the far end.
    Deferred,
}

impl OutboundSender {
    /// Sends up to `outbound_in_flight` rows at once, on `send_threads` threads;
    /// `drain_in_flight` bounds the sends of rows written before now (a restart's backlog).
    pub fn new(store: Store, channels: ChannelDirectory, settings: &ClaimSettings) -> Self {
        let (in_flight, drain_in_flight) = (settings.outbound_in_flight, settings.drain_in_flight);
        let drain = Drain {
            before: store.engine.now(),
            budget: drain_in_flight.clamp(1, in_flight.max(1)),
            sending: 0,
            began: std::time::Instant::now(),
            asked: None,
            last_done: None,
            attempted: 0,
            delivered: 0,
            failed: 0,
            deferred: 0,
        };
        OutboundSender {
            store,
            channels,
            in_flight,
            sending: 0,
            claims: ClaimLoop::default(),
            drain: Some(drain),
            stopping: Arc::default(),
            threads: SendThreads::start(settings.send_threads),
            drained: Vec::new(),
            mark: true,
        }
    }

    /// Whether sends are marked started (on unless only measuring what the mark costs).
    pub fn marking_send_started(mut self, mark: bool) -> Self {
        self.mark = mark;
        self
    }

    fn claim(&mut self, ctx: &mut Context<Self>) {
        let room = self.in_flight.saturating_sub(self.sending);
        let paused = self.store.pauses.queue(QueueName::Outbound);
        if self.stopping.load(Ordering::Relaxed) || room == 0 || paused || !self.claims.begin(ctx) {
            return;
        }
        let skip = self.store.pauses.keys(QueueName::Outbound);
        let backlog = self.drain.as_ref().map(|d| {
            let asked_lately = d.asked.is_some_and(|at| at.elapsed() < IDLE_BACKLOG_LOOK);
            (
                d.before,
                d.budget.saturating_sub(d.sending),
                d.sending > 0,
                asked_lately,
            )
        });
        let store = self.store.clone();
        let work = async move {
            let share = backlog.map(|(before, room, ..)| BacklogShare { before, room });
            let due = store.apply_alone(LeaseDue {
                queue: QueueName::Outbound,
                limit: room,
                skip,
                backlog: share,
            });
            let DueClaimed {
                claimed,
                backlog_found,
            } = due.await?;
            let Some((before, _, backlog_sending, asked_lately)) = backlog else {
                return Ok((claimed.leases, claimed.next_due, Backlog::Gone));
            };
            // Rows written since the start came first, then the backlog within its budget.
            let left = match ask_if_backlog_left(
                backlog_found || backlog_sending,
                claimed.leases.is_empty(),
                asked_lately,
            ) {
                Ask::No => Backlog::Left,
                ask => match store
                    .run(move |s| s.outbound.any_written_before(before))
                    .await?
                {
                    true if ask == Ask::Idle => Backlog::LeftAskedIdle,
                    true => Backlog::Left,
                    false => Backlog::Gone,
                },
            };
            Ok::<_, crate::ActorError>((claimed.leases, claimed.next_due, left))
        };
        ctx.spawn(work.into_actor(self).map(move |result, act, ctx| {
            if act.stopping.load(Ordering::Relaxed) {
                // The stop came while the claim was read: its rows go back unsent, and the
                // stop waits for that (see `ClaimLoop::settled`).
                let leases = result.map(|(leases, ..)| leases).unwrap_or_default();
                let store = act.store.clone();
                ctx.spawn(
                    async move { give_back(&store, leases, Duration::ZERO).await }
                        .into_actor(act)
                        .map(|(), act, _| act.claims.finish()),
                );
                return;
            }
            act.claims.finish();
            match result {
                Ok((leases, next, backlog)) => {
                    let full = leases.len() >= room;
                    for lease in leases {
                        act.send(lease, 0, false, ctx);
                    }
                    if let (Backlog::LeftAskedIdle, Some(d)) = (backlog, act.drain.as_mut()) {
                        d.asked = Some(std::time::Instant::now());
                    }
                    act.end_drain_if_done(backlog != Backlog::Gone);
                    if act.claims.again && !full {
                        ctx.notify(ClaimOutbound);
                    } else if let Some(wait) = delay_until(next, act.store.engine.now()) {
                        act.claims.timer = Some(ctx.notify_later(ClaimOutbound, wait));
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot claim outbound rows; trying again in 1s");
                    act.claims.timer =
                        Some(ctx.notify_later(ClaimOutbound, Duration::from_secs(1)));
                }
            }
        }));
    }

    /// Logs the drain's summary once no backlog row is left unfinished or in flight.
    fn end_drain_if_done(&mut self, backlog_left: bool) {
        let Some(d) = &self.drain else {
            return;
        };
        if backlog_left || d.sending > 0 {
            return;
        }
        if d.attempted > 0 {
            tracing::info!(
                attempted = d.attempted,
                delivered = d.delivered,
                failed = d.failed,
                deferred = d.deferred,
                duration = ?d.last_done.unwrap_or_else(std::time::Instant::now).duration_since(d.began),
                "outbound backlog from before the start drained"
            );
        }
        self.drain = None;
    }

    /// Whether a send of `rows` rows starting at `lease` is of the backlog from before the
    /// start: then it takes one slot of the drain's budget until it is done.
    fn count_backlog(&mut self, lease: &Lease, rows: u64) -> bool {
        match self.drain.as_mut().filter(|d| lease.created_at < d.before) {
            Some(d) => {
                d.sending += 1;
                d.attempted += rows;
                true
            }
            None => false,
        }
    }

    /// Sends a leased row; `chain` is how many rows of its key were sent just before it, each
    /// leasing the next (see [`CHAIN`]); `cleared`: its gates were passed and it is marked
    /// started already (see [`Then::LeaseToSend`]).
    fn send(&mut self, lease: Lease, chain: u32, cleared: bool, ctx: &mut Context<Self>) {
        self.sending += 1;
        // The key's next row is leased with this one's answer, up to CHAIN in a row (a
        // backlog's too: its run keeps the one slot of the drain's budget it took; without it,
        // a backlog on a database whose commits are slow, as PostgreSQL's durable ones, went
        // one row and several commits at a time).
        let chained = chain < CHAIN
            && !self.stopping.load(Ordering::Relaxed)
            && !self.store.pauses.holds(QueueName::Outbound, &lease.key);
        let backlog = self.count_backlog(&lease, 1);
        let (store, channels, mark) = (self.store.clone(), self.channels.clone(), self.mark);
        let send = async move {
            let message = OutboundMessage::from_payload(&lease.payload);
            let then = match &message {
                _ if !chained => Then::Stop,
                // Sent in order and recorded in order: held by its first row.
                Ok(m) if channels.sends_in_runs(&m.channel) && mark => {
                    Then::LeaseHeldRun { limit: RUN_LIMIT }
                }
                Ok(m) if channels.sends_in_runs(&m.channel) => Then::LeaseRun {
                    limit: RUN_LIMIT,
                    mark,
                },
                Ok(m) if channels.budgets(&m.channel).is_none() => Then::LeaseToSend { mark },
                _ => Then::Lease,
            };
            if let (Ok(m), false) = (&message, cleared) {
                // A channel not ready yet or paused first (no budget is spent on a row that
                // cannot go); then the send-started mark; then the budget and the breaker's
                // probe slot (taken last: only a send gives it back), so nothing but the
                // budget's own write lies between its take and the send. With the mark's
                // commit between them, a commit held up (a database restarting, a busy writer)
                // sent a chat's message late and the next one on time: two within 0.9 s.
                let held = channels
                    .unready(&m.channel)
                    .or_else(|| channels.penalty(&m.channel));
                if let Some(wait) = held {
                    give_back(&store, vec![lease], wait).await;
                    return (Sent::Deferred, None);
                }
                if mark && !mark_send_started(&store, &lease).await {
                    return (Sent::Failed, None);
                }
                let gate = channels
                    .budgets(&m.channel)
                    .map_or(Ok(()), |p| p.take(&m.to))
                    .and_then(|()| channels.admit(&m.channel));
                if let Err(wait) = gate {
                    // The mark goes back to what the lease found (`GiveBackUnsent`).
                    give_back(&store, vec![lease], wait).await;
                    return (Sent::Deferred, None);
                }
            }
            let message = message.map(|m| (m.channel.clone(), Content::Outbound(m)));
            let queue = store.outbound.clone();
            match deliver(&store, &queue, &lease, &channels, message, then).await {
                Ok((RowRecorded::Delivered, next)) => (Sent::Delivered, next),
                Ok((RowRecorded::Throttled { .. }, _)) => (Sent::Deferred, None),
                Ok(_) => (Sent::Failed, None),
                Err(e) => {
                    tracing::error!(row = lease.id, error = %e, "cannot record the outbound outcome");
                    (Sent::Failed, None)
                }
            }
        };
        let me = ctx.address();
        actix_rt::spawn(async move {
            let (sent, next) = send.await;
            me.do_send(SendDone {
                sent,
                next,
                backlog,
                chain,
            });
        });
    }

    /// Sends a run of one destination's rows, leased and marked started together (see
    /// [`Then::LeaseRun`]), one after the other without a write between them. Their answers are
    /// recorded together (at the latest [`DESTINATION_RECORD_WITHIN`] after the first, when one fails, or
    /// when the channel is held), in the write that leases the key's next run, up to
    /// [`CHAIN`] runs. A crash repeats at most the answers not recorded yet, in order, each a
    /// `possible_repeat` (at-least-once, as any unrecorded delivery).
    fn send_run(&mut self, run: Vec<Lease>, chain: u32, ctx: &mut Context<Self>) {
        self.sending += 1;
        // Its rows are counted when it ends (a chained run's too), by what became of them.
        let backlog = run
            .first()
            .is_some_and(|first| self.count_backlog(first, 0));
        let sender = DestinationSender {
            store: self.store.clone(),
            channels: self.channels.clone(),
            stopping: self.stopping.clone(),
            mark: self.mark,
        };
        let me = ctx.address();
        let thread = self.threads.pick();
        let started = self.threads.run_on(thread, move || {
            actix_rt::spawn(async move {
                let tally = sender.run(run, chain).await;
                me.do_send(DestinationDone(thread, backlog, tally));
            });
        });
        if !started {
            // Only once the threads were stopped: the run's rows return when their leases
            // expire.
            tracing::warn!(?thread, "send thread stopped; the run is not sent");
            self.sending -= 1;
            if let (true, Some(d)) = (backlog, self.drain.as_mut()) {
                d.sending -= 1;
            }
            self.threads.done(thread);
        }
    }

    /// Answers the shutdown once no send runs.
    fn notify_drained(&mut self) {
        if self.sending == 0 {
            for tx in self.drained.drain(..) {
                let _ = tx.send(());
            }
        }
    }
}

/// What a claim learnt of the backlog from before the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backlog {
    Left,
    /// Left, found by a claim that leased nothing (see [`ask_if_backlog_left`]).
    LeftAskedIdle,
    Gone,
}

/// Whether a claim asks the queue if rows written before the start are still unfinished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    /// Known already: this node leased or is sending some of it, or asked lately.
    No,
    Yes,
    /// Yes, by a claim that leased nothing.
    Idle,
}

/// A claim asks only once none of the backlog is leased or being sent here: the question reads
/// the queue's active rows from the start (with a backlog of 30 000 rows, asked at every claim,
/// 9 % of the server's time in a drain). A claim that leased nothing asks at most once every
/// [`IDLE_BACKLOG_LOOK`]: on a node idle beside others sending the backlog, it was asked at
/// every claim (each second), and read past every row they had finished (8 ms a time at
/// 300 000 rows). Its drain ends that much later, and only its summary waits for it.
fn ask_if_backlog_left(known_left: bool, leased_nothing: bool, asked_lately: bool) -> Ask {
    match (known_left, leased_nothing, asked_lately) {
        (true, ..) => Ask::No,
        (false, true, true) => Ask::No,
        (false, true, false) => Ask::Idle,
        (false, false, _) => Ask::Yes,
    }
}

/// How often a claim that leased nothing asks whether the backlog is left.
const IDLE_BACKLOG_LOOK: Duration = Duration::from_secs(5);

/// Rows of one key sent in a row, each leased with the previous one's answer, before the key's
/// next row waits for a claim like any other (so a long backlog to one destination does not
/// keep its send slot while other destinations wait).
const CHAIN: u32 = 8;

/// Most rows of one destination leased as one run (see [`Then::LeaseRun`]).
///
/// A destination's sender stops at each run's end until the write that leases the next run
/// commits, and each run costs its statements: on PostgreSQL a drain of 30 000 rows to 5
/// destinations ran at 14 400 rows/s with runs of 64 and 22 200 with 256 (one node, medians of
/// 3 interleaved runs; the drain's statements 58 → 48 µs of server time a row), no faster
/// with 512. A run's rows are marked send started when leased: after a crash, up to this many
/// rows of a destination are sent again as possible repeats, each with its idempotency key.
const RUN_LIMIT: usize = 256;

/// A destination sender's answers wait unrecorded at most this long after the first of them;
/// it sends on while they are written. A crash repeats at most the sends of this window, in order, each
/// a `possible_repeat` with its row's idempotency key (runs are only for `resend` channels
/// without budgets). Longer than a session's window (`RECORD_WITHIN`, 5 ms): an HTTP send
/// takes ~0.75 ms on loopback under load, so 5 ms recorded ~6 rows per write; 20 ms takes
/// ~2.5 µs of writer CPU off each row in the outbound benchmark (18.5 → 16 µs).
const DESTINATION_RECORD_WITHIN: Duration = Duration::from_millis(20);

/// Writes down that the row's send starts now, before the platform call (see
/// [`Queue::mark_send_started_in`](relayq_engine::Queue::mark_send_started_in)): after a crash
/// the row is known to be a possible repeat. False when the send must not start (the lease was
/// lost, or the mark could not be written: the lease runs out and the row is tried again).
async fn mark_send_started(store: &Store, lease: &Lease) -> bool {
    let mark = store.apply(MarkSendStarted {
        queue: QueueName::Outbound,
        lease: lease.clone(),
    });
    match mark.await {
        Ok(true) => true,
        Ok(false) => {
            tracing::info!(row = lease.id, "lease lost before the send; not sent");
            false
        }
        Err(e) => {
            tracing::warn!(row = lease.id, error = %e, "cannot mark the send started; not sent");
            false
        }
    }
}

/// Leased rows go back unsent, their attempts not counted, due after `wait`: their budget is
/// spent, their channel paused or not ready, or the sender is stopping. A send-started mark set
/// with a lease (see [`Then::LeaseToSend`]) is undone: the mark is what the lease found.
async fn give_back(store: &Store, leases: Vec<Lease>, wait: Duration) {
    let rows: Vec<i64> = leases.iter().map(|l| l.id).collect();
    let give_back = store.apply(GiveBackUnsent {
        queue: QueueName::Outbound,
        leases,
        wait,
    });
    match give_back.await {
        Ok(_) => tracing::debug!(?rows, ?wait, "given back unsent"),
        Err(e) => {
            tracing::warn!(?rows, error = %e, "cannot give rows back; they return when their leases expire")
        }
    }
}

/// What sending a destination's runs needs (see [`OutboundSender::send_run`]).
struct DestinationSender {
    store: Store,
    channels: ChannelDirectory,
    stopping: Arc<AtomicBool>,
    mark: bool,
}

impl DestinationSender {
    /// Sends `run` and the runs leased after it, `chain` counting them, until the key has no
    /// due row, a send fails, the channel is held, or the sender stops. Answers what became of
    /// the rows, as recorded (for the drain's summary).
    ///
    /// The answers of a run's first rows are recorded while its later rows are sent: the write
    /// is awaited only before the next one (one in flight) and when the run ends, since the
    /// key's next run can only be leased once the rows before it are recorded.
    async fn run(self, run: Vec<Lease>, mut chain: u32) -> Tally {
        let mut tally = Tally::default();
        let Some(key) = run.first().map(|l| l.key.clone()) else {
            return tally;
        };
        let mut rest = VecDeque::from(run);
        let mut recording: Option<(Recording, Tally)> = None;
        loop {
            let (answers, held) = self.send_while_fast(&mut rest).await;
            let failed = answers.iter().any(|a| !a.tried.outcome.is_delivered());
            // The rows after a failed one wait behind it; a held channel takes none.
            let give_back: Vec<Lease> = match failed || held {
                true => rest.drain(..).collect(),
                false => Vec::new(),
            };
            let this = Tally::of(&answers, give_back.len());
            let ends = rest.is_empty() || failed || held;
            let lease_next = rest.is_empty() && !failed && !held && chain + 1 < CHAIN;
            let next = lease_next.then_some(key.as_str());
            // Submitted before the previous write is awaited: the writer takes them in order.
            let write = self.record(answers, give_back, next);
            if let Some((previous, recorded)) = recording.take() {
                if let Err(e) = previous.await {
                    lost(&key, e);
                    return tally;
                }
                tally.add(recorded);
            }
            if !ends {
                recording = Some((Box::pin(write), this));
                continue;
            }
            match write.await {
                Ok(next) => {
                    tally.add(this);
                    if next.is_empty() {
                        return tally;
                    }
                    chain += 1;
                    rest.extend(next);
                }
                Err(e) => {
                    lost(&key, e);
                    return tally;
                }
            }
        }
    }

    /// Sends the run's rows one after the other while they are delivered, until
    /// [`DESTINATION_RECORD_WITHIN`] has passed since the first answer. Returns the answers, and whether it
    /// stopped because the channel is held (paused, not ready, breaker open) or the sender
    /// stops: the row it stopped at is left in `rest`, unsent.
    async fn send_while_fast(&self, rest: &mut VecDeque<Lease>) -> (Vec<AnswerToRecord>, bool) {
        let queue = &self.store.outbound;
        let mut answers = RunAnswers::new(DESTINATION_RECORD_WITHIN);
        while let Some(lease) = rest.pop_front() {
            let message = OutboundMessage::from_payload(&lease.payload);
            let held = self.stopping.load(Ordering::Relaxed)
                || message
                    .as_ref()
                    .is_ok_and(|m| !self.channels.clear_to_send(&m.channel));
            if held {
                rest.push_front(lease);
                return (answers.take().0, true);
            }
            let part = message.as_ref().ok().and_then(|m| m.part);
            let message = message.map(|m| (m.channel.clone(), Content::Outbound(m)));
            let tried = try_delivery(
                &self.store,
                queue,
                &lease,
                &self.channels,
                message,
                Default::default(),
            )
            .await;
            answers.push(AnswerToRecord::new(&self.channels, lease, tried, part));
            if answers.due() {
                break;
            }
        }
        (answers.take().0, false)
    }

    /// One write, submitted at once: gives back `give_back` unsent (uncounted, marks undone),
    /// records `answers` in order, and leases the `next` key's next run. Answers that run.
    fn record(
        &self,
        answers: Vec<AnswerToRecord>,
        give_back: Vec<Lease>,
        next: Option<&str>,
    ) -> impl std::future::Future<Output = crate::error::Result<Vec<Lease>>> + 'static {
        let next = match next {
            // A run's answers are recorded in order: it is held by its first row.
            Some(key) if self.mark => LeaseNext::HeldRun {
                key: key.to_string(),
                limit: RUN_LIMIT,
            },
            Some(key) => LeaseNext::Run {
                key: key.to_string(),
                limit: RUN_LIMIT,
                mark: false,
            },
            None => LeaseNext::Nothing,
        };
        let undo = GiveBack::UndoMarks;
        let write = record_run(
            &self.store,
            QueueName::Outbound,
            answers,
            give_back,
            undo,
            next,
        );
        async move {
            let RunRecorded { next, .. } = write.await.map_err(|lost| lost.error)?;
            Ok(next.and_then(|run| run.ok()).unwrap_or_default())
        }
    }
}

/// What became of a destination sender's rows, once recorded: sent and delivered, tried and not delivered,
/// given back unsent.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    delivered: u64,
    failed: u64,
    deferred: u64,
}

impl Tally {
    fn of(answers: &[AnswerToRecord], given_back: usize) -> Tally {
        let delivered = answers
            .iter()
            .filter(|a| a.tried.outcome.is_delivered())
            .count() as u64;
        Tally {
            delivered,
            failed: answers.len() as u64 - delivered,
            deferred: given_back as u64,
        }
    }

    fn add(&mut self, other: Tally) {
        self.delivered += other.delivered;
        self.failed += other.failed;
        self.deferred += other.deferred;
    }
}

/// A destination sender's write of answers still committing while it sends on.
type Recording =
    std::pin::Pin<Box<dyn std::future::Future<Output = crate::error::Result<Vec<Lease>>>>>;

/// A destination sender's write failed: nothing of it committed, so its rows are tried again when their
/// leases expire, the ones answered as possible repeats.
fn lost(key: &str, e: crate::error::ActorError) {
    tracing::error!(key, error = %e, "cannot record outbound answers");
}

impl Actor for OutboundSender {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.claim(ctx);
    }
}

/// A send of one row ended (see [`OutboundSender::send`]). Sends run as tasks of their own
/// and report here: a future spawned into the actor's context would be polled at every wake of
/// the actor, each of the sends in flight at every answer.
#[derive(actix::Message)]
#[rtype(result = "()")]
struct SendDone {
    sent: Sent,
    /// The key's next row or run, leased with the answer.
    next: Option<Taken>,
    /// The row was from the backlog of before the start.
    backlog: bool,
    chain: u32,
}

impl Handler<SendDone> for OutboundSender {
    type Result = ();
    /// The next row of the send's key, leased with its answer, goes next.
    fn handle(&mut self, done: SendDone, ctx: &mut Context<Self>) {
        let SendDone {
            sent,
            next,
            backlog,
            chain,
        } = done;
        self.sending -= 1;
        if let (true, Some(d)) = (backlog, self.drain.as_mut()) {
            d.sending -= 1;
            d.last_done = Some(std::time::Instant::now());
            match sent {
                Sent::Delivered => d.delivered += 1,
                Sent::Failed => d.failed += 1,
                Sent::Deferred => d.deferred += 1,
            }
        }
        if self.stopping.load(Ordering::Relaxed) {
            if let Some(next) = next {
                // Taken while stopping: given back unsent, due at once for the next start.
                let leases = match next {
                    Taken::Row { lease, .. } => vec![lease],
                    Taken::Run(run) => run,
                };
                let store = self.store.clone();
                self.sending += 1;
                ctx.spawn(
                    async move { give_back(&store, leases, Duration::ZERO).await }
                        .into_actor(self)
                        .map(|(), act, _| {
                            act.sending -= 1;
                            act.notify_drained();
                        }),
                );
            }
            self.notify_drained();
            return;
        }
        match next {
            Some(Taken::Row { lease, cleared }) => self.send(lease, chain + 1, cleared, ctx),
            Some(Taken::Run(run)) => self.send_run(run, chain + 1, ctx),
            // Room for one more send; the row behind this one may be due now.
            None => self.claim(ctx),
        }
    }
}

/// A destination sender's runs ended (see [`OutboundSender::send_run`]); whether it was the backlog's, and
/// what became of its rows.
#[derive(actix::Message)]
#[rtype(result = "()")]
struct DestinationDone(SendThread, bool, Tally);

impl Handler<DestinationDone> for OutboundSender {
    type Result = ();
    fn handle(
        &mut self,
        DestinationDone(thread, backlog, tally): DestinationDone,
        ctx: &mut Context<Self>,
    ) {
        self.sending -= 1;
        if let (true, Some(d)) = (backlog, self.drain.as_mut()) {
            d.sending -= 1;
            d.last_done = Some(std::time::Instant::now());
            d.attempted += tally.delivered + tally.failed + tally.deferred;
            d.delivered += tally.delivered;
            d.failed += tally.failed;
            d.deferred += tally.deferred;
        }
        self.threads.done(thread);
        if self.stopping.load(Ordering::Relaxed) {
            self.notify_drained();
        } else {
            // Room for one more send; the row behind the run may be due now.
            self.claim(ctx);
        }
    }
}

impl Handler<ClaimOutbound> for OutboundSender {
    type Result = ();
    fn handle(&mut self, _: ClaimOutbound, ctx: &mut Context<Self>) {
        self.claim(ctx);
    }
}

impl Handler<Shutdown> for OutboundSender {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, Shutdown { grace }: Shutdown, _: &mut Context<Self>) -> Self::Result {
        self.stopping.store(true, Ordering::Relaxed);
        let claim = self.claims.settled();
        let sends = (self.sending > 0).then(|| {
            let (tx, rx) = oneshot::channel();
            self.drained.push(tx);
            rx
        });
        Box::pin(
            async move {
                if let Some(rx) = claim {
                    if tokio::time::timeout(grace, rx).await.is_err() {
                        tracing::warn!(?grace, "a claim of outbound rows still running after the grace period; its rows return when their leases expire");
                    }
                }
                if let Some(rx) = sends {
                    if tokio::time::timeout(grace, rx).await.is_err() {
                        tracing::warn!(?grace, "sends still running after the grace period; they will be retried at next start");
                    }
                }
            }
            .into_actor(self)
            .map(|(), act, _| act.threads.stop()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node idle beside others sending the backlog asks about it once every
    /// `IDLE_BACKLOG_LOOK`, not at every claim; a node sending some of it never asks; one that
    /// leased rows written since asks each time (its answer ends the drain at once).
    #[test]
    fn a_claim_that_leased_nothing_asks_about_the_backlog_at_most_once_a_while() {
        assert_eq!(ask_if_backlog_left(true, true, false), Ask::No);
        assert_eq!(ask_if_backlog_left(true, false, false), Ask::No);
        assert_eq!(ask_if_backlog_left(false, true, true), Ask::No);
        assert_eq!(ask_if_backlog_left(false, true, false), Ask::Idle);
        assert_eq!(ask_if_backlog_left(false, false, true), Ask::Yes);
        assert_eq!(ask_if_backlog_left(false, false, false), Ask::Yes);
    }
}
