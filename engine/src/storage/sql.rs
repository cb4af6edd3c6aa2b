//! One statement, two dialects. Storage code runs a [`Sql`] with named parameters
//! (`:name`, [`params!`](crate::params!)) on an [`Executor`]: a SQLite connection or a
//! PostgreSQL one. Most statements are the same text in both (written once with
//! [`Sql::same`]); where the dialects differ, [`Sql::two`] holds both texts. For PostgreSQL
//! the `:name` parameters become `$1, $2, ...` once per statement, and values are bound by
//! name, so a statement's text decides the order, never the caller.
//!
//! Rows are read through [`Row`], by position or by column name, into [`Column`] types: the
//! same mapper reads either backend.
//!
//! Text is bound with U+FFFD in place of a NUL, on both backends ([`NulFree`]): PostgreSQL's
//! text cannot hold one, and what an agent reports (its cwd, its answer) is stored as it came
//! but for that, so a row reads the same on either.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock, RwLock};

use crate::error::{EngineError, Result};

/// A statement's text in each dialect.
#[derive(Debug, Clone, Copy)]
pub struct Sql {
    pub sqlite: &'static str,
    pub postgres: &'static str,
}

impl Sql {
    /// A statement both dialects read alike.
    pub const fn same(text: &'static str) -> Sql {
        Sql {
            sqlite: text,
            postgres: text,
        }
    }

    /// A statement written once per dialect.
    pub const fn two(sqlite: &'static str, postgres: &'static str) -> Sql {
        Sql { sqlite, postgres }
    }
}

/// A value both backends can bind. `u32` is not one (PostgreSQL reads it as an OID): bind
/// counts as `i64`.
pub trait Param: rusqlite::ToSql + postgres::types::ToSql + Sync {}
impl<T: rusqlite::ToSql + postgres::types::ToSql + Sync + ?Sized> Param for T {}

/// A statement's values, by parameter name (`":id"`).
pub type Params<'a> = &'a [(&'a str, &'a dyn Param)];

/// `params! { ":id" => id, ":now" => now }`: the values of a statement's named parameters.
#[macro_export]
macro_rules! params {
    () => { &[] as $crate::storage::sql::Params<'_> };
    ($($name:literal => $value:expr),+ $(,)?) => {
        &[$(($name, &$value as &dyn $crate::storage::sql::Param)),+] as $crate::storage::sql::Params<'_>
    };
}

/// A column's position or name.
pub trait Index: rusqlite::RowIndex + postgres::row::RowIndex + fmt::Display + Copy {}
impl<T: rusqlite::RowIndex + postgres::row::RowIndex + fmt::Display + Copy> Index for T {}

/// One row of a result, of either backend.
pub enum Row<'r> {
    Sqlite(&'r rusqlite::Row<'r>),
    Postgres(&'r postgres::Row),
}

impl Row<'_> {
    /// Column `at` (a position from 0, or a name) as a `T`.
    pub fn get<T: Column, I: Index>(&self, at: I) -> Result<T> {
        match self {
            Row::Sqlite(r) => T::from_sqlite(r, at),
            Row::Postgres(r) => T::from_postgres(r, at),
        }
    }
}

/// A type a column reads into, on either backend.
pub trait Column: Sized {
    fn from_sqlite<I: Index>(row: &rusqlite::Row<'_>, at: I) -> Result<Self>;
    fn from_postgres<I: Index>(row: &postgres::Row, at: I) -> Result<Self>;
}

/// Types both drivers read alike.
macro_rules! both_read {
    ($($t:ty),*) => {$(
        impl Column for $t {
            fn from_sqlite<I: Index>(row: &rusqlite::Row<'_>, at: I) -> Result<Self> {
                Ok(row.get(at)?)
            }
            fn from_postgres<I: Index>(row: &postgres::Row, at: I) -> Result<Self> {
                Ok(row.try_get(at)?)
            }
        }
    )*};
}
both_read!(i64, String, bool, Vec<u8>);

/// NULL is `None`; any other value is read as a `T`.
impl<T: Column> Column for Option<T> {
    fn from_sqlite<I: Index>(row: &rusqlite::Row<'_>, at: I) -> Result<Self> {
        match row.get_ref(at)? {
            rusqlite::types::ValueRef::Null => Ok(None),
            _ => T::from_sqlite(row, at).map(Some),
        }
    }

    fn from_postgres<I: Index>(row: &postgres::Row, at: I) -> Result<Self> {
        match T::from_postgres(row, at) {
            Ok(value) => Ok(Some(value)),
            Err(EngineError::Postgres(e)) if was_null(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Whether the driver refused a value because it was NULL.
fn was_null(e: &postgres::Error) -> bool {
    std::error::Error::source(e).is_some_and(|s| s.is::<postgres::types::WasNull>())
}

impl Column for u32 {
    fn from_sqlite<I: Index>(row: &rusqlite::Row<'_>, at: I) -> Result<Self> {
        Ok(row.get(at)?)
    }
    fn from_postgres<I: Index>(row: &postgres::Row, at: I) -> Result<Self> {
        let n: i64 = row.try_get(at)?;
        u32::try_from(n)
            .map_err(|_| EngineError::Invalid(format!("column {at}: {n} is not a count")))
    }
}

/// Runs statements: a connection or a transaction of either backend. Implementors say only
/// which connection they are; running a statement is written once, in [`Query`].
pub trait Executor {
    fn target(&self) -> Target<'_>;
}

/// The connection a statement runs on.
pub enum Target<'a> {
    Sqlite(&'a rusqlite::Connection),
    Postgres(&'a dyn PgClient),
}

/// A PostgreSQL connection or transaction, by statement text and values in `$n` order.
pub trait PgClient {
    fn run(&self, text: &str, values: &[&(dyn postgres::types::ToSql + Sync)]) -> Result<u64>;
    fn rows(
        &self,
        text: &str,
        values: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>>;
    /// Statements without parameters, one after the other (a migration).
    fn batch(&self, text: &str) -> Result<()>;
}

/// Statements on any [`Executor`].
pub trait Query: Executor {
    /// Runs `sql`; how many rows it changed. (Not `execute`: rusqlite's connection has an
    /// inherent method of that name, which a call would find first.)
    fn exec(&self, sql: &Sql, params: Params<'_>) -> Result<usize> {
        match self.target() {
            Target::Sqlite(conn) => {
                let mut stmt = conn.prepare_cached(sql.sqlite)?;
                bind_sqlite(&mut stmt, params)?;
                Ok(stmt.raw_execute()?)
            }
            Target::Postgres(client) => {
                let statement = positional(sql.postgres);
                let values = bind_postgres(&statement, params)?;
                Ok(client.run(&statement.text, &by_ref(&values))? as usize)
            }
        }
    }

    /// Runs `sql` and hands each row to `each`, in order.
    fn for_each_row(
        &self,
        sql: &Sql,
        params: Params<'_>,
        mut each: impl FnMut(&Row<'_>) -> Result<()>,
    ) -> Result<()> {
        match self.target() {
            Target::Sqlite(conn) => {
                let mut stmt = conn.prepare_cached(sql.sqlite)?;
                bind_sqlite(&mut stmt, params)?;
                let mut rows = stmt.raw_query();
                while let Some(row) = rows.next()? {
                    each(&Row::Sqlite(row))?;
                }
            }
            Target::Postgres(client) => {
                let statement = positional(sql.postgres);
                let values = bind_postgres(&statement, params)?;
                for row in &client.rows(&statement.text, &by_ref(&values))? {
                    each(&Row::Postgres(row))?;
                }
            }
        }
        Ok(())
    }

    /// Runs an `INSERT` of one row; the new row's id, or `None` when it inserted nothing (a
    /// conflict it ignores). SQLite reads the id from the connection (a `RETURNING` costs it a
    /// temporary b-tree); PostgreSQL's text must end in `RETURNING id`.
    fn insert(&self, sql: &Sql, params: Params<'_>) -> Result<Option<i64>> {
        match self.target() {
            Target::Sqlite(conn) => {
                let inserted = self.exec(sql, params)?;
                Ok((inserted == 1).then(|| conn.last_insert_rowid()))
            }
            Target::Postgres(_) => self.query_opt(sql, params, |r| r.get(0)),
        }
    }

    /// Statements without parameters, one after the other, in the connection's own dialect
    /// (a migration).
    fn batch(&self, text: &str) -> Result<()> {
        match self.target() {
            Target::Sqlite(conn) => Ok(conn.execute_batch(text)?),
            Target::Postgres(client) => client.batch(text),
        }
    }

    /// Every row, each read by `read`.
    fn query_all<T>(
        &self,
        sql: &Sql,
        params: Params<'_>,
        mut read: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.for_each_row(sql, params, |row| {
            out.push(read(row)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// The first row, if any, read by `read`.
    fn query_opt<T>(
        &self,
        sql: &Sql,
        params: Params<'_>,
        read: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<Option<T>> {
        let mut read = Some(read);
        let mut out = None;
        self.for_each_row(sql, params, |row| {
            if let Some(read) = read.take() {
                out = Some(read(row)?);
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// The one value of the first row's first column (a count, an `EXISTS`).
    fn query_value<T: Column>(&self, sql: &Sql, params: Params<'_>) -> Result<T> {
        self.query_opt(sql, params, |row| row.get(0))?
            .ok_or_else(|| EngineError::Invalid("the statement returned no row".into()))
    }
}

impl<E: Executor + ?Sized> Query for E {}

impl Executor for rusqlite::Connection {
    fn target(&self) -> Target<'_> {
        Target::Sqlite(self)
    }
}

impl<E: Executor + ?Sized> Executor for Box<E> {
    fn target(&self) -> Target<'_> {
        (**self).target()
    }
}

/// A pooled SQLite connection runs statements as its connection does.
impl Executor for r2d2::PooledConnection<r2d2_sqlite::SqliteConnectionManager> {
    fn target(&self) -> Target<'_> {
        Target::Sqlite(self)
    }
}

/// Binds each value to its named parameter; every parameter must get one.
fn bind_sqlite(stmt: &mut rusqlite::Statement<'_>, params: Params<'_>) -> Result<()> {
    for (name, value) in params {
        let Some(at) = stmt.parameter_index(name)? else {
            return Err(unknown_parameter(name));
        };
        stmt.raw_bind_parameter(at, NulFree(*value))?;
    }
    if stmt.parameter_count() != params.len() {
        return Err(EngineError::Invalid(format!(
            "the statement takes {} parameters, {} were given",
            stmt.parameter_count(),
            params.len()
        )));
    }
    Ok(())
}

fn unknown_parameter(name: &str) -> EngineError {
    EngineError::Invalid(format!("the statement has no parameter {name}"))
}

/// The values in `$n` order.
fn bind_postgres<'p>(statement: &Positional, params: Params<'p>) -> Result<Vec<NulFree<'p>>> {
    let mut values = Vec::with_capacity(statement.names.len());
    for name in &statement.names {
        let Some((_, value)) = params.iter().find(|(n, _)| n == name) else {
            return Err(EngineError::Invalid(format!(
                "no value for parameter {name}"
            )));
        };
        values.push(NulFree(*value));
    }
    if let Some((extra, _)) = params
        .iter()
        .find(|(n, _)| !statement.names.iter().any(|k| k == n))
    {
        return Err(unknown_parameter(extra));
    }
    Ok(values)
}

fn by_ref<'v>(values: &'v [NulFree<'_>]) -> Vec<&'v (dyn postgres::types::ToSql + Sync)> {
    values.iter().map(|v| v as _).collect()
}

/// A value bound as it is, but text with U+FFFD for each NUL: PostgreSQL's text refuses a NUL
/// ("invalid byte sequence for encoding UTF8: 0x00"), which held a session's hook rows when
/// an agent's cwd had one. SQLite binds the same, so both backends store the same text.
#[derive(Debug)]
struct NulFree<'p>(&'p dyn Param);

const REPLACEMENT: &str = "\u{FFFD}";

impl rusqlite::ToSql for NulFree<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value, ValueRef};
        let out = rusqlite::ToSql::to_sql(self.0)?;
        let text = match &out {
            ToSqlOutput::Borrowed(ValueRef::Text(bytes)) => *bytes,
            ToSqlOutput::Owned(Value::Text(text)) => text.as_bytes(),
            _ => return Ok(out),
        };
        if !text.contains(&0) {
            return Ok(out);
        }
        let text = String::from_utf8_lossy(text).replace('\0', REPLACEMENT);
        Ok(ToSqlOutput::Owned(Value::Text(text)))
    }
}

impl postgres::types::ToSql for NulFree<'_> {
    fn to_sql(
        &self,
        ty: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>>
    {
        self.to_sql_checked(ty, out)
    }

    fn accepts(_: &postgres::types::Type) -> bool {
        true
    }

    /// The value's own encoding; a text type's bytes (UTF-8 as they are, where a 0 byte is a
    /// NUL and nothing else) with each 0 made U+FFFD.
    fn to_sql_checked(
        &self,
        ty: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>>
    {
        use postgres::types::{IsNull, Type};
        let start = out.len();
        let null = self.0.to_sql_checked(ty, out)?;
        let text = [
            Type::TEXT,
            Type::VARCHAR,
            Type::BPCHAR,
            Type::NAME,
            Type::UNKNOWN,
        ];
        if matches!(null, IsNull::No) && text.contains(ty) && out[start..].contains(&0) {
            let tail = out.split_off(start);
            for byte in tail {
                match byte {
                    0 => out.extend_from_slice(REPLACEMENT.as_bytes()),
                    b => out.extend_from_slice(&[b]),
                }
            }
        }
        Ok(null)
    }

    fn encode_format(&self, ty: &postgres::types::Type) -> postgres::types::Format {
        self.0.encode_format(ty)
    }
}

/// A statement with its `:name` parameters made `$1, $2, ...`, and the name of each.
#[derive(Debug, PartialEq, Eq)]
pub struct Positional {
    pub text: String,
    pub names: Vec<String>,
}

/// `text` made positional, once per statement text (statements are `'static`).
fn positional(text: &'static str) -> Arc<Positional> {
    /// By the text's address and length (statements are `'static`).
    type Cache = RwLock<HashMap<(usize, usize), Arc<Positional>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (text.as_ptr() as usize, text.len());
    if let Some(found) = cache.read().expect("statement cache").get(&key) {
        return found.clone();
    }
    let made = Arc::new(to_positional(text));
    cache
        .write()
        .expect("statement cache")
        .insert(key, made.clone());
    made
}

/// Rewrites `:name` parameters to `$n` (the same name, the same number), leaving string
/// literals, quoted names and `::` casts alone.
pub fn to_positional(text: &str) -> Positional {
    let mut out = String::with_capacity(text.len());
    let mut names: Vec<String> = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' | '"' => {
                out.push(c);
                for (_, d) in chars.by_ref() {
                    out.push(d);
                    if d == c {
                        break;
                    }
                }
            }
            ':' if chars.peek().is_some_and(|(_, d)| *d == ':') => {
                out.push_str("::");
                chars.next();
            }
            ':' if chars
                .peek()
                .is_some_and(|(_, d)| d.is_ascii_alphabetic() || *d == '_') =>
            {
                let start = i;
                let mut end = i + 1;
                while let Some((j, d)) = chars.peek() {
                    if d.is_ascii_alphanumeric() || *d == '_' {
                        end = j + d.len_utf8();
                        chars.next();
                    } else {
                        break;
                    }
                }
                let name = &text[start..end];
                let n = match names.iter().position(|known| known == name) {
                    Some(k) => k + 1,
                    None => {
                        names.push(name.to_string());
                        names.len()
                    }
                };
                out.push('$');
                out.push_str(&n.to_string());
            }
            _ => out.push(c),
        }
    }
    Positional { text: out, names }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::postgresql::client::Pg;
    use crate::storage::postgresql::test_server::TestServer;
    use std::cell::RefCell;

    #[test]
    fn named_parameters_become_numbered_and_literals_and_casts_stay() {
        let p = to_positional(
            "SELECT ':no', \"a:b\", x::bigint FROM t WHERE id = :id AND (:id IS NULL OR k = :key_2)",
        );
        assert_eq!(
            p.text,
            "SELECT ':no', \"a:b\", x::bigint FROM t WHERE id = $1 AND ($1 IS NULL OR k = $2)"
        );
        assert_eq!(p.names, [":id", ":key_2"]);
    }

    /// The same statements and the same mapper on both backends.
    fn round_trip(db: &dyn Executor) {
        const CREATE: Sql = Sql::two(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL, n INTEGER, ok INTEGER NOT NULL)",
            "CREATE TABLE t (id BIGINT PRIMARY KEY, name TEXT NOT NULL, n BIGINT, ok BOOLEAN NOT NULL)",
        );
        const INSERT: Sql =
            Sql::same("INSERT INTO t (id, name, n, ok) VALUES (:id, :name, :n, :ok)");
        const SELECT: Sql = Sql::same(
            "SELECT id, name, n, ok FROM t WHERE id >= :from AND name <> ':x' ORDER BY id",
        );
        db.exec(&CREATE, params![]).unwrap();
        for (id, name, n, ok) in [(1i64, "one", Some(10i64), true), (2, "two", None, false)] {
            let changed = db
                .exec(
                    &INSERT,
                    params![":id" => id, ":name" => name, ":n" => n, ":ok" => ok],
                )
                .unwrap();
            assert_eq!(changed, 1);
        }
        let rows = db
            .query_all(&SELECT, params![":from" => 1i64], |r| {
                Ok((
                    r.get::<i64, _>("id")?,
                    r.get::<String, _>(1)?,
                    r.get::<Option<i64>, _>("n")?,
                    r.get::<bool, _>("ok")?,
                ))
            })
            .unwrap();
        assert_eq!(
            rows,
            [
                (1, "one".into(), Some(10), true),
                (2, "two".into(), None, false)
            ]
        );
        let missing = db.exec(&INSERT, params![":id" => 3i64, ":name" => "x"]);
        assert!(
            missing.is_err(),
            "a parameter without a value is refused, not NULL"
        );
        let extra = db.query_all(&SELECT, params![":from" => 1i64, ":to" => 2i64], |_| Ok(()));
        assert!(extra.is_err(), "a value for no parameter is refused");
    }

    #[test]
    fn one_statement_and_one_mapper_read_alike_on_sqlite() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        round_trip(&conn);
    }

    #[test]
    fn one_statement_and_one_mapper_read_alike_on_postgresql() {
        let server = TestServer::start();
        let mut client = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
        round_trip(&Pg(RefCell::new(&mut client)));
    }
}
