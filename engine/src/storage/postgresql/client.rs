//! A PostgreSQL client or transaction as an [`Executor`]: the statements it runs prepared
//! once per connection, where the driver may block (see [`blocking`]).

use std::cell::RefCell;

use postgres::GenericClient;

use super::connection::{blocking, Connection, Manager, Statements};
use crate::error::Result;
use crate::storage::sql::{Executor, PgClient, Target};

/// A PostgreSQL client or transaction (a pooled connection, `&mut Transaction`), borrowed
/// mutably through a cell: the driver takes `&mut`, storage code holds `&`.
pub struct Pg<C>(pub RefCell<C>);

/// What a [`Pg`] holds: something that lends a client or a transaction, and the statements its
/// connection keeps prepared (if it keeps any).
pub trait AsClient {
    type Client: GenericClient + Send;
    fn client(&mut self) -> (&mut Self::Client, Option<&Statements>);
}

impl AsClient for r2d2::PooledConnection<Manager> {
    type Client = postgres::Client;
    fn client(&mut self) -> (&mut postgres::Client, Option<&Statements>) {
        let conn: &mut Connection = self;
        let (client, statements) = conn.parts();
        (client, Some(statements))
    }
}

/// A write transaction on a pooled connection, with the statements the connection keeps.
pub struct InTransaction<'a, 'c> {
    pub tx: &'a mut postgres::Transaction<'c>,
    pub statements: Statements,
}

impl<'c> AsClient for InTransaction<'_, 'c> {
    type Client = postgres::Transaction<'c>;
    fn client(&mut self) -> (&mut postgres::Transaction<'c>, Option<&Statements>) {
        (self.tx, Some(&self.statements))
    }
}

/// `text` prepared on `client`, from `statements` when it was before.
fn prepared<C: GenericClient>(
    client: &mut C,
    statements: &Statements,
    text: &str,
) -> std::result::Result<postgres::Statement, postgres::Error> {
    if let Some(found) = statements.lock().expect("statements").get(text) {
        return Ok(found.clone());
    }
    let made = client.prepare(text)?;
    statements
        .lock()
        .expect("statements")
        .insert(text.to_string(), made.clone());
    Ok(made)
}

impl AsClient for &mut postgres::Client {
    type Client = postgres::Client;
    fn client(&mut self) -> (&mut postgres::Client, Option<&Statements>) {
        (self, None)
    }
}

impl<C: AsClient> Pg<C> {
    /// Runs `run` with the client and `text` prepared (kept by the connection when it keeps
    /// statements), where the driver may block.
    fn prepared_on<T: Send>(
        &self,
        text: &str,
        run: impl FnOnce(&mut C::Client, &postgres::Statement) -> std::result::Result<T, postgres::Error>
            + Send,
    ) -> Result<T> {
        let mut held = self.0.borrow_mut();
        let (client, statements) = held.client();
        Ok(blocking(move || {
            let statement = match statements {
                Some(statements) => prepared(client, statements, text)?,
                None => client.prepare(text)?,
            };
            run(client, &statement)
        })?)
    }
}

impl<C: AsClient> PgClient for Pg<C> {
    fn run(&self, text: &str, values: &[&(dyn postgres::types::ToSql + Sync)]) -> Result<u64> {
        self.prepared_on(text, |client, statement| client.execute(statement, values))
    }

    fn rows(
        &self,
        text: &str,
        values: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>> {
        self.prepared_on(text, |client, statement| client.query(statement, values))
    }

    fn batch(&self, text: &str) -> Result<()> {
        let mut held = self.0.borrow_mut();
        let (client, _) = held.client();
        Ok(blocking(move || client.batch_execute(text))?)
    }
}

impl<C: AsClient> Executor for Pg<C> {
    fn target(&self) -> Target<'_> {
        Target::Postgres(self)
    }
}
