//! Wake-ups ([`Waking`]). A process that writes rows while the daemon runs (the CLI, the hook
//! receiver) sends one datagram to a Unix socket beside the database, naming the queue and key;
//! the daemon wakes that key's worker at once. Best effort by design: a lost datagram only
//! delays the row until the RecoveryActor's next sweep, since SQLite is the source of truth.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

use actix::prelude::*;
use relayq_engine::QueueName;
use serde::{Deserialize, Serialize};

use crate::claiming::{ClaimHooks, ClaimOutbound};

/// What a wake datagram says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeNote {
    pub queue: QueueName,
    pub key: String,
}

/// The socket beside database `db`.
pub fn socket_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".wake");
    PathBuf::from(name)
}

/// Telling the workers that rows were committed where they do not see it: by another process
/// (the CLI, `relayq hook`), or by a write of the daemon's that another worker must take
/// (notices written beside another write). Best effort: a lost wake-up delays the rows until
/// the next sweep, never loses them. This is one of the pieces that assume one host: a
/// backend shared by several hosts implements it over its own channel (PostgreSQL: `NOTIFY`).
pub trait Waking: Send + Sync + std::fmt::Debug + 'static {
    /// `queue`'s `key` has new rows. Never fails the caller.
    fn rows_written(&self, queue: QueueName, key: &str);

    /// Outbound rows were committed for these ordering keys: their sender claims them now.
    fn outbound_written(&self, keys: Vec<String>) {
        for key in keys {
            self.rows_written(QueueName::Outbound, &key);
        }
    }
}

/// Today's [`Waking`]: a datagram to the Unix socket beside the database file, which the
/// daemon [`listen`]s on.
#[derive(Debug, Clone)]
pub struct SocketWaking {
    socket: PathBuf,
}

impl SocketWaking {
    /// The wake-ups for the daemon serving database `db`.
    pub fn beside(db: &Path) -> Self {
        SocketWaking {
            socket: socket_path(db),
        }
    }
}

/// [`SocketWaking::rows_written`] for a one-shot process that wrote to database `db` directly
/// (the CLI, `relayq hook`).
pub fn rows_written_beside(db: &Path, queue: QueueName, key: &str) {
    SocketWaking::beside(db).rows_written(queue, key);
}

impl Waking for SocketWaking {
    fn rows_written(&self, queue: QueueName, key: &str) {
        let note = serde_json::to_vec(&WakeNote {
            queue,
            key: key.into(),
        })
        .expect("serialises");
        if let Ok(socket) = UnixDatagram::unbound() {
            let _ = socket.send_to(&note, &self.socket);
        }
    }
}

/// Rows for this session were written elsewhere (the CLI, another process): deliver them.
#[derive(Debug, Clone, actix::Message)]
#[rtype(result = "()")]
pub struct WakeSession(pub String);

/// Make sure each of these sessions has a running actor (after a restart, or a sweep).
#[derive(Debug, Clone, actix::Message)]
#[rtype(result = "()")]
pub struct Resume(pub Vec<String>);

/// Who is told that rows may be due: the SupervisorActor (a session's inbound rows), the
/// HookClaimer and the OutboundSender.
#[derive(Clone)]
pub struct Wakers {
    pub session: Recipient<WakeSession>,
    pub resume: Recipient<Resume>,
    pub hooks: Recipient<ClaimHooks>,
    pub outbound: Recipient<ClaimOutbound>,
}

impl Wakers {
    /// Tells `queue`'s worker for `key` that rows may be due.
    pub fn wake(&self, queue: QueueName, key: &str) {
        match queue {
            QueueName::Inbound => self.session.do_send(WakeSession(key.to_string())),
            QueueName::Hooks => self.hooks.do_send(ClaimHooks),
            QueueName::Outbound => self.outbound.do_send(ClaimOutbound),
        }
    }

    /// Both claimers look for due rows.
    pub fn claim_all(&self) {
        self.hooks.do_send(ClaimHooks);
        self.outbound.do_send(ClaimOutbound);
    }
}

/// Binds the socket beside `db` and forwards each note: inbound rows to the SupervisorActor
/// (which wakes the session), hook rows to the HookClaimer, outbound rows to the
/// OutboundSender. The caller must hold the daemon lock (a stale socket file of a dead daemon
/// is replaced). The socket is made 0600.
pub fn listen(db: &Path, wakers: Wakers) -> std::io::Result<actix_rt::task::JoinHandle<()>> {
    let path = socket_path(db);
    // Only this user may send wake-ups, whatever the umask (the directory is private too):
    // bound under a name of its own, made 0600, then moved into place, so the socket is never
    // seen at its path with the umask's mode.
    let mut binding = path.clone().into_os_string();
    binding.push(format!(".{}", std::process::id()));
    let binding = std::path::PathBuf::from(binding);
    let _ = std::fs::remove_file(&binding);
    let socket = tokio::net::UnixDatagram::bind(&binding)?;
    std::fs::set_permissions(&binding, std::fs::Permissions::from_mode(0o600))?;
    std::fs::rename(&binding, &path)?;
    Ok(actix_rt::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match socket.recv(&mut buf).await {
                Ok(n) => match serde_json::from_slice::<WakeNote>(&buf[..n]) {
                    Ok(note) => wakers.wake(note.queue, &note.key),
                    Err(e) => tracing::debug!(error = %e, "ignoring a malformed wake datagram"),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "wake socket failed; relying on sweeps");
                    return;
                }
            }
        }
    }))
}

/// Removes the socket file when the daemon stops.
pub fn remove(db: &Path) {
    let _ = std::fs::remove_file(socket_path(db));
}
