//! Files both ways, from outside: a chat's photos, documents and voice notes reach the agent as
//! files in its project it can open (fetched by the node that delivers them, with retries), and
//! what relayq does not attach is a line saying why, never silence.

use std::time::Duration;

use relayq_actors::files::fake_transcriber::{FakeTranscriber, Hears};
use relayq_actors::sources::telegram::fake::FakeTelegram;
use serde_json::{json, Value};

use crate::agents::{agent_config, FakeAgent};
use crate::common::*;

const TOKEN: &str = "123:files";

/// A Telegram chat talking to a fake Claude Code in tmux, its project the app's directory.
struct Chat {
    fake: FakeTelegram,
    app: App,
    agent: FakeAgent,
    daemon: Option<Daemon>,
}

impl Chat {
    fn start(name: &str) -> Chat {
        Chat::start_with(name, &[], |config| config)
    }

    /// [`Chat::start`] with `more` added to the config, the daemon's environment `env`.
    fn start_with(name: &str, env: &[(&str, &str)], more: impl FnOnce(Config) -> Config) -> Chat {
        let fake = FakeTelegram::start(TOKEN);
        let tmux = Tmux::new(name);
        let config = agent_config(&tmux, &[]).telegram_source(
            &fake.url,
            &format!("token = {TOKEN:?}"),
            &[ALICE],
            &[(ALICE, "agent")],
            &[],
        );
        let app = App::new(more(config));
        let agent = FakeAgent::start(&app, tmux, "claude", "agent", &[]);
        let daemon = Some(app.serve_with_env(env));
        // Its files go where its hooks say it works, once they said it.
        wait_until(
            "the agent's directory known",
            Duration::from_secs(20),
            || {
                let listed: Value =
                    serde_json::from_str(&app.ok(&["session", "list", "--json"])).unwrap();
                listed
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|s| s["cwd"].is_string())
            },
        );
        Chat {
            fake,
            app,
            agent,
            daemon,
        }
    }

    /// The prompts the agent's turns began with, in order.
    fn prompts(&self) -> Vec<String> {
        self.agent.entries("turn_start")
    }

    fn wait_prompts(&self, n: usize) -> Vec<String> {
        self.agent
            .wait_log(&format!("{n} prompts"), |_| self.prompts().len() >= n);
        self.prompts()
    }

    /// What Alice's chat was sent, as text.
    fn said(&self) -> Vec<String> {
        self.fake.texts_to(ALICE)
    }
}

/// A photo as Telegram sends it: its sizes, the largest last.
fn photo(id: &str) -> Value {
    json!([{"file_id": format!("{id}-small"), "file_unique_id": format!("{id}s"), "width": 90, "height": 90},
           {"file_id": id, "file_unique_id": id, "width": 1280, "height": 960}])
}

/// The path a prompt's line gives for its `n`th file.
fn path_in(prompt: &str, name: &str) -> std::path::PathBuf {
    let line = prompt
        .lines()
        .find(|l| l.contains(name))
        .unwrap_or_else(|| panic!("no line names {name}: {prompt}"));
    let path = line.rsplit_once(": ").unwrap().1.trim_end_matches(']');
    path.into()
}

#[test]
fn a_photo_reaches_the_agent_as_a_file_in_its_project_with_its_caption() {
    let chat = Chat::start("files-photo");
    let jpeg = [&[0xFF, 0xD8, 0xFF, 0xE0][..], &[7u8; 4000]].concat();
    chat.fake.add_file("shot", "photos/file_1.jpg", &jpeg);
    chat.fake.push_media(
        ALICE,
        json!({"photo": photo("shot"), "caption": "what is wrong here?"}),
    );
    let prompts = chat.wait_prompts(1);
    let prompt = &prompts[0];
    assert!(
        prompt.starts_with("what is wrong here?\n[photo (4 KB): "),
        "{prompt}"
    );
    let path = path_in(prompt, "photo");
    assert!(
        path.starts_with(chat.app.dir.path().join(".relayq/inbox")),
        "in the agent's project: {}",
        path.display()
    );
    assert_eq!(std::fs::read(&path).unwrap(), jpeg, "the whole file");
    chat.daemon.unwrap().stop();
}

#[test]
fn a_file_relayq_cannot_fetch_or_take_is_a_line_for_the_agent_and_the_chat_is_told() {
    let chat = Chat::start("files-refused");
    let big = 25 * 1024 * 1024;
    chat.fake.push_media(
        ALICE,
        json!({"document": {"file_id": "dump", "file_unique_id": "d1", "file_name": "dump.bin", "file_size": big}}),
    );
    chat.fake.push_media(
        ALICE,
        json!({"sticker": {"file_id": "st", "file_unique_id": "s1", "type": "regular", "width": 512, "height": 512, "is_animated": false, "is_video": false}}),
    );
    // getFile does not know this one: refused, not tried again and again.
    chat.fake.push_media(
        ALICE,
        json!({"document": {"file_id": "gone", "file_unique_id": "g1", "file_name": "notes.txt", "file_size": 10}, "caption": "see notes"}),
    );
    let prompts = chat.wait_prompts(3);
    assert_eq!(
        prompts[0],
        "[file dump.bin (25.0 MB), not attached: it is 25.0 MB, over the 20.0 MB a bot may download from Telegram]"
    );
    assert_eq!(
        prompts[1],
        "[sticker, not attached: relayq does not take stickers]"
    );
    assert!(
        prompts[2].starts_with("see notes\n[file notes.txt (10 B), not attached: getFile: Telegram 400: Bad Request: invalid file_id"),
        "{}",
        prompts[2]
    );
    wait_until("the chat is told of each", Duration::from_secs(20), || {
        chat.said()
            .iter()
            .filter(|t| t.contains("not everything you sent reached the agent"))
            .count()
            == 3
    });
    let told = chat.said().join("\n");
    assert!(
        told.contains("dump.bin (25.0 MB): not attached, it is 25.0 MB"),
        "{told}"
    );
    chat.daemon.unwrap().stop();
}

#[test]
fn an_album_of_ten_photos_is_one_prompt_with_its_files_in_the_albums_order() {
    let chat = Chat::start("files-album");
    let mut sent = Vec::new();
    for n in 1..=10u8 {
        let id = format!("p{n}");
        let bytes = [&[0xFF, 0xD8, 0xFF, 0xE0][..], &vec![n; 1000 * n as usize]].concat();
        chat.fake
            .add_file(&id, &format!("photos/file_{n}.jpg"), &bytes);
        let mut media = json!({"photo": photo(&id), "media_group_id": "13579"});
        if n == 1 {
            media["caption"] = "the ten screens".into();
        }
        chat.fake.push_media(ALICE, media);
        sent.push(bytes);
        // Half now, half in the next poll: the album still waits for the rest.
        if n == 5 {
            std::thread::sleep(Duration::from_millis(400));
        }
    }
    chat.fake.push_text(ALICE, ALICE, "and this is after");
    let prompts = chat.wait_prompts(2);
    let album = &prompts[0];
    assert!(album.starts_with("the ten screens\n"), "{album}");
    let paths: Vec<std::path::PathBuf> = album
        .lines()
        .skip(1)
        .map(|l| l.rsplit_once(": ").unwrap().1.trim_end_matches(']').into())
        .collect();
    assert_eq!(paths.len(), 10, "{album}");
    for (n, (path, bytes)) in paths.iter().zip(&sent).enumerate() {
        assert_eq!(
            &std::fs::read(path).unwrap(),
            bytes,
            "photo {} in its place",
            n + 1
        );
    }
    assert_eq!(prompts[1], "and this is after", "in order behind the album");
    assert_eq!(chat.prompts().len(), 2, "one prompt for the album");
    chat.daemon.unwrap().stop();
}

/// A voice note as Telegram sends it, its recording served by the fake.
fn voice(chat: &Chat, id: &str, seconds: u64) -> Vec<u8> {
    let ogg = [&b"OggS"[..], &vec![1u8; 3000]].concat();
    chat.fake.add_file(id, &format!("voice/{id}.oga"), &ogg);
    chat.fake.push_media(
        ALICE,
        json!({"voice": {"file_id": id, "file_unique_id": id, "duration": seconds, "mime_type": "audio/ogg", "file_size": ogg.len()}}),
    );
    ogg
}

#[test]
fn a_voice_note_reaches_the_agent_as_its_words_and_the_chat_sees_what_was_heard() {
    let whisper = FakeTranscriber::start("please run the tests again");
    let url = whisper.url.clone();
    let env = [("WHISPER_TOKEN", "whisper-secret")];
    let chat = Chat::start_with("files-voice", &env, |config| {
        config.table(
            "transcription",
            &[
                format!("url = {url:?}"),
                "language = \"en\"".into(),
                "token_env = \"WHISPER_TOKEN\"".into(),
            ],
        )
    });
    let sent = voice(&chat, "v1", 67);
    let prompts = chat.wait_prompts(1);
    assert_eq!(prompts[0], "[voice note, 1:07] please run the tests again");
    let asked = whisper.asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].model.as_deref(), Some("whisper-1"));
    assert_eq!(asked[0].language.as_deref(), Some("en"));
    assert_eq!(asked[0].bytes, sent.len(), "the whole recording");
    assert_eq!(
        asked[0].authorization.as_deref(),
        Some("Bearer whisper-secret")
    );
    wait_until(
        "the chat sees what was heard",
        Duration::from_secs(20),
        || {
            chat.said().iter().any(|t| {
                t.contains("the agent got your voice note as")
                    && t.contains("please run the tests again")
            })
        },
    );
    chat.daemon.unwrap().stop();
}

#[test]
fn with_the_transcription_server_down_or_hanging_the_agent_gets_the_recording_and_the_chat_is_told_why(
) {
    let whisper = FakeTranscriber::start("unused");
    whisper.set(Hears::Refuses(503));
    let url = whisper.url.clone();
    let chat = Chat::start_with("files-voice-down", &[], |config| {
        config.table(
            "transcription",
            &[format!("url = {url:?}"), "timeout = \"2s\"".into()],
        )
    });
    let sent = voice(&chat, "v1", 5);
    let prompts = chat.wait_prompts(1);
    assert!(
        prompts[0].starts_with(
            "[voice note, 0:05, not transcribed (the transcription server refused: HTTP 503"
        ),
        "{}",
        prompts[0]
    );
    let path = path_in(&prompts[0], "voice note");
    assert_eq!(std::fs::read(&path).unwrap(), sent, "the recording, whole");

    whisper.set(Hears::Hangs(Duration::from_secs(5)));
    voice(&chat, "v2", 6);
    let prompts = chat.wait_prompts(2);
    assert!(
        prompts[1].starts_with(
            "[voice note, 0:06, not transcribed (the transcription server did not answer"
        ),
        "{}",
        prompts[1]
    );
    wait_until("the chat is told of both", Duration::from_secs(20), || {
        chat.said()
            .iter()
            .filter(|t| t.contains("not transcribed") && t.contains("the agent has the recording"))
            .count()
            == 2
    });
    chat.daemon.unwrap().stop();
}

/// A file of `size` bytes whose first bytes are a PNG's (`png`) or not, at `path`.
fn write_file(path: &std::path::Path, size: usize, png: bool) -> String {
    let mut bytes = vec![0u8; size];
    if png {
        bytes[..16].copy_from_slice(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR");
    } else {
        bytes[..4].copy_from_slice(b"\x7fBIN");
    }
    for (i, b) in bytes.iter_mut().enumerate().skip(16).step_by(4093) {
        *b = (i % 251) as u8;
    }
    std::fs::write(path, &bytes).unwrap();
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn relayq_send_sends_files_as_photos_or_documents_within_telegrams_limits_and_refuses_the_rest() {
    let chat = Chat::start("files-send");
    // The session's chat: where its answers go.
    chat.fake.push_text(ALICE, ALICE, "make me a plot");
    chat.wait_prompts(1);
    let dir = chat.app.dir.path();
    let mb = 1024 * 1024;
    let small = write_file(&dir.join("plot.png"), 5 * mb, true);
    let large = write_file(&dir.join("big.png"), 12 * mb, true);
    let most = write_file(&dir.join("data.bin"), 49 * mb, false);
    write_file(&dir.join("too-big.bin"), 51 * mb, false);
    std::fs::write(dir.join(".env"), "TOKEN=secret").unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let outside = elsewhere.path().join("notes.txt");
    std::fs::write(&outside, "not the project's").unwrap();

    // From inside the agent's pane: the session is found as its hooks find it.
    let argv = chat
        .app
        .argv(&["send", "plot.png", "--caption", "the plot"]);
    let line: Vec<String> = argv.iter().map(|w| shell_word(w)).collect();
    let script = format!(
        "cd {}; {} > sent.out 2>&1; echo $? > sent.rc",
        shell_word(&dir.display().to_string()),
        line.join(" ")
    );
    chat.agent
        .tmux
        .run(&["split-window", "-d", "-t", "agent", &script]);
    wait_until("relayq send in the pane", Duration::from_secs(20), || {
        dir.join("sent.rc").exists()
    });
    let rc = std::fs::read_to_string(dir.join("sent.rc")).unwrap();
    let out = std::fs::read_to_string(dir.join("sent.out")).unwrap();
    assert_eq!(rc.trim(), "0", "{out}");

    for name in ["big.png", "data.bin"] {
        chat.app.ok(&["send", "--session", "agent", name]);
    }
    let refused = chat.app.run(&[
        "send",
        "--session",
        "agent",
        "too-big.bin",
        ".env",
        outside.to_str().unwrap(),
    ]);
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("too-big.bin is 51.0 MB, over Telegram's 50 MB limit"),
        "{said}"
    );
    assert!(said.contains(".env matches the deny list (.env)"), "{said}");
    assert!(
        said.contains("is outside the session's directory"),
        "{said}"
    );

    let sent = chat.fake.wait_files(3, Duration::from_secs(60));
    let got: Vec<(&str, &str, usize, &str)> = sent
        .iter()
        .map(|f| {
            (
                f.method.as_str(),
                f.filename.as_str(),
                f.size,
                f.sha256.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("sendPhoto", "plot.png", 5 * mb, small.as_str()),
            ("sendDocument", "big.png", 12 * mb, large.as_str()),
            ("sendDocument", "data.bin", 49 * mb, most.as_str()),
        ]
    );
    assert_eq!(sent[0].caption.as_deref(), Some("the plot"));
    assert_eq!(sent[0].chat_id, ALICE.to_string());
    // A photo Telegram cannot show (its sides) goes again as a document, in the same send.
    chat.fake.refuse_photos(1);
    let odd = write_file(&dir.join("odd.png"), 1024 * 1024, true);
    chat.app.ok(&["send", "--session", "agent", "odd.png"]);
    let sent = chat.fake.wait_files(4, Duration::from_secs(30));
    assert_eq!(
        (sent[3].method.as_str(), sent[3].sha256.as_str()),
        ("sendDocument", odd.as_str())
    );
    wait_until(
        "the chat is told what was refused",
        Duration::from_secs(20),
        || {
            chat.said().iter().any(|t| {
                t.contains("tried to send files relayq did not send")
                    && t.contains("too-big.bin (51.0 MB): over Telegram's 50 MB limit")
                    && t.contains(".env: on the deny list")
                    && t.contains("notes.txt: outside the session's directory")
            })
        },
    );
    chat.daemon.unwrap().stop();
}

/// Slack: a message's `files` reach the agent as files in its project (fetched with the bot
/// token from Slack's private URL), and `relayq send` uploads one into the conversation
/// (`files.getUploadURLExternal`, the bytes, `files.completeUploadExternal`).
#[test]
fn on_slack_a_shared_file_reaches_the_agent_and_relayq_send_uploads_one_back() {
    use relayq_actors::sources::slack::fake_web::FakeSlackWeb;
    const SECRET: &str = "slack-files-secret";
    let slack = FakeSlackWeb::start();
    let port = crate::common::api::free_port();
    let tmux = Tmux::new("files-slack");
    let config = agent_config(&tmux, &[]).http_on(port).table(
        "sources.team",
        &[
            "kind = \"slack\"".to_string(),
            "signing_secret_env = \"SLACK_SIGNING_SECRET\"".into(),
            "token = \"xoxb-test-token\"".into(),
            format!("api_url = {:?}", slack.url),
            "allowed_users = [\"U0ALICE\"]".into(),
            "session_template = \"slack-{channel}\"".into(),
        ],
    );
    let app = App::new(config);
    let agent = FakeAgent::start(&app, tmux, "claude", "slack-D0ALICE", &[]);
    let daemon = app.serve_with_env(&[("SLACK_SIGNING_SECRET", SECRET)]);
    let log = b"error: the build failed at step 3\n".repeat(100);
    let url = slack.add_file("build.log", &log);
    let event = json!({"type": "message", "subtype": "file_share", "channel": "D0ALICE",
        "user": "U0ALICE", "text": "why did this fail?", "ts": "1767225000.000100", "channel_type": "im",
        "files": [{"id": "F0LOG", "name": "build.log", "mimetype": "text/plain", "filetype": "text",
                   "size": log.len(), "url_private_download": url, "mode": "hosted"},
                  {"id": "F0GONE", "name": "old.zip", "mimetype": "application/zip", "size": 10,
                   "mode": "tombstone"}]});
    let callback = json!({"type": "event_callback", "team_id": "T0TEAM", "event_id": "Ev0001", "event": event});
    let ingress = format!("http://127.0.0.1:{port}/v1/ingress/team");
    let posted = slack_post(&ingress, SECRET, callback.to_string(), "application/json");
    assert_eq!(posted.status(), 200);
    agent.wait_log("the prompt", |_| !agent.entries("turn_start").is_empty());
    let prompt = &agent.entries("turn_start")[0];
    assert!(
        prompt.starts_with("why did this fail?\n[file build.log (4 KB): "),
        "{prompt}"
    );
    assert!(
        prompt
            .ends_with("[file old.zip (10 B), not attached: Slack does not serve it (tombstone)]"),
        "{prompt}"
    );
    assert_eq!(std::fs::read(path_in(prompt, "build.log")).unwrap(), log);

    let report = app.path("report.pdf");
    let sha = write_file(&report, 300_000, false);
    app.ok(&[
        "send",
        "--session",
        "slack-D0ALICE",
        "report.pdf",
        "--caption",
        "the report",
    ]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while slack.files_shared().is_empty() {
        let calls: Vec<String> = slack
            .calls()
            .iter()
            .map(|c| format!("{} {}", c.method, c.body))
            .collect();
        assert!(
            std::time::Instant::now() < deadline,
            "the file is not shared; Slack was called: {calls:#?}\n{}",
            app.ok(&["status"])
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let shared = &slack.files_shared()[0];
    assert_eq!(
        (
            shared.filename.as_str(),
            shared.size,
            shared.sha256.as_str(),
            shared.channel.as_str()
        ),
        ("report.pdf", 300_000, sha.as_str(), "D0ALICE")
    );
    assert_eq!(shared.comment.as_deref(), Some("the report"));
    daemon.stop();
}

/// `kill -9` while a file is being fetched: after the restart it is fetched again and the
/// message pasted once, with the whole file; nothing half-written is left or pasted.
#[test]
fn a_download_cut_by_kill_9_is_done_again_and_the_message_pasted_once() {
    let mut chat = Chat::start("files-kill-download");
    let bytes = [&b"%PDF-1.7\n"[..], &vec![5u8; 300_000]].concat();
    chat.fake.add_file("doc", "documents/file_9.pdf", &bytes);
    chat.fake.hold_transfers(1, Duration::from_secs(3));
    chat.fake.push_media(
        ALICE,
        json!({"document": {"file_id": "doc", "file_unique_id": "d", "file_name": "spec.pdf", "file_size": bytes.len()}}),
    );
    // The row is taken and its file asked for, the answer held: killed then.
    wait_until("the download under way", Duration::from_secs(20), || {
        chat.fake.transfers_held()
    });
    let mut daemon = chat.daemon.take().unwrap();
    daemon.signal("KILL");
    assert!(
        chat.prompts().is_empty(),
        "nothing pasted before the file was whole"
    );
    chat.daemon = Some(chat.app.serve());
    let prompts = chat.wait_prompts(1);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(chat.prompts().len(), 1, "pasted once: {:?}", chat.prompts());
    let path = path_in(&prompts[0], "spec.pdf");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "the whole file");
    let left: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["01-spec.pdf"], "no partial file left beside it");
    chat.daemon.take().unwrap().stop();
}

/// `kill -9` while a file is being sent: after the restart it is sent again, marked as a
/// possible repeat (Telegram may have it from the cut send), and not a third time.
#[test]
fn an_upload_cut_by_kill_9_is_sent_again_marked_as_a_possible_repeat() {
    let mut chat = Chat::start("files-kill-upload");
    chat.fake.push_text(ALICE, ALICE, "send me the log");
    chat.wait_prompts(1);
    let sha = write_file(&chat.app.path("run.log"), 2 * 1024 * 1024, false);
    chat.fake.hold_transfers(1, Duration::from_secs(3));
    chat.app.ok(&[
        "send",
        "--session",
        "agent",
        "run.log",
        "--caption",
        "the log",
    ]);
    wait_until("the upload under way", Duration::from_secs(20), || {
        chat.fake.transfers_held()
    });
    let mut daemon = chat.daemon.take().unwrap();
    daemon.signal("KILL");
    chat.daemon = Some(chat.app.serve());
    // The held send finishes at the fake after the kill; the new daemon sends it again.
    let sent = chat.fake.wait_files(2, Duration::from_secs(30));
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent
        .iter()
        .all(|f| f.sha256 == sha && f.filename == "run.log"));
    let captions: Vec<_> = sent
        .iter()
        .map(|f| f.caption.clone().unwrap_or_default())
        .collect();
    assert!(
        captions
            .iter()
            .any(|c| c.starts_with(relayq_actors::files::REPEAT_MARK) && c.ends_with("the log")),
        "{captions:?}"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(chat.fake.files_sent().len(), 2, "not a third time");
    chat.daemon.take().unwrap().stop();
}

/// The outbox: a file the agent puts in `.relayq/outbox/<session>/` is sent once complete (a
/// `.partial` name is being written; renamed, it is taken), once, even across a restart; a file
/// on the deny list is refused and the chat told.
#[test]
fn a_file_put_in_the_sessions_outbox_is_sent_once_complete_and_once_only() {
    let mut chat = Chat::start("files-outbox");
    chat.fake
        .push_text(ALICE, ALICE, "put the report in your outbox");
    chat.wait_prompts(1);
    let outbox = chat.app.dir.path().join(".relayq/outbox/agent");
    std::fs::create_dir_all(&outbox).unwrap();
    let sha = write_file(&outbox.join("report.txt.partial"), 200_000, false);
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        chat.fake.files_sent().is_empty(),
        "a .partial file is being written"
    );
    std::fs::rename(outbox.join("report.txt.partial"), outbox.join("report.txt")).unwrap();
    let sent = chat.fake.wait_files(1, Duration::from_secs(20));
    assert_eq!(
        (
            sent[0].method.as_str(),
            sent[0].filename.as_str(),
            sent[0].sha256.as_str()
        ),
        ("sendDocument", "report.txt", sha.as_str())
    );
    assert!(!outbox.join("report.txt").exists(), "taken from the outbox");

    std::fs::write(outbox.join("id_rsa"), "-----BEGIN OPENSSH PRIVATE KEY-----").unwrap();
    wait_until(
        "the chat told of the refused file",
        Duration::from_secs(20),
        || {
            chat.said()
                .iter()
                .any(|t| t.contains("id_rsa: on the deny list (id_*)"))
        },
    );

    chat.daemon.take().unwrap().stop();
    chat.daemon = Some(chat.app.serve());
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        chat.fake.files_sent().len(),
        1,
        "not sent again after a restart"
    );
    chat.daemon.take().unwrap().stop();
}
