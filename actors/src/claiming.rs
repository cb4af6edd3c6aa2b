//! What the two claimers (the [`HookClaimer`](crate::hooks::claimer::HookClaimer) and the
//! [`OutboundSender`](crate::outbound::sender::OutboundSender)) share: their settings and the
//! claim loop that runs at most one claim at a time, again when asked meanwhile, and at the
//! next row's due time.

use std::time::Duration;

use crate::settings::{check_range, SettingError};
use actix::prelude::*;
use tokio::sync::oneshot;

/// Hook rows may be due: claim them (to the HookClaimer).
#[derive(Debug, Clone, Copy, actix::Message)]
#[rtype(result = "()")]
pub struct ClaimHooks;

/// Outbound rows may be due: claim them (to the OutboundSender).
#[derive(Debug, Clone, Copy, actix::Message)]
#[rtype(result = "()")]
pub struct ClaimOutbound;

/// How the claimers batch and bound their work (`[claimer]` in config.toml).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClaimSettings {
    /// Hook rows leased per claim.
    pub hook_batch: usize,
    /// Rows each session's hook worker buffers; claiming pauses for it when full.
    pub hook_buffer: usize,
    /// Buffer slots only critical events (prompt, stop, ...) may use.
    pub hook_reserved_critical: usize,
    /// Outbound sends running at once, across destinations.
    pub outbound_in_flight: usize,
    /// Of those, most sends of rows written before the daemon started (the backlog of an
    /// outage), so rows written since always have room.
    pub drain_in_flight: usize,
    /// Threads outbound runs are sent on: the actix thread and `send_threads − 1` more (see
    /// [`send_threads`](crate::outbound::send_threads)).
    pub send_threads: usize,
}

impl Default for ClaimSettings {
    fn default() -> Self {
        let limits = Limits::default();
        ClaimSettings {
            hook_batch: 25,
            hook_buffer: limits.capacity,
            hook_reserved_critical: limits.reserved_critical,
            outbound_in_flight: 32,
            drain_in_flight: 16,
            send_threads: 2,
        }
    }
}

/// Most threads outbound runs may be sent on (`claimer.send_threads`).
pub const MAX_SEND_THREADS: usize = 16;

impl ClaimSettings {
    /// What the file alone can tell; keys within `[claimer]`.
    pub fn check(&self) -> Result<(), SettingError> {
        if self.hook_batch == 0 {
            return Err(SettingError::new("hook_batch", "must be at least 1"));
        }
        if self.outbound_in_flight == 0 {
            return Err(SettingError::new(
                "outbound_in_flight",
                "must be at least 1",
            ));
        }
        if self.drain_in_flight == 0 || self.drain_in_flight > self.outbound_in_flight {
            return Err(SettingError::new(
                "drain_in_flight",
                format!(
                    "{} is out of range: between 1 and claimer.outbound_in_flight ({})",
                    self.drain_in_flight, self.outbound_in_flight
                ),
            ));
        }
        check_range("send_threads", self.send_threads, (1, MAX_SEND_THREADS))?;
        if self.hook_buffer <= self.hook_reserved_critical {
            return Err(SettingError::new(
                "hook_buffer",
                format!(
                    "must be larger than claimer.hook_reserved_critical ({}), so bursty events have room",
                    self.hook_reserved_critical
                ),
            ));
        }
        Ok(())
    }
}

/// A session's hook buffer's limits (see [`hooks::buffer`](crate::hooks::buffer)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Rows held at most.
    pub capacity: usize,
    /// Slots only critical rows may use.
    pub reserved_critical: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            capacity: 32,
            reserved_critical: 8,
        }
    }
}

impl ClaimSettings {
    /// Each session's hook buffer.
    pub fn hook_limits(&self) -> Limits {
        Limits {
            capacity: self.hook_buffer,
            reserved_critical: self.hook_reserved_critical,
        }
    }
}

/// One claim loop's state: at most one claim runs; a request meanwhile runs another after it.
#[derive(Default)]
pub struct ClaimLoop {
    pub running: bool,
    pub again: bool,
    pub timer: Option<SpawnHandle>,
    /// A stop waiting for the running claim to be settled (see [`ClaimLoop::settled`]).
    settling: Vec<oneshot::Sender<()>>,
}

impl ClaimLoop {
    /// Starting a claim: false if one is running (it will run again after).
    pub fn begin<A: Actor<Context = Context<A>>>(&mut self, ctx: &mut Context<A>) -> bool {
        if self.running {
            self.again = true;
            return false;
        }
        self.running = true;
        self.again = false;
        if let Some(t) = self.timer.take() {
            ctx.cancel_future(t);
        }
        true
    }

    /// For a stop: answered once the running claim is settled, its rows handed out, or given
    /// back when the stop came first (a claim read while stopping must not leave its rows
    /// leased with nothing to send them); `None` when no claim runs.
    pub fn settled(&mut self) -> Option<oneshot::Receiver<()>> {
        self.running.then(|| {
            let (tx, rx) = oneshot::channel();
            self.settling.push(tx);
            rx
        })
    }

    /// The running claim is settled: the next may run, a stop waiting for it goes on.
    pub fn finish(&mut self) {
        self.running = false;
        for tx in self.settling.drain(..) {
            let _ = tx.send(());
        }
    }
}

/// When a claim got less than it asked for: look again when the next row is due. A row due
/// already is one that cannot be claimed now (paused session, blocked destination): what frees
/// it claims again; the one-second timer is the backstop.
pub fn delay_until(next_due: Option<i64>, now: i64) -> Option<Duration> {
    let wait = next_due?.saturating_sub(now);
    Some(if wait > 0 {
        Duration::from_millis(wait as u64)
    } else {
        Duration::from_secs(1)
    })
}
