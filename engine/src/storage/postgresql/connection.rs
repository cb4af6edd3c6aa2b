//! PostgreSQL connections that may be used, and dropped, on any thread.
//!
//! The synchronous driver runs each call on a small async runtime of its own, and tokio
//! refuses to start a runtime on a thread that already drives async tasks (an actor's
//! thread, an async test): the call would panic there. The engine is synchronous and is
//! called from such threads too (the daemon moves its calls to blocking threads, but not
//! every caller does), so each blocking call goes through [`blocking`], which moves it to a
//! thread of its own when it must; and a connection dropped on such a thread is closed on
//! another.

use std::ops::{Deref, DerefMut};

use r2d2_postgres::postgres::{Client, Error, NoTls};
use r2d2_postgres::PostgresConnectionManager;

/// The statements a connection keeps prepared, by text: a statement is parsed and planned
/// once per connection, not at each run (which costs PostgreSQL a round trip more).
pub type Statements = std::sync::Arc<
    std::sync::Mutex<std::collections::HashMap<String, r2d2_postgres::postgres::Statement>>,
>;

/// Runs `f`, which blocks on the driver: here, or on a scoped thread when this thread
/// drives async tasks.
pub(crate) fn blocking<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|scope| match scope.spawn(f).join() {
        Ok(out) => out,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

/// A client that closes itself where closing may block, with the statements it keeps
/// prepared (see [`Statements`]).
pub struct Connection {
    client: Option<Client>,
    statements: Statements,
}

impl Connection {
    /// The client and its prepared statements, apart.
    pub fn parts(&mut self) -> (&mut Client, &Statements) {
        let client = self
            .client
            .as_mut()
            .expect("a connection is closed only when dropped");
        (client, &self.statements)
    }

    /// The statements it keeps prepared (shared with its transactions).
    pub fn statements(&self) -> Statements {
        self.statements.clone()
    }
}

impl Deref for Connection {
    type Target = Client;

    fn deref(&self) -> &Client {
        self.client
            .as_ref()
            .expect("a connection is closed only when dropped")
    }
}

impl DerefMut for Connection {
    fn deref_mut(&mut self) -> &mut Client {
        self.client
            .as_mut()
            .expect("a connection is closed only when dropped")
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            match tokio::runtime::Handle::try_current() {
                Err(_) => drop(client),
                Ok(_) => {
                    let _ = std::thread::Builder::new()
                        .name("relayq-pg-close".into())
                        .spawn(move || drop(client));
                }
            }
        }
    }
}

/// r2d2's manager for [`Connection`]s.
pub struct Manager(PostgresConnectionManager<NoTls>);

impl Manager {
    pub fn new(config: postgres::Config) -> Manager {
        Manager(PostgresConnectionManager::new(config, NoTls))
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Connection;
    type Error = Error;

    fn connect(&self) -> Result<Connection, Error> {
        blocking(|| self.0.connect()).map(|client| Connection {
            client: Some(client),
            statements: Statements::default(),
        })
    }

    fn is_valid(&self, conn: &mut Connection) -> Result<(), Error> {
        let client: &mut Client = conn;
        blocking(|| client.simple_query("").map(|_| ()))
    }

    fn has_broken(&self, conn: &mut Connection) -> bool {
        conn.is_closed()
    }
}
