//! The `source_offsets` table: how far each inbound source has read. Written in the
//! transaction of the rows it covers (see [`sources`](crate::sources)).

use crate::tx::Tx;
use rusqlite::{named_params, Connection, OptionalExtension};

use crate::error::Result;

const OFFSET_SQL: &str = r#"SELECT "offset" FROM source_offsets WHERE source = :source"#;

const SET_SQL: &str = r#"INSERT INTO source_offsets (source, "offset", updated_at)
     VALUES (:source, :offset, :now)
     ON CONFLICT (source) DO UPDATE SET "offset" = excluded."offset",
                                        updated_at = excluded.updated_at"#;

/// Where source `name` stopped reading, if it ever read.
pub fn offset(conn: &Connection, name: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached(OFFSET_SQL)?
        .query_row(named_params! {":source": name}, |r| r.get(0))
        .optional()?)
}

/// Records that source `name` has read up to `offset`.
pub fn set_offset_in(tx: &Tx<'_>, name: &str, offset: &str) -> Result<()> {
    let now = tx.now();
    tx.prepare_cached(SET_SQL)?
        .execute(named_params! {":source": name, ":offset": offset, ":now": now})?;
    Ok(())
}
