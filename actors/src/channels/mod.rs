//! Channels: where delivered rows go, and the only code that talks to the outside world.
//!
//! ```text
//!   session / outbound sender ──Deliver(Delivery, span)──▶ ChannelActor<C> ──C::deliver──▶ far end
//!                             ◀──────────Outcome───────────┘  Delivered(receipt) | Throttled
//!                                                              | Retry | Unknown | Unreachable
//!                                                              | Permanent | Expired
//! ```
//!
//! - [`contract`]: the [`Channel`] trait, [`Delivery`], [`Outcome`].
//! - [`ChannelActor`]: runs any channel; [`ChannelDirectory`] restarts one that panicked.
//! - [`ChannelKind`]: a kind's settings, checked and built into a channel.
//! - [`bot`]: the settings every bot platform's channel has (Telegram, Discord, Slack).
//! - [`notice`]: a notice as plain text, and what each platform's renderer shares.
//! - `conformance` (tests only): the suite every HTTP channel passes.
//! - what channels share with sources (HTTP, secrets, platform vocabulary) is in
//!   [`kit`](crate::kit).
//! - one folder per kind: `file/`, `exec/`, `tmux/`, `webhook/`, `telegram/`.
//!
//! **Adding a kind** (a platform): create `channels/<kind>/mod.rs` with a `Config` that
//! implements [`ChannelKind`] (settings, `check`, `build`) and the channel that implements
//! [`Channel`] (deliver, classify), with its tests beside it; then add one line to the
//! `kinds!` list below. `kind = "<kind>"` in `[channels.NAME]` then selects it.

mod actor;
pub mod bot;
#[cfg(test)]
pub mod conformance;
pub mod contract;
pub mod directory;
mod kind;
pub mod notice;

pub use crate::settings::{resolve_path, SettingError};
pub use actor::{ChannelActor, Deliver};
pub use relayq_engine::hooks::handlers::NOTICES_CHANNEL;

/// Why a message for `session` is refused: its channel `channel` can never deliver to it
/// (`why`, from [`ChannelKind::refuses_address`]). Said by `relayq enqueue`, the API and an
/// embedder's enqueue alike.
pub fn session_refused(session: &str, channel: &str, why: &str) -> String {
    format!(
        "session {:?} goes to channel '{channel}', which cannot deliver to it: {why}",
        session.escape_debug().to_string()
    )
}

/// Why channel `name` cannot be used: it is not one of `configured`. What a message for an
/// unknown channel is told (`relayq enqueue outbound`, the API, an embedder's enqueue).
pub fn not_configured(name: &str, configured: &[&str]) -> String {
    format!(
        "channel '{name}' is not configured (configured: {}); add a [channels.{name}] table",
        configured.join(", ")
    )
}

/// The channel every session's messages go to unless `[sessions]` says otherwise: relayq's
/// built-in `deliveries` file.
pub const DELIVERIES_CHANNEL: &str = "deliveries";
pub use contract::{
    AgentHints, Answer, Channel, Content, CosmeticAnswer, CosmeticCall, CosmeticOutcome, Delivery,
    DialogAnswer, DialogOutcome, DialogRequest, Outcome, ReadyCheck, Receipt, ThreadAnswer,
    ThreadCall, UnknownOutcome,
};
pub use directory::{ChannelDirectory, ChannelHandle, ChannelSpec};
pub use kind::{ChannelKind, TIMEOUT_RANGE};

/// The channel conformance suite ([`conformance`]) run on each kind marked `conformance` in
/// the list below: its folder's `tests::conformance` describes how its platform answers.
macro_rules! every_channel_kind_passes_the_conformance_suite {
    ($([$conformance:ident] $module:ident)*) => {
        #[cfg(test)]
        mod every_kind_passes_the_conformance_suite {
            $(
                #[actix_rt::test]
                async fn $module() {
                    super::$module::tests::conformance().await
                }
            )*
        }
    };
}

crate::settings::kinds! {
    ChannelConfig -> ChannelSpec, trait ChannelKind, check kind::check, spec kind::spec,
    suite every_channel_kind_passes_the_conformance_suite, {
        File(file),
        Exec(exec),
        Tmux(tmux),
        Webhook(webhook) conformance,
        Telegram(telegram) conformance,
        Discord(discord) conformance,
        Slack(slack) conformance,
    }
    forward {
        text_limit() -> Option<relayq_engine::TextLimit>,
        file_limit() -> Option<(u64, &'static str)>,
        refuses_address(address: &str) -> Option<String>,
        session_in_pane(place: &tmux::PanePlace) -> Option<String>,
    }
}
