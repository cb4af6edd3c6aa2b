//! The settings file read, checked and composed: what each key accepts and how a problem is said.

use std::time::Duration;

use super::*;
use relayq_engine::QueuePolicy;

#[test]
fn the_repo_config_toml_parses_and_equals_the_built_in_defaults() {
    let text = include_str!("../../config.toml");
    let parsed = Config::parse(text, "config.toml").unwrap();
    let mut expected = Config::default();
    // the example also shows one channel of each other kind, unused by default
    expected.channels.extend(
        parsed
            .channels
            .clone()
            .into_iter()
            .filter(|(k, _)| k != DEFAULT_CHANNEL),
    );
    assert_eq!(parsed, expected);
    // The example tmux channel shows the tmux defaults.
    let tmux_defaults = Config::parse("[channels.p]\nkind = \"tmux\"\n", "t").unwrap();
    assert_eq!(parsed.channels["agent-pane"], tmux_defaults.channels["p"]);
    assert!(parsed
        .channels
        .values()
        .any(|c| matches!(c, ChannelConfig::Exec(_))));
    assert!(parsed
        .channels
        .values()
        .any(|c| matches!(c, ChannelConfig::Tmux(_))));
}

#[test]
fn an_empty_file_is_the_defaults() {
    assert_eq!(Config::parse("", "c.toml").unwrap(), Config::default());
}

fn error(text: &str) -> String {
    Config::parse(text, "c.toml").unwrap_err().to_string()
}

/// Each file of `cases` is refused with a message that starts with its words.
fn refused_with(cases: &[(&str, &str)]) {
    for (text, start) in cases {
        let e = error(text);
        assert!(e.starts_with(start), "{text:?}: {e}");
    }
}

#[test]
fn errors_name_the_file_the_key_and_what_is_expected() {
    refused_with(&[(
        "[database]\nsynchronous = \"fast\"\n",
        "c.toml: database.synchronous: unknown variant `fast`, expected `normal` or `full`",
    )]);
    let e = error("[channels.log]\nkind = \"file\"\npth = \"x\"\n");
    assert!(
        e.contains("c.toml: channels.log") && e.contains("unknown field `pth`"),
        "{e}"
    );
    let e = error("[channels.log]\nkind = \"carrier-pigeon\"\n");
    assert!(
        e.contains("channels.log") && e.contains("unknown variant `carrier-pigeon`"),
        "{e}"
    );
    refused_with(&[
        (
            "[daemon]\nshutdown_grace = \"soon\"\n",
            "c.toml: daemon.shutdown_grace:",
        ),
        (
            "[queues.inbound]\nbackoff = []\nlease_timeout = \"5m\"\nretention = \"7d\"\n",
            "c.toml: queues.inbound.backoff: must list at least one delay",
        ),
        (
            "[sessions]\ndefault_channel = \"nope\"\n",
            "c.toml: sessions.default_channel: names channel 'nope'",
        ),
        (
            "[sessions.channels]\nalpha = \"nope\"\n",
            "c.toml: sessions.channels.alpha: names channel 'nope'",
        ),
        (
            "[sessions]\ndefault_channel = \"x\"\n[channels.x]\nkind = \"exec\"\ncommand = []\n",
            "c.toml: channels.x.command: must name a program",
        ),
        ("[database\npath = 1", "c.toml: line 1:"),
    ]);
    let e = error("surprise = 1\n");
    assert!(e.contains("unknown field `surprise`"), "{e}");
}

#[test]
fn settings_that_would_break_the_daemon_are_refused_with_their_range() {
    refused_with(&[
        (
            "[queues.hooks]\nlease_timeout = \"5ms\"\n",
            "c.toml: queues.hooks.lease_timeout: 5ms is out of range: between 1s and 1day",
        ),
        (
            "[daemon]\nsweep_interval = \"0s\"\n",
            "c.toml: daemon.sweep_interval: 0s is out of range",
        ),
        (
            "[daemon]\nprune_interval = \"2ms\"\n",
            "c.toml: daemon.prune_interval:",
        ),
        (
            "[channels.x]\nkind = \"exec\"\ncommand = [\"true\"]\ntimeout = \"0s\"\n",
            "c.toml: channels.x.timeout: 0s is out of range",
        ),
        (
            "[channels.x]\nkind = \"file\"\npath = \"f\"\ntimeout = \"18446744073709551615s\"\n",
            "c.toml: channels.x.timeout:",
        ),
        (
            "[queues.inbound]\nmax_age = \"18446744073709551615s\"\n",
            "c.toml: queues.inbound.max_age:",
        ),
    ]);
}

#[test]
fn a_dead_retention_shorter_than_retention_is_warned_about() {
    assert!(Config::default().warnings().is_empty());
    let c = Config::parse("[queues.outbound]\ndead_retention = \"1d\"\n", "c.toml").unwrap();
    let w = c.warnings();
    assert_eq!(w.len(), 1);
    assert!(
        w[0].starts_with("queues.outbound.dead_retention (1day) is shorter"),
        "{w:?}"
    );
}

#[test]
fn a_queue_setting_left_out_keeps_its_default() {
    let c = Config::parse("[queues.inbound]\nbackoff = [\"100ms\"]\n", "c.toml").unwrap();
    let p = c.queues.inbound.clone();
    assert_eq!(p.backoff, vec![Duration::from_millis(100)]);
    assert_eq!(
        p,
        QueuePolicy {
            backoff: p.backoff.clone(),
            ..QueuePolicy::inbound()
        }
    );
}

#[test]
fn each_queue_keeps_its_own_defaults_for_settings_left_out() {
    let c = Config::parse(
        "[queues.hooks]\nmax_attempts = 3\n[queues.outbound]\nmax_attempts = 0\n",
        "c.toml",
    )
    .unwrap();
    assert_eq!(
        c.queues.hooks,
        QueuePolicy {
            max_attempts: Some(3),
            ..QueuePolicy::hooks()
        }
    );
    assert_eq!(
        c.queues.outbound.max_attempts, None,
        "0 means never give up"
    );
    assert_eq!(c.queues.outbound.backoff, QueuePolicy::outbound().backoff);
}

#[test]
fn routes_and_claimer_settings_are_checked() {
    refused_with(&[
        ("[routes]\ndefault = [{ channel = \"nope\", to = \"x\" }]\n",
         "c.toml: routes.default: names channel 'nope'"),
        ("[routes.sessions]\ns1 = [{ channel = \"notices\", to = \"x\", events = [\"tool_use\"] }]\n",
         "c.toml: routes.sessions.s1: event ToolUse is not relayed"),
    ]);
    let e = error("[routes]\ndefault = [{ channel = \"notices\", to = \"\" }]\n");
    assert!(e.contains("empty `to`"), "{e}");
    refused_with(&[(
        "[claimer]\nhook_buffer = 8\n",
        "c.toml: claimer.hook_buffer: must be larger than",
    )]);
    for threads in ["0", "17"] {
        let e = error(&format!("[claimer]\nsend_threads = {threads}\n"));
        assert_eq!(
            e,
            format!("c.toml: claimer.send_threads: {threads} is out of range: between 1 and 16")
        );
    }
    refused_with(&[(
        "[channels.w]\nkind = \"webhook\"\nurl = \"localhost\"\n",
        "c.toml: channels.w.url: is not a URL",
    )]);
    let c = Config::parse("[routes.sessions]\nquiet = []\n", "c.toml").unwrap();
    let routes = c
        .runtime_config(relayq_engine::DbConfig::new(""))
        .notice_routes;
    assert!(routes.for_session("quiet").is_empty());
    let default: Vec<_> = routes
        .for_session("other")
        .iter()
        .map(|r| (r.channel.as_deref(), r.to.as_str()))
        .collect();
    assert_eq!(default, [(None, "origin"), (Some(NOTICES_CHANNEL), "log")]);
    refused_with(&[(
        "[routes]\ndefault = [{ to = \"ops\" }]\n",
        "c.toml: routes.default: the route to 'ops' names no channel",
    )]);
}

#[test]
fn a_telegram_source_answers_through_a_channel_made_from_its_own_settings() {
    let source = "[sources.mybot]\nkind = \"telegram\"\ntoken_env = \"T\"\nallowed_users = [1]\nchats = { \"1\" = \"agent\" }\n";
    let c = Config::parse(source, "c.toml").unwrap();
    match &c.channels["mybot"] {
        ChannelConfig::Telegram(bot) => assert_eq!(bot.token.token_env.as_deref(), Some("T")),
        other => panic!("{other:?}"),
    }
    let routes = c.notice_routes();
    assert_eq!(routes.replies["telegram:mybot"], "mybot");

    // A channel of that name in the file is kept; reply_channel names another.
    let own = format!("{source}[channels.mybot]\nkind = \"file\"\npath = \"x\"\n");
    let c = Config::parse(&own, "c.toml").unwrap();
    assert!(matches!(c.channels["mybot"], ChannelConfig::File(_)));
    let e = error(
        "[sources.mybot]\nkind = \"telegram\"\ntoken_env = \"T\"\nchats = { \"1\" = \"agent\" }\n",
    );
    assert!(
        e.starts_with("c.toml: sources.mybot.allowed_users: is required"),
        "{e}"
    );
}

#[test]
fn session_overrides_route_to_their_channel() {
    let c = Config::parse(
        "[sessions.channels]\nalpha = \"tmux\"\n[channels.tmux]\nkind = \"tmux\"\n[channels.deliveries]\nkind = \"file\"\npath = \"d.jsonl\"\n",
        "c.toml",
    )
    .unwrap();
    let r = c
        .runtime_config(relayq_engine::DbConfig::new(""))
        .session_channels;
    assert_eq!(
        (r.channel_for("alpha"), r.channel_for("beta")),
        ("tmux", "deliveries")
    );
}

/// `[database] url` comes inline, from an environment variable or from a file, as secrets
/// do; a URL that is not PostgreSQL's, or two ways at once, are refused with the key.
#[test]
fn the_database_url_is_read_like_a_secret_and_checked() {
    let db = |text: &str| {
        let config = Config::parse(text, "c.toml").unwrap();
        config.db_config(None).map(|d| d.url)
    };
    assert_eq!(db("").unwrap(), None, "no URL: the SQLite file");
    let inline = db("[database]\nurl = \"postgresql://relayq:pw@db/relayq\"\n").unwrap();
    assert_eq!(inline.as_deref(), Some("postgresql://relayq:pw@db/relayq"));

    std::env::set_var("RELAYQ_TEST_DB_URL", "postgres://u@%2Ftmp/q");
    let from_env = db("[database]\nurl_env = \"RELAYQ_TEST_DB_URL\"\n").unwrap();
    assert_eq!(from_env.as_deref(), Some("postgres://u@%2Ftmp/q"));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("url");
    std::fs::write(&file, "postgresql://from-file/q\n").unwrap();
    let text = format!("[database]\nurl_file = {:?}\n", file.display().to_string());
    assert_eq!(
        db(&text).unwrap().as_deref(),
        Some("postgresql://from-file/q")
    );

    let wrong = db("[database]\nurl = \"mysql://x/y\"\n").unwrap_err();
    assert_eq!(wrong.key, "database.url", "{wrong:?}");
    assert!(wrong.message.contains("not a PostgreSQL URL"), "{wrong:?}");
    let unset = db("[database]\nurl_env = \"RELAYQ_TEST_DB_URL_UNSET\"\n").unwrap_err();
    assert_eq!(unset.key, "database.url_env", "{unset:?}");
    refused_with(&[(
        "[database]\nurl = \"postgresql://a/b\"\nurl_env = \"X\"\n",
        "c.toml: database.url: is given more than once",
    )]);
    let config = Config::parse("[database]\nurl = \"postgresql://u:s3cret@h/d\"\n", "c").unwrap();
    let shown = format!("{config:?} {:?}", config.db_config(None).unwrap());
    assert!(!shown.contains("s3cret"), "{shown}");
}
