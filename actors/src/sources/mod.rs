//! Sources: where inbound platforms live (a Telegram poller, a spool file), mirroring
//! [`channels`](crate::channels). A source reads its platform and hands what it read to the
//! SupervisorActor as typed messages, the way an embedded chat adapter does:
//!
//! ```text
//!   SourceActor<S> ──S::fetch(offset)──▶ platform          (long poll; waits when idle)
//!        │ ◀──────Batch { messages, offset }─┘
//!        └──EnqueueFrom { source, messages, offset }──▶ SupervisorActor
//!                 ──store.apply(RecordBatch)──▶ commit thread: rows + source_offsets in ONE transaction
//!                 ◀── Vec<Result<Enqueued>> ── and each session with a new row is woken
//! ```
//!
//! Because the offset moves in the transaction that writes the rows read up to it, a crash
//! neither loses a batch nor enqueues it twice; the platform is only told "confirmed" by the
//! next fetch, which starts from the stored offset.
//!
//! A platform that pushes (a webhook: Telegram's webhook mode, Slack's Events API) has a
//! [`PushSource`] instead, which the HTTP API hands each request to:
//!
//! ```text
//!   platform ──POST /v1/ingress/NAME──▶ PushSource::receive (secret/signature, then parse)
//!        ◀── 200 only after ── Enqueue each message ──▶ SupervisorActor ──▶ committed rows
//! ```
//!
//! A platform that pushes over a connection relayq holds open (Slack's Socket Mode, Discord's
//! gateway) has a [`HeldSource`], run as a [`Source`] by [`Held`]: the same actor, with the
//! platform's resume token as the offset, stored with the rows, and the platform's
//! acknowledgements sent only after the commit.
//!
//! Every kind passes the conformance suite in `tests/source_conformance.rs`, which runs the
//! cases its folder describes ([`conformance`]).
//!
//! **Adding a kind**: create `sources/<kind>/mod.rs` with a `Config` implementing
//! [`SourceKind`] and a type implementing [`Source`] (or [`PushSource`], or [`HeldSource`]),
//! and `sources/<kind>/conformance.rs` describing its platform's side (with its fake platform
//! beside it), then add one line to the `kinds!` list below, marked `conformance`;
//! `[sources.NAME] kind = "<kind>"` selects it.

mod actor;
pub mod chat_words;
#[cfg(feature = "test-helpers")]
pub mod conformance;
mod contract;
mod held;
mod kind;

pub use actor::SourceActor;
pub use contract::{
    Arrived, Batch, Fetch, HeldConnection, HeldSource, OnConnection, Push, PushRefused, PushSource,
    Pushed, Receive, Source,
};
pub use held::Held;
pub use kind::{Replies, SourceKind, SourceSpec};

/// Collects the source conformance suite's cases (see [`conformance`]) of each kind marked
/// `conformance` in the list below, from its folder's `conformance::cases`.
macro_rules! every_source_case {
    ($([$conformance:ident] $module:ident)*) => {
        /// Every case the source conformance suite runs, of every kind (see [`conformance`]).
        #[cfg(feature = "test-helpers")]
        pub fn conformance_cases() -> Vec<conformance::Case> {
            let mut cases = Vec::new();
            $(cases.extend($module::conformance::cases());)*
            cases
        }
    };
}

crate::settings::kinds! {
    SourceConfig -> SourceSpec, trait SourceKind, check SourceKind::check, spec kind::spec,
    suite every_source_case, {
        Discord(discord) conformance,
        Jsonl(jsonl) conformance,
        Slack(slack) conformance,
        Telegram(telegram) conformance,
    }
    forward {
        replies(name: &str) -> Option<Replies>,
        pushed() -> bool,
        files(name: &str) -> Option<crate::files::FileSource>,
    }
}
