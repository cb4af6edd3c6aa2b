//! The launcher: carries out the session commands chats gave (`/new`, `/stop`, `/resume`)
//! for the projects this node hosts (see `relayq_engine::chat_sessions` for how they are
//! recorded and answered).
//!
//! ```text
//!   source batch ──▶ RecordRequests (the batch's transaction): command `ready` for the
//!                    project's node, the session's name reserved, "starting…" in the chat
//!   LauncherActor (told by the supervisor; every 2 s for other nodes' chats):
//!       LeaseCommands ──▶ each, in a task of its own:
//!         new:  topic? (SetTopic) ─▶ tmux new-session (none if one runs by that name: a retry)
//!               ─▶ the agent's hooks reach relayq within start_within ─▶ SessionReady
//!               (bound, "ready" in the topic or chat) | CommandFailed (why, the agent ended)
//!         stop: the agent's own exit, SIGTERM, SIGKILL ─▶ SessionStopped (ended, what waited
//!               dropped with a notice, "stopped" in the chat)
//!   a daemon that dies mid-command: its lease lapses; the next look carries it out again,
//!   and tmux's session names make a second start or stop a no-op
//! ```

pub mod agent;
pub mod conversations;
pub mod projects;

use std::collections::BTreeMap;
use std::time::Duration;

use actix::prelude::*;
use relayq_engine::chat_sessions::{
    ChatCommand, ChatSession, CommandFailed, CommandRow, ConversationsListed, LeaseCommands,
    ProjectEntry, PublishProjects, ReclaimCommands, SessionReady, SessionStopped, SetTopic,
};
use relayq_engine::Agent;

pub use projects::{EnvValue, Project};

use crate::channels::{ChannelDirectory, ThreadCall};
use crate::store::Store;

/// Look for this node's ready session commands now (a batch just made one ready).
#[derive(Debug, Clone, Copy, actix::Message)]
#[rtype(result = "()")]
pub struct LookForCommands;

/// How often the launcher looks for commands other nodes wrote for it.
const LOOK_EVERY: Duration = Duration::from_secs(2);

/// How long a command is this daemon's once leased: longer than a start may take.
const LEASE: Duration = Duration::from_secs(180);

/// What the launcher needs of the node's config.
#[derive(Debug, Clone)]
pub struct LaunchSettings {
    /// This node's projects (`[projects.NAME]`), those it hosts and those other nodes do.
    pub projects: BTreeMap<String, Project>,
    /// The tmux server the agents run on (the sessions' tmux channel's `socket_name`).
    pub socket: Option<String>,
    /// What every agent's hooks need to reach this database (`RELAYQ_CONFIG`, the database's
    /// settings), beside `RELAYQ_SESSION`.
    pub hook_env: Vec<(String, String)>,
    /// How long an agent has to show its hooks reach relayq.
    pub start_within: Duration,
    /// How long an agent has to leave by its own exit, then after SIGTERM.
    pub stop_grace: Duration,
}

impl Default for LaunchSettings {
    fn default() -> Self {
        LaunchSettings {
            projects: BTreeMap::new(),
            socket: None,
            hook_env: Vec::new(),
            start_within: Duration::from_secs(60),
            stop_grace: Duration::from_secs(5),
        }
    }
}

impl LaunchSettings {
    /// The projects node `node` hosts, as it publishes them.
    pub fn hosted_by(&self, node: &str) -> Vec<ProjectEntry> {
        self.projects
            .iter()
            .filter(|(_, p)| p.node_or(node) == node)
            .map(|(name, p)| ProjectEntry {
                name: name.clone(),
                node: node.to_string(),
                agents: p.agents.iter().map(|a| a.as_str().to_string()).collect(),
            })
            .collect()
    }
}

pub struct LauncherActor {
    store: Store,
    settings: LaunchSettings,
    /// The channels that answer chats: they open and close a session's topic.
    channels: ChannelDirectory,
    /// A look is under way; another was asked for meanwhile.
    looking: bool,
    again: bool,
}

impl LauncherActor {
    pub fn new(store: Store, settings: LaunchSettings, channels: ChannelDirectory) -> Self {
        LauncherActor {
            store,
            settings,
            channels,
            looking: false,
            again: false,
        }
    }

    fn look(&mut self, ctx: &mut Context<Self>) {
        if self.looking {
            self.again = true;
            return;
        }
        self.looking = true;
        let lease_ms = LEASE.as_millis() as i64;
        let leased = self.store.apply_alone(LeaseCommands { lease_ms });
        ctx.spawn(leased.into_actor(self).map(|leased, act, ctx| {
            act.looking = false;
            match leased {
                Ok(commands) => {
                    for command in commands {
                        let job = Job {
                            store: act.store.clone(),
                            settings: act.settings.clone(),
                            channels: act.channels.clone(),
                        };
                        actix_rt::spawn(job.carry_out(command));
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot look for session commands; looking again shortly"),
            }
            if std::mem::take(&mut act.again) {
                act.look(ctx);
            }
        }));
    }
}

impl Actor for LauncherActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.look(ctx);
        ctx.run_interval(LOOK_EVERY, |act, ctx| act.look(ctx));
    }
}

/// Before any source reads a chat (so a `/new` read at once finds this node's projects): the
/// commands an earlier daemon of this node was carrying out when it stopped are ready again,
/// and the projects this node hosts are published.
pub async fn prepare(store: &Store, settings: &LaunchSettings) -> crate::error::Result<()> {
    let reclaimed = store.apply_alone(ReclaimCommands).await?;
    if reclaimed > 0 {
        tracing::info!(
            commands = reclaimed,
            "session commands cut by this node's last stop are carried out again"
        );
    }
    let node = store.engine.node().to_string();
    let projects = settings.hosted_by(&node);
    store
        .apply_alone(PublishProjects { node, projects })
        .await?;
    Ok(())
}

/// A reloaded config's projects (SIGHUP): published for this node at once, and used by the
/// commands carried out from now on (those under way finish with the settings they began with).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetLaunchSettings(pub LaunchSettings);

impl Handler<SetLaunchSettings> for LauncherActor {
    type Result = ();
    fn handle(&mut self, SetLaunchSettings(settings): SetLaunchSettings, ctx: &mut Context<Self>) {
        let node = self.store.engine.node().to_string();
        let projects = settings.hosted_by(&node);
        self.settings = settings;
        let store = self.store.clone();
        ctx.spawn(
            async move {
                let names: Vec<String> = projects.iter().map(|p| p.name.clone()).collect();
                match store.apply_alone(PublishProjects { node, projects }).await {
                    Ok(_) => tracing::info!(?names, "SIGHUP: this node's projects published"),
                    Err(e) => tracing::error!(error = %e, "SIGHUP: this node's projects could not be published; chats see the ones before"),
                }
            }
            .into_actor(self),
        );
    }
}

impl Handler<LookForCommands> for LauncherActor {
    type Result = ();
    fn handle(&mut self, _: LookForCommands, ctx: &mut Context<Self>) {
        self.look(ctx);
    }
}

/// What carrying out a command needs.
struct Job {
    store: Store,
    settings: LaunchSettings,
    channels: ChannelDirectory,
}

/// How a command ended well.
enum Done {
    Ready,
    /// The project's conversations, to offer (and which agents' were looked for).
    Listed(Vec<conversations::Conversation>, Vec<String>),
    /// Stopped; its topic (channel, chat, thread) to close once that is recorded.
    Stopped(Option<(String, String, String)>),
}

impl Job {
    /// Carries out one leased command and records its outcome (the chat told).
    async fn carry_out(self, c: CommandRow) {
        let command: Result<ChatCommand, _> = serde_json::from_str(&c.command);
        let outcome = match command {
            Ok(ChatCommand::New { .. }) => self.start_session(&c).await,
            Ok(ChatCommand::Stop { .. }) => self.stop_session(&c).await,
            Ok(ChatCommand::Resume { project }) => self.list_conversations(project).await,
            Ok(other) => Err(format!("/{} is not carried out by a node", other.word())),
            Err(e) => Err(format!("the command cannot be read ({e})")),
        };
        let store = &self.store;
        let mut topic = None;
        let written = match outcome {
            Ok(Done::Ready) => store.apply(SessionReady { command: c.id }).await,
            Ok(Done::Listed(conversations, agents)) => {
                let listed = ConversationsListed {
                    command: c.id,
                    conversations,
                    agents,
                };
                store.apply(listed).await
            }
            Ok(Done::Stopped(closing)) => {
                topic = closing;
                store.apply(SessionStopped { command: c.id }).await
            }
            Err(why) => {
                tracing::warn!(command = c.id, session = ?c.session, why, "a session command failed");
                store.apply(CommandFailed { command: c.id, why }).await
            }
        };
        match written {
            Ok(keys) => store.waking.outbound_written(keys),
            Err(e) => {
                tracing::error!(command = c.id, error = %e, "cannot record a session command's outcome; it is carried out again once its lease lapses");
                return;
            }
        }
        if let Some((channel, to, thread)) = topic {
            let close = ThreadCall::Close { to, thread };
            if let Some(Err(why)) = self.thread(&channel, close).await {
                tracing::warn!(
                    command = c.id,
                    why,
                    "a stopped session's topic could not be closed"
                );
            }
        }
    }

    /// A thread call on `channel`; `None` when it has no threads.
    async fn thread(
        &self,
        channel: &str,
        call: ThreadCall,
    ) -> Option<Result<Option<String>, String>> {
        Some(self.channels.thread(channel, call)?.await)
    }

    /// The channel that answers chats of `origin`.
    fn reply_channel(&self, origin: &str) -> Option<String> {
        let routes = self.store.door.routes.read().expect("routes lock");
        routes.replies.get(origin).cloned()
    }

    /// Starts the session's agent in its project (see the module's drawing).
    async fn start_session(&self, c: &CommandRow) -> Result<Done, String> {
        let (store, settings) = (&self.store, &self.settings);
        let s = session_of(store, c).await?;
        let node = store.engine.node().to_string();
        let project = settings.projects.get(&s.project).ok_or_else(|| {
            format!(
                "node {node} has no project {} in its config.toml",
                s.project
            )
        })?;
        let agent = Agent::parse(&s.agent).ok_or_else(|| format!("{} is no agent", s.agent))?;
        self.open_topic(c, &s).await?;
        let mut env = settings.hook_env.clone();
        env.push(("RELAYQ_SESSION".into(), s.session.clone()));
        for (var, value) in &project.env {
            let value = value
                .resolve()
                .map_err(|why| format!("projects.{}.env.{var}: {why}", s.project))?;
            env.push((var.clone(), value));
        }
        let mut argv = project.command(agent);
        if let Some(id) = &s.resumed {
            argv.extend(conversations::resume_args(agent, id));
        }
        let start = agent::Start {
            socket: settings.socket.as_deref(),
            name: &s.session,
            dir: &project.dir,
            argv,
            env,
        };
        let started = agent::start(&start)
            .await
            .map_err(|e| format!("{agent} could not be started: {e}"))?;
        tracing::info!(session = s.session, %agent, project = s.project, started, "an agent started from the chat");
        // Codex runs its hooks from its first prompt on (its SessionStart comes with it):
        // before that, only its pane says it runs; its first message confirms the hooks.
        if agent == Agent::Codex {
            return match still_running(start.socket, &s.session).await {
                true => Ok(Done::Ready),
                false => Err(format!(
                    "{agent} ended as it started in {} (stopped, or it exited): run its command \
                     line in the project's directory to see why",
                    s.project
                )),
            };
        }
        match wait_for_hooks(store, start.socket, &s.session, settings.start_within).await {
            Started::Hooks => return Ok(Done::Ready),
            Started::Exited => {
                return Err(format!(
                    "{agent} ended as it started in {} (stopped, or it exited): run its command \
                     line in the project's directory to see why",
                    s.project
                ))
            }
            Started::Silent => {}
        }
        let how = agent::stop(start.socket, &s.session, agent, settings.stop_grace).await;
        tracing::warn!(
            session = s.session,
            ?how,
            "the agent's hooks did not reach relayq: ended it"
        );
        Err(format!(
            "{agent} started in {}, but its hooks did not reach relayq within {}: {} lacks the \
             hooks that `relayq init` prints. Add them, then /new again. (The agent was ended.)",
            s.project,
            humantime::format_duration(settings.start_within),
            hook_settings_file(agent)
        ))
    }

    /// In a chat with topics, the session's own topic, made before its agent starts and
    /// recorded at once (a retry finds it). A topic the platform refuses ends the command
    /// before anything starts.
    async fn open_topic(&self, c: &CommandRow, s: &ChatSession) -> Result<(), String> {
        let topics = c
            .detail
            .as_deref()
            .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .is_some_and(|d| d["topics"] == true);
        if !topics || s.thread.is_some() {
            return Ok(());
        }
        let Some(channel) = self.reply_channel(&s.origin) else {
            return Ok(());
        };
        let open = ThreadCall::Open {
            to: s.chat.clone(),
            name: s.session.clone(),
        };
        let thread = match self.thread(&channel, open).await {
            None | Some(Ok(None)) => return Ok(()),
            Some(Ok(Some(thread))) => thread,
            Some(Err(why)) => {
                return Err(format!(
                    "{why}. Give the bot the right to manage topics, or start sessions in a \
                     chat without topics"
                ))
            }
        };
        let write = SetTopic {
            session: s.session.clone(),
            thread,
        };
        self.store.apply(write).await.map_err(|e| e.to_string())
    }

    /// The project's agents' own conversations, newest first (see [`conversations`]).
    async fn list_conversations(&self, project: Option<String>) -> Result<Done, String> {
        let name = project.ok_or("the command names no project")?;
        let node = self.store.engine.node().to_string();
        let project = self
            .settings
            .projects
            .get(&name)
            .ok_or_else(|| format!("node {node} has no project {name} in its config.toml"))?
            .clone();
        let listed = actix_rt::task::spawn_blocking(move || {
            let var = |v: &str| match project.env.get(v) {
                Some(value) => value.resolve().ok().map(std::path::PathBuf::from),
                None => std::env::var_os(v).map(std::path::PathBuf::from),
            };
            let homes = conversations::Homes {
                home: var("HOME"),
                codex_home: var("CODEX_HOME"),
            };
            let mut all: Vec<conversations::Conversation> = project
                .agents
                .iter()
                .flat_map(|agent| conversations::list(*agent, &project.dir, &homes))
                .collect();
            all.sort_by_key(|c| std::cmp::Reverse(c.at));
            all.truncate(conversations::PER_AGENT);
            let agents = project
                .agents
                .iter()
                .map(|a| a.as_str().to_string())
                .collect();
            (all, agents)
        })
        .await
        .map_err(|e| format!("the conversations could not be read: {e}"))?;
        Ok(Done::Listed(listed.0, listed.1))
    }

    /// Ends the session's agent (see [`agent::stop`]).
    async fn stop_session(&self, c: &CommandRow) -> Result<Done, String> {
        let s = session_of(&self.store, c).await?;
        let agent = Agent::parse(&s.agent).ok_or_else(|| format!("{} is no agent", s.agent))?;
        let socket = self.settings.socket.as_deref();
        let how = agent::stop(socket, &s.session, agent, self.settings.stop_grace)
            .await
            .map_err(|e| format!("{} could not be stopped: {e}", s.session))?;
        tracing::info!(session = s.session, how, "a session stopped from the chat");
        let topic = match (&s.thread, self.reply_channel(&s.origin)) {
            (Some(thread), Some(channel)) => Some((channel, s.chat.clone(), thread.clone())),
            _ => None,
        };
        Ok(Done::Stopped(topic))
    }
}

/// The session the command names, as recorded.
async fn session_of(store: &Store, c: &CommandRow) -> Result<ChatSession, String> {
    let name = c.session.clone().ok_or("the command names no session")?;
    let found = store
        .run(move |s| relayq_engine::chat_sessions::session(&s.engine.database().read()?, &name))
        .await
        .map_err(|e| e.to_string())?;
    found.ok_or_else(|| "its session is not recorded".to_string())
}

/// Whether the agent of tmux session `name` still runs a moment after its start.
async fn still_running(socket: Option<&str>, name: &str) -> bool {
    tokio::time::sleep(CODEX_SETTLE).await;
    matches!(
        crate::channels::tmux::session_id(socket, name).await,
        Ok(Some(_))
    )
}

/// How long Codex must keep running after its start to count as started.
const CODEX_SETTLE: Duration = Duration::from_secs(2);

/// Where each agent reads the hooks that `relayq init` prints.
fn hook_settings_file(agent: Agent) -> &'static str {
    match agent {
        Agent::Claude => "~/.claude/settings.json (or the project's .claude/settings.json)",
        Agent::Codex => "~/.codex/hooks.json ($CODEX_HOME/hooks.json)",
        Agent::Gemini => "~/.gemini/settings.json (or the project's .gemini/settings.json)",
    }
}

/// What came of an agent's start, as its hooks and its pane tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Started {
    /// Its own hooks reported (its SessionStart, or any event of its hooks).
    Hooks,
    /// Its tmux session is gone: it exited (or was stopped) before its hooks reported.
    Exited,
    /// It runs, but no hook reported within the wait.
    Silent,
}

/// Waits up to `wait` for the agent of `session` to report through its own hooks, looking at
/// its pane each second.
async fn wait_for_hooks(
    store: &Store,
    socket: Option<&str>,
    session: &str,
    wait: Duration,
) -> Started {
    let until = std::time::Instant::now() + wait;
    for look in 0u32.. {
        let key = session.to_string();
        let seen = store
            .run(move |s| relayq_engine::sessions::get(&s.engine.database().read()?, &key))
            .await;
        if let Ok(Some(record)) = seen {
            if record.agent_hooks && record.state == "active" {
                return Started::Hooks;
            }
        }
        if look % 5 == 4
            && matches!(
                crate::channels::tmux::session_id(socket, session).await,
                Ok(None)
            )
        {
            return Started::Exited;
        }
        if std::time::Instant::now() >= until {
            return Started::Silent;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Started::Silent
}
