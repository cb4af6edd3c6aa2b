//! Moving a single-node SQLite deployment to PostgreSQL (`relayq migrate --to`): every table
//! that holds what the daemon must not forget — the rows with their states, attempts, leases
//! and ids, the sessions and their origins, the sources' offsets, the operator's pauses, the
//! channels' penalties, the approvals, the sessions started from chats with their commands and
//! the chats' current sessions, the chats' progress settings, the reactions their messages
//! should show and the albums' messages joined to rows — copied in one PostgreSQL transaction. The nodes' own tables
//! (nodes, source leases, budgets, the projects each publishes) are not copied: the daemons
//! write them afresh.
//!
//! A row already there (its key) is left as it is, so a second run copies only what the first
//! did not, and never takes back what a PostgreSQL daemon has done since. A row already there
//! under a copied row's id but with other contents is refused: the database is another
//! deployment's.

use std::collections::HashMap;

use crate::error::{EngineError, Result};
use crate::storage::sql::{Param, Query, Sql};
use crate::storage::sqlite::db::SqliteDatabase;
use crate::storage::tx::Tx;

/// The tables copied, in an order that keeps references whole.
pub const TABLES: &[&str] = &[
    "queue_rows",
    "sessions",
    "session_origins",
    "source_offsets",
    "pauses",
    "channel_penalties",
    "approvals",
    "session_commands",
    "chat_sessions",
    "chat_current",
    "chat_settings",
    "reactions",
    "album_parts",
    "chat_users",
    "pair_codes",
    "access_events",
];

/// What one table's copy did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    pub table: &'static str,
    /// Rows in the SQLite file.
    pub rows: usize,
    /// Of those, rows written (the others were there already).
    pub new: usize,
}

const COLUMN_TYPES_SQL: Sql = Sql::same(
    "SELECT column_name::TEXT, data_type::TEXT FROM information_schema.columns
     WHERE table_schema = current_schema() AND table_name = :table",
);
/// The identities go on after the highest ids copied.
const IDENTITY_SQL: Sql = Sql::same(
    "SELECT setval(pg_get_serial_sequence('queue_rows', 'id'),
                   GREATEST((SELECT COALESCE(MAX(id), 0) FROM queue_rows), 1)),
            setval(pg_get_serial_sequence('session_commands', 'id'),
                   GREATEST((SELECT COALESCE(MAX(id), 0) FROM session_commands), 1))",
);
const ROW_IDS_SQL: Sql = Sql::same("SELECT id, queue, key, created_at FROM queue_rows");

/// A value as SQLite stored it.
enum Value {
    Null,
    Integer(i64),
    Text(String),
}

/// Copies every table of `sqlite` into the PostgreSQL transaction `tx` (see the module's doc).
pub fn copy_in(sqlite: &SqliteDatabase, tx: &Tx<'_>) -> Result<Vec<Copied>> {
    let conn = sqlite.read()?;
    let mut copied = Vec::new();
    for &table in TABLES {
        let types: HashMap<String, String> = tx
            .query_all(&COLUMN_TYPES_SQL, crate::params![":table" => table], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .into_iter()
            .collect();
        let mut stmt = conn.prepare(&format!("SELECT * FROM {table}"))?;
        let columns: Vec<String> = stmt.column_names().iter().map(|c| c.to_string()).collect();
        let insert = insert_sql(table, &columns);
        let names: Vec<String> = (0..columns.len()).map(|i| format!(":c{i}")).collect();
        let mut rows = stmt.query([])?;
        let (mut count, mut new) = (0, 0);
        while let Some(row) = rows.next()? {
            let mut values: Vec<Box<dyn Param>> = Vec::with_capacity(columns.len());
            for (i, column) in columns.iter().enumerate() {
                let value = match row.get_ref(i)? {
                    rusqlite::types::ValueRef::Null => Value::Null,
                    rusqlite::types::ValueRef::Integer(n) => Value::Integer(n),
                    rusqlite::types::ValueRef::Text(t) => {
                        Value::Text(String::from_utf8_lossy(t).into_owned())
                    }
                    other => {
                        return Err(EngineError::Invalid(format!(
                            "{table}.{column}: a {:?} value, which relayq never writes",
                            other.data_type()
                        )))
                    }
                };
                values.push(as_param(
                    value,
                    types.get(column).map(String::as_str),
                    table,
                    column,
                )?);
            }
            let params: Vec<(&str, &dyn Param)> = names
                .iter()
                .zip(&values)
                .map(|(name, value)| (name.as_str(), value.as_ref()))
                .collect();
            new += tx.exec(&insert, &params)?;
            count += 1;
        }
        copied.push(Copied {
            table,
            rows: count,
            new,
        });
    }
    tx.exec(&IDENTITY_SQL, crate::params![])?;
    refuse_other_rows(&conn, tx)?;
    Ok(copied)
}

/// `INSERT` of every column, leaving a row whose key is there already.
fn insert_sql(table: &str, columns: &[String]) -> Sql {
    let names: Vec<String> = (0..columns.len()).map(|i| format!(":c{i}")).collect();
    let overriding = match table {
        "queue_rows" => " OVERRIDING SYSTEM VALUE",
        _ => "",
    };
    // Quoted: `offset` is a column name PostgreSQL reserves.
    let quoted: Vec<String> = columns.iter().map(|c| format!("\"{c}\"")).collect();
    let text = format!(
        "INSERT INTO {table} ({}){overriding} VALUES ({}) ON CONFLICT DO NOTHING",
        quoted.join(", "),
        names.join(", ")
    );
    // Once per table of a one-shot command: statements are `'static`.
    Sql::same(Box::leak(text.into_boxed_str()))
}

/// A SQLite value as the PostgreSQL column (`data_type`) takes it.
fn as_param(
    value: Value,
    data_type: Option<&str>,
    table: &str,
    column: &str,
) -> Result<Box<dyn Param>> {
    let mismatch = || {
        EngineError::Invalid(format!(
            "{table}.{column}: the SQLite value does not fit the PostgreSQL column ({data_type:?})"
        ))
    };
    Ok(match (data_type, value) {
        (Some("bigint"), Value::Null) => Box::new(None::<i64>),
        (Some("bigint"), Value::Integer(n)) => Box::new(Some(n)),
        (Some("boolean"), Value::Null) => Box::new(None::<bool>),
        (Some("boolean"), Value::Integer(n)) => Box::new(Some(n != 0)),
        (Some("text"), Value::Null) => Box::new(None::<String>),
        (Some("text"), Value::Text(t)) => Box::new(Some(t)),
        (Some("text"), Value::Integer(n)) => Box::new(Some(n.to_string())),
        _ => return Err(mismatch()),
    })
}

/// Every row copied is there as it was copied: a row under one of its ids with another key or
/// time is another deployment's, and the copy is refused (rolled back).
fn refuse_other_rows(conn: &rusqlite::Connection, tx: &Tx<'_>) -> Result<()> {
    type Identity = (String, String, i64);
    let there: HashMap<i64, Identity> = tx
        .query_all(&ROW_IDS_SQL, crate::params![], |r| {
            Ok((r.get(0)?, (r.get(1)?, r.get(2)?, r.get(3)?)))
        })?
        .into_iter()
        .collect();
    let mut stmt = conn.prepare("SELECT id, queue, key, created_at FROM queue_rows")?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let id: i64 = row.get(0)?;
        let mine: Identity = (row.get(1)?, row.get(2)?, row.get(3)?);
        if there.get(&id) != Some(&mine) {
            return Err(EngineError::Invalid(format!(
                "the PostgreSQL database holds another row under id {id}: it serves another \
                 deployment; migrate into a new, empty database"
            )));
        }
    }
    Ok(())
}
