//! Stored bytes that do not decode are typed errors, never panics: rows
//! overwritten with junk through redb directly (the table layouts are the
//! ones the module docs list) read back as `LedgerError::MalformedRow`,
//! `StorageError::Corrupt`, or a `Faulted` commit that writes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use custos_conformance::ledger::{key, sid, tok, tool, ws, LIMITS};
use custos_conformance::storage::{entry, id, ns, set};
use custos_core::ledger::{Ledger, LedgerError};
use custos_core::storage::{Commit, KeyPrefix, Storage, StorageError};
use custos_redb_example::{RedbLedger, RedbStorage};
use redb::{Database, TableDefinition};

type Pair = (&'static [u8], &'static [u8]);

/// Overwrites (or inserts) one row of a table, outside the port.
fn poke<K: redb::Key + 'static>(
    path: &Path,
    table: TableDefinition<K, &[u8]>,
    at: K::SelfType<'_>,
    value: &[u8],
) {
    let db = Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(table).unwrap().insert(at, value).unwrap();
    txn.commit().unwrap();
}

#[test]
fn a_ledger_row_that_does_not_decode_is_malformed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.redb");
    let l = RedbLedger::open(&path).unwrap();
    l.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("t"))
        .unwrap();
    l.admit(&LIMITS, &key("s", "o", 1), &tool("program"), &tok("t"))
        .unwrap();
    drop(l);

    let scopes: TableDefinition<&[u8], &[u8]> = TableDefinition::new("ledger_scopes");
    poke(&path, scopes, b"s".as_slice(), b"not json");
    let l = RedbLedger::open(&path).unwrap();
    assert!(matches!(
        l.scope(&LIMITS, &sid("s")),
        Err(LedgerError::MalformedRow { .. })
    ));
    // A refused write leaves the rows as they were.
    let before = l.records().unwrap();
    assert!(l
        .attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("t"))
        .is_err());
    assert_eq!(l.records(), Ok(before));
    drop(l);

    // Restart recovery reads every call row: a junk one fails the open.
    let calls: TableDefinition<Pair, &[u8]> = TableDefinition::new("ledger_calls");
    poke(
        &path,
        calls,
        (b"s".as_slice(), b"junk key".as_slice()),
        b"[1,2]",
    );
    assert!(matches!(
        RedbLedger::open(&path),
        Err(LedgerError::MalformedRow { .. })
    ));
}

#[test]
fn a_storage_row_that_does_not_decode_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.redb");
    let s = RedbStorage::open(&path).unwrap();
    s.commit(
        &Commit::at(0)
            .write(entry("a", None, "m"))
            .write(set("n", "k", b"v")),
    )
    .unwrap();
    drop(s);

    let entries: TableDefinition<&[u8], &[u8]> = TableDefinition::new("storage_entries");
    poke(&path, entries, b"a".as_slice(), b"{");
    let registers: TableDefinition<Pair, &[u8]> = TableDefinition::new("storage_registers");
    poke(&path, registers, (b"n".as_slice(), b"k".as_slice()), b"abc");
    poke(
        &path,
        registers,
        (b"z".as_slice(), b"\xff".as_slice()),
        &[0; 8],
    );

    let s = RedbStorage::open(&path).unwrap();
    let corrupt = |r: Result<(), StorageError>| matches!(r, Err(StorageError::Corrupt { .. }));
    assert!(corrupt(s.get_entries(&[id("a")]).map(drop)));
    assert!(corrupt(
        s.get_register(&ns("n"), &custos_conformance::storage::key("k"))
            .map(drop)
    ));
    assert!(corrupt(
        s.list_registers(&ns("z"), &KeyPrefix::all()).map(drop)
    ));
    // A commit whose footprint reads the junk cell is refused and writes
    // nothing (no seq consumed: the next commit gets seq 3).
    let refused = s
        .commit(&Commit::at(0).write(set("n", "k", b"w")))
        .unwrap_err();
    assert_eq!(refused.reason(), "Faulted", "{refused}");
    let receipt = s.commit(&Commit::at(0).write(set("o", "x", b"v"))).unwrap();
    assert_eq!(receipt.seqs, vec![3]);
}
