//! The group commit on a real SQLite file and a real PostgreSQL server: operations queued
//! together share one transaction, and a failing or panicking operation takes back exactly
//! what it should.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use relayq_engine::commit::{CommitLine, KeyLine};
use relayq_engine::params;
use relayq_engine::storage::sql::{Query, Sql};
use relayq_engine::storage::test_db::TestDb;
use relayq_engine::{Atomicity, Database, EngineError, Tx};
use tokio::sync::oneshot;

type Answer = oneshot::Receiver<relayq_engine::Result<()>>;

const INSERT_SQL: Sql = Sql::same("INSERT INTO t (name) VALUES (:name)");

/// A database of `backend` with a table `t` of names in the order written.
fn prepared(backend: TestDb) -> TestDb {
    let table = Sql::two(
        "CREATE TABLE t (n INTEGER PRIMARY KEY, name TEXT NOT NULL)",
        "CREATE TABLE t (n BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name TEXT NOT NULL)",
    );
    backend
        .db
        .write(|tx| tx.exec(&table, params![]).map(|_| ()))
        .unwrap();
    backend
}

fn both() -> [TestDb; 2] {
    TestDb::both().map(prepared)
}

fn insert(tx: &Tx<'_>, name: &str) -> relayq_engine::Result<()> {
    tx.exec(&INSERT_SQL, params![":name" => name])?;
    Ok(())
}

fn names(db: &Database) -> Vec<String> {
    let sql = Sql::same("SELECT name FROM t ORDER BY n");
    db.read()
        .unwrap()
        .query_all(&sql, params![], |r| r.get(0))
        .unwrap()
}

/// Holds the commit thread inside an operation until the returned sender is dropped, so the
/// operations submitted meanwhile all land in the next batch together.
fn hold_the_committer(db: &Database) -> (mpsc::Sender<()>, Answer) {
    let (release, held) = mpsc::channel::<()>();
    let (running, is_running) = mpsc::channel();
    let answer = db.submit(Atomicity::Savepoint, move |_| {
        running.send(()).unwrap();
        let _ = held.recv();
        Ok(())
    });
    is_running.recv().unwrap();
    (release, answer)
}

/// Holds the commit thread of `lane`, as [`hold_the_committer`] does the main one's.
fn hold_the_lane(db: &Database, lane: CommitLine) -> (mpsc::Sender<()>, Answer) {
    let (release, held) = mpsc::channel::<()>();
    let (running, is_running) = mpsc::channel();
    let answer = db.submit_ahead(lane, Atomicity::Savepoint, None, move |_, _| {
        running.send(()).unwrap();
        let _ = held.recv();
        Ok(())
    });
    is_running.recv().unwrap();
    (release, answer)
}

/// The answer, once it comes within `wait`; `None` if it does not.
fn answered_within(answer: &mut Answer, wait: Duration) -> Option<relayq_engine::Result<()>> {
    let until = Instant::now() + wait;
    while Instant::now() < until {
        match answer.try_recv() {
            Ok(out) => return Some(out),
            Err(oneshot::error::TryRecvError::Empty) => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => panic!("the committer dropped the answer: {e}"),
        }
    }
    None
}

fn answers(list: Vec<Answer>) -> Vec<relayq_engine::Result<()>> {
    list.into_iter()
        .map(|a| a.blocking_recv().unwrap())
        .collect()
}

/// Submits the operations `batch` returns while the commit thread is held, so they share one
/// transaction, and returns their answers.
fn in_one_batch(
    db: &Database,
    batch: impl FnOnce(&Database) -> Vec<Answer>,
) -> Vec<relayq_engine::Result<()>> {
    let (release, first) = hold_the_committer(db);
    let batch = batch(db);
    drop(release);
    first.blocking_recv().unwrap().unwrap();
    answers(batch)
}

#[test]
fn a_failing_operation_rolls_back_only_its_own_writes() {
    for backend in both() {
        a_failing_operation_rolls_back_only_its_own_writes_on(&backend.db);
    }
}

fn a_failing_operation_rolls_back_only_its_own_writes_on(db: &Database) {
    let got = in_one_batch(db, |db| {
        vec![
            db.submit(Atomicity::Savepoint, |tx| insert(tx, "a")),
            db.submit(Atomicity::Savepoint, |tx| {
                insert(tx, "half")?;
                Err(EngineError::Invalid("refused after its first write".into()))
            }),
            db.submit(Atomicity::OneStatement, |tx| {
                let null = Sql::same("INSERT INTO t (name) VALUES (NULL)");
                tx.exec(&null, params![])?; // NOT NULL: fails whole
                Ok(())
            }),
            db.submit(Atomicity::OneStatement, |tx| insert(tx, "c")),
        ]
    });
    assert!(got[0].is_ok() && got[3].is_ok(), "{got:?}");
    assert!(matches!(got[1], Err(EngineError::Invalid(_))), "{got:?}");
    assert!(got[2].is_err(), "{got:?}");
    assert_eq!(names(db), ["a", "c"]);
}

/// Commits "a", an operation that writes and then panics (run with `atomicity`), and "c" in
/// one batch; returns the three answers.
fn a_panic_between_two_writes(
    db: &Database,
    atomicity: Atomicity,
) -> Vec<relayq_engine::Result<()>> {
    in_one_batch(db, |db| {
        vec![
            db.submit(Atomicity::Savepoint, |tx| insert(tx, "a")),
            db.submit(atomicity, |tx| {
                insert(tx, "written, then a panic")?;
                panic!("a bug after the write");
            }),
            db.submit(Atomicity::OneStatement, |tx| insert(tx, "c")),
        ]
    })
}

/// On PostgreSQL a batch runs without savepoints (each costs a round trip) and, only when an
/// operation fails, again with one for every operation: each operation of a batch that fails
/// nowhere runs once; when one fails, the others run twice and commit once.
#[test]
fn a_postgresql_batch_runs_again_in_savepoints_only_when_an_operation_fails() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let backend = prepared(TestDb::postgres());
    let db = &backend.db;
    let batch = |fail: bool| {
        let runs: Vec<Arc<AtomicUsize>> = (0..3).map(|_| Arc::default()).collect();
        let got = in_one_batch(db, |db| {
            runs.iter()
                .enumerate()
                .map(|(i, count)| {
                    let count = Arc::clone(count);
                    db.submit(Atomicity::OneStatement, move |tx| {
                        count.fetch_add(1, Ordering::SeqCst);
                        match (fail, i) {
                            (true, 1) => Err(EngineError::Invalid("refused".into())),
                            _ => insert(tx, &format!("{fail}{i}")),
                        }
                    })
                })
                .collect()
        });
        let runs: Vec<usize> = runs.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        (got, runs)
    };
    let (got, runs) = batch(false);
    assert!(got.iter().all(Result::is_ok), "{got:?}");
    assert_eq!(runs, [1, 1, 1], "no failure: each operation ran once");
    let (got, runs) = batch(true);
    assert!(
        got[0].is_ok() && got[1].is_err() && got[2].is_ok(),
        "{got:?}"
    );
    assert_eq!(
        runs,
        [2, 2, 1],
        "run until the failure, then again in savepoints"
    );
    assert_eq!(names(db), ["false0", "false1", "false2", "true0", "true2"]);
}

/// On PostgreSQL every operation that fails is rolled back alone, whatever its atomicity.
#[test]
fn a_panicking_operation_in_a_savepoint_rolls_back_only_itself() {
    let [sqlite, postgres] = both();
    let runs = [
        (&sqlite, Atomicity::Savepoint),
        (&postgres, Atomicity::Savepoint),
        (&postgres, Atomicity::OneStatement),
    ];
    for (backend, atomicity) in runs {
        let got = a_panic_between_two_writes(&backend.db, atomicity);
        let what = format!("{} {atomicity:?}: {got:?}", backend.name());
        assert!(
            matches!(got[1], Err(EngineError::NotCommitted(_))),
            "{what}"
        );
        assert!(got[0].is_ok() && got[2].is_ok(), "{what}");
        let kept = names(&backend.db);
        assert_eq!(kept, ["a", "c"], "{what}");
        let clear = Sql::same("DELETE FROM t");
        backend.db.write(|tx| tx.exec(&clear, params![])).unwrap();
    }
}

#[test]
fn a_panicking_operation_without_a_savepoint_fails_its_whole_batch_on_sqlite_and_the_next_commits()
{
    let backend = prepared(TestDb::sqlite());
    let db = &backend.db;
    let got = a_panic_between_two_writes(db, Atomicity::OneStatement);
    for answer in got {
        assert!(
            matches!(answer, Err(EngineError::NotCommitted(_))),
            "{answer:?}"
        );
    }
    assert_eq!(
        names(db),
        Vec::<String>::new(),
        "nothing of the batch is kept"
    );
    let after = db.submit(Atomicity::OneStatement, |tx| insert(tx, "d"));
    after.blocking_recv().unwrap().unwrap();
    assert_eq!(names(db), ["d"]);
}

/// Commits made through the group commit reach the database file without the writer stopping
/// to checkpoint: far below SQLite's own threshold (1000 pages), the pages are copied back by
/// the checkpoint thread.
#[test]
fn group_commits_are_checkpointed_into_the_database_file_in_the_background() {
    let backend = prepared(TestDb::sqlite());
    let db = &backend.db;
    let file = db.path().to_path_buf();
    let before = std::fs::metadata(&file).unwrap().len();
    let body = "x".repeat(1000);
    let written: Vec<Answer> = (0..200)
        .map(|_| {
            let body = body.clone();
            db.submit(Atomicity::OneStatement, move |tx| insert(tx, &body))
        })
        .collect();
    for answer in answers(written) {
        answer.unwrap();
    }
    let grown = || std::fs::metadata(&file).unwrap().len() >= before + 150 * 1024;
    for _ in 0..300 {
        if grown() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!(
        "the database file is still {} bytes: the 200 KB written stayed in the WAL",
        std::fs::metadata(&file).unwrap().len()
    );
}

/// On PostgreSQL the rows that operations side by side begin with are written by one
/// statement and handed to them, in order; when one operation fails, the batch runs again with
/// each operation writing its own row, and only the failed one's is missing.
#[test]
fn a_postgresql_batch_writes_its_rows_ahead_together_and_each_alone_when_one_fails() {
    use relayq_engine::commit::RowAhead;
    use relayq_engine::{NewRow, QueueName};
    let backend = prepared(TestDb::postgres());
    let db = &backend.db;
    let own_insert = Sql::same(
        "INSERT INTO queue_rows (queue, key, payload, created_at, next_attempt_at)
         VALUES ('inbound', :key, 'x', 0, 0) RETURNING id",
    );
    // Each answer: (written ahead, its row's id).
    let batch = |fail: bool| {
        let (release, first) = hold_the_committer(db);
        let answers: Vec<_> = (0..3)
            .map(|i| {
                let key = format!("{fail}{i}");
                let ahead = RowAhead {
                    queue: QueueName::Inbound,
                    row: NewRow {
                        key: key.clone(),
                        payload: "x".into(),
                        dedup_key: None,
                    },
                    session_ended: "",
                };
                db.submit_ahead(
                    CommitLine::Main,
                    Atomicity::OneStatement,
                    Some(ahead),
                    move |tx, written| {
                        if fail && i == 1 {
                            return Err(EngineError::Invalid("refused".into()));
                        }
                        match written {
                            Some(row) => Ok((true, row.id)),
                            None => {
                                let id = tx.insert(&own_insert, params![":key" => key])?;
                                Ok((false, id.expect("written")))
                            }
                        }
                    },
                )
            })
            .collect();
        drop(release);
        first.blocking_recv().unwrap().unwrap();
        answers
            .into_iter()
            .map(|a| a.blocking_recv().unwrap())
            .collect::<Vec<_>>()
    };
    let got: Vec<(bool, i64)> = batch(false).into_iter().map(Result::unwrap).collect();
    assert!(got.iter().all(|(ahead, _)| *ahead), "{got:?}");
    assert!(got.windows(2).all(|w| w[0].1 < w[1].1), "in order: {got:?}");
    let got = batch(true);
    assert!(got[1].is_err(), "{got:?}");
    for answer in [&got[0], &got[2]] {
        assert!(matches!(answer, Ok((false, _))), "written alone: {got:?}");
    }
    let keys = Sql::same("SELECT key FROM queue_rows ORDER BY id");
    let keys: Vec<String> = db
        .read()
        .unwrap()
        .query_all(&keys, params![], |r| r.get(0))
        .unwrap();
    assert_eq!(keys, ["false0", "false1", "false2", "true0", "true2"]);
}

/// Two keys whose held rows' writes go through different lanes on PostgreSQL.
fn keys_on_two_lanes() -> (String, String) {
    let first = "key-0".to_string();
    let other = (1..1_000)
        .map(|i| format!("key-{i}"))
        .find(|k| KeyLine::of(k) != KeyLine::of(&first))
        .expect("held rows' writes go through more than one lane");
    (first, other)
}

#[test]
fn on_postgresql_a_keys_held_row_writes_commit_beside_another_keys_and_in_order_behind_its_own() {
    let backend = prepared(TestDb::postgres());
    let db = &backend.db;
    let (a, b) = keys_on_two_lanes();
    let (release, mut held) = hold_the_lane(db, CommitLine::held(&a));
    let write = |key: &str| {
        let name = key.to_string();
        db.submit_ahead(
            CommitLine::held(key),
            Atomicity::Savepoint,
            None,
            move |tx, _| insert(tx, &name),
        )
    };
    let (mut behind, mut beside) = (write(&a), write(&b));
    // The other key's write commits while this key's lane is held (one lane kept a drain to
    // 5 destinations at a third of SQLite's: every key's answers waited on one connection)...
    let wait = Duration::from_secs(10);
    assert!(
        matches!(answered_within(&mut beside, wait), Some(Ok(()))),
        "{b}'s write waited for {a}'s lane"
    );
    // ...and the key's own write waits behind the one before it.
    assert!(answered_within(&mut behind, Duration::from_millis(200)).is_none());
    assert_eq!(names(db), std::slice::from_ref(&b));
    drop(release);
    assert!(matches!(answered_within(&mut held, wait), Some(Ok(()))));
    assert!(matches!(answered_within(&mut behind, wait), Some(Ok(()))));
    assert_eq!(names(db), [b, a]);
}

#[test]
fn on_sqlite_every_write_lane_is_the_one_writer() {
    let backend = prepared(TestDb::sqlite());
    let db = &backend.db;
    let (a, b) = keys_on_two_lanes();
    let (release, _held) = hold_the_lane(db, CommitLine::held(&a));
    let name = b.clone();
    let mut other = db.submit_ahead(
        CommitLine::held(&b),
        Atomicity::Savepoint,
        None,
        move |tx, _| insert(tx, &name),
    );
    assert!(answered_within(&mut other, Duration::from_millis(200)).is_none());
    drop(release);
    assert!(matches!(
        answered_within(&mut other, Duration::from_secs(10)),
        Some(Ok(()))
    ));
    assert_eq!(names(db), [b]);
}
