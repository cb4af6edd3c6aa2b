//! Wake-ups across nodes. The schema's trigger announces every row written pending (or
//! revived) on channel [`CHANNEL`] as `QUEUE KEY` when its transaction commits, whichever
//! node, command or hook wrote it; each daemon listens on a connection of its own and wakes
//! the key's worker. Best effort, as the local wake socket: a notification missed while the
//! connection was down delays its rows until the next sweep, never loses them.
//!
//! The same connection hears the steps of progress every daemon announces (on
//! [`PROGRESS_CHANNEL`]): cosmetic, so one missed is simply not shown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls};

use crate::storage::row::QueueName;

/// The channel rows are announced on.
pub const CHANNEL: &str = "relayq_rows";

/// The channel steps of progress are announced on (`storage::progress::announce_in`).
pub const PROGRESS_CHANNEL: &str = "relayq_progress";

/// What a listener hears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard<'a> {
    /// Rows of `queue`'s key were written pending.
    Rows(QueueName, &'a str),
    /// A step of progress (its payload, as announced).
    Progress(&'a str),
}

/// How long the listener waits for a notification before it looks at its stop flag (it also
/// looks after each notification: while other nodes write, they never stop coming).
const POLL: Duration = Duration::from_millis(200);

/// A listener thread; stops when dropped.
#[derive(Debug)]
pub struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    /// Listens on `url` and calls `on_heard` for each announcement, connecting again (every
    /// second) whenever the connection is lost.
    pub fn start(
        url: String,
        on_heard: impl Fn(Heard<'_>) + Send + 'static,
    ) -> std::io::Result<Listener> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("relayq-listen".into())
            .spawn(move || {
                while !stopped.load(Ordering::SeqCst) {
                    if let Err(e) = listen(&url, &stopped, &on_heard) {
                        tracing::warn!(error = %crate::EngineError::from(e), "listening for rows written by other nodes; connecting again");
                        for _ in 0..5 {
                            if stopped.load(Ordering::SeqCst) {
                                break;
                            }
                            std::thread::sleep(POLL);
                        }
                    }
                }
            })?;
        Ok(Listener {
            stop,
            thread: Some(thread),
        })
    }
}

fn listen(
    url: &str,
    stop: &AtomicBool,
    on_heard: &impl Fn(Heard<'_>),
) -> Result<(), postgres::Error> {
    let mut client = Client::connect(url, NoTls)?;
    client.batch_execute(&format!("LISTEN {CHANNEL}; LISTEN {PROGRESS_CHANNEL}"))?;
    // A lost connection ends the wait with an error: the caller connects again.
    while !stop.load(Ordering::SeqCst) {
        let mut notes = client.notifications();
        let mut waiting = notes.timeout_iter(POLL);
        while let Some(note) = waiting.next()? {
            if stop.load(Ordering::SeqCst) {
                return Ok(());
            }
            if note.channel() == PROGRESS_CHANNEL {
                on_heard(Heard::Progress(note.payload()));
                continue;
            }
            let announced = note.payload().split_once(' ');
            match announced.and_then(|(queue, key)| Some((queue.parse().ok()?, key))) {
                Some((queue, key)) => on_heard(Heard::Rows(queue, key)),
                None => {
                    tracing::debug!(payload = note.payload(), "ignoring an unknown announcement")
                }
            }
        }
    }
    Ok(())
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::queue::testing::row;
    use crate::storage::test_db::TestDb;
    use crate::{Engine, QueuePolicy, SystemClock};

    /// A listener on `pg`'s database, and what it hears.
    fn listening(pg: &TestDb) -> (Listener, std::sync::mpsc::Receiver<(QueueName, String)>) {
        let url = pg.config.url.clone().unwrap();
        let (heard, hear) = std::sync::mpsc::channel();
        let listener = Listener::start(url, move |h: Heard<'_>| {
            if let Heard::Rows(queue, key) = h {
                let _ = heard.send((queue, key.to_string()));
            }
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(300)); // it is listening
        (listener, hear)
    }

    /// A row written by any connection reaches the listener as its queue and key, once its
    /// transaction commits; the listener connects again after the server restarts.
    #[test]
    fn rows_written_are_announced_to_every_listener_and_survive_a_server_restart() {
        let pg = TestDb::postgres_own_server();
        let (_listener, hear) = listening(&pg);
        let engine = Engine::with_clock(pg.db.clone(), Arc::new(SystemClock));
        let hooks = engine.queue(QueueName::Hooks, QueuePolicy::hooks());
        hooks.enqueue(&row("session one", "{}")).unwrap();
        let got = hear.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(got, (QueueName::Hooks, "session one".to_string()));

        pg.server().unwrap().restart_immediate();
        // Written until one is heard: the listener may still be connecting again.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let _ = hooks.enqueue(&row("after", "{}"));
            if let Ok(got) = hear.recv_timeout(Duration::from_millis(500)) {
                assert_eq!(got.1, "after");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "nothing heard after the restart"
            );
        }
    }

    /// A step announced in a transaction is heard by every listener on commit, as its payload
    /// (`storage::progress::announce_in` and the listener agree on the channel); nothing is
    /// heard of a transaction rolled back.
    #[test]
    fn a_step_of_progress_announced_is_heard_on_commit_and_not_after_a_rollback() {
        let pg = TestDb::postgres();
        let url = pg.config.url.clone().unwrap();
        let (heard, hear) = std::sync::mpsc::channel();
        let _listener = Listener::start(url, move |h: Heard<'_>| {
            if let Heard::Progress(payload) = h {
                let _ = heard.send(payload.to_string());
            }
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(300)); // it is listening
        let failed: crate::Result<()> = pg.db.write(|tx| {
            crate::storage::progress::announce_in(tx, "rolled back")?;
            Err(crate::EngineError::Invalid("roll back".into()))
        });
        assert!(failed.is_err());
        pg.db
            .write(|tx| crate::storage::progress::announce_in(tx, "{\"step\":1}"))
            .unwrap();
        let got = hear.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(got, "{\"step\":1}");
        assert!(hear.recv_timeout(Duration::from_millis(300)).is_err());
    }

    /// Issue 41, item 4: a message waiting for a busy agent was pasted 12 to 15 s late when
    /// another node applied the agent's Stop event: only that node's workers were woken, and
    /// the agent's node looked again at its next 15 s look. A change of an agent's state, by
    /// whichever node, is announced to every node as the session's inbound rows are.
    #[test]
    fn an_agent_state_changed_by_any_node_wakes_every_node_for_its_session() {
        use crate::storage::sessions::{self, Activity};
        use crate::AgentState;
        let pg = TestDb::postgres();
        let (_listener, hear) = listening(&pg);
        let activity = Activity {
            key: "agent-1",
            agent: crate::Agent::Claude,
            native_session_id: None,
            cwd: None,
            transcript_path: None,
            pane: None,
            node: Some("elsewhere"),
            permission_mode: None,
        };
        pg.db
            .write(|tx| sessions::record_activity(tx, &activity, false))
            .unwrap();
        pg.db
            .write(|tx| sessions::set_agent_state(tx, "agent-1", AgentState::Working).map(|_| ()))
            .unwrap();
        let got = hear.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(got, (QueueName::Inbound, "agent-1".to_string()));
        // The same state again changes nothing and announces nothing.
        pg.db
            .write(|tx| sessions::set_agent_state(tx, "agent-1", AgentState::Working).map(|_| ()))
            .unwrap();
        assert!(hear.recv_timeout(Duration::from_millis(500)).is_err());
        pg.db
            .write(|tx| sessions::set_agent_state(tx, "agent-1", AgentState::Ready).map(|_| ()))
            .unwrap();
        let got = hear.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(got, (QueueName::Inbound, "agent-1".to_string()));
    }
}
