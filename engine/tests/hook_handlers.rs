//! Hook rows processed by the handlers on a real database (SQLite, or PostgreSQL when
//! `RELAYQ_TEST_DATABASE=postgresql`): the session registry, the outbound rows for routes, and
//! that a row's effects commit with its completion or not at all.

use std::sync::Arc;

use relayq_engine::hooks::handlers::Effects;
use relayq_engine::params;
use relayq_engine::storage::sql::{Query, Sql};
use relayq_engine::storage::test_db::TestDb;
use relayq_engine::{
    hooks, inbound, Agent, Engine, EventType, HookEvent, InboundMessage, ManualClock, NewRow,
    NoticeRoute, NoticeRoutes, OutboundMessage, Processed, QueuePolicy, Retried, WriteDoor,
};
use serde_json::{json, Value};

const T0: i64 = 1_700_000_000_000;

struct Fixture {
    _db: TestDb,
    engine: Engine,
    door: WriteDoor,
    clock: Arc<ManualClock>,
}

fn fixture(max_attempts: u32) -> Fixture {
    let db = TestDb::from_env();
    let clock = Arc::new(ManualClock::new(T0));
    let engine = Engine::with_clock(db.db.clone(), clock.clone());
    let route = |channel: &str, to: &str, events: Vec<EventType>| NoticeRoute {
        channel: Some(channel.into()),
        to: to.into(),
        events,
    };
    let routes = NoticeRoutes {
        default: vec![route(
            "team",
            "ops",
            relayq_engine::hooks::handlers::relayed_events(),
        )],
        sessions: std::collections::BTreeMap::from([(
            "quiet".to_string(),
            vec![route("pager", "me", vec![EventType::Notification])],
        )]),
        replies: Default::default(),
        limits: Default::default(),
        progress: Default::default(),
        idle_reminders: false,
    };
    let policies = relayq_engine::QueuePolicies {
        hooks: QueuePolicy {
            max_attempts: Some(max_attempts),
            ..QueuePolicy::hooks()
        },
        ..Default::default()
    };
    let door = WriteDoor {
        queues: engine.queues(&policies),
        routes: routes.shared(),
    };
    Fixture {
        _db: db,
        engine,
        door,
        clock,
    }
}

fn event(session: &str, kind: EventType, data: Value) -> HookEvent {
    HookEvent {
        native_session_id: Some(format!("native-{session}")),
        received_at: T0,
        ..HookEvent::new(Agent::Claude, kind, session, data)
    }
}

impl Fixture {
    /// Notices go back to the chat each session's messages came from: `telegram:bot`'s chats
    /// through channel `tg`, which show `progress`.
    fn answer_at_origin(
        &self,
        progress: std::collections::BTreeMap<String, relayq_engine::progress::ProgressMode>,
    ) {
        let origin_route = NoticeRoute {
            channel: None,
            to: relayq_engine::hooks::handlers::ORIGIN.into(),
            events: relayq_engine::hooks::handlers::relayed_events(),
        };
        *self.door.routes.write().unwrap() = Arc::new(NoticeRoutes {
            default: vec![origin_route],
            sessions: Default::default(),
            replies: [("telegram:bot".to_string(), "tg".to_string())].into(),
            limits: Default::default(),
            progress,
            idle_reminders: false,
        });
    }

    /// Enqueues the event and processes it.
    fn run(&self, e: HookEvent) -> Processed {
        let key = e.session.clone();
        self.door.hooks.enqueue(&e.to_row()).unwrap();
        let lease = self.door.hooks.lease_next(&key).unwrap().unwrap();
        self.door.process(&lease).unwrap()
    }

    fn outbound(&self) -> Vec<OutboundMessage> {
        let sql = Sql::same("SELECT payload FROM queue_rows WHERE queue = 'outbound' ORDER BY id");
        let conn = self.engine.database().read().unwrap();
        let payloads: Vec<String> = conn.query_all(&sql, params![], |r| r.get(0)).unwrap();
        payloads
            .iter()
            .map(|p| OutboundMessage::from_payload(p).unwrap())
            .collect()
    }
}

#[test]
fn a_turn_updates_the_registry_and_agent_stop_sends_the_last_answer_to_the_routes() {
    let f = fixture(20);
    let start =
        json!({"session_id": "native-s1", "cwd": "/src/app", "transcript_path": "/t.jsonl"});
    assert!(matches!(
        f.run(event("s1", EventType::SessionStart, start)),
        Processed::Applied(_)
    ));
    f.run(event(
        "s1",
        EventType::UserPromptSubmit,
        json!({"prompt": "run the tests"}),
    ));
    let s = f.engine.session("s1").unwrap().unwrap();
    assert_eq!(
        (
            s.state.as_str(),
            s.current_turn,
            s.turn_running,
            s.last_user_input.as_deref()
        ),
        ("active", 1, true, Some("run the tests"))
    );
    assert_eq!(
        (
            s.agent.as_str(),
            s.native_session_id.as_deref(),
            s.cwd.as_deref(),
            s.transcript_path.as_deref()
        ),
        (
            "claude",
            Some("native-s1"),
            Some("/src/app"),
            Some("/t.jsonl")
        )
    );
    f.run(event(
        "s1",
        EventType::ToolUse,
        json!({"tool_name": "Bash"}),
    ));
    assert!(f.outbound().is_empty(), "tool events never fan out to chat");

    let stop = f.run(event(
        "s1",
        EventType::AgentStop,
        json!({"last_assistant_message": "All pass."}),
    ));
    let Processed::Applied(Effects {
        outbound_keys,
        session_ended,
        ..
    }) = stop
    else {
        panic!("{stop:?}")
    };
    assert_eq!(
        (outbound_keys, session_ended),
        (vec![r#"["team","ops"]"#.to_string()], false)
    );
    let out = f.outbound();
    assert_eq!(out.len(), 1);
    // The notice is stored as data; each channel renders it (plain text: "s1: agent
    // finished\n\nAll pass.", see relayq_actors::channels::notice).
    let notice = out[0].notice.clone().expect("a notice");
    assert_eq!(
        (
            out[0].channel.as_str(),
            out[0].to.as_str(),
            notice.session.as_str(),
            notice.headline.as_str(),
            notice.body.as_deref()
        ),
        ("team", "ops", "s1", "agent finished", Some("All pass."))
    );
    assert_eq!(
        (out[0].session.as_deref(), out[0].event.as_deref()),
        (Some("s1"), Some("agent_stop"))
    );
    let s = f.engine.session("s1").unwrap().unwrap();
    assert_eq!(
        (s.turn_running, s.last_assistant_message.as_deref()),
        (false, Some("All pass."))
    );
}

#[test]
fn a_session_route_replaces_the_default_and_filters_events() {
    let f = fixture(20);
    f.run(event("quiet", EventType::AgentStop, json!({})));
    assert!(
        f.outbound().is_empty(),
        "agent_stop is not routed for this session"
    );
    f.run(event(
        "quiet",
        EventType::Notification,
        json!({"message": "May I?"}),
    ));
    let out = f.outbound();
    assert_eq!(out.len(), 1);
    let notice = out[0].notice.clone().expect("a notice");
    assert_eq!(
        (
            out[0].channel.as_str(),
            notice.headline.as_str(),
            notice.question.as_deref()
        ),
        ("pager", "needs you", Some("May I?"))
    );
}

#[test]
fn session_end_ends_the_session_and_expires_its_pending_inbound_rows() {
    let f = fixture(20);
    let inbound = &f.door.inbound;
    let pending = inbound
        .enqueue(&InboundMessage::text("s1", "t", "hi").to_row())
        .unwrap()
        .id;
    let other = inbound
        .enqueue(&InboundMessage::text("s2", "t", "hi").to_row())
        .unwrap()
        .id;
    let end = f.run(event(
        "s1",
        EventType::SessionEnd,
        json!({"reason": "exit"}),
    ));
    assert!(
        matches!(
            end,
            Processed::Applied(Effects {
                session_ended: true,
                ..
            })
        ),
        "{end:?}"
    );
    assert_eq!(f.engine.session("s1").unwrap().unwrap().state, "ended");
    let s = inbound.state_of(pending).unwrap().unwrap();
    assert_eq!(
        (s.state.as_str(), s.reason.as_deref()),
        ("expired", Some("session ended"))
    );
    assert_eq!(inbound.state_of(other).unwrap().unwrap().state, "pending");
    // A new start under the same key reopens it.
    f.run(event("s1", EventType::SessionStart, json!({})));
    assert_eq!(f.engine.session("s1").unwrap().unwrap().state, "active");
}

#[test]
fn a_stale_lease_applies_nothing() {
    let f = fixture(20);
    let hooks = &f.door.hooks;
    hooks
        .enqueue(&event("s1", EventType::AgentStop, json!({})).to_row())
        .unwrap();
    let lease = hooks.lease_next("s1").unwrap().unwrap();
    // The lease is lost: the session expires the row under the holder.
    hooks.expire_key("s1", "test").unwrap();
    assert_eq!(f.door.process(&lease).unwrap(), Processed::Stale);
    assert!(f.engine.session("s1").unwrap().is_none());
    assert!(f.outbound().is_empty());
}

#[test]
fn an_undecodable_row_and_a_refused_event_are_done_at_once_with_the_error() {
    let f = fixture(20);
    let hooks = &f.door.hooks;
    let id = hooks
        .enqueue(&NewRow {
            key: "s1".into(),
            payload: "{not json".into(),
            dedup_key: None,
        })
        .unwrap()
        .id;
    let lease = hooks.lease_next("s1").unwrap().unwrap();
    let p = f.door.process(&lease).unwrap();
    assert!(
        matches!(
            p,
            Processed::DoneWithError {
                reason: "undecodable",
                ..
            }
        ),
        "{p:?}"
    );
    let s = hooks.state_of(id).unwrap().unwrap();
    assert_eq!(
        (s.state.as_str(), s.reason.as_deref(), s.attempts),
        ("delivered", Some("undecodable"), 1)
    );
    assert!(s.last_error.unwrap().contains("not valid"));

    let p = f.run(event(
        "s2",
        EventType::AgentStop,
        json!("a string, not an object"),
    ));
    assert!(
        matches!(
            p,
            Processed::DoneWithError {
                reason: "rejected",
                ..
            }
        ),
        "{p:?}"
    );
    assert!(
        f.engine.session("s2").unwrap().is_none(),
        "a refused event changes nothing"
    );
}

#[test]
fn a_failing_handler_rolls_back_every_effect_retries_and_dies_at_the_limit() {
    let f = fixture(3);
    f.run(event(
        "s1",
        EventType::UserPromptSubmit,
        json!({"prompt": "go"}),
    ));
    // From now on, writing an outbound row fails inside the handler's transaction.
    let refuse = match f.engine.database().is_shared() {
        false => {
            "CREATE TRIGGER refuse BEFORE INSERT ON queue_rows WHEN NEW.queue = 'outbound'
             BEGIN SELECT RAISE(ABORT, 'disk says no'); END;"
        }
        true => {
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
               IF NEW.queue = 'outbound' THEN RAISE EXCEPTION 'disk says no'; END IF;
               RETURN NEW; END $$;
             CREATE TRIGGER refuse BEFORE INSERT ON queue_rows FOR EACH ROW
               EXECUTE FUNCTION refuse();"
        }
    };
    f.engine.database().write(|tx| tx.batch(refuse)).unwrap();
    let hooks = &f.door.hooks;
    let id = hooks
        .enqueue(
            &event(
                "s1",
                EventType::AgentStop,
                json!({"last_assistant_message": "done"}),
            )
            .to_row(),
        )
        .unwrap()
        .id;
    let mut outcomes = vec![];
    for _ in 0..3 {
        // The manual clock does not move: lease the row whatever its backoff says.
        let due = Sql::same("UPDATE queue_rows SET next_attempt_at = 0 WHERE id = :id");
        f.engine
            .database()
            .write(|tx| tx.exec(&due, params![":id" => id]))
            .unwrap();
        let lease = hooks.lease_next("s1").unwrap().unwrap();
        match f.door.process(&lease).unwrap() {
            Processed::Failed { error, retried } => {
                assert!(error.contains("disk says no"), "{error}");
                outcomes.push(retried);
            }
            other => panic!("{other:?}"),
        }
        let s = f.engine.session("s1").unwrap().unwrap();
        assert!(
            s.turn_running && s.last_assistant_message.is_none(),
            "the turn was not completed"
        );
        assert_ne!(
            hooks.state_of(id).unwrap().unwrap().state,
            "delivered",
            "nor was the row"
        );
    }
    assert_eq!(
        outcomes,
        vec![
            Retried::Scheduled { at: T0 + 1000 },
            Retried::Scheduled { at: T0 + 2000 },
            Retried::Dead
        ]
    );
    assert_eq!(
        f.engine
            .dead_rows(Some(relayq_engine::QueueName::Hooks))
            .unwrap()[0]
            .id,
        id
    );
}

#[test]
fn notices_go_back_to_the_chat_and_thread_the_sessions_last_message_came_from() {
    let f = fixture(20);
    f.answer_at_origin(Default::default());
    let from = |chat: &str, thread: Option<&str>, id: &str| InboundMessage {
        source_channel_id: Some(chat.into()),
        source_thread_id: thread.map(str::to_string),
        source_message_id: Some(id.into()),
        ..InboundMessage::text("s1", "telegram:bot", "hi")
    };
    let write = |m: &InboundMessage| {
        let q = &f.door.inbound;
        q.write(|tx| inbound::enqueue_in(q, tx, m)).unwrap()
    };

    f.run(event(
        "s1",
        EventType::AgentStop,
        json!({"last_assistant_message": "alone"}),
    ));
    assert!(f.outbound().is_empty(), "no origin yet: nothing to answer");

    write(&from("111", None, "1"));
    write(&from("222", Some("7"), "2"));
    write(&from("111", None, "1")); // a duplicate of an older message does not move the origin
    write(&InboundMessage::text("s1", "cli", "typed locally")); // names no chat: no origin
    write(&InboundMessage {
        source_channel_id: Some("333".into()),
        ..InboundMessage::text("s2", "slack:other", "elsewhere")
    });
    f.run(event(
        "s1",
        EventType::AgentStop,
        json!({"last_assistant_message": "done"}),
    ));
    f.run(event("s2", EventType::AgentStop, json!({})));
    let out = f.outbound();
    assert_eq!(
        out.len(),
        1,
        "s2's origin has no channel that answers it: {out:?}"
    );
    assert_eq!(
        (
            out[0].channel.as_str(),
            out[0].to.as_str(),
            out[0].thread.as_deref()
        ),
        ("tg", "222", Some("7"))
    );
    assert_eq!(
        f.engine
            .database()
            .read()
            .unwrap()
            .query_value::<String>(
                &Sql::same("SELECT origin FROM session_origins WHERE session = 's1'"),
                params![]
            )
            .unwrap(),
        "telegram:bot",
        "the registry keeps it"
    );
}

/// A payload captured from the real agent CLI (`tests/fixtures/<agent>/captured/`), received
/// for relayq session `session`, with `edit` applied to its JSON first.
fn captured(agent: Agent, file: &str, session: &str, edit: impl FnOnce(&mut Value)) -> HookEvent {
    let dir = match agent {
        Agent::Claude => "claude-code",
        Agent::Codex => "codex",
        Agent::Gemini => "gemini",
    };
    let path = format!(
        "{}/../tests/fixtures/{dir}/captured/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut json: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut json);
    match hooks::receive(agent, &json.to_string(), Some(session.into())) {
        hooks::Received::Event(e) => e,
        other => panic!("{file}: {other:?}"),
    }
}

fn applied(p: Processed) -> Effects {
    match p {
        Processed::Applied(effects) => effects,
        other => panic!("not applied: {other:?}"),
    }
}

impl Fixture {
    fn agent_state(&self, session: &str) -> Option<relayq_engine::AgentState> {
        self.engine.session(session).unwrap()?.agent_state
    }
}

#[test]
fn the_agents_own_events_move_its_state_in_the_registry() {
    use relayq_engine::AgentState::*;
    let f = fixture(20);
    let steps = [
        ("SessionStart.json", Ready),
        ("UserPromptSubmit.json", Working),
        ("PermissionRequest.json", AwaitingApproval),
        ("Stop.json", Ready),
    ];
    for (file, want) in steps {
        let effects = applied(f.run(captured(Agent::Claude, file, "s1", |_| {})));
        assert_eq!(f.agent_state("s1"), Some(want), "after {file}");
        assert!(
            effects.wake_session,
            "{file} changed the state: the delivery is woken"
        );
    }
    let s = f.engine.session("s1").unwrap().unwrap();
    assert_eq!(s.agent_state_since, Some(T0), "since when the state holds");
    let again = applied(f.run(captured(Agent::Claude, "Notification.json", "s1", |_| {})));
    assert!(
        !again.wake_session,
        "idle_prompt keeps ready: no change, no wake"
    );
}

#[test]
fn a_pasted_message_is_delivered_when_the_agent_submits_it_not_before() {
    let f = fixture(20);
    let inbound = &f.door.inbound;
    let message = InboundMessage::text("s1", "terminal", "please  reply\tt116b69c\n");
    let id = inbound.enqueue(&message.to_row()).unwrap().id;
    let lease = inbound.lease_next("s1").unwrap().unwrap();
    f.engine
        .database()
        .write_at(T0, |tx| {
            assert!(inbound.mark_send_started_in(tx, &lease)?);
            inbound.submitted_in(tx, &lease, "submitted, waiting for the agent", T0 + 60_000)
        })
        .unwrap();
    let other = captured(Agent::Claude, "UserPromptSubmit.json", "s1", |j| {
        j["prompt"] = json!("something the person typed in the terminal")
    });
    assert_eq!(applied(f.run(other)).confirmed, None);
    assert_eq!(
        inbound.state_of(id).unwrap().unwrap().state,
        "leased",
        "another prompt does not confirm the pasted message"
    );
    let submit = captured(Agent::Claude, "UserPromptSubmit.json", "s1", |_| {});
    let effects = applied(f.run(submit));
    assert_eq!((effects.confirmed, effects.wake_session), (Some(id), true));
    let detail = f.engine.row(id).unwrap().unwrap();
    assert_eq!(
        (detail.state.as_str(), detail.receipt.as_deref()),
        (
            "delivered",
            Some("UserPromptSubmit 9c77b1c9-e0de-4571-a0d3-f71baf6aac1a")
        )
    );
}

#[test]
fn codex_side_thread_notify_is_not_an_agent_finished() {
    let f = fixture(20);
    // notify alone (no Codex hooks): the title thread's turn is ignored, the main one relays.
    let title = applied(f.run(captured(
        Agent::Codex,
        "notify-title-thread.json",
        "s1",
        |_| {},
    )));
    assert!(
        title.ignored.is_some() && f.outbound().is_empty(),
        "{title:?}"
    );
    applied(f.run(captured(Agent::Codex, "notify.json", "s1", |_| {})));
    let out = f.outbound();
    let bodies: Vec<_> = out.iter().map(|m| m.notice.clone().unwrap().body).collect();
    assert_eq!(
        bodies,
        vec![Some("echo: please reply t1641ade".to_string())]
    );
    let title_later = f.run(captured(
        Agent::Codex,
        "notify-title-thread.json",
        "s1",
        |_| {},
    ));
    assert!(
        applied(title_later).ignored.is_some(),
        "another thread than the session's"
    );
    assert_eq!(f.outbound().len(), 1);
}

#[test]
fn codex_notify_is_ignored_when_its_hooks_report_and_the_turns_input_is_kept() {
    let f = fixture(20);
    for file in ["SessionStart.json", "UserPromptSubmit.json", "Stop.json"] {
        applied(f.run(captured(Agent::Codex, file, "s1", |_| {})));
    }
    let notify = applied(f.run(captured(Agent::Codex, "notify.json", "s1", |j| {
        j["thread-id"] = json!("01a21b31-88aa-71a3-b1f2-7b495bfdf2dc");
    })));
    assert!(notify.ignored.is_some(), "the Stop hook already said it");
    assert_eq!(f.outbound().len(), 1, "one agent finished per turn");
    // Without hooks, the turn's input comes from notify's input-messages (the last of them).
    let g = fixture(20);
    applied(g.run(captured(
        Agent::Codex,
        "notify-later-turn.json",
        "s2",
        |_| {},
    )));
    let s = g.engine.session("s2").unwrap().unwrap();
    assert_eq!(s.last_user_input.as_deref(), Some("please reply t4c0118d"));
}

#[test]
fn claude_idle_reminder_is_not_a_second_needs_you_unless_asked() {
    let f = fixture(20);
    applied(f.run(captured(Agent::Claude, "Stop.json", "s1", |_| {})));
    applied(f.run(captured(Agent::Claude, "Notification.json", "s1", |_| {})));
    let events: Vec<_> = f.outbound().iter().map(|m| m.event.clone()).collect();
    assert_eq!(events, vec![Some("agent_stop".to_string())]);
    let mut routes = (**f.door.routes.read().unwrap()).clone();
    routes.idle_reminders = true;
    *f.door.routes.write().unwrap() = Arc::new(routes);
    applied(f.run(captured(Agent::Claude, "Notification.json", "s1", |_| {})));
    assert_eq!(f.outbound().len(), 2, "idle_reminders = true relays it");
}

#[test]
fn gemini_answer_is_read_from_its_transcript_not_the_garbled_hook_text() {
    let f = fixture(20);
    let dir = tempfile::tempdir().unwrap();
    let transcript = dir.path().join("session.jsonl");
    std::fs::write(
        &transcript,
        [
            r#"{"id":"1","type":"user","content":[{"text":"please reply t18ff2df"}]}"#,
            r#"{"id":"2","type":"gemini","content":"echo: please reply t18ff2df"}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let path = transcript.to_str().unwrap().to_string();
    let after = captured(Agent::Gemini, "AfterAgent.json", "s1", |j| {
        j["transcript_path"] = json!(path)
    });
    assert_eq!(
        after.last_assistant_message(),
        Some("echo: please reply t18ff2df reply t18ff2df"),
        "the captured hook text is garbled"
    );
    applied(f.run(after));
    let body = f.outbound()[0].notice.clone().unwrap().body;
    assert_eq!(body.as_deref(), Some("echo: please reply t18ff2df"));
    let s = f.engine.session("s1").unwrap().unwrap();
    assert_eq!(
        s.last_assistant_message.as_deref(),
        Some("echo: please reply t18ff2df")
    );
}

#[test]
fn a_dialog_announced_twice_is_one_needs_you() {
    let f = fixture(20);
    applied(f.run(captured(
        Agent::Claude,
        "PermissionRequest.json",
        "s1",
        |_| {},
    )));
    let prompt = captured(Agent::Claude, "Notification.json", "s1", |j| {
        j["notification_type"] = json!("permission_prompt");
        j["message"] = json!("Claude needs your permission");
    });
    applied(f.run(prompt));
    let asked: Vec<_> = f
        .outbound()
        .iter()
        .map(|m| m.notice.clone().unwrap().question)
        .collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0]
        .as_deref()
        .unwrap()
        .starts_with("permission to use Bash: touch probe-p512802.txt"));
}

/// Issue 28, fault 11: a message waiting when its agent ended the session was expired
/// silently; its chat now hears it was dropped.
#[test]
fn the_chat_of_a_message_dropped_at_session_end_is_told() {
    let f = fixture(20);
    let mut routes = (**f.door.routes.read().unwrap()).clone();
    routes.replies = [("telegram:bot".to_string(), "tg".to_string())].into();
    *f.door.routes.write().unwrap() = Arc::new(routes);
    let waiting = InboundMessage {
        source_channel_id: Some("7".into()),
        source_message_id: Some("1".into()),
        ..InboundMessage::text("s1", "telegram:bot", "still there?")
    };
    let id = f.door.inbound.enqueue(&waiting.to_row()).unwrap().id;
    applied(f.run(captured(Agent::Claude, "SessionStart.json", "s1", |_| {})));
    applied(f.run(captured(Agent::Claude, "Stop.json", "s1", |j| {
        j["hook_event_name"] = json!("SessionEnd");
    })));
    assert_eq!(
        f.door.inbound.state_of(id).unwrap().unwrap().state,
        "expired"
    );
    let told: Vec<_> = f
        .outbound()
        .into_iter()
        .filter(|m| m.event.as_deref() == Some("delivery"))
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    let notice = told[0].notice.clone().unwrap();
    assert_eq!((told[0].channel.as_str(), told[0].to.as_str()), ("tg", "7"));
    assert_eq!(notice.headline, "your message was dropped");
    assert!(notice.body.unwrap().contains("the agent ended the session"));
}

/// Issue 41, item 13: Claude Code's auto mode (its default since 2.1.3xx) blocks the calls it
/// judges risky by itself, asking no one: no question reached the chat and nothing said a call
/// was blocked. Its `PermissionDenied` event now tells the chat what was blocked and why, and
/// the session keeps the permission mode its events say.
#[test]
fn a_call_claude_codes_auto_mode_blocked_is_told_to_the_chat_with_the_mode() {
    let f = fixture(20);
    let auto = |j: &mut Value| j["permission_mode"] = json!("auto");
    applied(f.run(captured(Agent::Claude, "UserPromptSubmit.json", "s1", auto)));
    let path = format!(
        "{}/../tests/fixtures/claude-code/PermissionDenied.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut denied: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    auto(&mut denied);
    let event = match hooks::receive(Agent::Claude, &denied.to_string(), Some("s1".into())) {
        hooks::Received::Event(e) => e,
        other => panic!("PermissionDenied is relayed: {other:?}"),
    };
    applied(f.run(event));
    let notice = f.outbound().last().unwrap().notice.clone().unwrap();
    assert_eq!(notice.headline, "blocked a tool call");
    let body = notice.body.unwrap();
    assert!(
        body.contains("Bash: curl -X POST https://deploy.example.test/release")
            && body.contains("Blocked by classifier")
            && body.contains("defaultMode"),
        "{body}"
    );
    assert_eq!(
        f.agent_state("s1"),
        Some(relayq_engine::AgentState::Working),
        "a blocked call is no dialog: the turn goes on"
    );
    let session = f.engine.session("s1").unwrap().unwrap();
    assert_eq!(session.permission_mode.as_deref(), Some("auto"));
}

/// Progress on the phone: the reaction a chat message should show follows what became of it,
/// in the transaction that records it (taken with the agent's prompt-submit event, done with
/// its turn's end), a late "taken" never undoes "done", each step of the turn is a note for the
/// session's chat, and a chat set to `off` records nothing.
#[test]
fn a_chat_messages_reaction_follows_its_turn_and_each_step_is_a_note_for_its_chat() {
    use relayq_engine::progress::{self, ProgressMode, ReactionState, Step};
    use relayq_engine::writes::Write;
    let f = fixture(20);
    f.answer_at_origin([("telegram:bot".to_string(), ProgressMode::Steps)].into());
    let inbound = &f.door.inbound;
    let message = |chat: &str, id: &str, text: &str| InboundMessage {
        source_channel_id: Some(chat.into()),
        source_message_id: Some(id.into()),
        ..InboundMessage::text("s1", "telegram:bot", text)
    };
    // Pasted, and taken by the agent.
    let paste = |m: &InboundMessage| -> i64 {
        let id = inbound
            .write(|tx| inbound::enqueue_in(inbound, tx, m))
            .unwrap()
            .id;
        let lease = inbound.lease_next("s1").unwrap().unwrap();
        f.engine
            .database()
            .write_at(T0, |tx| {
                assert!(inbound.mark_send_started_in(tx, &lease)?);
                inbound.submitted_in(tx, &lease, "submitted", T0 + 60_000)
            })
            .unwrap();
        id
    };
    let row = paste(&message("111", "41", "run the tests"));
    let taken = f.run(event(
        "s1",
        EventType::UserPromptSubmit,
        json!({"prompt": "run the tests"}),
    ));
    let effects = applied(taken);
    assert!(effects.reactions, "the reaction changed: shown at once");
    let note = effects.progress.expect("a step for the chat");
    assert_eq!(
        (note.channel.as_str(), note.to.as_str(), &note.step),
        ("tg", "111", &Step::TurnStarted)
    );
    let reaction = |row: i64| {
        progress::reaction(&f.engine.database().read().unwrap(), row)
            .unwrap()
            .map(|r| r.wanted)
    };
    assert_eq!(reaction(row), Some(ReactionState::Taken));

    let tool = f.run(event(
        "s1",
        EventType::ToolUse,
        json!({"tool_name": "Bash", "tool_input": {"command": "cargo test"}}),
    ));
    assert_eq!(
        applied(tool).progress.map(|n| n.step),
        Some(Step::Tool {
            name: "Bash".into(),
            on: Some("cargo test".into())
        })
    );
    let stop = f.run(event(
        "s1",
        EventType::AgentStop,
        json!({"last_assistant_message": "all pass"}),
    ));
    let effects = applied(stop);
    assert!(effects.reactions);
    assert_eq!(
        effects.progress.map(|n| n.step),
        Some(Step::TurnEnded { answered: true })
    );
    assert_eq!(reaction(row), Some(ReactionState::Done));
    // A "taken" that comes late does not undo "done".
    let db = f.engine.database();
    let place = progress::ReactionPlace {
        row_id: row,
        session: "s1",
        origin: "telegram:bot",
        chat: "111",
        message: "41",
    };
    let late = db
        .write_at(T0, |tx| {
            relayq_engine::storage::progress::want_in(tx, &place, ReactionState::Taken)
        })
        .unwrap();
    assert!(!late);
    assert_eq!(reaction(row), Some(ReactionState::Done));

    // Untried until the actors say it was shown.
    let untried = f.engine.untried_reactions(T0 + 1, 10).unwrap();
    assert_eq!(untried.len(), 1);
    assert_eq!(untried[0].message, "41");
    let tried = progress::writes::ReactionTried {
        row_id: row,
        state: ReactionState::Done,
        shown: true,
    };
    f.door.apply_now(tried).unwrap();
    assert!(f.engine.untried_reactions(T0 + 1, 10).unwrap().is_empty());
    let shown = progress::reaction(&db.read().unwrap(), row)
        .unwrap()
        .unwrap();
    assert_eq!(shown.shown, Some(ReactionState::Done));

    // `/progress off` in chat 222: nothing recorded there, no note for it.
    let off = progress::writes::SetChatProgress {
        origin: "telegram:bot".into(),
        chat: "222".into(),
        mode: ProgressMode::Off,
    };
    assert!(off.atomicity() == relayq_engine::Atomicity::OneStatement);
    f.door.apply_now(off).unwrap();
    let quiet = paste(&message("222", "42", "quietly"));
    let effects = applied(f.run(event(
        "s1",
        EventType::UserPromptSubmit,
        json!({"prompt": "quietly"}),
    )));
    assert_eq!(effects.confirmed, Some(quiet));
    assert!(!effects.reactions && effects.progress.is_none());
    assert_eq!(reaction(quiet), None);

    // Forgotten a day after their last change.
    let prune = progress::writes::PruneReactions;
    assert_eq!(f.door.apply_now(prune).unwrap(), 0, "kept for a day");
    f.clock.set(T0 + progress::writes::REACTIONS_KEPT_MS + 1);
    assert_eq!(f.door.apply_now(prune).unwrap(), 1);
    assert_eq!(reaction(row), None);
}
