//! The `source_offsets` table: how far each inbound source has read. Written in the
//! transaction of the rows it covers (see [`sources`](crate::inbound::sources)). Its statements run on
//! either backend ([`sql`](crate::storage::sql)).

use crate::error::Result;
use crate::params;
use crate::storage::sql::{Executor, Query, Sql};
use crate::storage::tx::Tx;

const OFFSET_SQL: Sql = Sql::same(r#"SELECT "offset" FROM source_offsets WHERE source = :source"#);

const SET_SQL: Sql = Sql::same(
    r#"INSERT INTO source_offsets (source, "offset", updated_at)
     VALUES (:source, :offset, :now)
     ON CONFLICT (source) DO UPDATE SET "offset" = excluded."offset",
                                        updated_at = excluded.updated_at"#,
);

/// Where source `name` stopped reading, if it ever read.
pub fn offset(db: &dyn Executor, name: &str) -> Result<Option<String>> {
    db.query_opt(&OFFSET_SQL, params![":source" => name], |r| r.get(0))
}

/// Records that source `name` has read up to `offset`.
pub fn set_offset_in(tx: &Tx<'_>, name: &str, offset: &str) -> Result<()> {
    let now = tx.now();
    tx.exec(
        &SET_SQL,
        params![":source" => name, ":offset" => offset, ":now" => now],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The offset is kept per source and moves forward with each write, on both backends.
    fn offsets_are_kept_per_source(
        write: &dyn Fn(&str, &str),
        read: &dyn Fn(&str) -> Option<String>,
    ) {
        assert_eq!(read("tg"), None);
        write("tg", "41");
        write("tg", "42");
        write("file", "1024");
        assert_eq!(read("tg").as_deref(), Some("42"));
        assert_eq!(read("file").as_deref(), Some("1024"));
    }

    #[test]
    fn offsets_on_both_backends() {
        for backend in crate::storage::test_db::TestDb::both() {
            let db = &backend.db;
            offsets_are_kept_per_source(
                &|name, at| db.write_at(1, |tx| set_offset_in(tx, name, at)).unwrap(),
                &|name| offset(&db.read().unwrap(), name).unwrap(),
            );
        }
    }
}
