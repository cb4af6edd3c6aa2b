//! A model API on loopback for the real agent CLIs (Claude Code, Codex, Gemini CLI), speaking
//! the three wire formats they use (see shared/design/REAL-AGENTS.md): Anthropic's
//! `/v1/messages` (SSE), OpenAI's `/v1/responses` (SSE), Gemini's `:streamGenerateContent`
//! (SSE), and the side requests they make (token counts, model lists, titles, routing).
//!
//! What it answers, by the person's last message:
//! - `tool` in it: a request to run `echo ran >> probe-<word>.txt` ([`probe_command`]: the word
//!   after `tool`; the CLI asks for permission, and each run adds a line); once the tool's
//!   result comes back, `tool done`;
//! - `long` in it: a 10 000-character answer ([`long_answer`]);
//! - `slow` in it: the answer after [`SLOW`];
//! - anything else: `echo: <the message>`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use relayq_actors::testing::loopback::{Answer, Loopback};
use serde_json::{json, Value};

/// The command a `tool` prompt asks to run: `echo ran >> probe-<word>.txt`, `<word>` the
/// word after `tool` (`use the tool a1` → `probe-a1.txt`), else `tool`.
pub fn probe_command(text: &str) -> String {
    format!("echo ran >> {}", probe_file(text))
}

/// The file [`probe_command`] appends to.
pub fn probe_file(text: &str) -> String {
    let word: String = text
        .split_once("tool ")
        .map(|(_, rest)| rest)
        .unwrap_or_default()
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    format!("probe-{}.txt", if word.is_empty() { "tool" } else { &word })
}

/// A new number for a tool call's id: each call has its own, as the real APIs give them (an
/// agent keys its permission bookkeeping by the id; Claude Code asks again, for ever, when a
/// new call repeats an interrupted one's id).
fn next_call() -> u64 {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Whether this is the first time a request carries call `id`'s result.
fn first_result_of(id: &str) -> bool {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap();
    if id.is_empty() || seen.iter().any(|s| s == id) {
        return false;
    }
    seen.push(id.to_string());
    true
}

/// How long a `slow` prompt's turn takes.
pub const SLOW: Duration = Duration::from_secs(5);

/// The answer to a prompt with `long` in it: 10 000 characters in paragraphs of sentences
/// that do not repeat (Gemini CLI stops a turn whose stream repeats itself, as a loop).
pub fn long_answer() -> String {
    const WORDS: &[&str] = &[
        "queue", "lease", "agent", "pane", "turn", "hook", "chat", "answer", "order", "crash",
        "commit", "retry", "session", "paste", "notice", "token", "daemon", "socket", "row",
        "channel", "source", "offset", "backoff", "part", "limit", "markup", "dialog", "state",
    ];
    let mut seed: u64 = 28;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    let mut text = String::new();
    let mut sentence = 0;
    while text.len() < 10_000 {
        sentence += 1;
        let words: Vec<&str> = (0..8 + next() % 8)
            .map(|_| WORDS[next() % WORDS.len()])
            .collect();
        text += &format!("Sentence {sentence} tells of {}.", words.join(" "));
        text += if sentence % 6 == 0 { "\n\n" } else { " " };
    }
    let mut answer: String = text.chars().take(10_000).collect();
    // Agents trim an answer's ends: it must end in a letter, not white space.
    while answer.ends_with(char::is_whitespace) {
        answer.pop();
        answer.push('x');
    }
    answer
}

/// The model's answer to the person's `text`.
pub fn answer_to(text: &str) -> String {
    if text.contains("long") {
        long_answer()
    } else {
        format!("echo: {text}")
    }
}

/// A running fake model API; stopped when dropped.
pub struct FakeModel {
    pub port: u16,
    /// The JSON body of every request, in order.
    requests: Arc<Mutex<Vec<Value>>>,
    _server: Loopback,
}

impl FakeModel {
    pub fn start() -> FakeModel {
        let requests: Arc<Mutex<Vec<Value>>> = Arc::default();
        let log = requests.clone();
        let server = Loopback::start(0, move |asked| {
            let body: Value = serde_json::from_slice(&asked.body).unwrap_or(Value::Null);
            let (content_type, answer) = answer(&asked.url, &body);
            log.lock().unwrap().push(body);
            Answer::new(200, answer).header("content-type", content_type)
        });
        FakeModel {
            port: server.addr.port(),
            requests,
            _server: server,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Whether some request's body holds every one of `parts` (a conversation sent whole).
    pub fn asked_with_all(&self, parts: &[&str]) -> bool {
        let requests = self.requests.lock().unwrap();
        requests.iter().any(|body| {
            let body = body.to_string();
            parts.iter().all(|p| body.contains(p))
        })
    }
}

const SSE: &str = "text/event-stream";
const JSON: &str = "application/json";

/// The answer to one request: its content type and body.
fn answer(url: &str, body: &Value) -> (&'static str, String) {
    let path = url.split('?').next().unwrap_or(url);
    if path.ends_with("/count_tokens") {
        return (JSON, json!({"input_tokens": 10}).to_string());
    }
    if path.starts_with("/v1/messages") {
        return claude(body);
    }
    if path.starts_with("/v1/responses") {
        return (SSE, codex(body));
    }
    if path.contains(":streamGenerateContent") {
        return (SSE, gemini_stream(body));
    }
    if path.contains(":generateContent") {
        // Side requests (routing, the next speaker, titles) expect JSON in the text.
        let text = json!({"reasoning": "simple", "model_choice": "flash", "next_speaker": "user"});
        return (
            JSON,
            gemini_response(&[json!({"text": text.to_string()})]).to_string(),
        );
    }
    if path.contains(":countTokens") {
        return (JSON, json!({"totalTokens": 10}).to_string());
    }
    (JSON, json!({"models": [], "data": []}).to_string())
}

fn pause_if_slow(text: &str) {
    if text.contains("slow") {
        std::thread::sleep(SLOW);
    }
}

fn sse(events: &[(&str, Value)]) -> String {
    events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

/// Anthropic Messages: the person's last text, or a tool result.
fn claude(body: &Value) -> (&'static str, String) {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last_user = messages.iter().rev().find(|m| m["role"] == "user");
    let mut text = String::new();
    let mut tool_result = false;
    match last_user.map(|m| &m["content"]) {
        Some(Value::String(s)) => text = s.clone(),
        Some(Value::Array(blocks)) => {
            for b in blocks {
                match b["type"].as_str() {
                    Some("text") => {
                        let t = b["text"].as_str().unwrap_or_default();
                        if !t.starts_with("<system-reminder>") {
                            text = t.to_string();
                        }
                    }
                    Some("tool_result") => {
                        let call = b["tool_use_id"].as_str().unwrap_or_default();
                        tool_result |= first_result_of(call);
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
    // A call's result (run, or refused by a hook) is answered once, whatever text comes with
    // it (Claude Code sends the turn's prompt again beside it, and an answered call's result
    // again with the next prompt).
    if text.contains("<session>") {
        text = r#"{"title": "A relayq test"}"#.into();
        return (JSON, claude_json(&text));
    }
    if body["stream"] != true {
        return (JSON, claude_json(&answer_to(&text)));
    }
    pause_if_slow(&text);
    let start = json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
        "role": "assistant", "model": body["model"], "content": [], "stop_reason": null,
        "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}});
    let (block, delta, stop) = if text.contains("tool") && !tool_result {
        let input =
            json!({"command": probe_command(&text), "description": "Create the probe file"});
        (
            json!({"type": "tool_use", "id": format!("toolu_{}", next_call()), "name": "Bash", "input": {}}),
            json!({"type": "input_json_delta", "partial_json": input.to_string()}),
            "tool_use",
        )
    } else {
        let answer = if tool_result {
            "tool done".into()
        } else {
            answer_to(&text)
        };
        (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": answer}),
            "end_turn",
        )
    };
    let events = [
        ("message_start", start),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": block}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 5}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    (SSE, sse(&events))
}

fn claude_json(text: &str) -> String {
    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
           "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
           "usage": {"input_tokens": 1, "output_tokens": 1}})
    .to_string()
}

/// OpenAI Responses, as Codex calls it: the person's last text, or a tool's output.
fn codex(body: &Value) -> String {
    let mut text = String::new();
    let mut tool_result = false;
    for item in body["input"].as_array().into_iter().flatten() {
        if item["type"] == "message" && item["role"] == "user" {
            for c in item["content"].as_array().into_iter().flatten() {
                if c["type"] == "input_text" {
                    text = c["text"].as_str().unwrap_or_default().to_string();
                }
            }
            tool_result = false;
        }
        if item["type"] == "function_call_output" {
            tool_result = true;
        }
    }
    let item = if text.contains("task title") {
        message_item("Reply to the user")
    } else if text.contains("tool") && !tool_result {
        pause_if_slow(&text);
        let arguments = json!({"cmd": probe_command(&text),
            "sandbox_permissions": "require_escalated", "justification": "Create the probe file?"});
        let n = next_call();
        json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"),
               "name": "exec_command", "arguments": arguments.to_string()})
    } else {
        pause_if_slow(&text);
        message_item(&if tool_result {
            "tool done".into()
        } else {
            answer_to(&text)
        })
    };
    let event = |name: &str, mut data: Value| {
        data["type"] = json!(name);
        (name.to_string(), data)
    };
    let usage = json!({"input_tokens": 1, "input_tokens_details": null, "output_tokens": 1,
                       "output_tokens_details": null, "total_tokens": 2});
    let events = [
        event("response.created", json!({"response": {"id": "resp_1"}})),
        event("response.output_item.done", json!({"item": item})),
        event(
            "response.completed",
            json!({"response": {"id": "resp_1", "usage": usage}}),
        ),
    ];
    let events: Vec<(&str, Value)> = events
        .iter()
        .map(|(n, d)| (n.as_str(), d.clone()))
        .collect();
    sse(&events)
}

fn message_item(text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "id": "msg_1",
           "content": [{"type": "output_text", "text": text}]})
}

/// Gemini's streamGenerateContent: the person's last text, or a function's response.
fn gemini_stream(body: &Value) -> String {
    let contents = body["contents"].as_array().cloned().unwrap_or_default();
    let mut text = String::new();
    for c in contents.iter().filter(|c| c["role"] == "user") {
        for part in c["parts"].as_array().into_iter().flatten() {
            // Gemini CLI's own notes ("System: Potential loop detected…") are not the person.
            match part["text"].as_str() {
                Some(t) if !t.starts_with("System:") => text = t.to_string(),
                _ => {}
            }
        }
    }
    let tool_result = contents
        .last()
        .and_then(|c| c["parts"].as_array())
        .is_some_and(|parts| parts.iter().any(|p| p.get("functionResponse").is_some()));
    pause_if_slow(&text);
    let parts = if text.contains("tool") && !tool_result {
        vec![json!({"functionCall": {"name": "run_shell_command",
            "args": {"command": probe_command(&text), "description": "Create the probe file"}}})]
    } else if tool_result {
        vec![json!({"text": "tool done"})]
    } else {
        vec![json!({"text": answer_to(&text)})]
    };
    format!("data: {}\n\n", gemini_response(&parts))
}

fn gemini_response(parts: &[Value]) -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
           "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2}})
}
