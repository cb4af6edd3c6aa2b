//! Starting and stopping the actor system: opens the engine, takes the daemon lock, starts the
//! channels, the SupervisorActor, the RecoveryActor and the wake listener. The binary's `serve` and
//! Rust programs that embed relayq (see `examples/`) both start relayq through this.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use relayq_engine::db::Heard;
use relayq_engine::writes::upkeep::SupersedeStale;
use relayq_engine::{
    inbound, outbound, DbConfig, Engine, Enqueued, HookEvent, InboundMessage, NoticeRoutes,
    OutboundMessage, QueueName, QueuePolicies,
};

use crate::channels::{ChannelDirectory, ChannelSpec};
use crate::claiming::{ClaimHooks, ClaimOutbound, ClaimSettings};
use crate::daemon_lock::{self, DaemonLock};
use crate::error::{ActorError, Result};
use crate::hooks::claimer::HookClaimer;
use crate::inbound::supervisor::{
    Enqueue, ExpireSession, Resume, SessionChannels, SetSessionChannels, SupervisorActor,
};
use crate::lifecycle::{Shutdown, Stop};
use crate::node::Membership;
use crate::outbound::sender::OutboundSender;
use crate::pauses::SharedPauses;
use crate::recovery::RecoveryActor;
use crate::sources::{PushSource, SourceSpec};
use crate::store::Store;
use crate::wake::{self, Wakers};

/// Everything the actor system needs to run.
#[derive(Debug, Clone)]
pub struct RelayqConfig {
    pub db: DbConfig,
    /// This daemon's node name (`[node] name`; the host name by default).
    pub node: String,
    /// How far this daemon's clock is off (ms): 0 but to test a host whose clock is wrong
    /// (`RELAYQ_CLOCK_OFFSET`).
    pub clock_offset_ms: i64,
    pub queues: QueuePolicies,
    /// Which channel each session's inbound messages go to.
    pub session_channels: SessionChannels,
    /// Where hook events' notices (agent finished, needs you, error) go.
    pub notice_routes: NoticeRoutes,
    pub claims: ClaimSettings,
    pub max_body_bytes: usize,
    /// How often expired leases are reclaimed and sessions with pending rows re-resumed.
    pub sweep_interval: Duration,
    /// How often finished rows past retention are deleted.
    pub prune_interval: Duration,
    /// Listen on the wake socket beside the database for rows written by other processes.
    pub listen_for_wakes: bool,
    /// Write down each outbound send's start before the platform call, so a send cut by a
    /// crash is known as a possible repeat. On; off only to measure what it costs
    /// (`relayq-bench`): without it such a send is replayed as if new.
    pub mark_send_started: bool,
    /// The projects chats may start sessions in, and how (see [`launcher`](crate::launcher)).
    pub launch: crate::launcher::LaunchSettings,
    /// What each chat source shows while its agents work, by origin (see
    /// [`progress`](crate::progress)).
    pub progress: crate::progress::ProgressSettingsByOrigin,
    /// Where a message's files go, how they are fetched and heard (see [`files`](crate::files)).
    pub files: crate::files::FilesConfig,
}

impl RelayqConfig {
    /// Defaults for a database at `db` delivering every session to channel `default_channel`.
    pub fn new(db: impl Into<PathBuf>, default_channel: &str) -> Self {
        RelayqConfig {
            db: DbConfig::new(db),
            node: relayq_engine::nodes::host_name(),
            clock_offset_ms: 0,
            queues: QueuePolicies::default(),
            session_channels: SessionChannels::all_to(default_channel),
            notice_routes: NoticeRoutes::none(),
            claims: ClaimSettings::default(),
            max_body_bytes: inbound::DEFAULT_MAX_BODY_BYTES,
            sweep_interval: Duration::from_secs(10),
            prune_interval: Duration::from_secs(300),
            listen_for_wakes: true,
            mark_send_started: true,
            launch: Default::default(),
            progress: Default::default(),
            files: Default::default(),
        }
    }

    /// Where a session's files go when its directory is not known: beside the database.
    pub fn files_fallback(&self) -> PathBuf {
        self.db
            .path
            .parent()
            .unwrap_or(Path::new("."))
            .join("inbox")
    }
}

/// Collects the channels and sources, then starts relayq.
pub struct RelayqBuilder {
    config: RelayqConfig,
    channels: ChannelDirectory,
    sources: Vec<(String, SourceSpec)>,
}

impl RelayqBuilder {
    /// Registers channel `name`: a channel from config, or a custom channel actor.
    pub fn channel(self, name: &str, spec: ChannelSpec) -> Self {
        self.channels.register(name, spec);
        self
    }

    /// Registers inbound source `name`; it starts reading once relayq has started.
    pub fn source(mut self, name: &str, spec: SourceSpec) -> Self {
        self.sources.push((name.to_string(), spec));
        self
    }

    /// Starts relayq inside the current actix system.
    pub async fn start(self) -> Result<Relayq> {
        let RelayqBuilder {
            config,
            channels,
            sources,
        } = self;
        check_channels(
            &config.session_channels,
            &config.notice_routes,
            &channels.names(),
        )?;
        if config.listen_for_wakes {
            daemon_lock::check_private_directory(&config.db.path)?;
        }
        let (db, node, offset) = (
            config.db.clone(),
            config.node.clone(),
            config.clock_offset_ms,
        );
        let engine = actix_rt::task::spawn_blocking(move || {
            let engine = match offset {
                0 => Engine::open(&db)?,
                ms => {
                    tracing::warn!(
                        offset_ms = ms,
                        "this daemon's clock is set off by RELAYQ_CLOCK_OFFSET"
                    );
                    let clock = std::sync::Arc::new(relayq_engine::clock::OffsetClock(ms));
                    Engine::with_clock(relayq_engine::Database::open(&db)?, clock)
                }
            };
            // A backlog written since the server last looked is not sent on stale plans.
            engine.database().analyze_if_stale();
            Ok::<_, ActorError>(engine.with_node(&node))
        })
        .await
        .map_err(|e| ActorError::Blocking(e.to_string()))??;
        let lock: Box<dyn DaemonLock> = Box::new(daemon_lock::take_for(engine.database())?);
        // Several daemons on one database keep one budget and one penalty per channel there.
        let channels = channels.for_database(&engine);
        let store = Store::new(
            engine.clone(),
            config.queues.clone(),
            config.notice_routes.clone(),
        );
        let (joined, readiness) = (engine.clone(), store.readiness.clone());
        let membership =
            actix_rt::task::spawn_blocking(move || Membership::join(joined, readiness))
                .await
                .map_err(|e| ActorError::Blocking(e.to_string()))??;
        // Before any actor can lease them: stale progress rows from before this start.
        let started = engine.now();
        let superseded = store.apply_alone(SupersedeStale { started }).await?;
        // A channel paused before the restart (the far end asked, or its breaker opened) stays
        // paused: a far end that asked for quiet is still owed it.
        let paused = store.run(|s| s.engine.channel_penalties()).await?;
        let now = engine.now();
        for p in paused {
            let wait = Duration::from_millis(p.until.saturating_sub(now).max(0) as u64);
            tracing::warn!(
                channel = p.channel,
                ?wait,
                reason = p.reason,
                "channel paused before the restart"
            );
            channels.penalize(&p.channel, wait);
        }
        // The operator's pauses hold across a restart too.
        let pauses = store.run(|s| s.engine.pauses()).await?;
        for p in &pauses {
            tracing::warn!(queue = %p.queue, key = p.key.as_deref().unwrap_or("(every key)"), "paused by the operator; resume to deliver");
        }
        store.pauses.load(pauses);
        if superseded > 0 {
            tracing::info!(
                superseded,
                "rows of kinds not in replay_kinds, left from before this start, ended as superseded"
            );
        }
        tracing::info!(db = %config.db.describe(), instance = engine.owner(), "relayq starting");

        crate::launcher::prepare(&store, &config.launch).await?;
        let known_channels = channels.clone();
        let launcher = crate::launcher::LauncherActor::new(
            store.clone(),
            config.launch.clone(),
            channels.clone(),
        )
        .start();
        let files = crate::files::Files::new(config.files.clone(), config.files_fallback());
        let outbox = crate::files::outbox::OutboxActor::new(store.clone(), files.clone()).start();
        let supervisor = SupervisorActor::new(
            store.clone(),
            channels,
            config.session_channels.clone(),
            config.max_body_bytes,
        )
        .with_launcher(launcher.clone().recipient())
        .with_files(files.clone())
        .start_unbounded();
        let sender = OutboundSender::new(store.clone(), known_channels.clone(), &config.claims)
            .marking_send_started(config.mark_send_started)
            .start();
        // Before the sender's first claim: channels without a ready check are ready now.
        known_channels.check_readiness(sender.clone().recipient(), store.readiness.clone());
        let progress = crate::progress::ProgressActor::new(
            store.clone(),
            known_channels.clone(),
            config.progress.clone(),
        )
        .start();
        let claimer = HookClaimer::start(
            store.clone(),
            config.claims.hook_batch,
            config.claims.hook_limits(),
            sender.clone().recipient(),
            supervisor.clone(),
            progress.clone(),
        );
        let wakers = Wakers {
            session: supervisor.clone().recipient(),
            resume: supervisor.clone().recipient(),
            hooks: claimer.clone().recipient(),
            outbound: sender.clone().recipient(),
        };
        let recovery = RecoveryActor::new(
            store.clone(),
            wakers.clone(),
            config.sweep_interval,
            config.prune_interval,
            lock.sole(),
        )
        .start();
        let approvals =
            crate::approvals::ApprovalsActor::new(store.clone(), supervisor.clone()).start();
        let listener = if config.listen_for_wakes {
            match wake::listen(&config.db.path, wakers.clone()) {
                Ok(task) => Some(task),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for wake-ups; rows from other processes wait for the next sweep");
                    None
                }
            }
        } else {
            None
        };
        // Rows other nodes (and their commands and hooks) write are announced by the database,
        // where it can.
        let nodes_listener = match config.listen_for_wakes {
            true => {
                let (wakers, hears) = (wakers.clone(), progress.clone());
                let on_heard = move |heard: Heard<'_>| match heard {
                    Heard::Rows(queue, key) => wakers.wake(queue, key),
                    Heard::Progress(note) => {
                        hears.do_send(crate::progress::HeardProgress(note.to_string()))
                    }
                };
                let listener = engine.database().listen(on_heard).unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "cannot listen for other nodes' rows; they wait for the next sweep, and this node shows the progress of the steps it applies itself");
                    None
                });
                // Every node hears every step: the chat's lane holder shows it.
                if listener.is_some() {
                    progress.do_send(crate::progress::ShareProgress);
                }
                listener
            }
            false => None,
        };
        // A pause another node set (or ended) holds here too.
        let shared_pauses = {
            let (wakers, store_now) = (wakers.clone(), store.clone());
            let resumed = move |(queue, key): crate::pauses::Paused| match (queue, key) {
                (QueueName::Inbound, None) => match store_now.inbound.active_keys() {
                    Ok(sessions) => wakers.resume.do_send(Resume(sessions)),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot list the sessions to resume; they wait for the next sweep")
                    }
                },
                (queue, key) => wakers.wake(queue, key.as_deref().unwrap_or("")),
            };
            SharedPauses::follow(engine.clone(), store.pauses.clone(), resumed)
        };
        let ingress = Ingress::default();
        let running_sources =
            start_sources(&sources, &store, &supervisor, &known_channels, &ingress);
        Ok(Relayq {
            handle: RelayqHandle {
                max_body_bytes: config.max_body_bytes,
                store,
                supervisor,
                sender,
                channels: known_channels,
                wakers,
                ingress,
                approvals,
            },
            config,
            sources: std::sync::Mutex::new(running_sources),
            claimer,
            recovery,
            launcher,
            progress,
            files,
            _outbox: outbox,
            listener,
            _nodes_listener: nodes_listener,
            _shared_pauses: shared_pauses,
            _membership: membership,
            _lock: lock,
        })
    }
}

/// A running relayq. Drop it only after `shutdown`.
pub struct Relayq {
    config: RelayqConfig,
    handle: RelayqHandle,
    claimer: Addr<HookClaimer>,
    recovery: Addr<RecoveryActor>,
    launcher: Addr<crate::launcher::LauncherActor>,
    progress: Addr<crate::progress::ProgressActor>,
    /// What the sessions fetch messages' files with; replaced at a reload.
    files: crate::files::Files,
    /// Sends what the agents put in their outboxes.
    _outbox: Addr<crate::files::outbox::OutboxActor>,
    listener: Option<actix_rt::task::JoinHandle<()>>,
    /// The running sources, stopped first at shutdown and replaced at a reload.
    sources: std::sync::Mutex<Vec<Recipient<Stop>>>,
    /// Wakes this node's workers for rows other nodes wrote, where the database announces them.
    _nodes_listener: Option<relayq_engine::db::Listener>,
    /// Reads the pauses other nodes set, on a database several daemons share.
    _shared_pauses: Option<SharedPauses>,
    /// Left (dropped) before the lock.
    _membership: Membership,
    _lock: Box<dyn DaemonLock>,
}

impl Relayq {
    pub fn builder(config: RelayqConfig) -> RelayqBuilder {
        RelayqBuilder {
            config,
            channels: ChannelDirectory::default(),
            sources: Vec::new(),
        }
    }

    /// What other threads use to reach this relayq (an HTTP server's workers).
    pub fn handle(&self) -> &RelayqHandle {
        &self.handle
    }

    pub fn supervisor(&self) -> Addr<SupervisorActor> {
        self.handle.supervisor()
    }

    pub fn store(&self) -> &Store {
        self.handle.store()
    }

    /// See [`RelayqHandle::enqueue`].
    pub fn enqueue(
        &self,
        message: InboundMessage,
    ) -> impl std::future::Future<Output = Result<Enqueued>> + 'static {
        self.handle.enqueue(message)
    }

    /// See [`RelayqHandle::enqueue_outbound`].
    pub fn enqueue_outbound(
        &self,
        message: OutboundMessage,
    ) -> impl std::future::Future<Output = Result<outbound::Written>> + 'static {
        self.handle.enqueue_outbound(message)
    }

    /// Applies a reloaded configuration: queue policies, routes, which channel each session
    /// uses, the channels themselves, and the projects. Everything is checked first; on an error nothing
    /// changes. The database, claimer and daemon settings take effect at the next start.
    pub fn reload(&self, reload: Reload) -> Result<()> {
        let names: Vec<String> = reload.channels.iter().map(|(n, _)| n.clone()).collect();
        check_channels(&reload.session_channels, &reload.notice_routes, &names)?;
        self.handle
            .store
            .reconfigure(reload.queues, reload.notice_routes);
        let h = &self.handle;
        h.channels.replace_all(reload.channels);
        h.channels
            .check_readiness(h.sender.clone().recipient(), h.store.readiness.clone());
        h.supervisor
            .do_send(SetSessionChannels(reload.session_channels));
        // Sources start afresh from their stored offsets with their new settings.
        let started = start_sources(
            &reload.sources,
            &h.store,
            &h.supervisor,
            &h.channels,
            &h.ingress,
        );
        for stopped in std::mem::replace(&mut *self.sources.lock().unwrap(), started) {
            stopped.do_send(Stop);
        }
        self.files
            .replace(reload.files, self.config.files_fallback());
        // The projects: published again for this node, used by the commands from now on.
        self.launcher
            .do_send(crate::launcher::SetLaunchSettings(reload.launch));
        self.progress
            .do_send(crate::progress::SetProgressSettings(std::sync::Arc::new(
                reload.progress,
            )));
        // Rows whose retry the new policies may have moved earlier.
        self.handle.wakers.claim_all();
        Ok(())
    }

    /// See [`RelayqHandle::expire_session`].
    pub async fn expire_session(&self, session: &str) -> Result<usize> {
        self.handle.expire_session(session).await
    }

    /// Stops taking work, waits up to `grace` for in-flight deliveries, and stops the actors.
    pub async fn shutdown(self, grace: Duration) {
        if let Some(listener) = &self.listener {
            listener.abort();
        }
        for source in self.sources.lock().unwrap().drain(..) {
            source.do_send(Stop);
        }
        self.recovery.do_send(Stop);
        self.handle.approvals.do_send(Stop);
        let started = std::time::Instant::now();
        let _ = tokio::join!(
            self.handle.supervisor.send(Shutdown { grace }),
            self.claimer.send(Shutdown { grace }),
            self.handle.sender.send(Shutdown { grace })
        );
        // Database calls already on blocking threads finish before relayq reports it stopped.
        if !self
            .handle
            .store
            .settle(grace.saturating_sub(started.elapsed()))
            .await
        {
            tracing::warn!("database calls still running after the grace period");
        }
        wake::remove(&self.config.db.path);
    }
}

/// What a config reload changes (see [`Relayq::reload`]).
pub struct Reload {
    pub queues: QueuePolicies,
    pub notice_routes: NoticeRoutes,
    pub session_channels: SessionChannels,
    pub channels: Vec<(String, ChannelSpec)>,
    pub sources: Vec<(String, SourceSpec)>,
    /// The projects chats may start sessions in.
    pub launch: crate::launcher::LaunchSettings,
    /// What each chat source shows while its agents work.
    pub progress: crate::progress::ProgressSettingsByOrigin,
    /// `[files]`, `[transcription]`, and each source's fetcher.
    pub files: crate::files::FilesConfig,
}

/// Starts each source, handing what it reads to the SupervisorActor; its cosmetic calls share
/// its reply channel's budget.
fn start_sources(
    sources: &[(String, SourceSpec)],
    store: &Store,
    supervisor: &Addr<SupervisorActor>,
    channels: &ChannelDirectory,
    ingress: &Ingress,
) -> Vec<Recipient<Stop>> {
    let mut pushed = std::collections::BTreeMap::new();
    let running = sources
        .iter()
        .filter_map(|(name, spec)| {
            if let Some(source) = spec.push_source() {
                pushed.insert(name.clone(), source);
            }
            let budget = spec
                .reply_channel
                .as_ref()
                .and_then(|c| channels.budgets(c));
            spec.start(name, store.clone(), supervisor.clone().recipient(), budget)
        })
        .collect();
    *ingress.write().expect("ingress lock") = pushed;
    running
}

/// The sources the platform pushes to, by name, for `POST /v1/ingress/NAME`.
type Ingress = Arc<std::sync::RwLock<std::collections::BTreeMap<String, Arc<dyn PushSource>>>>;

/// Every channel the session_channels and the routes name must be one of `configured`.
fn check_channels(
    session_channels: &SessionChannels,
    routes: &NoticeRoutes,
    configured: &[String],
) -> Result<()> {
    let routed = routes
        .default
        .iter()
        .chain(routes.sessions.values().flatten())
        .filter_map(|r| r.channel.as_ref())
        .chain(routes.replies.values());
    let named = std::iter::once(&session_channels.default_channel)
        .chain(session_channels.channels.values())
        .chain(routed);
    for name in named {
        if !configured.contains(name) {
            let known: Vec<&str> = configured.iter().map(String::as_str).collect();
            return Err(ActorError::Invalid(crate::channels::not_configured(
                name, &known,
            )));
        }
    }
    Ok(())
}

/// A running relayq's entry points, for any thread: cheap to clone, `Send`. An HTTP server's
/// workers enqueue through it, as adapters in the same process do through [`Relayq`].
#[derive(Clone)]
pub struct RelayqHandle {
    max_body_bytes: usize,
    store: Store,
    supervisor: Addr<SupervisorActor>,
    sender: Addr<OutboundSender>,
    channels: ChannelDirectory,
    wakers: Wakers,
    ingress: Ingress,
    approvals: Addr<crate::approvals::ApprovalsActor>,
}

impl RelayqHandle {
    pub fn supervisor(&self) -> Addr<SupervisorActor> {
        self.supervisor.clone()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Enqueues an inbound message; the future answers once it is committed. The message is
    /// handed over when `enqueue` is called, not when the future is first polled, so messages
    /// enqueued one after another commit (and are delivered) in that order even when their
    /// futures are awaited together or in another order.
    pub fn enqueue(
        &self,
        message: InboundMessage,
    ) -> impl std::future::Future<Output = Result<Enqueued>> + 'static {
        let request = self.supervisor.send(Enqueue(message));
        async move { request.await? }
    }

    /// Keeps a platform's message that is over `max_body_bytes` expired and cut (see
    /// [`KeepRefused`](crate::inbound::supervisor::KeepRefused)); `None` when it is wrong in
    /// another way.
    pub fn record_refused(
        &self,
        message: InboundMessage,
    ) -> impl std::future::Future<Output = Result<Option<Enqueued>>> + 'static {
        let request = self
            .supervisor
            .send(crate::inbound::supervisor::KeepRefused(message));
        async move { request.await? }
    }

    /// The pushed messages whose senders may write, in order (a stranger's is dropped, and
    /// their chat told once an hour): see `relayq_engine::access`.
    pub fn admit(
        &self,
        messages: Vec<InboundMessage>,
    ) -> impl std::future::Future<Output = Result<Vec<InboundMessage>>> + 'static {
        let write = self
            .store
            .apply(relayq_engine::access::writes::AdmitMessages(messages));
        let waking = self.store.waking.clone();
        async move {
            let admitted = write.await?;
            waking.outbound_written(admitted.told);
            Ok(admitted.messages.into_iter().flatten().collect())
        }
    }

    /// Records answers to agents' questions a platform pushed; each with the line for the
    /// person who answered, once committed.
    pub fn record_answers(
        &self,
        answers: Vec<relayq_engine::approvals::ChatAnswer>,
    ) -> impl std::future::Future<Output = Result<Vec<relayq_engine::approvals::Answered>>> + 'static
    {
        let request = self
            .supervisor
            .send(crate::inbound::supervisor::TakeChatAnswers(answers));
        async move { request.await? }
    }

    /// Records session requests a platform pushed; each tap's callback with its line, once
    /// committed.
    pub fn record_session_requests(
        &self,
        requests: Vec<relayq_engine::chat_sessions::SessionRequest>,
    ) -> impl std::future::Future<Output = Result<Vec<(String, String)>>> + 'static {
        let request = self
            .supervisor
            .send(crate::inbound::supervisor::TakeSessionRequests(requests));
        async move { request.await? }
    }

    /// Tells the ApprovalsActor to look now (an answer was recorded outside a source).
    pub fn approvals_changed(&self) {
        self.approvals.do_send(crate::approvals::LookNow);
    }

    /// Writes an outbound message ahead of sending it, and wakes the claimer; answers once the
    /// row is committed. As with [`Relayq::enqueue`], the write is handed over when this is
    /// called, so messages enqueued one after another are written (and sent) in that order
    /// even when their futures are awaited together: an adapter may keep several in flight.
    /// A text over the channel's limit is written as parts (see [`Channel::text_limit`]).
    ///
    /// [`Channel::text_limit`]: crate::channels::Channel::text_limit
    pub fn enqueue_outbound(
        &self,
        message: OutboundMessage,
    ) -> impl std::future::Future<Output = Result<outbound::Written>> + 'static {
        let checked = message
            .validate(self.max_body_bytes)
            .map_err(ActorError::from)
            .and_then(|()| match self.channels.contains(&message.channel) {
                true => match self.channels.refuses_address(&message.channel, &message.to) {
                    Some(why) => Err(ActorError::Invalid(format!("to: {why}"))),
                    None => Ok(()),
                },
                false => {
                    let names = self.channels.names();
                    let known: Vec<&str> = names.iter().map(String::as_str).collect();
                    Err(ActorError::Invalid(crate::channels::not_configured(
                        &message.channel,
                        &known,
                    )))
                }
            });
        let parts = message.parts(self.channels.text_limit(&message.channel));
        let write = checked.map(|()| {
            self.store
                .apply(relayq_engine::outbound::writes::EnqueueOutbound(parts))
        });
        let sender = self.sender.clone();
        let (metrics, channel) = (self.store.metrics.clone(), message.channel.clone());
        async move {
            let enqueued = write?.await?;
            if !enqueued.first.duplicate {
                metrics.enqueued(QueueName::Outbound, &channel);
                sender.do_send(ClaimOutbound);
            }
            Ok(enqueued)
        }
    }

    /// Expires a session's pending rows and stops its actor.
    pub async fn expire_session(&self, session: &str) -> Result<usize> {
        self.supervisor.send(ExpireSession(session.into())).await?
    }

    /// Writes a hook event (see [`relayq_engine::hooks::receive`]) for the HookClaimer, as
    /// `relayq hook` does, and wakes it; answers once the row is committed.
    pub fn record_hook(
        &self,
        mut event: HookEvent,
    ) -> impl std::future::Future<Output = Result<Enqueued>> + 'static {
        event.received_at = self.store.hooks.now();
        let row = event.to_row();
        let write = self
            .store
            .apply(relayq_engine::hooks::writes::RecordHook(row));
        let (wakers, metrics) = (self.wakers.clone(), self.store.metrics.clone());
        async move {
            let enqueued = write.await?;
            metrics.enqueued(QueueName::Hooks, "");
            wakers.hooks.do_send(ClaimHooks);
            Ok(enqueued)
        }
    }

    /// Pauses `queue`'s `key` (the whole queue when `None`): no row of it is leased until
    /// [`RelayqHandle::resume`]; deliveries under way finish. Kept in the database, so the
    /// pause holds across a restart. Answers once it is committed.
    pub async fn pause(&self, queue: QueueName, key: Option<String>) -> Result<()> {
        let (k, paused) = (key.clone(), true);
        self.store
            .apply(relayq_engine::writes::upkeep::SetPause {
                queue,
                key: k,
                paused,
            })
            .await?;
        self.store.pauses.set(queue, key, true);
        Ok(())
    }

    /// Ends a pause [`RelayqHandle::pause`] began, and wakes the workers; true when it was
    /// paused. A key stays held while its whole queue is paused.
    pub async fn resume(&self, queue: QueueName, key: Option<String>) -> Result<bool> {
        let (k, paused) = (key.clone(), false);
        let was = self
            .store
            .apply(relayq_engine::writes::upkeep::SetPause {
                queue,
                key: k,
                paused,
            })
            .await?;
        self.store.pauses.set(queue, key.clone(), false);
        match (queue, key) {
            (QueueName::Inbound, Some(session)) => self.wake(queue, &session),
            // Every session with rows gets its actor again, as after a restart.
            (QueueName::Inbound, None) => {
                let sessions = self.store.run(|s| s.inbound.active_keys()).await?;
                self.wakers.resume.do_send(Resume(sessions));
            }
            (queue, _) => self.wake(queue, ""),
        }
        Ok(was)
    }

    /// Tells the worker of `queue`'s `key` that rows may be due (after a dead-letter retry,
    /// say), as a wake datagram from another process would.
    pub fn wake(&self, queue: QueueName, key: &str) {
        self.wakers.wake(queue, key);
    }

    /// The source `name`, when its platform pushes to relayq (a webhook).
    pub fn push_source(&self, name: &str) -> Option<Arc<dyn PushSource>> {
        self.ingress
            .read()
            .expect("ingress lock")
            .get(name)
            .cloned()
    }

    /// The channels, their readiness and pauses.
    pub fn channels(&self) -> &ChannelDirectory {
        &self.channels
    }
}

/// An HTTP server's workers run on threads of their own: the handle must cross to them.
const _: fn() = || {
    fn crosses_threads<T: Send + Sync + 'static>() {}
    crosses_threads::<RelayqHandle>();
};
