//! Which node delivers a session, when several share a database: the session actor asks here
//! when a wake comes, before it leases the next run, and when it looks again later.
//!
//! Every node serving a session is woken by its rows; the one whose lease holds the session's
//! head delivers, the others look again when that lease may have ended (spaced, not one write
//! per wake). A busy node (its writer backed up, say as the node that reads a source) leaves a
//! session that has just become due to an idle node for a moment, and takes it back when none
//! took it; sessions handed on and not taken stop the handing on for a while
//! (`Engine::handed_on`). The load figures are the engine's (`Engine::busier_than_others`,
//! `Engine::is_idle`), read from the nodes' heartbeats.

use std::time::{Duration, Instant};

use actix::prelude::*;
use relayq_engine::{Engine, Head, Lease};

use super::{SessionActor, State, Wake};

/// How soon a session whose head another lease holds (another node delivers it) looks again
/// when woken: a wake there is a row written behind that lease, which changes nothing until the
/// lease ends, so the looks of N nodes are spaced, not one write per wake per node.
pub const HELD_ELSEWHERE_LOOK: Duration = Duration::from_millis(100);

/// [`HELD_ELSEWHERE_LOOK`] on an idle node (`Engine::is_idle`): the holder may be a busy node
/// that hands the session on between runs (see [`LEAVE_TO_OTHERS_LOOK`]), and an idle node's
/// looks cost little.
pub const HELD_ELSEWHERE_LOOK_IDLE: Duration = Duration::from_millis(10);

/// How long a busy node waits before it looks at a session that has just become due (or
/// leases its next run), when another node is idle (`Engine::busier_than_others`): that node
/// is woken by the same row and takes it, so the busy node's writer keeps to its own work (the
/// messages it takes in, say, as the node that reads a source); when none has, this node looks
/// itself. Longer than an idle node's look ([`HELD_ELSEWHERE_LOOK_IDLE`]) and a lease's commit
/// take.
pub const LEAVE_TO_OTHERS_LOOK: Duration = Duration::from_millis(50);

/// What a look armed for later does (see `SessionActor::look_at`).
#[derive(Debug, Clone, Copy)]
pub enum Then {
    /// Looks, or leaves the session to the others a moment longer.
    Look,
    /// Looks and leases: the others had their moment (`handed_on`: this node had handed the
    /// session on between runs, so if none took it they are busier than they said).
    TakeBack { handed_on: bool },
}

/// What a Wake does to a session.
#[derive(Debug, PartialEq, Eq)]
pub enum OnWake {
    /// Look now (or, on a busy node, in a moment: see [`Placement::leave_first`]).
    Look,
    /// Look then, not at once (its head is another's lease).
    LookAt(Instant),
    /// The next look is soon enough.
    Nothing,
}

/// A session's standing among the nodes: whether its head is held elsewhere, and whether this
/// node left it to the others.
pub struct Placement {
    engine: Engine,
    /// The head is leased by another owner, or left to others: when the session looks again.
    held_elsewhere: Option<Instant>,
    /// The session was left to the others for a moment and none took it: this node leases its
    /// next run itself (`Some(true)`: it had handed the session on between runs).
    left: Option<bool>,
}

impl Placement {
    pub fn new(engine: Engine) -> Self {
        Placement {
            engine,
            held_elsewhere: None,
            left: None,
        }
    }

    /// A step looks at the session: it is held elsewhere only once a look finds so again.
    pub fn stepped(&mut self) {
        self.held_elsewhere = None;
    }

    /// The session looks again at `at`: its head is another's lease until then, or it is left
    /// to the others.
    pub fn look_again_at(&mut self, at: Instant) {
        self.held_elsewhere = Some(at);
    }

    /// The look armed with `then` fires.
    pub fn looks(&mut self, then: Then) {
        if let Then::TakeBack { handed_on } = then {
            self.left = Some(handed_on);
        }
    }

    /// What a wake does now.
    pub fn on_wake(&self, now: Instant) -> OnWake {
        // A busy node leaves a session another node holds to it: its looks would only wait on
        // that node's row locks, in the busy node's writer (the lease's end still wakes it).
        let within = match (self.engine.is_idle(), self.engine.busier_than_others()) {
            (true, _) => Some(HELD_ELSEWHERE_LOOK_IDLE),
            (false, false) => Some(HELD_ELSEWHERE_LOOK),
            (false, true) => None,
        };
        on_wake(self.held_elsewhere, within, now)
    }

    /// When a session with nothing in hand here (`in_hand` false) is left to an idle node for a
    /// moment before this node looks: this node is busy and another is alive and idle.
    pub fn leave_first(&self, in_hand: bool) -> Option<(Instant, Then)> {
        let leave = !in_hand && self.engine.busier_than_others();
        leave.then(|| {
            let at = Instant::now() + LEAVE_TO_OTHERS_LOOK;
            (at, Then::TakeBack { handed_on: false })
        })
    }

    /// Before a write that would lease the session's next run (`may`: its channel takes runs
    /// and nothing failed): whether to hand the session on instead. Never twice in a row: a
    /// session taken back is leased here.
    pub fn hand_on(&mut self, may: bool) -> HandOn {
        let taken_back = self.left.take();
        HandOn {
            now: may && taken_back.is_none() && self.engine.busier_than_others(),
            taken_back,
        }
    }

    /// After the write that leased `next` for a session this node had handed on and took back
    /// (`HandOn::taken_back`): tells the engine whether another node had taken it meanwhile.
    pub fn after_take_back(
        &self,
        taken_back: Option<bool>,
        next: &Option<Result<Vec<Lease>, Head>>,
        lease_timeout: Duration,
    ) {
        if taken_back != Some(true) {
            return;
        }
        let taken = match next {
            Some(Ok(run)) => run
                .first()
                .is_none_or(|head| !waited_all_along(head, lease_timeout)),
            _ => true,
        };
        self.engine.handed_on(taken);
    }
}

/// What [`Placement::hand_on`] decided.
pub struct HandOn {
    /// Hand the session on: look again as [`handed_on_look`] says.
    pub now: bool,
    /// The session was left to the others and this node takes it back (`Some(true)`: handed
    /// on between runs); for [`Placement::after_take_back`].
    pub taken_back: Option<bool>,
}

impl SessionActor {
    /// Looks at the session (a step), unless it is left to the others for a moment first.
    pub(super) fn look(&mut self, ctx: &mut Context<Self>) {
        let in_hand = self.state.runs() || !self.run.is_empty() || self.awaiting.is_some();
        match self.placement.leave_first(in_hand) {
            Some((at, then)) => self.look_at(at, then, ctx),
            None => self.step(ctx),
        }
    }

    /// Looks at `at` as `then` says; wakes before then change nothing.
    pub(super) fn look_at(&mut self, at: Instant, then: Then, ctx: &mut Context<Self>) {
        self.cancel_timer(ctx);
        self.placement.look_again_at(at);
        let wait = at.saturating_duration_since(Instant::now());
        let timer = ctx.run_later(wait, move |act, ctx| {
            act.state = State::Idle;
            act.placement.looks(then);
            match then {
                Then::Look => act.look(ctx),
                Then::TakeBack { .. } => act.step(ctx),
            }
        });
        self.state = State::Waiting(timer);
    }
}

impl Handler<Wake> for SessionActor {
    type Result = ();
    fn handle(&mut self, _: Wake, ctx: &mut Context<Self>) {
        self.wakes_seen += 1;
        match self.placement.on_wake(Instant::now()) {
            OnWake::Look => self.look(ctx),
            OnWake::LookAt(at) => self.look_at(at, Then::Look, ctx),
            OnWake::Nothing => {}
        }
    }
}

/// When and how a session handed on between runs looks again (from now).
pub fn handed_on_look() -> (Instant, Then) {
    let at = Instant::now() + LEAVE_TO_OTHERS_LOOK;
    (at, Then::TakeBack { handed_on: true })
}

/// Whether the row leased first when a session handed on is taken back had waited since
/// before it was handed on: then no other node took the session. A newer row means one did,
/// delivered what was waiting and caught up, and this node came between two of its runs.
fn waited_all_along(head: &Lease, lease_timeout: Duration) -> bool {
    let leased_at = head.expires_at - lease_timeout.as_millis() as i64;
    let waited = Duration::from_millis(leased_at.saturating_sub(head.created_at).max(0) as u64);
    waited >= LEAVE_TO_OTHERS_LOOK
}

/// A wake makes a session look at once, unless another lease holds its head (`held_elsewhere`:
/// when it looks again): then within `within` ([`HELD_ELSEWHERE_LOOK`], or sooner on an idle
/// node), or with `None` not before it was to.
fn on_wake(held_elsewhere: Option<Instant>, within: Option<Duration>, now: Instant) -> OnWake {
    match (held_elsewhere, within) {
        (None, _) => OnWake::Look,
        (Some(_), None) => OnWake::Nothing,
        (Some(looks_at), Some(within)) if looks_at <= now + within => OnWake::Nothing,
        (Some(_), Some(within)) => OnWake::LookAt(now + within),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session handed on and taken back: its first row had waited the whole moment (no node
    /// took it), or is newer (another node took it, delivered what waited and caught up).
    #[test]
    fn a_session_taken_back_was_not_taken_only_if_its_head_waited_the_whole_moment() {
        let timeout = Duration::from_secs(300);
        let head = |created_at: i64, leased_at: i64| Lease {
            id: 1,
            key: "s".into(),
            payload: String::new(),
            attempts: 1,
            token: 1,
            expires_at: leased_at + timeout.as_millis() as i64,
            created_at,
            send_started: None,
            run: None,
        };
        let moment = LEAVE_TO_OTHERS_LOOK.as_millis() as i64;
        assert!(waited_all_along(&head(1_000, 1_000 + moment), timeout));
        assert!(!waited_all_along(&head(1_000, 1_003), timeout));
    }

    /// A row written behind another node's lease wakes every node serving the session; only
    /// the holder can deliver it, so the others look within `HELD_ELSEWHERE_LOOK`, once, not
    /// with a write per wake; a session with no such lease looks at once.
    #[test]
    fn a_wake_behind_another_nodes_lease_is_a_look_soon_not_a_write_per_wake() {
        let now = Instant::now();
        let within = Some(HELD_ELSEWHERE_LOOK);
        assert_eq!(on_wake(None, within, now), OnWake::Look);
        let lease_ends = now + Duration::from_secs(30);
        let soon = now + HELD_ELSEWHERE_LOOK;
        assert_eq!(on_wake(Some(lease_ends), within, now), OnWake::LookAt(soon));
        // The next wakes, with that look armed, add nothing.
        let later = now + Duration::from_millis(10);
        assert_eq!(on_wake(Some(soon), within, later), OnWake::Nothing);
        // A lease that ends sooner than the look is waited for as it was.
        let ends_soon = now + Duration::from_millis(20);
        assert_eq!(on_wake(Some(ends_soon), within, now), OnWake::Nothing);
        // A busy node (another is idle) waits for the lease's end; a free head it looks at.
        assert_eq!(on_wake(Some(lease_ends), None, now), OnWake::Nothing);
        assert_eq!(on_wake(None, None, now), OnWake::Look);
    }
}
