//! A write transaction and the time it is made at. Every statement of a write reads one `now`
//! from it, so a write cannot mix times, and the time is the storage's to give: the backend
//! that opens the transaction decides what clock it comes from.

use std::ops::Deref;

use rusqlite::Transaction;

/// An open write transaction with its time (unix ms). Derefs to the SQLite transaction for
/// the statements of `storage`.
pub struct Tx<'a> {
    tx: &'a Transaction<'a>,
    now: i64,
}

impl<'a> Tx<'a> {
    /// `tx`, made at `now`.
    pub fn new(tx: &'a Transaction<'a>, now: i64) -> Self {
        Tx { tx, now }
    }

    /// The time the write is made at.
    pub fn now(&self) -> i64 {
        self.now
    }
}

impl<'a> Deref for Tx<'a> {
    type Target = Transaction<'a>;

    fn deref(&self) -> &Transaction<'a> {
        self.tx
    }
}
