//! The Telegram source against a local Bot API (`super::fake`) fed the fixtures'
//! updates: what becomes a row, what is refused, and how failures read.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use relayq_engine::inbound::attachments::FileKind;
use crate::pacing::{Pace, Pacer};
use crate::kit::api::telegram::Telegram;
use crate::kit::routing::ChatRouting;
use crate::kit::secret::TokenSetting;
use crate::sources::SourceKind;
use crate::sources::telegram::fake::FakeTelegram;

const TOKEN: &str = "123456:test-token";
const ALICE: i64 = 123456789;
const GROUP: i64 = -1001987654321;

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/telegram")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn config(fake: &FakeTelegram) -> Config {
    let mut config = Config {
        api_url: fake.url.clone(),
        poll_timeout: Duration::from_secs(1),
        ..Config::new(TOKEN, ALICE, ALICE, "alice-agent")
    };
    config.routing.session_template = Some("tg{chat}".into());
    config
}

/// `config` with its routing changed by `change`.
fn routed(mut config: Config, change: impl FnOnce(&mut ChatRouting<Telegram>)) -> Config {
    change(&mut config.routing);
    config
}

fn started(config: Config) -> TelegramSource {
    let mut source = TelegramSource::new(config).unwrap();
    source.named("bot");
    source
}

async fn fetch(source: &mut TelegramSource, offset: Option<&str>) -> Result<Batch, String> {
    source.fetch(offset.map(str::to_string)).await
}

#[actix_rt::test]
async fn fixture_updates_become_rows_with_their_chat_message_sender_and_file() {
    let fake = FakeTelegram::start(TOKEN);
    for update in fixture("get_updates_ok.json")["result"].as_array().unwrap() {
        fake.push_message(update["message"].clone());
    }
    let mut source = started(config(&fake));
    let batch = fetch(&mut source, None).await.unwrap();
    assert_eq!(batch.messages.len(), 3, "{batch:#?}");
    let [text, voice, document] = &batch.messages[..] else { unreachable!() };

    assert_eq!(text.session, "alice-agent", "the chat's session from `chats`");
    assert_eq!(text.origin, "telegram:bot");
    assert_eq!(text.content, "please run the tests again");
    assert_eq!(text.source_channel_id.as_deref(), Some("123456789"));
    assert_eq!(text.source_message_id.as_deref(), Some("4211"));
    assert_eq!(text.actor_id.as_deref(), Some("123456789"));
    assert_eq!(text.actor_name.as_deref(), Some("@alice_dev"));

    // Files are written down as they arrived, to be fetched by the node that delivers them.
    assert_eq!(voice.message_type, MessageType::Voice);
    let file_id = "AwACAgIAAxkBAAIQxGZfakeVoiceFileId0123456789abcdEF";
    let [heard] = &voice.attachments[..] else { panic!("{voice:?}") };
    assert_eq!((heard.kind, heard.handle.as_str()), (FileKind::Voice, file_id));
    assert!(heard.duration.is_some() && heard.skipped.is_none(), "{heard:?}");
    assert_eq!(voice.prompt, None, "made once the file is fetched");

    assert_eq!(document.session, "tg-1001987654321", "a group from the template");
    assert_eq!(document.message_type, MessageType::File);
    assert_eq!(document.content, "log from the failing CI run", "the caption");
    let [log] = &document.attachments[..] else { panic!("{document:?}") };
    assert_eq!(log.kind, FileKind::Document);
    assert_eq!(log.name.as_deref(), Some("build.log"));
    assert_eq!(log.mime.as_deref(), Some("text/plain"));

    assert_eq!(batch.offset, "700000003", "the last update_id + 1");
    // The next poll from that offset confirms them: Telegram forgets them, nothing comes twice.
    let next = fetch(&mut source, Some(&batch.offset)).await.unwrap();
    assert!(next.messages.is_empty());
    assert_eq!(next.offset, batch.offset, "no news keeps the offset");
}

#[actix_rt::test]
async fn a_message_from_someone_not_allowed_is_skipped_but_its_update_is_passed() {
    let fake = FakeTelegram::start(TOKEN);
    let stranger = 555;
    fake.push_text(stranger, stranger, "rm -rf ~");
    fake.push_text(GROUP, stranger, "hello from the group");
    fake.push_text(ALICE, ALICE, "/start");
    fake.push_text(ALICE, ALICE, "real work");
    let mut source = started(config(&fake));
    let batch = fetch(&mut source, None).await.unwrap();
    let texts: Vec<_> = batch.messages.iter().filter(|m| !m.unlisted).map(|m| m.content.as_str()).collect();
    assert_eq!(texts, ["real work"], "strangers and /start are not typed into a pane");
    // Strangers' messages go on marked: the write takes them only if pairing added them.
    let unlisted = batch.messages.iter().filter(|m| m.unlisted).count();
    assert_eq!(unlisted, 2);
    assert_eq!(batch.offset, "700000004", "the skipped updates are confirmed too");

    // A trusted group lets its members in.
    fake.push_text(GROUP, stranger, "hello again");
    let mut trusting = started(Config {
        allowed_chats: vec![GROUP],
        ..config(&fake)
    });
    let batch = fetch(&mut trusting, Some(&batch.offset)).await.unwrap();
    assert_eq!(batch.messages[0].content, "hello again");
    assert_eq!(batch.messages[0].session, format!("tg{GROUP}"));
    assert!(!batch.messages[0].unlisted, "a member of a trusted group writes");
}

/// A chat config.toml routes nowhere is no longer skipped: the sessions it started (`/new`)
/// decide in the write; with none, the message is kept expired and the chat told.
#[actix_rt::test]
async fn a_chat_that_feeds_no_static_session_is_routed_by_its_own_sessions_in_the_write() {
    let fake = FakeTelegram::start(TOKEN);
    fake.push_text(GROUP, ALICE, "which session?");
    let mut source = started(routed(config(&fake), |r| r.session_template = None));
    let batch = fetch(&mut source, None).await.unwrap();
    let m = &batch.messages[0];
    assert!(m.session.is_empty() && m.route_by_chat, "{m:?}");
    assert_eq!(batch.offset, "700000001");
}

#[actix_rt::test]
async fn forum_topics_are_kept_as_the_thread_and_each_kind_of_file_is_written_down() {
    let fake = FakeTelegram::start(TOKEN);
    let from = json!({"id": ALICE, "is_bot": false, "first_name": "Alice"});
    let chat = json!({"id": GROUP, "type": "supergroup", "is_forum": true});
    let message = |id: i64, extra: Value| {
        let mut m = json!({"message_id": id, "message_thread_id": 77, "is_topic_message": true,
            "from": from, "chat": chat, "date": 1767225600});
        m.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        m
    };
    let big = 25 * 1024 * 1024;
    for (id, extra) in [
        (9, json!({"document": {"file_id": "doc-1", "file_unique_id": "u1", "file_name": "../../.bashrc", "file_size": 7}})),
        (10, json!({"document": {"file_id": "doc-2", "file_unique_id": "u2", "file_name": "dump.bin", "file_size": big}})),
        (11, json!({"sticker": {"file_id": "st-1", "file_unique_id": "u3", "type": "regular", "width": 512, "height": 512, "is_animated": false, "is_video": false}})),
        (12, json!({"video_note": {"file_id": "vn-1", "file_unique_id": "u4", "length": 240, "duration": 5}})),
        (13, json!({"photo": [{"file_id": "small", "file_unique_id": "u5", "width": 90, "height": 90},
                              {"file_id": "large", "file_unique_id": "u6", "width": 1280, "height": 1280}],
                    "media_group_id": "album-1", "caption": "look"})),
        (14, json!({"new_chat_title": "renamed"})),
    ] {
        fake.push_message(message(id, extra));
    }
    let mut source = started(config(&fake));
    let batch = fetch(&mut source, None).await.unwrap();
    let m = &batch.messages[0];
    assert_eq!(m.source_thread_id.as_deref(), Some("77"));
    assert_eq!(m.actor_name.as_deref(), Some("Alice"), "no username: the first name");
    assert_eq!(m.attachments[0].name.as_deref(), Some("../../.bashrc"), "kept as sent; made safe when written");
    assert_eq!(m.attachments[0].message.as_deref(), Some("9"));

    let skipped: Vec<_> = batch.messages.iter().map(|m| m.attachments[0].skipped.clone()).collect();
    assert_eq!(skipped[1].as_deref(), Some("it is 25.0 MB, over the 20.0 MB a bot may download from Telegram"));
    assert_eq!(skipped[2].as_deref(), Some("relayq does not take stickers"));
    assert_eq!(batch.messages[2].attachments[0].kind, FileKind::Other);
    assert_eq!(batch.messages[3].attachments[0].kind, FileKind::VideoNote);
    let photo = &batch.messages[4];
    assert_eq!(photo.attachments[0].handle, "large", "the largest size");
    assert_eq!((photo.album.as_deref(), photo.content.as_str()), (Some("album-1"), "look"));
    assert_eq!(batch.messages.len(), 5, "a service message has nothing for an agent");
}

#[actix_rt::test]
async fn conflict_and_a_bad_token_fail_the_fetch_with_what_to_do() {
    let fake = FakeTelegram::start(TOKEN);
    fake.fail_polls(409, fixture("error_conflict.json"), 1);
    let mut good = started(config(&fake));
    let error = fetch(&mut good, None).await.unwrap_err();
    assert!(error.contains("409") && error.contains("another program is reading this bot's updates"), "{error}");

    let mut bad = started(Config {
        token: TokenSetting::inline("999:wrong"),
        ..config(&fake)
    });
    let error = fetch(&mut bad, None).await.unwrap_err();
    assert!(error.contains("check token_env"), "{error}");
    assert!(!error.contains("999:wrong"), "the token is never shown: {error}");
}

#[actix_rt::test]
async fn typing_is_shown_where_progress_is_off_within_the_reply_channels_budget_and_dropped_when_it_is_short() {
    let fake = FakeTelegram::start(TOKEN);
    let mut with_progress = config(&fake);
    let mut source = started(with_progress.clone());
    source.committed(vec![InboundMessage {
        source_channel_id: Some("1".into()),
        ..InboundMessage::text("s", "telegram:bot", "hi")
    }], None);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(fake.actions().is_empty(), "where progress shows, 👀 says it: no typing");
    with_progress.routing.progress = relayq_engine::progress::ProgressMode::Off;
    let mut source = started(with_progress);
    let budget = Arc::new(Pacer::new(&Pace {
        per_destination: Some("1/s".parse().unwrap()),
        ..Pace::default()
    })
    .unwrap());
    let message = |chat: &str| InboundMessage {
        source_channel_id: Some(chat.into()),
        ..InboundMessage::text("s", "telegram:bot", "hi")
    };
    source.committed(vec![message("1"), message("1"), message("2")], Some(budget.clone()));
    crate::testing::wait_for("two typing calls", || fake.actions().len() == 2).await;
    let chats: BTreeSet<String> = fake.actions().iter().map(|a| a["chat_id"].to_string()).collect();
    assert_eq!(chats, ["1".to_string(), "2".to_string()].into(), "one per chat");
    assert_eq!(fake.actions()[0]["action"], "typing");

    // Chat 1's budget is spent: an answer may be due, so no typing call takes it.
    source.committed(vec![message("1")], Some(budget));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(fake.actions().len(), 2);
}

#[test]
fn settings_that_would_let_anyone_in_or_reach_no_session_are_refused() {
    let base = Config::new(TOKEN, ALICE, ALICE, "a");
    let open = routed(base.clone(), |r| r.allowed_users = vec![]);
    let e = open.check().unwrap_err();
    assert_eq!(e.key, "allowed_users");
    assert!(e.message.contains("can run commands"), "{}", e.message);

    let nowhere = routed(base.clone(), |r| r.chats = Default::default());
    assert_eq!(nowhere.check().unwrap_err().key, "chats");
    let one_for_all = routed(base.clone(), |r| r.session_template = Some("shared".into()));
    assert_eq!(one_for_all.check().unwrap_err().key, "session_template");
    let busy = Config {
        poll_timeout: Duration::ZERO,
        ..base.clone()
    };
    assert_eq!(busy.check().unwrap_err().key, "poll_timeout");
    let not_a_chat = routed(base.clone(), |r| {
        r.chats = [("@alice".to_string(), "a".to_string())].into()
    });
    assert_eq!(not_a_chat.check().unwrap_err().key, "chats.@alice");
    // Files: the bot limit, an album's quiet period, and the old download folder.
    let over = Config {
        max_download_bytes: 21 * 1024 * 1024,
        ..base.clone()
    };
    let e = over.check().unwrap_err();
    assert_eq!(e.key, "max_download_bytes");
    assert!(e.message.contains("give 1 to 20971520"), "{}", e.message);
    let slow_album = Config {
        album_quiet: Duration::from_secs(11),
        ..base.clone()
    };
    assert_eq!(slow_album.check().unwrap_err().key, "album_quiet");
    let old = Config {
        download_dir: Some("files".into()),
        ..base.clone()
    };
    let e = old.check().unwrap_err();
    assert_eq!(e.key, "download_dir");
    assert!(e.message.contains("[files] inbox"), "{}", e.message);
    base.check().unwrap();

    let replies = base.replies("mybot").unwrap();
    assert_eq!(replies.origin, "telegram:mybot");
    assert_eq!(replies.channel, "mybot", "answered by the channel of its name");
}

/// Issue 27, item 1: an answer over the kit's 64 KiB was cut, could not be parsed, and the
/// source polled the same offset for ever.
#[actix_rt::test]
async fn a_get_updates_answer_over_64_kib_is_read_whole() {
    let fake = FakeTelegram::start(TOKEN);
    let long: String = "漢".repeat(4000);
    for n in 0..20 {
        fake.push_text(ALICE, ALICE, &format!("{n}{long}"));
    }
    let mut source = started(config(&fake));
    let batch = fetch(&mut source, None).await.expect("a 240 KB answer is read");
    assert_eq!(batch.messages.len(), 20);
    assert!(batch.messages[19].content.starts_with("19漢"));
    assert_eq!(batch.offset, "700000020");
}

/// Issue 27, item 1: an answer too large even for one update at a time is skipped past, never
/// polled for ever; the updates behind it are read.
#[actix_rt::test]
async fn an_update_too_large_to_read_is_skipped_and_the_source_reads_on() {
    let fake = FakeTelegram::start(TOKEN);
    let huge = fake.push_text(ALICE, ALICE, &"x".repeat(7 * 1024 * 1024));
    fake.push_text(ALICE, ALICE, "after the huge one");
    let mut source = started(config(&fake));
    let mut offset = None;
    let mut read = Vec::new();
    for _ in 0..12 {
        let batch = fetch(&mut source, offset.as_deref()).await.expect("never a failure");
        read.extend(batch.messages.into_iter().map(|m| m.content));
        offset = Some(batch.offset);
        if !read.is_empty() {
            break;
        }
    }
    assert_eq!(read, ["after the huge one"]);
    assert!(offset.unwrap().parse::<i64>().unwrap() > huge, "past the huge update");
    let limits = fake.poll_limits();
    assert_eq!(limits[..2], [100, 50], "asks for fewer after a cut answer: {limits:?}");
    assert!(limits.contains(&1), "{limits:?}");
}

/// A tap on an approval's button (the fixture's `callback_query`) is an answer, not a row: its
/// approval and decision from the button's data, who tapped, from which chat; the tap is then
/// answered once (`answerCallbackQuery`) with the line for the person.
#[actix_rt::test]
async fn a_tapped_approval_button_is_an_answer_and_the_tap_is_answered() {
    let fake = FakeTelegram::start(TOKEN);
    fake.push_update(fixture("update_callback_query.json"));
    let mut source = started(config(&fake));
    let batch = fetch(&mut source, None).await.unwrap();
    assert!(batch.messages.is_empty(), "{batch:#?}");
    let [answer] = &batch.answers[..] else {
        panic!("{batch:#?}")
    };
    assert_eq!(answer.target, approvals::Target::Id("k3x9pq".into()));
    assert_eq!(
        answer.decision,
        approvals::Decision::Allow(approvals::Scope::Once)
    );
    assert_eq!(answer.who.name, "Alice");
    assert_eq!(
        answer.who.chat,
        Some(("telegram:bot".into(), ALICE.to_string()))
    );
    assert_eq!(answer.role, crate::kit::routing::Role::Approver);
    assert_eq!(answer.callback.as_deref(), Some("4382bfdwdsb323b2d9"));
    source.acknowledge(vec![relayq_engine::approvals::Answered {
        answer: answer.clone(),
        reply: "Allowed by Alice at 00:03 UTC".into(),
        took_effect: true,
    }]);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while fake.tap_answers().is_empty() && std::time::Instant::now() < deadline {
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fake.tap_answers(), ["Allowed by Alice at 00:03 UTC"]);
}
