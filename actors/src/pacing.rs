//! Pacing: how fast a channel may send, to one destination (a chat) and through the whole
//! channel (a bot). A channel declares its platform's budgets ([`Channel::pace`]);
//! `[pacing.NAME]` in config.toml overrides them. The budgets are GCRA without a burst (the
//! platforms punish bursts), one message every `per / count`, each send taking all the budgets
//! it needs or none. The OutboundSender asks the channel's [`Pacer`] as it
//! takes a row: a row that would go over budget is given back, its attempt not counted, due when
//! the budget allows.
//!
//! [`Channel::pace`]: crate::channels::Channel::pace

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use relayq_engine::writes::nodes::TakeBudgets;
use relayq_engine::{Engine, EngineError};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A channel's budgets (`None`: no limit) and breaker, as its kind declares them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pace {
    /// Most messages to one destination per period.
    pub per_destination: Option<Rate>,
    /// Most messages through the channel per period.
    pub per_channel: Option<Rate>,
    /// Most messages to one group chat per period, besides `per_destination` (Telegram's 20
    /// a minute); a destination is a group when it starts with `group_prefix`.
    pub per_group: Option<Rate>,
    pub group_prefix: Option<&'static str>,
    /// The circuit breaker (see `channels::directory`).
    pub breaker: BreakerSettings,
}

/// When a channel's breaker opens: after `after` failed sends in a row (0: never), for `open`
/// at first (doubled each time it opens again without a success, up to 5 minutes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    pub after: u32,
    pub open: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        BreakerSettings {
            after: 5,
            open: Duration::from_secs(10),
        }
    }
}

impl Pace {
    /// Whether `destination` is a group chat, paced by `per_group` too.
    pub fn is_group(&self, destination: &str) -> bool {
        self.group_prefix
            .is_some_and(|prefix| destination.trim().starts_with(prefix))
    }

    /// `self` with what `over` sets (a `[pacing.NAME]` table over a channel's own budgets).
    pub fn overridden_by(&self, over: &PaceSettings) -> Pace {
        let pick = |own: &Option<Rate>, set: &Option<Setting>| match set {
            None => own.clone(),
            Some(Setting::Off) => None,
            Some(Setting::Rate(r)) => Some(r.clone()),
        };
        Pace {
            per_destination: pick(&self.per_destination, &over.per_destination),
            per_channel: pick(&self.per_channel, &over.per_channel),
            per_group: pick(&self.per_group, &over.per_group),
            group_prefix: self.group_prefix,
            breaker: BreakerSettings {
                after: over.breaker_after.unwrap_or(self.breaker.after),
                open: over.breaker_open.unwrap_or(self.breaker.open),
            },
        }
    }
}

/// `[pacing.NAME]` as written: each budget a rate (`"1/s"`, `"20/min"`) or `"off"`, and the
/// breaker's numbers; what is left out stays as the channel's kind declares it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PaceSettings {
    pub per_destination: Option<Setting>,
    pub per_channel: Option<Setting>,
    /// Group chats' own budget, where the platform has one (Telegram).
    pub per_group: Option<Setting>,
    /// Failed sends in a row that open the breaker (0: no breaker).
    pub breaker_after: Option<u32>,
    /// How long the breaker stays open the first time.
    #[serde(with = "humantime_serde")]
    pub breaker_open: Option<Duration>,
}

/// One budget setting: a rate, or `"off"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setting {
    Off,
    Rate(Rate),
}

/// `count` messages per `per`, written `"N/s"`, `"N/min"`, `"N/h"` or `"N/<duration>"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rate {
    pub count: NonZeroU32,
    pub per: Duration,
}

impl std::str::FromStr for Rate {
    type Err = String;
    fn from_str(text: &str) -> Result<Rate, String> {
        let bad = || format!("{text:?} is not a rate: write e.g. \"1/s\", \"20/min\", \"30/s\"");
        let (count, per) = text.split_once('/').ok_or_else(bad)?;
        let count: NonZeroU32 = count.trim().parse().map_err(|_| bad())?;
        let per = match per.trim() {
            "s" => Duration::from_secs(1),
            "min" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            other => humantime::parse_duration(other).map_err(|_| bad())?,
        };
        if per.is_zero() || per > Duration::from_secs(24 * 3600) {
            return Err(format!(
                "{text:?}: the period must be between 1ms and 1 day"
            ));
        }
        Ok(Rate { count, per })
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per = match self.per.as_millis() {
            1_000 => "s".to_string(),
            60_000 => "min".to_string(),
            3_600_000 => "h".to_string(),
            _ => humantime::format_duration(self.per).to_string(),
        };
        write!(f, "{}/{per}", self.count)
    }
}

impl Rate {
    /// `count` per second: a budget a platform documents (not zero).
    pub fn per_second(count: u32) -> Rate {
        Rate {
            count: NonZeroU32::new(count).expect("a declared budget is not zero"),
            per: Duration::from_secs(1),
        }
    }

    /// One message every this long (`per / count`), no burst.
    fn every(&self) -> Duration {
        (self.per / self.count.get()).max(Duration::from_micros(1))
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for Setting {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Setting::Off => s.serialize_str("off"),
            Setting::Rate(r) => r.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Setting {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match text.as_str() {
            "off" => Ok(Setting::Off),
            _ => text
                .parse()
                .map(Setting::Rate)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// A channel's budgets, as its senders (and its source's cosmetic calls) take from them: in
/// this process's memory ([`Pacer`]) when one daemon serves the database, in the database
/// ([`SharedBudgets`]) when several do, so that they do not each spend the bot's whole budget.
pub trait Budgets: Send + Sync + 'static {
    /// Takes one message's budget for `destination`, or says how long to wait for it.
    fn take(&self, destination: &str) -> Result<(), Duration>;
}

/// The budgets `pace` sets for channel `channel` (`None`: it sets none): kept in this
/// process's memory, or, when several daemons share the database (`shared`), in the
/// database, one budget between them all.
pub fn budgets(pace: &Pace, channel: &str, shared: Option<&Engine>) -> Option<Arc<dyn Budgets>> {
    match shared {
        None => Pacer::new(pace).map(|pacer| Arc::new(pacer) as Arc<dyn Budgets>),
        Some(engine) => SharedBudgets::new(pace, channel, engine.clone())
            .map(|shared| Arc::new(shared) as Arc<dyn Budgets>),
    }
}

/// [`Budgets`] kept in the database the nodes share (`relayq_engine::budgets`): N
/// daemons sending through one bot keep to the bot's budget and each chat's together.
pub struct SharedBudgets {
    /// Taking from a budget writes only the budgets' table: the queues' policies do not matter.
    door: relayq_engine::WriteDoor,
    /// Budget keys: the channel's, and the start of each destination's.
    channel_key: String,
    destination_key: String,
    /// Microseconds between sends.
    per_destination: Option<i64>,
    per_channel: Option<i64>,
    per_group: Option<i64>,
    group_key: String,
    group_prefix: Option<&'static str>,
}

impl SharedBudgets {
    /// `None` when the pace sets no budget.
    pub fn new(pace: &Pace, channel: &str, engine: Engine) -> Option<SharedBudgets> {
        let every = |r: &Rate| (r.per.as_micros() as i64 / i64::from(r.count.get())).max(1);
        let shared = SharedBudgets {
            door: relayq_engine::WriteDoor::new(
                engine.queues(&Default::default()),
                Default::default(),
            ),
            channel_key: format!("{channel}:all"),
            destination_key: format!("{channel}:to:"),
            per_destination: pace.per_destination.as_ref().map(every),
            per_channel: pace.per_channel.as_ref().map(every),
            per_group: pace.per_group.as_ref().map(every),
            group_key: format!("{channel}:group:"),
            group_prefix: pace.group_prefix,
        };
        let any = [shared.per_destination, shared.per_channel, shared.per_group];
        any.iter().any(Option::is_some).then_some(shared)
    }
}

/// When the database cannot be asked, a send waits this long and asks again.
const UNREADABLE_BUDGET_WAIT: Duration = Duration::from_millis(200);

impl Budgets for SharedBudgets {
    fn take(&self, destination: &str) -> Result<(), Duration> {
        let to = format!("{}{destination}", self.destination_key);
        let group = self
            .group_prefix
            .is_some_and(|p| destination.trim().starts_with(p));
        let budgets: Vec<(String, i64)> = [
            self.per_destination.map(|every| (to, every)),
            self.per_group
                .filter(|_| group)
                .map(|every| (format!("{}{destination}", self.group_key), every)),
            self.per_channel
                .map(|every| (self.channel_key.clone(), every)),
        ]
        .into_iter()
        .flatten()
        .collect();
        match self.door.apply_now(TakeBudgets(budgets)) {
            Ok(()) => Ok(()),
            Err(EngineError::OverBudget { wait_us }) => {
                Err(Duration::from_micros(wait_us.max(1) as u64))
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot take from the shared budget; the send waits");
                Err(UNREADABLE_BUDGET_WAIT)
            }
        }
    }
}

/// [`Budgets`] in this process's memory: when each budget may next be spent (GCRA without a
/// burst: one message every `per / count`). A send takes every budget it needs, or none: a
/// budget that passes is not spent when another refuses (with one limiter per budget, a chat's
/// slot was spent by a send the bot's budget then refused, and the next send waited for it).
pub struct Pacer {
    per_destination: Option<Duration>,
    per_channel: Option<Duration>,
    per_group: Option<Duration>,
    group_prefix: Option<&'static str>,
    /// Budget (`to:DEST`, `group:DEST`, `all`) → when it may next be spent.
    next: std::sync::Mutex<std::collections::HashMap<String, Instant>>,
}

/// Past this many budgets kept, the ones that may be spent already are forgotten.
const PACER_KEPT: usize = 10_000;

impl Pacer {
    /// `None` when the pace sets no budget.
    pub fn new(pace: &Pace) -> Option<Pacer> {
        if pace.per_destination.is_none() && pace.per_channel.is_none() && pace.per_group.is_none()
        {
            return None;
        }
        Some(Pacer {
            per_destination: pace.per_destination.as_ref().map(Rate::every),
            per_channel: pace.per_channel.as_ref().map(Rate::every),
            per_group: pace.per_group.as_ref().map(Rate::every),
            group_prefix: pace.group_prefix,
            next: Default::default(),
        })
    }
}

impl Budgets for Pacer {
    fn take(&self, destination: &str) -> Result<(), Duration> {
        let now = Instant::now();
        let group = self
            .group_prefix
            .is_some_and(|p| destination.trim().starts_with(p));
        let budgets: Vec<(String, Duration)> = [
            self.per_destination
                .map(|e| (format!("to:{destination}"), e)),
            self.per_group
                .filter(|_| group)
                .map(|e| (format!("group:{destination}"), e)),
            self.per_channel.map(|e| ("all".to_string(), e)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let mut next = self.next.lock().expect("pacer lock");
        let wait = budgets
            .iter()
            .filter_map(|(key, _)| next.get(key))
            .map(|at| at.saturating_duration_since(now))
            .max()
            .unwrap_or_default();
        if !wait.is_zero() {
            return Err(wait);
        }
        if next.len() > PACER_KEPT {
            next.retain(|_, at| *at > now);
        }
        for (key, every) in budgets {
            next.insert(key, now + every);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_and_write_as_people_do() {
        let r: Rate = "20/min".parse().unwrap();
        assert_eq!((r.count.get(), r.per), (20, Duration::from_secs(60)));
        assert_eq!(r.to_string(), "20/min", "written back as read");
        assert_eq!(
            "1/500ms".parse::<Rate>().unwrap().per,
            Duration::from_millis(500)
        );
        for bad in ["20", "0/s", "x/s", "1/0s", "1/fortnight"] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
        let setting: PaceSettings =
            serde_json::from_str(r#"{"per_destination": "off", "per_channel": "30/s"}"#).unwrap();
        let own = Pace {
            per_destination: Some("1/s".parse().unwrap()),
            ..Pace::default()
        };
        let paced = own.overridden_by(&setting);
        assert_eq!(paced.per_destination, None);
        assert_eq!(paced.per_channel, Some("30/s".parse().unwrap()));
    }

    #[test]
    fn a_destination_gets_one_message_per_period_and_others_are_not_held() {
        let pacer = Pacer::new(&Pace {
            per_destination: Some("1/s".parse().unwrap()),
            ..Pace::default()
        })
        .unwrap();
        pacer.take("chat-1").unwrap();
        let wait = pacer.take("chat-1").unwrap_err();
        assert!(
            wait > Duration::from_millis(900) && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        pacer.take("chat-2").unwrap();
        assert!(Pacer::new(&Pace::default()).is_none());
    }

    /// Regression (issue 45's soak): with one limiter per budget, a chat's slot was spent by a
    /// send that the next budget refused, and the send tried again waited a second slot.
    #[test]
    fn a_send_refused_by_one_budget_spends_no_other() {
        let pacer = Pacer::new(&Pace {
            per_destination: Some("1/s".parse().unwrap()),
            per_channel: Some("2/s".parse().unwrap()),
            ..Pace::default()
        })
        .unwrap();
        pacer.take("a").unwrap();
        let wait = pacer.take("b").unwrap_err();
        assert!(
            wait <= Duration::from_millis(500),
            "the bot's budget: {wait:?}"
        );
        std::thread::sleep(wait + Duration::from_millis(10));
        pacer
            .take("b")
            .expect("b's own budget was not spent by the refused send");
    }

    #[test]
    fn a_group_chat_is_paced_by_its_group_budget_too() {
        let pace = Pace {
            per_destination: Some("1/s".parse().unwrap()),
            per_group: Some("20/min".parse().unwrap()),
            group_prefix: Some("-"),
            ..Pace::default()
        };
        assert!(pace.is_group("-100123") && !pace.is_group("42"));
        let pacer = Pacer::new(&pace).unwrap();
        pacer.take("-100123").unwrap();
        let wait = pacer.take("-100123").unwrap_err();
        assert!(
            wait > Duration::from_millis(2900),
            "one every 3 s in a group: {wait:?}"
        );
        pacer.take("42").unwrap();
        let wait = pacer.take("42").unwrap_err();
        assert!(
            wait <= Duration::from_secs(1),
            "a private chat: one a second: {wait:?}"
        );
    }
}
