//! The writes of sessions from the chat: a source's requests recorded with its batch (each
//! checked and answered in the same transaction: a refusal, a list, "starting…"), the
//! projects a node publishes, and what the node hosting a project writes as it carries a
//! command out (a lease; the outcome, with the chat's reply, in one transaction).

use serde_json::json;

use super::commands::{ChatCommand, ChatWords};
use super::names::shown;
use super::{Asked, Conversation, SessionRequest, Tap};
use crate::error::Result;
use crate::outbound::Button;
use crate::progress::ProgressMode;
use crate::storage::chat_sessions::{
    self as store, ChatSession, ChatSessionState, CommandMove, CommandRow, CommandState,
    NewCommand, ProjectEntry,
};
use crate::writes::{Write, Writer};
use crate::{Agent, OutboundMessage};

/// Sessions a `/sessions` page shows.
pub const PAGE: i64 = 10;

/// What recording requests did, for the caller to act on after the commit.
#[derive(Debug, Default, PartialEq)]
pub struct RequestsRecorded {
    /// Outbound rows written (replies): wake their sender.
    pub outbound_keys: Vec<String>,
    /// Taps to answer (the callback and its line), once committed.
    pub taps: Vec<(String, String)>,
    /// Commands made ready for a node to carry out: wake the nodes' launchers.
    pub ready: usize,
}

/// A source's session requests, recorded (and answered) in one transaction.
#[derive(Debug, Clone)]
pub struct RecordRequests(pub Vec<SessionRequest>);

impl Write for RecordRequests {
    type Output = RequestsRecorded;

    fn apply(&self, w: &Writer<'_>) -> Result<RequestsRecorded> {
        record_requests_in(w, &self.0)
    }
}

/// Records each request and answers it in its chat, in the caller's transaction (a source's
/// batch): see [`Request::record`].
pub fn record_requests_in(w: &Writer<'_>, requests: &[SessionRequest]) -> Result<RequestsRecorded> {
    let mut recorded = RequestsRecorded::default();
    for request in requests {
        // The roles pairing gave, over those the source's settings give.
        let request = crate::access::request_in(w, request)?;
        let request = Request {
            w,
            r: &request,
            told: Default::default(),
        };
        request.record(&mut recorded)?;
        recorded.outbound_keys.extend(request.told.take());
    }
    Ok(recorded)
}

/// One request being recorded.
struct Request<'a> {
    w: &'a Writer<'a>,
    r: &'a SessionRequest,
    /// Replies written beside the request's own (their ordering keys).
    told: std::cell::RefCell<Vec<String>>,
}

/// What a request's reply says and offers.
struct Reply {
    text: String,
    buttons: Vec<Vec<Button>>,
}

impl Reply {
    fn text(text: impl Into<String>) -> Reply {
        Reply {
            text: text.into(),
            buttons: Vec::new(),
        }
    }
}

impl Request<'_> {
    fn record(&self, recorded: &mut RequestsRecorded) -> Result<()> {
        let r = self.r;
        let (reply, ready) = match &r.asked {
            Asked::Typed(typed) => {
                if let Some(id) = &r.message_id {
                    if self.seen(id)? {
                        return Ok(()); // read again after a crash: recorded the first time
                    }
                }
                match typed {
                    Ok(ChatCommand::Pair) => (self.pair()?, false),
                    _ if !r.known => (self.refuse_stranger()?, false),
                    Err(why) => (self.refuse(&format!("{why}."), None)?, false),
                    Ok(c) if c.changes_sessions() && !r.may => {
                        let why = "only the people this chat source names as approvers may \
                                   start, stop or resume sessions, or let people in.";
                        (self.refuse(why, Some(c))?, false)
                    }
                    Ok(c) => self.typed(c)?,
                }
            }
            Asked::Tapped { tap, callback } => {
                let (line, reply, ready) = self.tapped(*tap)?;
                if let Some(callback) = callback {
                    recorded.taps.push((callback.clone(), line));
                }
                (reply, ready)
            }
        };
        recorded.ready += usize::from(ready);
        if let Some(reply) = reply {
            recorded.outbound_keys.extend(self.reply_in(reply)?);
        }
        Ok(())
    }

    /// `/pair`: a code for the person (see [`crate::access::pairing`]), said in the chat;
    /// recorded without the code.
    fn pair(&self) -> Result<Option<Reply>> {
        let line = crate::access::pairing::pair_in(self.w, self.r)?;
        let json = json!(ChatCommand::Pair).to_string();
        self.insert(json, CommandState::Done, None, None, None)?;
        Ok(line.map(Reply::text))
    }

    /// `/approve CODE ROLE` by an approver: the person who was given the code added.
    fn approve(&self, code: &str, role: crate::access::Role) -> Result<Option<Reply>> {
        let r = self.r;
        let by = crate::access::pairing::Approver::Chat {
            origin: r.origin.clone(),
            id: r.user_id.clone().unwrap_or_default(),
            name: r.user_name.clone(),
        };
        let approved = crate::access::pairing::approve_in(self.w, code, role, &by)?;
        let state = match approved.added {
            Some(_) => CommandState::Done,
            None => CommandState::Failed,
        };
        // The code is not kept in the command's row.
        let json = json!({"command": "approve", "role": role}).to_string();
        self.insert(json, state, None, None, Some(&approved.line))?;
        self.told.borrow_mut().extend(approved.told);
        Ok(Some(Reply::text(approved.line)))
    }

    /// A stranger's command: recorded, refused in words that name nothing here, at most once
    /// an hour per chat, whatever strangers did there (a refusal is no invitation to keep
    /// trying): see [`crate::access`].
    fn refuse_stranger(&self) -> Result<Option<Reply>> {
        let r = self.r;
        let tell = crate::access::tell_stranger_now_in(self.w, &r.origin, &r.chat)?;
        let outcome = tell.then_some(crate::access::STRANGER_REPLY);
        self.insert("null".into(), CommandState::Failed, None, None, outcome)?;
        Ok(outcome.map(Reply::text))
    }

    /// Whether a command from message `id` was recorded already.
    fn seen(&self, id: &str) -> Result<bool> {
        let r = self.r;
        Ok(store::command_of_message(self.w.tx(), &r.origin, &r.chat, id)?.is_some())
    }

    /// Records a typed command that is refused (failed, with why) and the reply saying so.
    fn refuse(&self, why: &str, command: Option<&ChatCommand>) -> Result<Option<Reply>> {
        let text = format!("Not done: {why}");
        let json = command.map_or_else(|| json!(null), |c| json!(c));
        self.insert(
            json.to_string(),
            CommandState::Failed,
            None,
            None,
            Some(&text),
        )?;
        Ok(Some(Reply::text(text)))
    }

    fn insert(
        &self,
        command: String,
        state: CommandState,
        node: Option<&str>,
        session: Option<&str>,
        outcome: Option<&str>,
    ) -> Result<Option<i64>> {
        let r = self.r;
        // What the node carrying it out must know of the chat.
        let detail = json!({"topics": r.topics}).to_string();
        store::insert_command_in(
            self.w.tx(),
            &NewCommand {
                origin: &r.origin,
                chat: &r.chat,
                thread: r.thread.as_deref(),
                message_id: r.message_id.as_deref(),
                user_id: r.user_id.as_deref(),
                user_name: &r.user_name,
                command,
                state,
                node,
                session,
                detail: Some(&detail),
                outcome,
            },
        )
    }

    /// A typed command: its reply, and whether a node has it to carry out.
    fn typed(&self, c: &ChatCommand) -> Result<(Option<Reply>, bool)> {
        match c {
            ChatCommand::New {
                project,
                agent,
                name,
            } => self.new_session(c, project.as_deref(), *agent, name.as_deref()),
            ChatCommand::Pair => Ok((self.pair()?, false)),
            ChatCommand::Approve { code, role } => Ok((self.approve(code, *role)?, false)),
            ChatCommand::Sessions { page } => {
                self.insert(json!(c).to_string(), CommandState::Done, None, None, None)?;
                Ok((Some(self.sessions_page(*page)?), false))
            }
            ChatCommand::Status => {
                self.insert(json!(c).to_string(), CommandState::Done, None, None, None)?;
                Ok((Some(self.status()?), false))
            }
            ChatCommand::Progress { mode } => {
                self.insert(json!(c).to_string(), CommandState::Done, None, None, None)?;
                Ok((Some(self.progress(*mode)?), false))
            }
            ChatCommand::Stop { session } => self.stop(c, session.as_deref()),
            ChatCommand::Resume { project } => self.resume(c, project.as_deref()),
        }
    }

    /// The project named, or the only one there is; why not, when neither.
    fn project(&self, name: Option<&str>) -> Result<std::result::Result<ProjectEntry, String>> {
        let tx = self.w.tx();
        let all = store::projects(tx)?;
        let names = || {
            let names: Vec<&str> = all.iter().map(|p| p.name.as_str()).collect();
            match names.is_empty() {
                true => "none is configured: add [projects.NAME] to config.toml".to_string(),
                false => format!("the projects are {}", names.join(", ")),
            }
        };
        Ok(match name {
            Some(name) => match all.iter().find(|p| p.name == name) {
                Some(p) => Ok(p.clone()),
                None => Err(format!("there is no project {name:?}: {}", names())),
            },
            None if all.len() == 1 => Ok(all[0].clone()),
            None => Err(format!("say which project: {}", names())),
        })
    }

    fn new_session(
        &self,
        c: &ChatCommand,
        project: Option<&str>,
        agent: Option<Agent>,
        name: Option<&str>,
    ) -> Result<(Option<Reply>, bool)> {
        let project = match self.project(project)? {
            Ok(p) => p,
            Err(why) => return Ok((self.refuse(&format!("{why}."), Some(c))?, false)),
        };
        let agent = match agent {
            Some(a) if project.agents.iter().any(|x| x == a.as_str()) => a.as_str().to_string(),
            Some(a) => {
                let why = format!(
                    "{a} may not run in {}: its agents are {}.",
                    project.name,
                    project.agents.join(", ")
                );
                return Ok((self.refuse(&why, Some(c))?, false));
            }
            None => project.agents[0].clone(),
        };
        // Written resolved: the node reads what to start from the row.
        let resolved = ChatCommand::New {
            project: Some(project.name.clone()),
            agent: Agent::parse(&agent),
            name: name.map(str::to_string),
        };
        self.start(&resolved, &project, &agent, name, None)
    }

    /// Reserves the session's name and writes the command for the project's node: the reply
    /// says it is starting. Refused when the chat holds `max_sessions` or the name is taken.
    fn start(
        &self,
        c: &ChatCommand,
        project: &ProjectEntry,
        agent: &str,
        name: Option<&str>,
        resumed: Option<&str>,
    ) -> Result<(Option<Reply>, bool)> {
        let (tx, r) = (self.w.tx(), self.r);
        let (live, _) = store::counts_in_chat(tx, &r.origin, &r.chat)?;
        if live >= i64::from(r.max_sessions) {
            let why = format!(
                "this chat has {live} sessions running, its limit (max_sessions = {}): stop \
                 one first (/sessions lists them).",
                r.max_sessions
            );
            return Ok((self.refuse(&why, Some(c))?, false));
        }
        let name = match name {
            Some(name) => name.to_string(),
            None => self.free_name(&project.name, agent)?,
        };
        let taken = store::session(tx, &name)?.is_some()
            || crate::storage::sessions::get(tx, &name)?.is_some();
        if taken {
            let why = format!("a session is named {name} already: give another name.");
            return Ok((self.refuse(&why, Some(c))?, false));
        }
        let node = project.node.as_str();
        let Some(id) = self.insert(
            json!(c).to_string(),
            CommandState::Ready,
            Some(node),
            Some(&name),
            None,
        )?
        else {
            return Ok((None, false));
        };
        store::insert_session_in(
            tx,
            &ChatSession {
                session: name.clone(),
                origin: r.origin.clone(),
                chat: r.chat.clone(),
                thread: None,
                project: project.name.clone(),
                agent: agent.to_string(),
                node: node.to_string(),
                command: id,
                state: ChatSessionState::Starting,
                resumed: resumed.map(str::to_string),
                created_at: self.w.now(),
                ended_at: None,
            },
        )?;
        let what = match resumed {
            Some(_) => "Resuming",
            None => "Starting",
        };
        let text = format!(
            "{what} {agent} in {} as {name} (on {node})… I will say when it is ready.{}",
            project.name,
            self.away(node)?
        );
        Ok((Some(Reply::text(text)), true))
    }

    /// What the chat is told when the node that carries the command out is away (stopped, or
    /// not heard from): it waits for that node. Empty when the node is alive (or unknown).
    fn away(&self, node: &str) -> Result<String> {
        let tx = self.w.tx();
        let known = crate::storage::nodes::list(tx)?
            .into_iter()
            .find(|n| n.name == node);
        Ok(match known {
            Some(n) if !crate::storage::nodes::is_alive(&n, self.w.now()) => format!(
                " Node {node} is away (last seen {} UTC): this waits until it is back.",
                clock_time(n.seen_at)
            ),
            _ => String::new(),
        })
    }

    /// `<project>-<agent>-<n>`, the first `n` from 1 that no session has.
    fn free_name(&self, project: &str, agent: &str) -> Result<String> {
        let tx = self.w.tx();
        // Project names may hold dots; a session's may not (see `names`).
        let stem: String = format!("{project}-{agent}")
            .chars()
            .map(|c| if c == '.' { '_' } else { c })
            .take(super::names::MAX_NAME_CHARS - 5)
            .collect();
        for n in 1.. {
            let name = format!("{stem}-{n}");
            if store::session(tx, &name)?.is_none()
                && crate::storage::sessions::get(tx, &name)?.is_none()
            {
                return Ok(name);
            }
        }
        unreachable!("some number is free")
    }

    /// The session `/stop` (or a topic) names: the one given, else the topic's, else the chat's
    /// current one; it must be one of this chat's.
    fn stopped_session(
        &self,
        named: Option<&str>,
    ) -> Result<std::result::Result<ChatSession, String>> {
        let (tx, r) = (self.w.tx(), self.r);
        let found = match (named, r.thread.as_deref()) {
            (Some(name), _) => store::session(tx, name)?,
            (None, Some(thread)) => store::by_topic(tx, &r.origin, &r.chat, thread)?,
            (None, None) => match store::current(tx, &r.origin, &r.chat)? {
                Some(current) => store::session(tx, &current)?,
                None => None,
            },
        };
        let words = ChatWords::of(&r.origin);
        Ok(match found {
            Some(s) if r.is_operator() || (s.origin == r.origin && s.chat == r.chat) => Ok(s),
            _ => Err(match named {
                Some(name) if r.is_operator() => format!(
                    "no session named {:?} was started from a chat or by `relayq session new` \
                     (a session started by hand ends in its terminal; `relayq session expire` \
                     drops what waits for it)",
                    shown(name)
                ),
                Some(name) => format!(
                    "this chat started no session named {:?} ({} lists them)",
                    shown(name),
                    words.command("sessions")
                ),
                None => format!(
                    "say which session: {} ({} lists them)",
                    words.command("stop NAME"),
                    words.command("sessions")
                ),
            }),
        })
    }

    fn stop(&self, c: &ChatCommand, named: Option<&str>) -> Result<(Option<Reply>, bool)> {
        let session = match self.stopped_session(named)? {
            Ok(s) => s,
            Err(why) => return Ok((self.refuse(&format!("{why}."), Some(c))?, false)),
        };
        if session.state == ChatSessionState::Ended {
            let why = format!("{} has ended already.", session.session);
            return Ok((self.refuse(&why, Some(c))?, false));
        }
        let name = session.session.as_str();
        // The operator asked in so many words: no button to confirm.
        let state = match self.r.is_operator() {
            true => CommandState::Ready,
            false => CommandState::Confirming,
        };
        let written = self.insert(
            json!(c).to_string(),
            state,
            Some(&session.node),
            Some(name),
            None,
        )?;
        let Some(id) = written else {
            return Ok((None, false));
        };
        if state == CommandState::Ready {
            return Ok((None, true));
        }
        let reply = Reply {
            text: format!(
                "Stop {name} ({} in {})? Its agent is ended and what still waits for it is \
                 dropped.",
                session.agent, session.project
            ),
            buttons: vec![vec![
                Button {
                    label: format!("Stop {name}"),
                    data: Tap::Stop(id).data(),
                },
                Button {
                    label: "Keep it".into(),
                    data: Tap::Keep(id).data(),
                },
            ]],
        };
        Ok((Some(reply), false))
    }

    fn resume(&self, c: &ChatCommand, project: Option<&str>) -> Result<(Option<Reply>, bool)> {
        let project = match self.project(project)? {
            Ok(p) => p,
            Err(why) => return Ok((self.refuse(&format!("{why}."), Some(c))?, false)),
        };
        let node = project.node.as_str();
        // Written resolved: the node reads which project from the row.
        let c = &ChatCommand::Resume {
            project: Some(project.name.clone()),
        };
        if self
            .insert(
                json!(c).to_string(),
                CommandState::Ready,
                Some(node),
                None,
                None,
            )?
            .is_none()
        {
            return Ok((None, false));
        }
        let text = format!(
            "Looking for the conversations of {} in {}…{}",
            project.agents.join(", "),
            project.name,
            self.away(node)?
        );
        Ok((Some(Reply::text(text)), true))
    }

    /// A page of the chat's sessions, a button each, and the pages around it.
    fn sessions_page(&self, page: u32) -> Result<Reply> {
        let (tx, r) = (self.w.tx(), self.r);
        let (_, all) = store::counts_in_chat(tx, &r.origin, &r.chat)?;
        if all == 0 {
            return Ok(Reply::text(
                "No sessions were started from this chat yet: /new [project] [agent] [name] \
                 starts one.",
            ));
        }
        let pages = (all + PAGE - 1) / PAGE;
        let page = i64::from(page).min(pages);
        let sessions = store::of_chat(tx, &r.origin, &r.chat, PAGE, (page - 1) * PAGE)?;
        let current = store::current(tx, &r.origin, &r.chat)?;
        let mut lines = vec![format!("Sessions of this chat, page {page} of {pages}:")];
        let mut buttons = Vec::new();
        for s in &sessions {
            let state = self.state_of(s)?;
            let mark = match current.as_deref() == Some(s.session.as_str()) {
                true => " ← current",
                false => "",
            };
            lines.push(format!(
                "• {} · {} · {} · {state} since {}{mark}",
                s.session,
                s.agent,
                s.project,
                clock_time(s.created_at)
            ));
            buttons.push(vec![Button {
                label: format!("{} ({state})", s.session),
                data: Tap::Use(s.command).data(),
            }]);
        }
        let mut paging = Vec::new();
        if page > 1 {
            paging.push(Button {
                label: "◀ newer".into(),
                data: Tap::Page((page - 1) as u32).data(),
            });
        }
        if page < pages {
            paging.push(Button {
                label: "older ▶".into(),
                data: Tap::Page((page + 1) as u32).data(),
            });
        }
        if !paging.is_empty() {
            buttons.push(paging);
        }
        lines.push("Tap one to talk to it.".into());
        Ok(Reply {
            text: lines.join("\n"),
            buttons,
        })
    }

    /// A session's state for the chat: starting, ready, working, asking, gone.
    fn state_of(&self, s: &ChatSession) -> Result<&'static str> {
        if s.state == ChatSessionState::Ended {
            return Ok("gone");
        }
        if s.state == ChatSessionState::Starting {
            return Ok("starting");
        }
        let agent = crate::storage::sessions::agent_state(self.w.tx(), &s.session)?;
        Ok(match agent.map(|a| a.0) {
            Some(crate::AgentState::Working) => "working",
            Some(crate::AgentState::AwaitingApproval) => "asking",
            Some(crate::AgentState::Gone) => "gone",
            _ => "ready",
        })
    }

    /// The chat's live sessions, their states, and how many messages wait for each.
    fn status(&self) -> Result<Reply> {
        let (tx, r) = (self.w.tx(), self.r);
        let sessions = store::of_chat(tx, &r.origin, &r.chat, 1000, 0)?;
        let live: Vec<&ChatSession> = sessions
            .iter()
            .filter(|s| s.state != ChatSessionState::Ended)
            .collect();
        if live.is_empty() {
            return Ok(Reply::text(format!(
                "No session of this chat runs: {} starts one.",
                ChatWords::of(&r.origin).command("new [project] [agent] [name]")
            )));
        }
        let current = store::current(tx, &r.origin, &r.chat)?;
        let mut lines = vec![format!("{} session(s) running from this chat:", live.len())];
        for s in live {
            let waiting = self.w.door.inbound.unfinished_of(tx, &s.session)?;
            let mark = match current.as_deref() == Some(s.session.as_str()) {
                true => ", current",
                false => "",
            };
            lines.push(format!(
                "• {} ({} in {}, on {}): {}, {waiting} message(s) waiting{mark}",
                s.session,
                s.agent,
                s.project,
                s.node,
                self.state_of(s)?
            ));
        }
        Ok(Reply::text(lines.join("\n")))
    }

    /// `/progress`: what the chat sees while its agent works, set to `mode` when given.
    fn progress(&self, mode: Option<ProgressMode>) -> Result<Reply> {
        let (tx, r) = (self.w.tx(), self.r);
        let routes = self.w.door.routes.read().expect("routes lock").clone();
        let Some(own) = routes.progress.get(&r.origin).copied() else {
            return Ok(Reply::text(
                "Progress is not shown for this chat's source (its `progress` setting is \
                 missing).",
            ));
        };
        let words = ChatWords::of(&r.origin);
        let usage = words.command("progress off|receipts|steps|stream");
        let Some(mode) = mode else {
            let now = crate::progress::mode_of(tx, &routes, &r.origin, &r.chat)?;
            return Ok(Reply::text(format!(
                "Progress in this chat: {now} ({}). {usage} changes it; the source's setting is {own}.",
                crate::progress::shows(now)
            )));
        };
        crate::storage::progress::set_chat_progress_in(tx, &r.origin, &r.chat, mode)?;
        Ok(Reply::text(format!(
            "Progress in this chat is now {mode}: {}.",
            crate::progress::shows(mode)
        )))
    }

    /// A tap: the line shown where it was tapped, the reply in the chat, whether a node has a
    /// command to carry out.
    fn tapped(&self, tap: Tap) -> Result<(String, Option<Reply>, bool)> {
        let (tx, r) = (self.w.tx(), self.r);
        if !r.known {
            return Ok(("You may not use this bot's buttons".into(), None, false));
        }
        if let Tap::Page(page) = tap {
            return Ok((String::new(), Some(self.sessions_page(page)?), false));
        }
        let id = match tap {
            Tap::Use(id) | Tap::Stop(id) | Tap::Keep(id) | Tap::Resume(id, _) => id,
            Tap::Page(_) => unreachable!("answered above"),
        };
        let command = store::command(tx, id)?.filter(|c| c.origin == r.origin && c.chat == r.chat);
        let Some(command) = command else {
            return Ok(("This button is too old to answer".into(), None, false));
        };
        if !matches!(tap, Tap::Use(_)) && !r.may {
            let line = "Only the people in allowed_users may stop or resume sessions";
            return Ok((line.into(), None, false));
        }
        match tap {
            Tap::Use(_) => self.use_session(&command),
            Tap::Stop(_) | Tap::Keep(_) => self.confirm_stop(&command, matches!(tap, Tap::Stop(_))),
            Tap::Resume(_, n) => self.resume_chosen(&command, n),
            Tap::Page(_) => unreachable!("answered above"),
        }
    }

    fn use_session(&self, command: &CommandRow) -> Result<(String, Option<Reply>, bool)> {
        let (tx, r) = (self.w.tx(), self.r);
        let Some(s) = command
            .session
            .as_deref()
            .map(|s| store::session(tx, s))
            .transpose()?
            .flatten()
        else {
            return Ok(("That session is not known any more".into(), None, false));
        };
        if let Some(thread) = &s.thread {
            let words = ChatWords::of(&s.origin);
            let line = format!("{} talks in its own {}", s.session, words.thread);
            let text = format!(
                "{} talks in its own {} (#{thread}): write there.",
                s.session, words.thread
            );
            return Ok((line, Some(Reply::text(text)), false));
        }
        store::set_current_in(tx, &r.origin, &r.chat, &s.session)?;
        let line = format!("Now talking to {}", s.session);
        let state = self.state_of(&s)?;
        let text = format!(
            "Messages in this chat now go to {} ({} in {}, {state}).",
            s.session, s.agent, s.project
        );
        Ok((line, Some(Reply::text(text)), false))
    }

    fn confirm_stop(
        &self,
        command: &CommandRow,
        stop: bool,
    ) -> Result<(String, Option<Reply>, bool)> {
        let tx = self.w.tx();
        let name = command.session.clone().unwrap_or_default();
        let (to, line, text) = match stop {
            true => (
                CommandState::Ready,
                format!("Stopping {name}…"),
                format!("Stopping {name}…"),
            ),
            false => (
                CommandState::Done,
                format!("{name} keeps running"),
                format!("{name} keeps running."),
            ),
        };
        let outcome = (!stop).then_some(text.as_str());
        let moved = store::move_command_in(
            tx,
            command.id,
            CommandState::Confirming,
            to,
            &CommandMove {
                outcome,
                ..CommandMove::default()
            },
        )?;
        if !moved {
            return Ok(("Already answered".into(), None, false));
        }
        Ok((line, Some(Reply::text(text)), stop))
    }

    /// Conversation `n` of those `/resume` command `command` listed: started like `/new`,
    /// resuming it (the id is the listing's, never the tap's). The first tap wins.
    fn resume_chosen(
        &self,
        command: &CommandRow,
        n: usize,
    ) -> Result<(String, Option<Reply>, bool)> {
        let tx = self.w.tx();
        let listed: Option<Conversation> = command
            .detail
            .as_deref()
            .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .and_then(|d| {
                serde_json::from_value::<Vec<Conversation>>(d["conversations"].clone()).ok()
            })
            .and_then(|all| all.into_iter().nth(n));
        let project = match serde_json::from_str::<ChatCommand>(&command.command) {
            Ok(ChatCommand::Resume { project: Some(p) }) => store::project(tx, &p)?,
            _ => None,
        };
        let (Some(conversation), Some(project)) = (listed, project) else {
            return Ok(("This button is too old to answer".into(), None, false));
        };
        let title = conversation.title.clone();
        let moved = store::move_command_in(
            tx,
            command.id,
            CommandState::Listed,
            CommandState::Done,
            &CommandMove {
                outcome: Some(&format!("resumed: {title}")),
                ..CommandMove::default()
            },
        )?;
        if !moved {
            return Ok(("Already answered".into(), None, false));
        }
        let agent = conversation.agent;
        if !project.agents.iter().any(|a| a == agent.as_str()) {
            let why = format!("{agent} may not run in {} any more.", project.name);
            return Ok((
                why.clone(),
                Some(Reply::text(format!("Not done: {why}"))),
                false,
            ));
        }
        let new = ChatCommand::New {
            project: Some(project.name.clone()),
            agent: Some(agent),
            name: None,
        };
        let (reply, ready) =
            self.start(&new, &project, agent.as_str(), None, Some(&conversation.id))?;
        Ok((format!("Resuming “{title}”"), reply, ready))
    }

    /// The reply in the request's chat and topic, on the channel that answers its origin.
    fn reply_in(&self, reply: Reply) -> Result<Option<String>> {
        let (w, r) = (self.w, self.r);
        if r.is_operator() {
            return Ok(None); // the operator reads the command's row
        }
        let routes = w.door.routes.read().expect("routes lock").clone();
        let Some(channel) = routes.replies.get(&r.origin) else {
            tracing::warn!(
                origin = r.origin,
                "no channel answers this source: a session command's reply is not sent"
            );
            return Ok(None);
        };
        let key = match &r.asked {
            Asked::Typed(_) => r.message_id.clone(),
            Asked::Tapped { callback, .. } => callback.clone(),
        };
        let message = OutboundMessage {
            thread: r.thread.clone(),
            reply_to: match r.asked {
                Asked::Typed(_) => r.message_id.clone(),
                Asked::Tapped { .. } => None,
            },
            idempotency_key: key.map(|k| format!("relayq-session-{}-{}-{k}", r.origin, r.chat)),
            event: Some("session".into()),
            buttons: reply.buttons,
            ..OutboundMessage::text(channel, &r.chat, &reply.text)
        };
        let written = crate::outbound::enqueue_in(&w.door.outbound, w.tx(), &message, None)?;
        Ok((!written.first.duplicate).then(|| message.destination_key()))
    }
}

/// `HH:MM` UTC of unix ms `at`.
fn clock_time(at: i64) -> String {
    crate::outbound::notice::clock_time(at)
}

/// A reply about command `c`, in its chat, in `thread` (its session's topic, or where the
/// command was typed); written once (`what` keys it).
fn reply_to_command_in(
    w: &Writer<'_>,
    c: &CommandRow,
    thread: Option<&str>,
    text: &str,
    what: &str,
) -> Result<Option<String>> {
    if c.origin == super::OPERATOR {
        return Ok(None); // the operator reads the command's row
    }
    let routes = w.door.routes.read().expect("routes lock").clone();
    let Some(channel) = routes.replies.get(&c.origin) else {
        tracing::warn!(
            origin = c.origin,
            "no channel answers this source: a session command's outcome is not sent"
        );
        return Ok(None);
    };
    let message = OutboundMessage {
        thread: thread.map(str::to_string),
        idempotency_key: Some(format!("relayq-session-command-{}-{what}", c.id)),
        event: Some("session".into()),
        session: c.session.clone(),
        ..OutboundMessage::text(channel, &c.chat, text)
    };
    let written = crate::outbound::enqueue_in(&w.door.outbound, w.tx(), &message, None)?;
    Ok((!written.first.duplicate).then(|| message.destination_key()))
}

/// Moves leased command `c` from `running` to `to`, its outcome `text`; false when its lease
/// lapsed and another daemon took it over (that one records the outcome).
fn finish_in(tx: &crate::tx::Tx<'_>, c: &CommandRow, to: CommandState, text: &str) -> Result<bool> {
    let outcome = CommandMove {
        outcome: Some(text),
        ..CommandMove::default()
    };
    store::move_command_in(tx, c.id, CommandState::Running, to, &outcome)
}

/// The command and the session it names, as written (the caller leased the command).
fn command_and_session(w: &Writer<'_>, id: i64) -> Result<(CommandRow, Option<ChatSession>)> {
    let c = store::command(w.tx(), id)?.ok_or_else(|| {
        crate::EngineError::Invalid(format!("session command {id} is not written"))
    })?;
    let s = match &c.session {
        Some(name) => store::session(w.tx(), name)?,
        None => None,
    };
    Ok((c, s))
}

/// The topic made for a session, recorded before its agent starts (so a retry finds it).
#[derive(Debug, Clone)]
pub struct SetTopic {
    pub session: String,
    pub thread: String,
}

impl Write for SetTopic {
    type Output = ();

    fn apply(&self, w: &Writer<'_>) -> Result<()> {
        store::set_thread_in(w.tx(), &self.session, &self.thread)
    }
}

/// A session's agent runs and its hooks reached relayq: the session runs, its topic (or, in a
/// chat without topics, the chat) talks to it, its notices go there, the command is done and
/// the chat told. The ordering keys of the replies written.
#[derive(Debug, Clone)]
pub struct SessionReady {
    pub command: i64,
}

impl Write for SessionReady {
    type Output = Vec<String>;

    fn apply(&self, w: &Writer<'_>) -> Result<Vec<String>> {
        let tx = w.tx();
        let (c, s) = command_and_session(w, self.command)?;
        let Some(s) = s else {
            return Ok(Vec::new());
        };
        if s.state == ChatSessionState::Ended {
            // Stopped while it started (/stop won the race): nothing is bound to it.
            let text = format!("{} was stopped before it was ready.", s.session);
            finish_in(tx, &c, CommandState::Done, &text)?;
            return Ok(Vec::new());
        }
        let words = ChatWords::of(&s.origin);
        let text = format!(
            "{} is ready: {} in {}, on {}. Write {} to talk to it; {} ends it.",
            s.session,
            s.agent,
            s.project,
            s.node,
            match s.thread {
                Some(_) => format!("in this {}", words.thread),
                None => "here".into(),
            },
            words.command(&format!("stop {}", s.session))
        );
        if !finish_in(tx, &c, CommandState::Done, &text)? {
            return Ok(Vec::new()); // its lease lapsed and another daemon took it over
        }
        store::set_session_state_in(tx, &s.session, ChatSessionState::Running)?;
        if s.thread.is_none() {
            store::set_current_in(tx, &s.origin, &s.chat, &s.session)?;
        }
        let origin = crate::sessions::Origin {
            origin: s.origin.clone(),
            chat: s.chat.clone(),
            thread: s.thread.clone(),
        };
        crate::sessions::set_origin_in(tx, &s.session, &origin)?;
        let mut told = Vec::new();
        told.extend(reply_to_command_in(
            w,
            &c,
            s.thread.as_deref(),
            &text,
            "ready",
        )?);
        if s.thread.is_some() && s.thread != c.thread {
            let there = format!("{} is ready in its own {}.", s.session, words.thread);
            told.extend(reply_to_command_in(
                w,
                &c,
                c.thread.as_deref(),
                &there,
                "ready-here",
            )?);
        }
        Ok(told)
    }
}

/// A command could not be carried out: the chat is told why (`why`, in words a person can act
/// on); a session it was starting ends. The ordering keys of the replies written.
#[derive(Debug, Clone)]
pub struct CommandFailed {
    pub command: i64,
    pub why: String,
}

impl Write for CommandFailed {
    type Output = Vec<String>;

    fn apply(&self, w: &Writer<'_>) -> Result<Vec<String>> {
        let tx = w.tx();
        let (c, s) = command_and_session(w, self.command)?;
        let text = format!("Not done: {}", self.why);
        if !finish_in(tx, &c, CommandState::Failed, &text)? {
            return Ok(Vec::new());
        }
        if let Some(s) = s.filter(|s| s.state == ChatSessionState::Starting) {
            store::set_session_state_in(tx, &s.session, ChatSessionState::Ended)?;
        }
        Ok(
            reply_to_command_in(w, &c, c.thread.as_deref(), &text, "failed")?
                .into_iter()
                .collect(),
        )
    }
}

/// A session was stopped (its agent ended): the registry ends it, what waited for it is
/// dropped (each chat told), the command is done and the chat told. The ordering keys of the
/// notices and replies written.
#[derive(Debug, Clone)]
pub struct SessionStopped {
    pub command: i64,
}

impl Write for SessionStopped {
    type Output = Vec<String>;

    fn apply(&self, w: &Writer<'_>) -> Result<Vec<String>> {
        let tx = w.tx();
        let (c, s) = command_and_session(w, self.command)?;
        let Some(s) = s else {
            return Ok(Vec::new());
        };
        let text = format!("{} stopped: its agent has ended.", s.session);
        if !finish_in(tx, &c, CommandState::Done, &text)? {
            return Ok(Vec::new());
        }
        store::set_session_state_in(tx, &s.session, ChatSessionState::Ended)?;
        let routes = w.door.routes.read().expect("routes lock").clone();
        let why = format!(
            "{} was stopped from the chat before its agent took the message",
            s.session
        );
        let queues = &w.door.queues;
        let mut told = crate::sessions::ending::end_in(
            &queues.inbound,
            &queues.outbound,
            tx,
            &routes,
            &s.session,
            &why,
        )?;
        told.extend(reply_to_command_in(
            w,
            &c,
            s.thread.as_deref(),
            &text,
            "stopped",
        )?);
        if s.thread != c.thread {
            told.extend(reply_to_command_in(
                w,
                &c,
                c.thread.as_deref(),
                &text,
                "stopped-here",
            )?);
        }
        Ok(told)
    }
}

/// The conversations a `/resume` command's node found: kept with the command (a tap names one
/// by its place in this list), offered in the chat with a button each.
#[derive(Debug, Clone)]
pub struct ConversationsListed {
    pub command: i64,
    pub conversations: Vec<Conversation>,
    /// The agents whose conversations were looked for.
    pub agents: Vec<String>,
}

impl Write for ConversationsListed {
    type Output = Vec<String>;

    fn apply(&self, w: &Writer<'_>) -> Result<Vec<String>> {
        let tx = w.tx();
        let (c, _) = command_and_session(w, self.command)?;
        let project = match serde_json::from_str::<ChatCommand>(&c.command) {
            Ok(ChatCommand::Resume { project: Some(p) }) => p,
            _ => String::new(),
        };
        let mut detail: serde_json::Value = c
            .detail
            .as_deref()
            .and_then(|d| serde_json::from_str(d).ok())
            .unwrap_or_else(|| json!({}));
        detail["conversations"] = json!(self.conversations);
        let detail = detail.to_string();
        let (to, text, buttons) = match self.conversations.is_empty() {
            true => (
                CommandState::Done,
                format!(
                    "No conversation of {} in {project} to resume: {} starts one.",
                    self.agents.join(" or "),
                    ChatWords::of(&c.origin).command("new")
                ),
                Vec::new(),
            ),
            false => {
                let mut lines = vec![format!("Conversations in {project}, newest first:")];
                let mut buttons = Vec::new();
                for (i, conv) in self.conversations.iter().enumerate() {
                    lines.push(format!(
                        "{}. {} · {} · {}",
                        i + 1,
                        conv.agent,
                        clock_time(conv.at),
                        conv.title
                    ));
                    let short: String = conv.title.chars().take(40).collect();
                    buttons.push(vec![Button {
                        label: format!("{}. {} {short}", i + 1, conv.agent),
                        data: Tap::Resume(c.id, i).data(),
                    }]);
                }
                lines.push("Tap one to resume it.".into());
                (CommandState::Listed, lines.join("\n"), buttons)
            }
        };
        let moved = store::move_command_in(
            tx,
            c.id,
            CommandState::Running,
            to,
            &CommandMove {
                detail: Some(&detail),
                outcome: (to == CommandState::Done).then_some(text.as_str()),
                ..CommandMove::default()
            },
        )?;
        if !moved || c.origin == super::OPERATOR {
            return Ok(Vec::new());
        }
        let routes = w.door.routes.read().expect("routes lock").clone();
        let Some(channel) = routes.replies.get(&c.origin) else {
            return Ok(Vec::new());
        };
        let message = OutboundMessage {
            thread: c.thread.clone(),
            idempotency_key: Some(format!("relayq-session-command-{}-listed", c.id)),
            event: Some("session".into()),
            buttons,
            ..OutboundMessage::text(channel, &c.chat, &text)
        };
        let written = crate::outbound::enqueue_in(&w.door.outbound, tx, &message, None)?;
        Ok((!written.first.duplicate)
            .then(|| message.destination_key())
            .into_iter()
            .collect())
    }
}

/// Node `node` publishes the projects it hosts (at start and at each reload).
#[derive(Debug, Clone)]
pub struct PublishProjects {
    pub node: String,
    pub projects: Vec<ProjectEntry>,
}

impl Write for PublishProjects {
    type Output = ();

    fn apply(&self, w: &Writer<'_>) -> Result<()> {
        store::publish_in(w.tx(), &self.node, &self.projects)
    }
}

/// At a daemon's start: the commands an earlier daemon of this node was carrying out when it
/// stopped are carried out again (a start finds its tmux session running, a stop finds it
/// gone: neither is done twice). How many.
#[derive(Debug, Clone, Copy)]
pub struct ReclaimCommands;

impl Write for ReclaimCommands {
    type Output = usize;

    fn apply(&self, w: &Writer<'_>) -> Result<usize> {
        let engine = &w.door.engine;
        store::reclaim_commands_in(w.tx(), engine.node(), engine.owner())
    }
}

/// The node's due session commands, leased to this daemon for `lease_ms`.
#[derive(Debug, Clone, Copy)]
pub struct LeaseCommands {
    pub lease_ms: i64,
}

impl Write for LeaseCommands {
    type Output = Vec<CommandRow>;

    fn apply(&self, w: &Writer<'_>) -> Result<Vec<CommandRow>> {
        let engine = &w.door.engine;
        let until = w.now() + self.lease_ms;
        store::lease_commands_in(w.tx(), engine.node(), engine.owner(), until)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::chat_sessions::{command_of, route};
    use crate::storage::sql::Query;
    use crate::storage::test_db::TestDb;
    use crate::{Engine, NoticeRoutes, SystemClock, WriteDoor};

    const ORIGIN: &str = "telegram:bot";

    fn door(db: &TestDb) -> WriteDoor {
        let engine = Engine::with_clock(db.db.clone(), Arc::new(SystemClock)).with_node("n1");
        let mut routes = NoticeRoutes::none();
        routes.replies.insert(ORIGIN.into(), "bot".into());
        WriteDoor::new(engine.queues(&Default::default()), routes)
    }

    fn typed(message: u32, user: &str, text: &str) -> SessionRequest {
        SessionRequest {
            origin: ORIGIN.into(),
            chat: "42".into(),
            thread: None,
            message_id: Some(message.to_string()),
            user_id: Some(user.into()),
            user_name: user.into(),
            may: user == "ann",
            known: user != "mallory",
            topics: false,
            max_sessions: 2,
            asked: Asked::Typed(command_of(text).expect("a command")),
        }
    }

    fn tapped(tap: Tap, user: &str) -> SessionRequest {
        SessionRequest {
            message_id: None,
            asked: Asked::Tapped {
                tap,
                callback: Some(format!("cb-{}", tap.data())),
            },
            ..typed(0, user, "/status")
        }
    }

    /// The text (and button data) of the replies written so far, oldest first.
    fn replies(db: &TestDb) -> Vec<(String, Vec<String>)> {
        let payloads: Vec<String> = db
            .db
            .read()
            .unwrap()
            .query_all(
                &crate::storage::sql::Sql::same(
                    "SELECT payload FROM queue_rows WHERE queue = 'outbound' ORDER BY id",
                ),
                crate::params![],
                |r| r.get(0),
            )
            .unwrap();
        payloads
            .iter()
            .map(|p| {
                let m: OutboundMessage = serde_json::from_str(p).unwrap();
                let data = m.buttons.iter().flatten().map(|b| b.data.clone()).collect();
                (m.text, data)
            })
            .collect()
    }

    fn record(door: &WriteDoor, requests: Vec<SessionRequest>) -> RequestsRecorded {
        door.apply_now(RecordRequests(requests)).unwrap()
    }

    fn publish(door: &WriteDoor) {
        let demo = ProjectEntry {
            name: "demo".into(),
            node: "n1".into(),
            agents: vec!["claude".into(), "gemini".into()],
        };
        let web = ProjectEntry {
            name: "web.app".into(),
            node: "n2".into(),
            agents: vec!["codex".into()],
        };
        door.apply_now(PublishProjects {
            node: "n1".into(),
            projects: vec![demo, web],
        })
        .unwrap();
    }

    #[test]
    fn new_reserves_the_name_writes_the_command_for_the_projects_node_and_says_starting() {
        for db in TestDb::both() {
            let door = door(&db);
            publish(&door);
            let got = record(&door, vec![typed(1, "ann", "/new demo")]);
            assert_eq!(got.ready, 1, "{}", db.name());
            let tx = db.db.read().unwrap();
            let s = store::session(&tx, "demo-claude-1").unwrap().unwrap();
            assert_eq!((s.agent.as_str(), s.node.as_str()), ("claude", "n1"));
            assert_eq!(s.state, ChatSessionState::Starting);
            let c = store::command(&tx, s.command).unwrap().unwrap();
            assert_eq!(c.state, CommandState::Ready);
            assert_eq!(c.node.as_deref(), Some("n1"));
            let said = replies(&db);
            assert!(
                said[0]
                    .0
                    .starts_with("Starting claude in demo as demo-claude-1 (on n1)"),
                "{said:?}"
            );

            // A second /new gets the next free name; a project with dots gives none to it.
            record(&door, vec![typed(2, "ann", "/new web.app codex")]);
            let tx = db.db.read().unwrap();
            assert_eq!(
                store::session(&tx, "web_app-codex-1")
                    .unwrap()
                    .unwrap()
                    .node,
                "n2"
            );

            // The same message read again (a crash before the offset moved) is one command.
            let again = record(&door, vec![typed(1, "ann", "/new demo")]);
            assert_eq!(again, RequestsRecorded::default(), "{}", db.name());
            assert_eq!(replies(&db).len(), 2, "{}", db.name());
        }
    }

    #[test]
    fn bad_new_commands_start_nothing_and_the_chat_is_told_why() {
        for db in TestDb::both() {
            let door = door(&db);
            publish(&door);
            let cases = [
                (
                    "/new nope",
                    "there is no project \"nope\": the projects are demo, web.app",
                ),
                ("/new", "say which project: the projects are demo, web.app"),
                (
                    "/new demo codex",
                    "codex may not run in demo: its agents are claude, gemini",
                ),
                (
                    "/new demo claude ../x",
                    "the session name \"../x\" has the character '.'",
                ),
                ("/new demo claude a:b", "has the character ':'"),
                ("/new demo claude a\u{1b}b", "has the character U+001B"),
            ];
            for (n, (text, why)) in cases.iter().enumerate() {
                let got = record(&door, vec![typed(10 + n as u32, "ann", text)]);
                assert_eq!(got.ready, 0, "{text}");
                let said = replies(&db);
                let last = &said.last().unwrap().0;
                assert!(
                    last.starts_with("Not done: ") && last.contains(why),
                    "{text}: {last}"
                );
                assert!(!last.contains('\u{1b}'), "{last:?}");
            }
            // A writer who is no approver starts nothing.
            let got = record(&door, vec![typed(20, "eve", "/new demo")]);
            assert_eq!(got.ready, 0);
            assert!(replies(&db).last().unwrap().0.contains("approvers"));
            // A stranger is told once an hour, in words that name nothing; even /sessions.
            let before = replies(&db).len();
            record(&door, vec![typed(30, "mallory", "/sessions")]);
            record(&door, vec![typed(31, "mallory", "/new demo")]);
            let said = replies(&db);
            assert_eq!(said.len(), before + 1, "{said:?}");
            assert_eq!(said.last().unwrap().0, crate::access::STRANGER_REPLY);
            let tap = record(&door, vec![tapped(Tap::Page(1), "mallory")]);
            assert_eq!(replies(&db).len(), before + 1);
            assert!(tap.taps[0].1.contains("may not"));
            // The name taken, then the chat's limit (2).
            record(&door, vec![typed(21, "ann", "/new demo claude a1")]);
            record(&door, vec![typed(22, "ann", "/new demo claude a1")]);
            assert!(replies(&db).last().unwrap().0.contains("named a1 already"));
            record(&door, vec![typed(23, "ann", "/new demo claude a2")]);
            record(&door, vec![typed(24, "ann", "/new demo claude a3")]);
            let last = replies(&db).last().unwrap().0.clone();
            assert!(last.contains("max_sessions = 2"), "{last}");
            let tx = db.db.read().unwrap();
            assert!(
                store::session(&tx, "a3").unwrap().is_none(),
                "{}",
                db.name()
            );
        }
    }

    #[test]
    fn stop_asks_first_and_the_first_tap_wins() {
        for db in TestDb::both() {
            let door = door(&db);
            publish(&door);
            record(&door, vec![typed(1, "ann", "/new demo claude s1")]);
            record(&door, vec![typed(2, "ann", "/stop s1")]);
            let (text, data) = replies(&db).pop().unwrap();
            assert!(text.starts_with("Stop s1 (claude in demo)?"), "{text}");
            let id = match Tap::read(&data[0]) {
                Some(Tap::Stop(id)) => id,
                other => panic!("{other:?}"),
            };
            // A stranger's tap changes nothing; the first allowed tap readies it; a second
            // tap (Keep) is "already answered".
            let eve = record(&door, vec![tapped(Tap::Stop(id), "eve")]);
            assert_eq!(eve.ready, 0);
            assert!(eve.taps[0].1.contains("allowed_users"));
            let ann = record(&door, vec![tapped(Tap::Stop(id), "ann")]);
            assert_eq!((ann.ready, ann.taps[0].1.as_str()), (1, "Stopping s1…"));
            let late = record(&door, vec![tapped(Tap::Keep(id), "ann")]);
            assert_eq!(late.taps[0].1, "Already answered", "{}", db.name());
            let tx = db.db.read().unwrap();
            let c = store::command(&tx, id).unwrap().unwrap();
            assert_eq!(
                (c.state, c.node.as_deref()),
                (CommandState::Ready, Some("n1"))
            );
            // Nothing to stop: said so.
            drop(tx);
            record(&door, vec![typed(3, "ann", "/stop")]);
            assert!(replies(&db).last().unwrap().0.contains("say which session"));
        }
    }

    #[test]
    fn sessions_lists_a_page_and_a_tap_makes_one_current_for_the_chats_messages() {
        for db in TestDb::both() {
            let door = door(&db);
            publish(&door);
            for n in 0..12 {
                let mut request = typed(n, "ann", &format!("/new demo claude s{n}"));
                request.max_sessions = 20;
                record(&door, vec![request]);
            }
            record(&door, vec![typed(50, "ann", "/sessions")]);
            let (text, data) = replies(&db).pop().unwrap();
            assert!(
                text.starts_with("Sessions of this chat, page 1 of 2:"),
                "{text}"
            );
            assert_eq!(text.lines().filter(|l| l.starts_with("• ")).count(), 10);
            assert!(text.contains("• s11 · claude · demo · starting"), "{text}");
            assert_eq!(data.last().map(String::as_str), Some("relayq-s:page:2"));
            let tap = Tap::read(&data[0]).unwrap();
            let tx = db.db.read().unwrap();
            assert_eq!(
                route(&tx, ORIGIN, "42", None, Some("static"))
                    .unwrap()
                    .as_deref(),
                Some("static")
            );
            drop(tx);
            let got = record(&door, vec![tapped(tap, "ann")]);
            assert_eq!(got.taps[0].1, "Now talking to s11");
            let tx = db.db.read().unwrap();
            assert_eq!(
                route(&tx, ORIGIN, "42", None, Some("static"))
                    .unwrap()
                    .as_deref(),
                Some("s11")
            );
            drop(tx);
            record(&door, vec![tapped(Tap::Page(2), "ann")]);
            let (text, _) = replies(&db).pop().unwrap();
            assert!(
                text.starts_with("Sessions of this chat, page 2 of 2:") && text.contains("s0"),
                "{text}"
            );
        }
    }

    /// A `/stop` that ends a session while its agent is still starting wins: the start's
    /// outcome, recorded after, binds nothing and says so.
    #[test]
    fn a_session_stopped_while_it_starts_is_not_bound_when_its_start_ends() {
        for db in TestDb::both() {
            let door = door(&db);
            publish(&door);
            record(&door, vec![typed(1, "ann", "/new demo claude s1")]);
            let new = door.apply_now(LeaseCommands { lease_ms: 60_000 }).unwrap();
            assert_eq!(new.len(), 1, "{}", db.name());
            record(&door, vec![typed(2, "ann", "/stop s1")]);
            let (_, data) = replies(&db).pop().unwrap();
            let tap = Tap::read(&data[0]).unwrap();
            record(&door, vec![tapped(tap, "ann")]);
            let stop = door.apply_now(LeaseCommands { lease_ms: 60_000 }).unwrap();
            door.apply_now(SessionStopped {
                command: stop[0].id,
            })
            .unwrap();
            door.apply_now(SessionReady { command: new[0].id }).unwrap();
            let tx = db.db.read().unwrap();
            let s = store::session(&tx, "s1").unwrap().unwrap();
            assert_eq!(s.state, ChatSessionState::Ended, "{}", db.name());
            assert_eq!(store::current(&tx, ORIGIN, "42").unwrap(), None);
            let c = store::command(&tx, new[0].id).unwrap().unwrap();
            assert_eq!(
                c.outcome.as_deref(),
                Some("s1 was stopped before it was ready.")
            );
            assert!(!replies(&db).iter().any(|(t, _)| t.contains("is ready:")));
        }
    }

    /// Never silent: a command for a node that is away says so, and waits for it.
    #[test]
    fn a_command_for_a_node_that_is_away_says_it_waits_for_it() {
        for db in TestDb::both() {
            let door = door(&db);
            publish(&door);
            db.db
                .write(|tx| {
                    crate::storage::nodes::join_in(tx, "n2", "n2/1")?;
                    crate::storage::nodes::leave_in(tx, "n2", "n2/1")
                })
                .unwrap();
            record(&door, vec![typed(1, "ann", "/new web.app")]);
            let (said, _) = replies(&db).pop().unwrap();
            assert!(said.contains("Node n2 is away (last seen "), "{said}");
            assert!(said.contains("this waits until it is back"), "{said}");
            // A node never heard of (or alive) adds nothing.
            record(&door, vec![typed(2, "ann", "/new demo")]);
            let (said, _) = replies(&db).pop().unwrap();
            assert!(!said.contains("away"), "{said}");
            // Both wait for their node, oldest first, as `relayq status` lists them.
            let waiting =
                crate::storage::chat_sessions::waiting_commands(&db.db.read().unwrap(), 20)
                    .unwrap();
            let nodes: Vec<Option<&str>> = waiting.iter().map(|c| c.node.as_deref()).collect();
            assert_eq!(waiting.len(), 2, "{waiting:?}");
            assert_eq!(nodes[0], Some("n2"), "{waiting:?}");
            assert!(waiting[0].id < waiting[1].id);
            let one =
                crate::storage::chat_sessions::waiting_commands(&db.db.read().unwrap(), 1).unwrap();
            assert_eq!(one.len(), 1, "the limit holds");
        }
    }
}
