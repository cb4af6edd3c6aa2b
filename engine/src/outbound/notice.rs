//! What a relayed hook event tells the people watching: a [`Notice`], kept as data in the
//! outbound row. The engine never writes chat text: each channel renders the notice in its
//! platform's markup (see `relayq_actors::channels::notice`), so a Telegram message gets
//! HTML within Telegram's limits and a webhook gets the structured notice beside plain text.

use serde::{Deserialize, Serialize};

use crate::hooks::{head_of, EventType, HookEvent};
use crate::outbound::chunking::{self, Markup, TextLimit};

/// Longest body or question a notice keeps; the rest is left to the agent's transcript, and
/// the notice says how much (an answer this long is 16 Telegram messages).
pub const MAX_NOTICE_BYTES: usize = 64 * 1024;

/// Room a rendered notice takes beside its body: the session and headline (counted apart),
/// the part number, separators and the platform's markup around them (`<b>…</b>`, `**`).
const RENDER_OVERHEAD: usize = 32;

/// A hook event's notice: which session, what happened, and what it says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    pub session: String,
    pub event: EventType,
    /// One line: `agent finished`, `needs you`, `error`.
    pub headline: String,
    /// The agent's last answer, or the error and its details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// What the agent asks of the person (a permission, a question).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The approval the question opened: the chat answers it (buttons, `/allow ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalAsked>,
}

/// An open approval as a notice carries it: what a channel needs to offer the answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalAsked {
    pub id: String,
    /// "Allow for this session" is offered.
    #[serde(default)]
    pub for_session: bool,
    /// Unix ms; unanswered by then, the agent is told no.
    pub expires_at: i64,
}

impl ApprovalAsked {
    /// How to answer by text, for channels without buttons (and beside them).
    pub fn text_commands(&self) -> String {
        let id = &self.id;
        let session = if self.for_session {
            format!(", /allow {id} session")
        } else {
            String::new()
        };
        format!(
            "Answer with /allow {id}{session} or /deny {id} (or reply yes or no to this \
             message) by {}; unanswered, it is denied.",
            clock_time(self.expires_at)
        )
    }
}

impl Notice {
    /// The notice a relayed event sends: "agent finished" with the agent's last answer, "needs
    /// you" with what it asks, or the error. `None` for the events that do not relay. `answer`
    /// is the agent's answer when read elsewhere than the event (a transcript).
    pub fn of(event: &HookEvent, answer: Option<&str>) -> Option<Notice> {
        let notice = |headline: &str, body: Option<String>, question: Option<String>| Notice {
            session: event.session.clone(),
            event: event.event,
            headline: headline.into(),
            body: body.map(cut),
            question: question.map(cut),
            approval: None,
        };
        Some(match event.event {
            EventType::AgentStop => notice(
                "agent finished",
                answer
                    .or(event.last_assistant_message())
                    .map(str::to_string),
                None,
            ),
            EventType::Notification
                if event.native_event.as_deref() == Some("PermissionDenied") =>
            {
                let tool = event.field(&["tool_name"]).unwrap_or("a tool");
                let call = match command_of(event) {
                    Some(command) => format!("{tool}: {command}"),
                    None => tool.to_string(),
                };
                let why = event.field(&["reason"]).unwrap_or("no reason given");
                let body = format!(
                    "The agent blocked {call} by itself ({why}), asking no one: in auto mode it \
                     decides alone. To be asked from the chat instead, set \
                     permissions.defaultMode = \"default\" in its settings."
                );
                notice("blocked a tool call", Some(body), None)
            }
            EventType::Notification => {
                let what = match permission_asked(event) {
                    Some(ask) => format!("{ask}\n{ANSWER_IN_TERMINAL}"),
                    None => event
                        .field(&["message", "title"])
                        .map(str::to_string)
                        .or_else(|| {
                            event
                                .field(&["tool_name"])
                                .map(|tool| match command_of(event) {
                                    Some(cmd) => format!("permission to use {tool}: {cmd}"),
                                    None => format!("permission to use {tool}"),
                                })
                        })
                        .unwrap_or_else(|| "the agent is waiting for you".into()),
                };
                notice("needs you", None, Some(what))
            }
            EventType::Error => {
                let what = event
                    .field(&["error", "message"])
                    .unwrap_or("unknown error");
                let body = match event.field(&["error_details", "details"]) {
                    Some(details) => format!("{what} ({details})"),
                    None => what.to_string(),
                };
                notice("error", Some(body), None)
            }
            _ => return None,
        })
    }
}

impl Notice {
    /// This notice in parts that each fit `limit` once a channel renders it: the body split
    /// where a reader would cut it (a paragraph, a line, a space; code fences closed and
    /// reopened for markdown), each part's headline numbered (`agent finished (2/3)`). One part
    /// when it fits, or the channel has no limit.
    pub fn parts(&self, limit: Option<TextLimit>) -> Vec<Notice> {
        let (Some(limit), Some(body)) = (limit, &self.body) else {
            return vec![self.clone()];
        };
        let head = chunking::length(&self.session) + chunking::length(&self.headline);
        let budget = limit.max.saturating_sub(head + RENDER_OVERHEAD);
        // Measured escaped (as HTML renders it, and Slack too), so escaping cannot push a
        // part over; an entity is never cut.
        let escaped = escape(body);
        if chunking::length(&escaped) <= budget {
            return vec![self.clone()];
        }
        let markup = match limit.markup {
            Markup::Markdown => Markup::Markdown,
            _ => Markup::Html,
        };
        let bodies = chunking::split(
            &escaped,
            TextLimit {
                max: budget,
                markup,
            },
        );
        let of = bodies.len();
        bodies
            .into_iter()
            .enumerate()
            .map(|(i, part)| Notice {
                headline: format!("{} ({}/{of})", self.headline, i + 1),
                body: Some(unescape(&part)),
                ..self.clone()
            })
            .collect()
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// How a permission is answered while relayq cannot answer it from the chat.
pub const ANSWER_IN_TERMINAL: &str = "(answer it in the agent's terminal: relayq types nothing \
     into the agent while it asks, and messages you send meanwhile wait)";

/// What an agent asks permission for (a dialog is open), as `Bash: touch x`: Claude Code's
/// and Codex's `PermissionRequest`, Claude Code's `permission_prompt` and Gemini CLI's
/// `ToolPermission` notifications. `None` for any other event.
pub fn permission_asked(event: &HookEvent) -> Option<String> {
    let native = event.native_event.as_deref()?;
    let kind = event.field(&["notification_type"]);
    let asks = native == "PermissionRequest"
        || (native == "Notification"
            && matches!(kind, Some("permission_prompt" | "ToolPermission")));
    if !asks {
        return None;
    }
    let details = event.data.get("details");
    let detail = |field: &str| details.and_then(|d| d.get(field)).and_then(|v| v.as_str());
    let what = match (event.field(&["tool_name"]), detail("title")) {
        (Some(tool), _) => format!("permission to use {tool}"),
        (None, Some(title)) => title.to_string(),
        (None, None) => event
            .field(&["message"])
            .unwrap_or("a permission")
            .to_string(),
    };
    Some(match command_of(event).or(detail("command")) {
        Some(command) => format!("{what}: {command}"),
        None => what,
    })
}

fn command_of(event: &HookEvent) -> Option<&str> {
    event
        .data
        .get("tool_input")
        .and_then(|i| i.get("command"))
        .and_then(serde_json::Value::as_str)
}

/// `text` cut to at most `max` bytes (at a character), ending in `…` when cut.
pub fn cut_to(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    format!("{}…", head_of(&text, max.saturating_sub('…'.len_utf8())))
}

fn cut(text: String) -> String {
    if text.len() <= MAX_NOTICE_BYTES {
        return text;
    }
    let kept = head_of(&text, MAX_NOTICE_BYTES);
    format!(
        "{kept}\n\n[{} more bytes of this text are in the agent's transcript]",
        text.len() - kept.len()
    )
}

/// `12:03 UTC` for unix ms.
pub fn clock_time(ms: i64) -> String {
    let minutes = ms.div_euclid(60_000).rem_euclid(24 * 60);
    format!("{:02}:{:02} UTC", minutes / 60, minutes % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::Agent;
    use serde_json::{json, Value};

    fn notice(kind: EventType, data: Value) -> Option<Notice> {
        Notice::of(&HookEvent::new(Agent::Claude, kind, "s1", data), None)
    }

    fn parts(n: Notice) -> (String, Option<String>, Option<String>) {
        (n.headline, n.body, n.question)
    }

    #[test]
    fn notices_carry_the_last_answer_the_question_or_the_error() {
        let some = |s: &str| Some(s.to_string());
        let n = |kind, data| parts(notice(kind, data).unwrap());
        assert_eq!(
            n(
                EventType::AgentStop,
                json!({"last_assistant_message": "All pass."})
            ),
            ("agent finished".into(), some("All pass."), None)
        );
        assert_eq!(
            n(EventType::AgentStop, json!({"prompt_response": "Fixed."})).1,
            some("Fixed.")
        );
        assert_eq!(
            n(
                EventType::Notification,
                json!({"message": "May I run Bash?"})
            ),
            ("needs you".into(), None, some("May I run Bash?"))
        );
        assert_eq!(
            n(
                EventType::Notification,
                json!({"tool_name": "Bash", "tool_input": {"command": "ls"}})
            )
            .2,
            some("permission to use Bash: ls")
        );
        assert_eq!(
            n(
                EventType::Error,
                json!({"error": "rate_limit", "error_details": "429"})
            ),
            ("error".into(), some("rate_limit (429)"), None)
        );
        assert_eq!(notice(EventType::ToolUse, json!({})), None);
        let long = n(
            EventType::AgentStop,
            json!({"last_assistant_message": "x".repeat(100_000)}),
        )
        .1
        .unwrap();
        assert!(long.starts_with(&"x".repeat(MAX_NOTICE_BYTES)));
        assert!(long.ends_with("[34464 more bytes of this text are in the agent's transcript]"));
    }

    #[test]
    fn a_permission_says_the_tool_the_command_and_how_to_answer() {
        let fixture = |path: &str| {
            let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/");
            std::fs::read_to_string(format!("{dir}{path}")).unwrap()
        };
        let asked = |agent, path: &str| {
            let event = match crate::hooks::receive(agent, &fixture(path), None) {
                crate::hooks::Received::Event(e) => e,
                other => panic!("{other:?}"),
            };
            Notice::of(&event, None).unwrap().question.unwrap()
        };
        let claude = asked(Agent::Claude, "claude-code/captured/PermissionRequest.json");
        assert_eq!(
            claude,
            format!("permission to use Bash: touch probe-p512802.txt\n{ANSWER_IN_TERMINAL}")
        );
        let codex = asked(Agent::Codex, "codex/captured/PermissionRequest.json");
        assert!(codex.starts_with("permission to use Bash: touch probe-p857b3f.txt\n"));
        let gemini = asked(Agent::Gemini, "gemini/captured/Notification.json");
        assert!(
            gemini.starts_with("Confirm Shell Command: touch probe-p82308b.txt\n"),
            "{gemini}"
        );
    }

    #[test]
    fn a_long_answer_is_split_into_numbered_parts_that_fit_and_lose_nothing() {
        let para = |i: usize| format!("paragraph {i} <b>&amp;</b> {}", "word ".repeat(60));
        let body: Vec<String> = (0..40).map(para).collect();
        let body = body.join("\n\n");
        let n = notice(
            EventType::AgentStop,
            json!({"last_assistant_message": body}),
        )
        .unwrap();
        let limit = TextLimit {
            max: 4096,
            markup: Markup::Plain,
        };
        let parts = n.parts(Some(limit));
        assert!(parts.len() > 1);
        for (i, p) in parts.iter().enumerate() {
            assert_eq!(
                p.headline,
                format!("agent finished ({}/{})", i + 1, parts.len())
            );
            let rendered = format!(
                "<b>{}</b>: {}\n\n{}",
                p.session,
                p.headline,
                escape(p.body.as_deref().unwrap())
            );
            assert!(
                chunking::length(&rendered) <= 4096,
                "part {i}: {}",
                chunking::length(&rendered)
            );
        }
        let joined: String = parts.iter().map(|p| p.body.as_deref().unwrap()).collect();
        assert_eq!(joined, body, "nothing lost, nothing added");
        assert_eq!(n.parts(None).len(), 1);
        let short = notice(
            EventType::AgentStop,
            json!({"last_assistant_message": "ok"}),
        )
        .unwrap();
        assert_eq!(short.parts(Some(limit)), vec![short.clone()]);
    }
}
