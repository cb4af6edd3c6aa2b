//! The registered channels by name, each started on first use and started again if its actor
//! died.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;

use super::actor::{ChannelActor, Deliver};
use super::contract::Channel;
use crate::pacing::{Budgets, Pace, PaceSettings};
use crate::penalties::{ChannelPenalties, LocalPenalties, SharedPenalties};
use relayq_engine::Engine;

/// How to run one named channel: start its actor (again, after a panic), its timeout, and its
/// readiness.
#[derive(Clone)]
pub struct ChannelSpec {
    start: Arc<dyn Fn() -> Recipient<Deliver> + Send + Sync>,
    readiness: Arc<dyn Fn() -> Result<(), String> + Send + Sync>,
    ready_check: Arc<dyn Fn() -> Option<super::ReadyCheck> + Send + Sync>,
    dialog: Arc<dyn Fn(super::DialogRequest) -> Option<super::DialogAnswer> + Send + Sync>,
    thread: Arc<dyn Fn(super::ThreadCall) -> Option<super::ThreadAnswer> + Send + Sync>,
    cosmetic: Arc<dyn Fn(super::CosmeticCall) -> Option<super::CosmeticAnswer> + Send + Sync>,
    drafts_in: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    /// A delivery taking longer than this is abandoned and retried.
    pub timeout: Duration,
    /// How fast it may send.
    pub pace: Pace,
    /// Longer outbound texts are split into parts of at most this.
    pub text_limit: Option<relayq_engine::TextLimit>,
    /// What a possible repeat gets (see [`Channel::unknown_outcome`]).
    pub unknown_outcome: super::UnknownOutcome,
    /// See [`Channel::confirms_within`].
    pub confirms_within: Option<Duration>,
    /// Why an address can never be delivered to (see
    /// [`ChannelKind::refuses_address`](super::ChannelKind::refuses_address)).
    refuses: Refuses,
}

/// Why an address is refused, if it is (see [`ChannelSpec::refusing`]).
type Refuses = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

impl ChannelSpec {
    /// Runs `channel` in a [`ChannelActor`]; a restart starts from a clone of it.
    pub fn of<C: Channel>(channel: C) -> Self {
        let (timeout, pace, text_limit) = (channel.timeout(), channel.pace(), channel.text_limit());
        let unknown_outcome = channel.unknown_outcome();
        let confirms_within = channel.confirms_within();
        let probe = channel.clone();
        let asker = channel.clone();
        let presser = channel.clone();
        let threader = channel.clone();
        let shower = channel.clone();
        let drafter = channel.clone();
        ChannelSpec {
            cosmetic: Arc::new(move |call| shower.cosmetic(call)),
            drafts_in: Arc::new(move |to| drafter.drafts_in(to)),
            dialog: Arc::new(move |request| presser.dialog(request)),
            thread: Arc::new(move |call| threader.thread(call)),
            ready_check: Arc::new(move || asker.ready_check()),
            start: Arc::new(move || ChannelActor::new(channel.clone()).start().recipient()),
            readiness: Arc::new(move || probe.readiness()),
            timeout,
            pace,
            text_limit,
            unknown_outcome,
            confirms_within,
            refuses: Arc::new(|_| None),
        }
    }

    /// Addresses `refuses` says why it cannot deliver to are refused at enqueue.
    pub fn refusing(
        mut self,
        refuses: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.refuses = Arc::new(refuses);
        self
    }

    /// The channel's own budgets with what `settings` (a `[pacing.NAME]` table) changes.
    pub fn paced(mut self, settings: Option<&PaceSettings>) -> Self {
        if let Some(settings) = settings {
            self.pace = self.pace.overridden_by(settings);
        }
        self
    }

    /// See [`Channel::readiness`].
    pub fn readiness(&self) -> Result<(), String> {
        (self.readiness)()
    }

    /// See [`Channel::dialog`].
    pub fn dialog(&self, request: super::DialogRequest) -> Option<super::DialogAnswer> {
        (self.dialog)(request)
    }

    /// See [`Channel::ready_check`]: whether the far end takes the channel's credentials.
    pub fn ready_check(&self) -> Option<super::ReadyCheck> {
        (self.ready_check)()
    }
}

/// A running channel: its current actor and its timeout.
#[derive(Clone)]
pub struct ChannelHandle {
    pub name: String,
    pub recipient: Recipient<Deliver>,
    pub timeout: Duration,
    pub unknown_outcome: super::UnknownOutcome,
    pub confirms_within: Option<Duration>,
}

struct Slot {
    spec: ChannelSpec,
    /// Its actor on each thread that sends through it (see
    /// [`send_threads`](crate::outbound::send_threads)): a delivery stays on the thread that asked for it.
    running: Vec<(std::thread::ThreadId, Recipient<Deliver>)>,
    budgets: Option<Arc<dyn Budgets>>,
    /// False until the channel's ready check answers (see [`Channel::ready_check`]).
    ready: Arc<std::sync::atomic::AtomicBool>,
}

/// The registered channels. Hands out the running actor of a channel, starting a new one when
/// the previous one died (a panic in a handler closes the actor's mailbox), so a crashing
/// channel costs a retry, never the daemon.
#[derive(Clone)]
pub struct ChannelDirectory {
    slots: Arc<Mutex<HashMap<String, Slot>>>,
    /// Channels under a penalty (the far end asked for quiet, or the breaker opened).
    penalties: Arc<dyn ChannelPenalties>,
    breakers: Arc<Mutex<HashMap<String, Breaker>>>,
    /// The engine of a database several daemons share: budgets kept there.
    shared: Option<Engine>,
}

impl Default for ChannelDirectory {
    fn default() -> Self {
        ChannelDirectory {
            slots: Arc::default(),
            penalties: Arc::new(LocalPenalties::default()),
            breakers: Arc::default(),
            shared: None,
        }
    }
}

/// The longest a breaker stays open: the first opening (`BreakerSettings::open`) doubles each
/// time it opens again without a success in between, up to this.
pub const BREAKER_MAX_OPEN: Duration = Duration::from_secs(300);

/// A channel's circuit breaker: failed sends (`Retry`: refused, timed out, 5xx) in a row across
/// all its destinations. At `BreakerSettings::after` it opens: the channel gets a penalty, its rows
/// wait uncharged instead of failing one by one. When the penalty ends, one send at a time goes
/// as a probe: a success closes it, a failure opens it again, for longer.
#[derive(Debug, Default)]
struct Breaker {
    failures: u32,
    opens: u32,
    probing: bool,
}

impl ChannelDirectory {
    pub fn register(&self, name: &str, spec: ChannelSpec) {
        let slot = Slot::new(name, spec, self.shared.as_ref());
        self.slots.lock().unwrap().insert(name.to_string(), slot);
    }

    /// This directory for `engine`'s database, before any send: on one several daemons share,
    /// the channels' budgets and penalties are kept in it, one for all the nodes (see
    /// `pacing::SharedBudgets`, `penalties::SharedPenalties`); on one a daemon serves alone,
    /// in its memory.
    pub fn for_database(self, engine: &Engine) -> Self {
        if !engine.database().is_shared() {
            return self;
        }
        let mut slots = self.slots.lock().unwrap();
        for (name, slot) in slots.iter_mut() {
            slot.budgets = crate::pacing::budgets(&slot.spec.pace, name, Some(engine));
        }
        drop(slots);
        ChannelDirectory {
            penalties: Arc::new(SharedPenalties::new(engine.clone())),
            shared: Some(engine.clone()),
            ..self
        }
    }

    /// Replaces every channel (a config reload): channels not in `specs` are removed, the
    /// others start afresh with their new settings on their next delivery. Deliveries in flight
    /// finish on the actor they started with.
    pub fn replace_all(&self, specs: Vec<(String, ChannelSpec)>) {
        let mut slots = self.slots.lock().unwrap();
        slots.clear();
        let shared = self.shared.as_ref();
        slots.extend(specs.into_iter().map(|(name, spec)| {
            let slot = Slot::new(&name, spec, shared);
            (name, slot)
        }));
    }

    /// Runs each channel's ready check (see [`Channel::ready_check`]) until it answers `Ok`,
    /// pausing 1 s, then twice as long each time up to 30 s; tells `on_ready` when a channel
    /// becomes ready. A channel without a check is ready at once. Run at start and after a
    /// reload, inside the actix system; a check of a channel replaced meanwhile stops.
    pub fn check_readiness(
        &self,
        on_ready: Recipient<crate::claiming::ClaimOutbound>,
        readiness: crate::readiness::Readiness,
    ) {
        use std::sync::atomic::Ordering;
        let slots = self.slots.lock().unwrap();
        for (name, slot) in slots.iter() {
            if slot.ready.load(Ordering::SeqCst) {
                continue;
            }
            let Some(first) = (slot.spec.ready_check)() else {
                slot.ready.store(true, Ordering::SeqCst);
                continue;
            };
            let (name, flag, ask) = (
                name.clone(),
                slot.ready.clone(),
                slot.spec.ready_check.clone(),
            );
            let (directory, on_ready, readiness) =
                (self.clone(), on_ready.clone(), readiness.clone());
            let what = format!("channel {name}");
            actix_rt::spawn(async move {
                let mut check = Some(first);
                let mut pause = Duration::from_secs(1);
                loop {
                    let replaced = || {
                        let slots = directory.slots.lock().unwrap();
                        !slots
                            .get(&name)
                            .is_some_and(|s| Arc::ptr_eq(&s.ready, &flag))
                    };
                    if replaced() {
                        readiness.ready(&what);
                        return;
                    }
                    let Some(answer) = check.take().or_else(|| ask()) else {
                        break;
                    };
                    match answer.await {
                        Ok(()) => break,
                        Err(why) => {
                            readiness.not_ready(&what, &why.to_string());
                            tracing::warn!(channel = name, error = %why, retry_in = ?pause, "channel not ready; its rows wait, uncharged")
                        }
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(30));
                }
                readiness.ready(&what);
                tracing::info!(channel = name, "channel ready");
                flag.store(true, Ordering::SeqCst);
                on_ready.do_send(crate::claiming::ClaimOutbound);
            });
        }
    }

    /// How long a row for channel `name` should wait because the channel has not answered its
    /// ready check yet (see [`check_readiness`](Self::check_readiness)).
    pub fn unready(&self, name: &str) -> Option<Duration> {
        let slots = self.slots.lock().unwrap();
        let ready = slots
            .get(name)?
            .ready
            .load(std::sync::atomic::Ordering::SeqCst);
        (!ready).then_some(Duration::from_secs(1))
    }

    pub fn contains(&self, name: &str) -> bool {
        self.slots.lock().unwrap().contains_key(name)
    }

    /// The text limit of channel `name` (see [`Channel::text_limit`]).
    pub fn text_limit(&self, name: &str) -> Option<relayq_engine::TextLimit> {
        self.slots.lock().unwrap().get(name)?.spec.text_limit
    }

    /// Why channel `name` can never deliver to `address`, if it cannot (the same check as
    /// `relayq enqueue`'s, for the API and an embedding program).
    pub fn refuses_address(&self, name: &str, address: &str) -> Option<String> {
        let refuses = self.slots.lock().unwrap().get(name)?.spec.refuses.clone();
        refuses(address)
    }

    /// See [`Channel::confirms_within`]; `None` also for a channel not configured.
    pub fn confirms_within(&self, name: &str) -> Option<Duration> {
        self.slots.lock().unwrap().get(name)?.spec.confirms_within
    }

    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.slots.lock().unwrap().keys().cloned().collect();
        names.sort();
        names
    }

    /// The far end asked channel `name` for quiet for `wait` (a channel-wide 429): a penalty.
    pub fn penalize(&self, name: &str, wait: Duration) {
        if let Some(breaker) = self.breakers.lock().unwrap().get_mut(name) {
            breaker.probing = false; // a probe answered with a penalty is over
        }
        self.penalties.penalize(name, wait);
    }

    /// How long channel `name`'s penalty still runs, if it has one.
    pub fn penalty(&self, name: &str) -> Option<Duration> {
        self.penalties.penalty(name)
    }

    /// Whether a row may go through channel `name` now: `Err(wait)` while the channel has a penalty,
    /// or while its breaker's probe is out.
    pub fn admit(&self, name: &str) -> Result<(), Duration> {
        if let Some(left) = self.penalty(name) {
            return Err(left);
        }
        let after = self.breaker_settings(name).after;
        let mut breakers = self.breakers.lock().unwrap();
        let Some(breaker) = breakers.get_mut(name) else {
            return Ok(());
        };
        if after == 0 || breaker.failures < after {
            return Ok(());
        }
        if breaker.probing {
            return Err(Duration::from_secs(1));
        }
        breaker.probing = true;
        Ok(())
    }

    /// Counts a send's outcome in channel `name`'s breaker; returns how long the channel is to
    /// get a penalty when the breaker opens with it.
    pub fn observe(&self, name: &str, outcome: &super::Outcome) -> Option<Duration> {
        let settings = self.breaker_settings(name);
        let mut breakers = self.breakers.lock().unwrap();
        let breaker = breakers.entry(name.to_string()).or_default();
        breaker.probing = false;
        match outcome {
            super::Outcome::Delivered(_) => {
                *breaker = Breaker::default();
                None
            }
            super::Outcome::Retry { .. }
            | super::Outcome::Unknown { .. }
            | super::Outcome::Unreachable { .. } => {
                breaker.failures += 1;
                if settings.after == 0 || breaker.failures < settings.after {
                    return None;
                }
                breaker.opens += 1;
                let open = settings
                    .open
                    .saturating_mul(1 << (breaker.opens - 1).min(8));
                Some(open.min(BREAKER_MAX_OPEN))
            }
            _ => None,
        }
    }

    fn breaker_settings(&self, name: &str) -> crate::pacing::BreakerSettings {
        let slots = self.slots.lock().unwrap();
        slots
            .get(name)
            .map(|s| s.spec.pace.breaker)
            .unwrap_or_default()
    }

    /// Whether channel `name` may send now as far as checks that take nothing can tell: ready,
    /// no penalty, breaker closed. (Budgets and the breaker's probe slot are taken by
    /// [`admit`](Self::admit) and the pacer.)
    pub fn clear_to_send(&self, name: &str) -> bool {
        if self.unready(name).is_some() || self.penalty(name).is_some() {
            return false;
        }
        let after = self.breaker_settings(name).after;
        let breakers = self.breakers.lock().unwrap();
        breakers
            .get(name)
            .is_none_or(|b| after == 0 || b.failures < after)
    }

    /// Whether rows of channel `name` may go in runs (see
    /// [`Then::LeaseRun`](crate::delivery::Then::LeaseRun)): it has no budgets to take per
    /// row, and a possible repeat is sent again (`resend`), so marking a whole run started,
    /// rows not yet sent included, costs at most a `possible_repeat` flag after a crash, never
    /// a row held for an operator.
    pub fn sends_in_runs(&self, name: &str) -> bool {
        let slots = self.slots.lock().unwrap();
        slots.get(name).is_some_and(|s| {
            s.budgets.is_none() && s.spec.unknown_outcome == super::UnknownOutcome::Resend
        })
    }

    /// The budgets of channel `name`, if it has any.
    pub fn budgets(&self, name: &str) -> Option<Arc<dyn Budgets>> {
        self.slots.lock().unwrap().get(name)?.budgets.clone()
    }

    /// See [`Channel::thread`]: `None` when channel `name` is unknown or has no threads.
    pub fn thread(&self, name: &str, call: super::ThreadCall) -> Option<super::ThreadAnswer> {
        let spec = self.slots.lock().unwrap().get(name)?.spec.clone();
        (spec.thread)(call)
    }

    /// See [`Channel::cosmetic`]: `None` when channel `name` is unknown or shows no progress.
    pub fn cosmetic(&self, name: &str, call: super::CosmeticCall) -> Option<super::CosmeticAnswer> {
        let spec = self.slots.lock().unwrap().get(name)?.spec.clone();
        (spec.cosmetic)(call)
    }

    /// See [`Channel::drafts_in`]: false when channel `name` is unknown.
    pub fn drafts_in(&self, name: &str, to: &str) -> bool {
        let spec = self.slots.lock().unwrap().get(name).map(|s| s.spec.clone());
        spec.is_some_and(|spec| (spec.drafts_in)(to))
    }

    /// See [`Channel::dialog`]: `None` when channel `name` is unknown or cannot answer.
    pub fn dialog(&self, name: &str, request: super::DialogRequest) -> Option<super::DialogAnswer> {
        let spec = self.slots.lock().unwrap().get(name)?.spec.clone();
        spec.dialog(request)
    }

    /// The live actor of channel `name` on this thread, (re)started if needed. Must run inside
    /// an actix system.
    pub fn get(&self, name: &str) -> Option<ChannelHandle> {
        let mut slots = self.slots.lock().unwrap();
        let slot = slots.get_mut(name)?;
        let me = std::thread::current().id();
        let at = slot.running.iter().position(|(t, _)| *t == me);
        let alive = at.is_some_and(|i| slot.running[i].1.connected());
        let i = match (at, alive) {
            (Some(i), true) => i,
            (Some(i), false) => {
                tracing::warn!(channel = name, "channel actor died; starting a new one");
                slot.running[i].1 = (slot.spec.start)();
                i
            }
            (None, _) => {
                slot.running.push((me, (slot.spec.start)()));
                slot.running.len() - 1
            }
        };
        Some(ChannelHandle {
            name: name.to_string(),
            recipient: slot.running[i].1.clone(),
            timeout: slot.spec.timeout,
            unknown_outcome: slot.spec.unknown_outcome,
            confirms_within: slot.spec.confirms_within,
        })
    }
}

impl Slot {
    fn new(name: &str, spec: ChannelSpec, shared: Option<&Engine>) -> Self {
        Slot {
            budgets: crate::pacing::budgets(&spec.pace, name, shared),
            spec,
            running: Vec::new(),
            ready: Arc::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channels::Outcome;
    use crate::pacing::{BreakerSettings, Pace};

    #[derive(Clone)]
    struct Quiet;
    impl Channel for Quiet {
        fn deliver(&mut self, _: super::super::Delivery) -> super::super::Answer {
            Outcome::delivered().into()
        }
        fn timeout(&self) -> Duration {
            Duration::from_secs(1)
        }
    }

    #[test]
    fn the_breaker_opens_after_failures_in_a_row_lets_one_probe_through_and_closes_on_success() {
        let channels = ChannelDirectory::default();
        let mut spec = ChannelSpec::of(Quiet);
        spec.pace = Pace {
            breaker: BreakerSettings {
                after: 2,
                open: Duration::from_millis(50),
            },
            ..Pace::default()
        };
        channels.register("c", spec);
        let fail = Outcome::retry("refused");
        assert_eq!(channels.observe("c", &fail), None);
        assert_eq!(
            channels.observe("c", &Outcome::delivered()),
            None,
            "a success resets"
        );
        assert_eq!(channels.observe("c", &fail), None);
        let open = channels
            .observe("c", &fail)
            .expect("opens at the second failure in a row");
        assert_eq!(open, Duration::from_millis(50));
        // The caller penalizes the channel for `open`; after it, one probe at a time.
        channels.admit("c").expect("the probe");
        assert!(
            channels.admit("c").is_err(),
            "a second send waits for the probe"
        );
        let again = channels
            .observe("c", &fail)
            .expect("a failed probe opens it again");
        assert_eq!(again, Duration::from_millis(100), "for twice as long");
        channels.admit("c").expect("the next probe");
        assert_eq!(channels.observe("c", &Outcome::delivered()), None);
        channels.admit("c").unwrap();
        channels.admit("c").expect("closed: no probe slot any more");
    }

    /// Review: a probe answered with a penalty (a channel-wide 429) kept the probe slot taken,
    /// and the channel never sent again.
    #[test]
    fn a_pause_releases_the_probe_slot() {
        let channels = ChannelDirectory::default();
        let mut spec = ChannelSpec::of(Quiet);
        spec.pace.breaker = BreakerSettings {
            after: 1,
            open: Duration::from_millis(1),
        };
        channels.register("c", spec);
        channels.observe("c", &Outcome::retry("refused")).unwrap();
        channels.admit("c").expect("the probe");
        channels.penalize("c", Duration::from_millis(20));
        assert!(channels.admit("c").is_err(), "paused");
        std::thread::sleep(Duration::from_millis(30));
        channels
            .admit("c")
            .expect("after the pause, a new probe may go");
    }
}
