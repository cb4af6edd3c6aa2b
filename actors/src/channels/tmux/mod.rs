//! `kind = "tmux"`: types the message into the session's tmux pane, as a person pasting it.
//!
//! 1. The tmux session is found by its exact name among `list-sessions`, then addressed by its
//!    id, so a session id is never read as a prefix (`victo` for `victory`), a pattern
//!    (`oth?r`), or another kind of target (`%0`, `$0`, `@1`, a client); an id tmux cannot
//!    address exactly (`:`, `.`, a trailing `;`) is a permanent failure.
//! 2. The pane is looked up (`display-message`): its id, and the program it runs. Text is
//!    pasted only into a pane running one of the channel's `programs` (the agent CLIs by
//!    default); a shell there means the agent exited, and the row waits rather than run as a
//!    command. A pane that does not exist, or runs something else, is waited for
//!    `missing_grace` (the agent may be starting), then the row is expired (`session not
//!    found`, or why).
//! 3. Control characters are taken out of the text ([`sanitize`]): an `ESC [201~` would end the
//!    bracketed paste early, Ctrl-C or Esc would interrupt the agent.
//! 4. The text goes into a tmux buffer, is pasted into that pane id with bracketed paste
//!    (`paste-buffer -p`: the markers are sent when the program asked for them, as agent CLIs
//!    do), and Enter is pressed after a short pause so the program sees the paste end first.
//!    One paste-and-submit at a time per pane ([`pane_turn`]), whichever flow it comes from.
//!
//! **What "delivered" means** (`confirm`):
//! - `agent` (the default): the agent in the pane takes the message when its own prompt-submit
//!   event names it (relayq's hooks, see `relayq init`); until then the row is in flight,
//!   `submitted, waiting for the agent`. Before the paste the pane's [`screen`] is read: with a
//!   dialog open nothing is typed. After the paste, Enter waits until the text shows in the
//!   input box (Gemini CLI takes an Enter too close behind a paste as a newline). No word
//!   within `confirm_within`: the pane is looked at; text still in the input box gets one more
//!   Enter (never a second paste); an agent gone, or a text nowhere, fails saying which.
//! - `paste`: delivered when the paste and Enter went through: for a plain program with no
//!   hooks (`cat`, a script).
//!
//! Every value reaches tmux as its own argument, never through a shell.

mod screen;

pub use screen::Screen;

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, LazyLock, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::kit::{on_path, tail};
use super::{
    Answer, Channel, ChannelKind, Delivery, DialogAnswer, DialogOutcome, DialogRequest, Outcome,
    SettingError,
};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The target pane; `{session}` is replaced by the session id (for an outbound message,
    /// by its destination). The part before the first `:` names a tmux session, matched
    /// exactly; `{session}:1.0` picks a window and pane of it.
    #[serde(default = "default_target")]
    pub target: String,
    /// A tmux server socket name (`tmux -L`); the default server when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_name: Option<String>,
    /// Pause between the paste and the Enter key.
    #[serde(default = "default_submit_delay", with = "humantime_serde")]
    pub submit_delay: Duration,
    #[serde(default = "default_tmux_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// What the pane must be running (tmux's `#{pane_current_command}`) for text to be pasted:
    /// the agent CLIs, and `node`, which runs the npm-installed ones.
    #[serde(default = "default_programs")]
    pub programs: Vec<String>,
    /// How long a row waits for its agent (a pane that does not exist, or runs something else
    /// than the agent) before it is expired; the chat is told when it starts to wait and when
    /// it is dropped.
    #[serde(default = "default_missing_grace", with = "humantime_serde")]
    pub missing_grace: Duration,
    /// When a message counts as delivered: when the agent says it took it, or on paste.
    #[serde(default)]
    pub confirm: Confirm,
    /// How long the agent has to say it took a message before relayq looks at its pane.
    #[serde(default = "default_confirm_within", with = "humantime_serde")]
    pub confirm_within: Duration,
}

/// When a message pasted into a pane counts as delivered (see the module's doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Confirm {
    /// When the agent's own prompt-submit event names it.
    #[default]
    Agent,
    /// When the paste and Enter went through.
    Paste,
}

/// The waits an agent may have to confirm a message.
pub const CONFIRM_WITHIN_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(600));

/// How long Enter waits for a pasted text to show in the input box.
const SHOW_WITHIN: Duration = Duration::from_secs(2);

fn default_target() -> String {
    "{session}".into()
}
fn default_submit_delay() -> Duration {
    Duration::from_millis(100)
}
fn default_tmux_timeout() -> Duration {
    Duration::from_secs(10)
}
pub fn default_programs() -> Vec<String> {
    ["claude", "codex", "gemini", "node"]
        .map(String::from)
        .to_vec()
}
fn default_missing_grace() -> Duration {
    Duration::from_secs(600)
}
fn default_confirm_within() -> Duration {
    Duration::from_secs(10)
}

/// Why a row whose pane never appeared is expired.
pub const SESSION_NOT_FOUND: &str = "session not found";

/// Where a tmux pane sits: its tmux session's name and its window's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PanePlace {
    pub session: String,
    pub window: String,
}

impl PanePlace {
    /// Where `pane` (`$TMUX_PANE`) sits, asked of the pane's own tmux server (`$TMUX` is
    /// "<socket path>,<server pid>,<session index>"); `None` outside tmux. The pane id goes to
    /// tmux as an argument, never through a shell.
    pub fn of(pane: &str) -> Option<PanePlace> {
        let tmux_env = std::env::var("TMUX").ok()?;
        let socket = tmux_env.split(',').next().filter(|s| !s.is_empty())?;
        let out = std::process::Command::new("tmux")
            .args(["-S", socket, "display-message", "-p", "-t", pane])
            .arg("#{session_name}\t#{window_name}")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|out| out.status.success())?;
        let shown = String::from_utf8_lossy(&out.stdout);
        let (session, window) = shown.trim_end_matches('\n').split_once('\t')?;
        Some(PanePlace {
            session: session.to_string(),
            window: window.to_string(),
        })
    }
}

impl ChannelKind for Config {
    type Channel = TmuxChannel;

    /// The target read back: `{session}` is the tmux session's name, `agents:{session}` a
    /// window's.
    fn session_in_pane(&self, place: &PanePlace) -> Option<String> {
        let (first, rest) = self.target.split_once(':').unwrap_or((&self.target, ""));
        if first == "{session}" {
            Some(place.session.clone())
        } else if first == place.session && rest.starts_with("{session}") {
            Some(place.window.clone())
        } else {
            None
        }
    }

    fn refuses_address(&self, session: &str) -> Option<String> {
        target_for(&self.target, session).err()
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn check(&self) -> Result<(), SettingError> {
        crate::settings::check_duration(
            "confirm_within",
            self.confirm_within,
            CONFIRM_WITHIN_RANGE,
            "",
        )
    }

    fn build(&self) -> Result<TmuxChannel, SettingError> {
        Ok(TmuxChannel {
            config: self.clone(),
        })
    }
}

#[derive(Clone)]
pub struct TmuxChannel {
    config: Config,
}

impl Channel for TmuxChannel {
    fn deliver(&mut self, delivery: Delivery) -> Answer {
        let config = self.config.clone();
        Answer::later(async move {
            let work = async {
                match delivery.agent.look {
                    Some(n) => look(&config, &delivery, n).await,
                    None => paste(&config, &delivery).await,
                }
            };
            match tokio::time::timeout(config.timeout, work).await {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(outcome)) => outcome,
                Err(_) => {
                    Outcome::retry(format!("tmux did not answer within {:?}", config.timeout))
                }
            }
        })
    }

    fn timeout(&self) -> Duration {
        self.config.timeout
    }

    fn confirms_within(&self) -> Option<Duration> {
        (self.config.confirm == Confirm::Agent).then_some(self.config.confirm_within)
    }

    fn dialog(&self, request: DialogRequest) -> Option<DialogAnswer> {
        let config = self.config.clone();
        Some(Box::pin(async move {
            let work = answer_dialog(&config, &request);
            match tokio::time::timeout(config.timeout, work).await {
                Ok(outcome) => outcome,
                Err(_) => DialogOutcome::Retry(format!(
                    "tmux did not answer within {:?}",
                    config.timeout
                )),
            }
        }))
    }

    fn readiness(&self) -> Result<(), String> {
        match on_path("tmux") {
            true => Ok(()),
            false => Err("tmux is not installed (not on PATH)".into()),
        }
    }
}

/// Where `session`'s messages go under `template`: the tmux session's name, and the window and
/// pane part after it (empty for the session's current pane). An id tmux cannot address
/// exactly is refused, with the reason.
pub fn target_for(template: &str, session: &str) -> Result<(String, String), String> {
    let refuse = |why: &str| {
        Err(format!(
            "session id {session:?} {why}; it cannot name a tmux session exactly"
        ))
    };
    if session.is_empty() {
        return refuse("is empty");
    }
    if session.contains([':', '.']) {
        return refuse("has ':' or '.', which tmux reads as window and pane");
    }
    if session.ends_with(';') {
        return refuse("ends with ';', which tmux reads as the end of a command");
    }
    if session.chars().any(char::is_control) {
        return refuse("has control characters");
    }
    let filled = template.replace("{session}", session);
    let (name, rest) = filled.split_once(':').unwrap_or((&filled, ""));
    Ok((name.to_string(), rest.to_string()))
}

/// The text as it is pasted: every control character but newline and tab is taken out (ESC,
/// which would let the text end the bracketed paste or send keys; Ctrl-C and the other C0
/// controls; DEL; the C1 controls), and carriage returns become newlines.
pub fn sanitize(text: &str) -> String {
    text.replace("\r\n", "\n")
        .chars()
        .filter_map(|c| match c {
            '\r' => Some('\n'),
            '\n' | '\t' => Some(c),
            c if c.is_control() => None,
            c => Some(c),
        })
        .collect()
}

/// The pane a delivery goes to, running one of the channel's programs: its id. A pane that is
/// missing or runs something else (the agent exited to its shell) is waited for up to
/// `missing_grace`, the error saying how to start the agent; then the row is expired.
async fn agent_pane(config: &Config, delivery: &Delivery) -> Result<String, Outcome> {
    let (name, rest) = target_for(&config.target, delivery.address())
        .map_err(|reason| Outcome::Permanent { reason })?;
    let target = format!("{name}:{rest}");
    let pane = find_pane(config, &name, &rest).await?;
    let Some((pane, program)) = pane else {
        return Err(missing(config, delivery, &target));
    };
    if !config.programs.contains(&program) {
        let why = format!(
            "pane {pane} ({target}) runs `{program}`, not one of {:?}: the agent is not running there, so nothing is pasted",
            config.programs
        );
        return Err(not_running(config, delivery, why));
    }
    Ok(pane)
}
/// How long an answer waits for its dialog to be drawn (the agent asks before it draws).
const DIALOG_SHOWN_WITHIN: Duration = Duration::from_secs(5);

/// How long a dialog has to leave the screen after its key was pressed.
const DIALOG_GONE_WITHIN: Duration = Duration::from_secs(3);

/// How long, after a deny closed the dialog, the agent has to show its empty prompt.
const PROMPT_BACK_WITHIN: Duration = Duration::from_secs(1);

/// Looks at, or answers by its keys, the dialog about `request.action` in the session's pane:
/// only while that dialog shows (never into another question's dialog, never into the input
/// box), with the dialog's own numbering for an allow and Escape for a deny; answered once
/// the dialog left the screen. One paste or key press at a time per pane ([`pane_turn`]).
async fn answer_dialog(config: &Config, request: &DialogRequest) -> DialogOutcome {
    use relayq_engine::approvals::{Decision, Scope};
    let retry = |o: Outcome| DialogOutcome::Retry(o.text().unwrap_or("tmux failed").to_string());
    let Ok((name, rest)) = target_for(&config.target, &request.session) else {
        return DialogOutcome::NotShown("the session has no pane relayq can address".into());
    };
    let pane = match find_pane(config, &name, &rest).await {
        Ok(Some((pane, program))) if config.programs.contains(&program) => pane,
        Ok(Some((pane, program))) => {
            return DialogOutcome::NotShown(format!(
                "pane {pane} runs `{program}`, not the agent"
            ))
        }
        Ok(None) => return DialogOutcome::NotShown("the agent's pane is gone".into()),
        Err(e) => return retry(e),
    };
    let turn = pane_turn(config.socket_name.as_deref(), &pane);
    let _turn = turn.lock().await;
    let mut screen = match capture(config, &pane).await {
        Ok(screen) => screen,
        Err(e) => return retry(e),
    };
    // An answer can come before the dialog is drawn: Gemini CLI runs its Notification hook
    // first, and a fast tap in the chat then arrives while the pane still shows the prompt.
    let drawn_by = tokio::time::Instant::now() + DIALOG_SHOWN_WITHIN;
    while request.press.is_some()
        && !screen.dialog_about(&request.action)
        && tokio::time::Instant::now() < drawn_by
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
        screen = match capture(config, &pane).await {
            Ok(screen) => screen,
            Err(e) => return retry(e),
        };
    }
    if !screen.dialog_about(&request.action) {
        return DialogOutcome::NotShown(match screen.dialog() {
            Some(_) => "the dialog open in the agent's terminal asks about something else".into(),
            None => "no dialog was open in the agent's terminal (answered there?)".into(),
        });
    }
    let Some(decision) = request.press else {
        return DialogOutcome::Shows;
    };
    let (key, literal) = match decision {
        Decision::Deny => ("Escape".to_string(), false),
        Decision::Allow(scope) => {
            let labels: &[&str] = match scope {
                Scope::Once => &["Allow once"],
                Scope::Session => &["Allow for this session", "Allow always"],
            };
            match screen.choice(labels) {
                Some(key) => (key, true),
                None => {
                    return DialogOutcome::NotShown(format!(
                        "the dialog offers no {:?} choice",
                        labels[0]
                    ))
                }
            }
        }
    };
    tracing::info!(pane, key, "answering the agent's dialog by its keys");
    let mut args = vec!["send-keys", "-t", &pane];
    if literal {
        args.push("-l");
    }
    args.push(&key);
    if let Err(e) = tmux(config, &args, None).await {
        return retry(e);
    }
    let deadline = tokio::time::Instant::now() + DIALOG_GONE_WITHIN;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let screen = match capture(config, &pane).await {
            Ok(screen) => screen,
            Err(e) => return retry(e),
        };
        if !screen.dialog_about(&request.action) {
            let mut at_prompt = screen.at_prompt();
            let back_by = tokio::time::Instant::now() + PROMPT_BACK_WITHIN;
            while decision == Decision::Deny && !at_prompt && tokio::time::Instant::now() < back_by {
                tokio::time::sleep(Duration::from_millis(100)).await;
                at_prompt = capture(config, &pane).await.is_ok_and(|s| s.at_prompt());
            }
            return DialogOutcome::Answered { at_prompt };
        }
        if tokio::time::Instant::now() >= deadline {
            return DialogOutcome::Retry(format!(
                "the dialog still shows {DIALOG_GONE_WITHIN:?} after {key} was pressed"
            ));
        }
    }
}

/// Pastes the message and presses Enter. With `confirm = "agent"`, not into an open dialog,
/// Enter only once the text shows, and the answer is `Submitted`: the agent's word decides.
async fn paste(config: &Config, delivery: &Delivery) -> Result<Outcome, Outcome> {
    let pane = agent_pane(config, delivery).await?;
    let agent = config.confirm == Confirm::Agent;
    let turn = pane_turn(config.socket_name.as_deref(), &pane);
    let _turn = turn.lock().await;
    if agent {
        let screen = capture(config, &pane).await?;
        if let Some(dialog) = screen.dialog() {
            return Err(dialog_open(dialog));
        }
        if delivery.agent.unsure && !screen.at_prompt() {
            return Err(Outcome::Throttled {
                reason: "the agent has not reported that it is ready, and its pane shows no \
                         empty prompt (still starting, or a dialog): nothing is typed until it does"
                    .into(),
                wait: Duration::from_secs(2),
                channel_wide: false,
            });
        }
    }
    let buffer = format!("relayq-{}", delivery.id);
    let text = sanitize(delivery.text());
    tmux(config, &["load-buffer", "-b", &buffer, "-"], Some(&text)).await?;
    tmux(
        config,
        &["paste-buffer", "-p", "-d", "-b", &buffer, "-t", &pane],
        None,
    )
    .await
    .inspect_err(|_| {
        // leave no stray buffer behind when the paste failed
        let cfg = config.clone();
        let buffer = buffer.clone();
        actix_rt::spawn(async move {
            let _ = tmux(&cfg, &["delete-buffer", "-b", &buffer], None).await;
        });
    })?;
    if agent {
        // The agent has read the paste when it shows it: an Enter sooner may be a newline.
        let deadline = tokio::time::Instant::now() + SHOW_WITHIN;
        while !capture(config, &pane).await?.holds(&text) {
            if tokio::time::Instant::now() >= deadline {
                // Not taken (an agent still starting drops input): nothing is submitted.
                return Err(Outcome::retry(format!(
                    "the pasted text did not show in the agent's input box within \
                     {SHOW_WITHIN:?} (is it still starting?): nothing was submitted; it is \
                     pasted again"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    tokio::time::sleep(config.submit_delay).await;
    tmux(config, &["send-keys", "-t", &pane, "Enter"], None).await?;
    Ok(match agent {
        true => submitted(config, "pasted"),
        false => Outcome::delivered(),
    })
}

/// The `n`th look at a message pasted before that its agent has not confirmed (`n` = 0: after
/// a restart, before any wait). Still in the input box: Enter, once more. Nowhere: waited for
/// once, then a failure that says the agent never took it. Never pasted twice, except when the
/// paste was not seen by this daemon (`paste_unseen`): a crash between the send-started mark
/// and the paste leaves a mark on a text that never reached the pane, and an agent that took
/// it would have said so (its hooks persist its events while relayq is down), so the first
/// look after the wait pastes it (at least once, as every unknown outcome).
async fn look(config: &Config, delivery: &Delivery, n: u32) -> Result<Outcome, Outcome> {
    match look_once(config, delivery, n).await? {
        Look::Answered(outcome) => Ok(outcome),
        Look::Unpasted => {
            tracing::info!(
                row = delivery.id,
                "a message marked sent before a restart is not in the agent's input box and the \
                 agent never took it: the restart cut its send before the paste; pasting it now"
            );
            let pasted = paste(config, delivery).await?;
            Ok(match pasted {
                Outcome::Submitted { .. } => submitted(
                    config,
                    "pasted after a restart that cut its send before the paste (its agent had not taken it)",
                ),
                other => other,
            })
        }
    }
}

/// What one look found.
enum Look {
    Answered(Outcome),
    /// A text whose paste this daemon did not see is nowhere after the wait: never pasted.
    Unpasted,
}

/// [`look`] while holding the pane's turn ([`paste`] takes it again).
async fn look_once(config: &Config, delivery: &Delivery, n: u32) -> Result<Look, Outcome> {
    let pane = agent_pane(config, delivery).await.map_err(|outcome| match outcome {
        Outcome::Retry { error, .. } | Outcome::Expired { reason: error } => Outcome::retry(
            format!("the message was pasted, but its agent is gone before it took it ({error}); it is pasted again when the agent runs"),
        ),
        other => other,
    })?;
    let turn = pane_turn(config.socket_name.as_deref(), &pane);
    let _turn = turn.lock().await;
    let screen = capture(config, &pane).await?;
    if let Some(dialog) = screen.dialog() {
        // Nothing is pressed; the row stays in flight with its send mark (a throttle would
        // clear the mark, and the text already pasted would be pasted again).
        return Ok(Look::Answered(submitted(
            config,
            &format!("a dialog is open ({dialog:?}), nothing pressed"),
        )));
    }
    let text = sanitize(delivery.text());
    match (screen.holds(&text), n) {
        // Looks at a `paste_unseen` row count one more after its paste (`Look::Unpasted`).
        (true, n) if n < 2 || (n == 2 && delivery.agent.paste_unseen) => {
            tracing::info!(pane, look = n, "the pasted text is still in the agent's input box; pressing Enter again");
            tmux(config, &["send-keys", "-t", &pane, "Enter"], None).await?;
            Ok(Look::Answered(submitted(config, "Enter pressed again")))
        }
        // Folded into the running turn, it gets no prompt-submit of its own.
        (false, _) if delivery.agent.steering => Ok(Look::Answered(Outcome::delivered_as(
            "taken into the agent's running turn (pasted during it; it left the input box)",
        ))),
        (false, 0) => Ok(Look::Answered(submitted(config, "looked at after a restart"))),
        (false, 1) if delivery.agent.paste_unseen => Ok(Look::Unpasted),
        (held, _) => Ok(Look::Answered(Outcome::Permanent {
            reason: format!(
                "pasted into pane {pane}, but its agent never said it took it (no prompt-submit \
                 event within {:?}{}): check that the agent runs relayq's hooks (`relayq init`), \
                 then `relayq dead retry {}` to paste it again",
                config.confirm_within,
                if held { "; the text still sits in its input box" } else { "; the text is not in its input box" },
                delivery.id
            ),
        })),
    }
}

/// The answer for a message the agent is to confirm.
fn submitted(config: &Config, how: &str) -> Outcome {
    Outcome::Submitted {
        note: format!("{how}, waiting for the agent to take it"),
        wait: config.confirm_within,
    }
}

/// Nothing is typed while a dialog is open: Enter would confirm its highlighted default.
fn dialog_open(dialog: &str) -> Outcome {
    Outcome::Throttled {
        reason: format!(
            "a dialog is open in the agent's pane ({dialog:?}): nothing is typed until it is answered"
        ),
        wait: Duration::from_secs(5),
        channel_wide: false,
    }
}

/// What the pane shows now, long lines joined, and where its cursor is on its line.
async fn capture(config: &Config, pane: &str) -> Result<Screen, Outcome> {
    let shown = tmux(config, &["capture-pane", "-p", "-J", "-t", pane], None).await?;
    let cursor = tmux(config, &["display-message", "-p", "-t", pane, "#{cursor_x}"], None).await?;
    Ok(Screen::new(&shown).with_cursor_x(cursor.trim().parse().ok()))
}

/// The turn to paste into `pane` of the tmux server on `socket`: one paste-and-submit at a time
/// per pane, whatever queue, channel actor or thread it comes from; two at once would go
/// paste, paste, Enter, Enter, and the agent would get one merged prompt.
fn pane_turn(socket: Option<&str>, pane: &str) -> Arc<tokio::sync::Mutex<()>> {
    type Turns = HashMap<(Option<String>, String), Weak<tokio::sync::Mutex<()>>>;
    static TURNS: LazyLock<std::sync::Mutex<Turns>> = LazyLock::new(Default::default);
    let mut turns = TURNS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    turns.retain(|_, turn| turn.strong_count() > 0);
    let key = (socket.map(str::to_string), pane.to_string());
    if let Some(turn) = turns.get(&key).and_then(Weak::upgrade) {
        return turn;
    }
    let turn = Arc::new(tokio::sync::Mutex::new(()));
    turns.insert(key, Arc::downgrade(&turn));
    turn
}

/// The pane of session `name` (exactly that name) that `rest` (window and pane, or nothing
/// for the current pane) names: its id (`%N`, what the paste is sent to) and the program it
/// runs; `None` when there is no such session, window or pane. The session is looked up by
/// name ([`session_id`]), then addressed by its id.
async fn find_pane(
    config: &Config,
    name: &str,
    rest: &str,
) -> Result<Option<(String, String)>, Outcome> {
    let socket = config.socket_name.as_deref();
    let Some(id) = session_id(socket, name).await.map_err(Outcome::retry)? else {
        return Ok(None);
    };
    let target = format!("{id}:{rest}");
    let format = "#{pane_id}\t#{pane_current_command}";
    match tmux(
        config,
        &["display-message", "-p", "-t", &target, format],
        None,
    )
    .await
    {
        Ok(out) => Ok(out
            .lines()
            .next()
            .and_then(|line| line.split_once('\t'))
            .filter(|(pane, _)| pane.starts_with('%'))
            .map(|(pane, program)| (pane.to_string(), program.trim().to_string()))),
        Err(Outcome::Retry { error, .. }) if error.contains("can't find") => Ok(None),
        Err(e) => Err(e),
    }
}

/// The id (`$N`) of the tmux session named exactly `name` on `socket`, `None` when there is
/// none (or no server). tmux itself would also read a name as a session id (`$0`), a client,
/// a prefix or a pattern: a session is found by name here, then addressed by its id.
pub async fn session_id(socket: Option<&str>, name: &str) -> Result<Option<String>, String> {
    let args = ["list-sessions", "-F", "#{session_id}\t#{session_name}"];
    let sessions = match run(socket, &args, None).await {
        Ok(out) => out,
        Err(error) if no_server(&error) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(sessions
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .find(|(_, n)| *n == name)
        .map(|(id, _)| id.to_string()))
}

/// tmux's answer when no server runs on the socket.
fn no_server(error: &str) -> bool {
    error.contains("no server running") || error.contains("error connecting")
}

/// The pane does not exist: wait for it within the grace (the agent may be starting), then
/// expire the row.
fn missing(config: &Config, delivery: &Delivery, target: &str) -> Outcome {
    if past_grace(config, delivery) {
        return Outcome::Expired {
            reason: SESSION_NOT_FOUND.into(),
        };
    }
    Outcome::retry(format!(
        "tmux has no pane {target} (yet: waiting up to {} for the agent to start; start it with \
         `tmux new-session -s {} -e RELAYQ_SESSION={} <agent>`)",
        humantime::format_duration(config.missing_grace),
        delivery.address(),
        delivery.address()
    ))
}

/// The pane runs something else than the agent: wait for the agent within the grace, then
/// expire the row, saying why.
fn not_running(config: &Config, delivery: &Delivery, why: String) -> Outcome {
    let grace = humantime::format_duration(config.missing_grace);
    match past_grace(config, delivery) {
        true => Outcome::Expired {
            reason: format!("the agent did not run in its pane within {grace}: {why}"),
        },
        false => Outcome::retry(format!(
            "{why}; the message waits up to {grace} for it: start the agent in that pane \
             (with RELAYQ_SESSION={})",
            delivery.address()
        )),
    }
}

/// The row is older than `missing_grace`.
fn past_grace(config: &Config, delivery: &Delivery) -> bool {
    now_ms().saturating_sub(delivery.created_at) > relayq_engine::clock::ms(config.missing_grace)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// Runs one tmux command; its stdout, or a retry carrying its stderr.
async fn tmux(config: &Config, args: &[&str], stdin: Option<&str>) -> Result<String, Outcome> {
    run(config.socket_name.as_deref(), args, stdin)
        .await
        .map_err(Outcome::retry)
}

/// Runs one tmux command on server `socket` (`tmux -L`; the default server when `None`),
/// every value its own argument; its stdout, or what went wrong (its stderr).
pub async fn run(socket: Option<&str>, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let mut cmd = Command::new("tmux");
    if let Some(socket) = socket {
        cmd.args(["-L", socket]);
    }
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| format!("cannot run tmux: {e}"))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .await
            .map_err(|e| format!("tmux {}: {e}", args[0]))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| format!("tmux {}: {e}", args[0]))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "tmux {} failed: {}",
            args[0],
            tail(&String::from_utf8_lossy(&out.stderr), 1024)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_match_the_session_name_exactly() {
        let t = |template: &str, s: &str| target_for(template, s);
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        for id in ["victo", "-x", "+1", "%0", "$0", "@1", "oth?r"] {
            assert_eq!(t("{session}", id).unwrap(), pair(id, ""));
        }
        assert_eq!(t("{session}:1.0", "a").unwrap(), pair("a", "1.0"));
        assert_eq!(t("agents:{session}", "a").unwrap(), pair("agents", "a"));
        for bad in ["", "a:b", "a.b", "x;", "a\nb"] {
            assert!(t("{session}", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sanitize_takes_out_escapes_and_controls_but_keeps_lines() {
        assert_eq!(sanitize("a\x1b[201~b"), "a[201~b");
        assert_eq!(sanitize("stop\x03 now\x1b"), "stop now");
        assert_eq!(sanitize("l1\r\nl2\rl3\tx\u{7f}\u{9b}"), "l1\nl2\nl3\tx");
        assert_eq!(sanitize("héllo ✓"), "héllo ✓");
    }
}
