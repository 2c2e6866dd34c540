//! [`RedbLedger`]: the execution-ledger port ([`Ledger`]) over redb.
//!
//! ## Tables
//!
//! | table | key | value |
//! |---|---|---|
//! | `ledger_scopes` | session id (bytes) | JSON [`Scope`] |
//! | `ledger_calls` | (session id, JSON [`Key`]) | JSON `(Key, CallRow)` |
//! | `ledger_acks` | (session id, JSON [`Key`]) | `()` (a tombstone) |
//! | `ledger_releases` | `u64`, counting from 0 | JSON [`Release`] |
//!
//! Session ids lead the call and tombstone keys so one session's rows are
//! one contiguous range of the table. Inside it the JSON of a [`Key`] does
//! **not** sort as [`Key`]'s `Ord` (step 10 sorts before step 2 as text), so
//! the loader sorts the rows it read before handing them to
//! [`decide`]. The release log is keyed by a counter, so a range over it is
//! insertion order.

use std::cmp::Ordering;
use std::path::Path;

use custos_core::ledger::{
    decide, Answer, CallRow, Effect, Footprint, Key, Ledger, LedgerError, Limits, Release, Request,
    RowState, Scope, SessionId, View,
};
use redb::{
    Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, Table, TableDefinition,
    WriteTransaction,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::handle::{self, Handle, Refusal, REASON_POISONED};

/// A call or tombstone key: (session id, JSON of the call [`Key`]).
type CallKey = (&'static [u8], &'static [u8]);

const SCOPES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("ledger_scopes");
const CALLS: TableDefinition<CallKey, &[u8]> = TableDefinition::new("ledger_calls");
const ACKS: TableDefinition<CallKey, ()> = TableDefinition::new("ledger_acks");
const RELEASES: TableDefinition<u64, &[u8]> = TableDefinition::new("ledger_releases");

/// The empty second half of a call key: the lowest key of a session.
const LOWEST: &[u8] = &[];

/// The execution ledger in one redb file.
///
/// Every [`Ledger::execute`] is one redb transaction: a write transaction
/// for a request that may write ([`Request::writes`]), committed only when
/// [`decide`] accepted it; a read transaction otherwise. Opening the file
/// ([`RedbLedger::open`]) runs restart recovery, as the SQLite shell does.
#[derive(Debug)]
pub struct RedbLedger {
    handle: Handle,
}

impl RedbLedger {
    /// Creates the ledger file at `path` (or opens the existing one), makes
    /// sure its tables exist, and runs restart recovery
    /// ([`Ledger::recover`], i.e. [`Request::Open`]): every call left
    /// `admitted` by the last process becomes `unknown`.
    ///
    /// redb locks the file: a second open while this handle is open fails
    /// with [`LedgerError::BackendFault`] (one opener per file).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LedgerError> {
        let db = handle::create_with_tables(path.as_ref(), |txn| {
            handle::ensure(txn, SCOPES)?;
            handle::ensure(txn, CALLS)?;
            handle::ensure(txn, ACKS)?;
            handle::ensure(txn, RELEASES)
        })
        .map_err(fault)?;
        let ledger = RedbLedger {
            handle: Handle::new(db),
        };
        ledger.recover()?;
        Ok(ledger)
    }

    fn with_db<T>(
        &self,
        f: impl FnOnce(&Database) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        self.handle.with_db(refused, f)
    }
}

impl Ledger for RedbLedger {
    fn execute(&self, limits: &Limits, req: &Request) -> Result<Answer, LedgerError> {
        self.with_db(|db| {
            if req.writes() {
                execute_write(db, limits, req)
            } else {
                execute_read(db, limits, req)
            }
        })
    }

    fn close(&self) -> Result<(), LedgerError> {
        self.handle
            .close()
            .map_err(|reason| LedgerError::BackendFault { reason })
    }

    fn records(&self) -> Result<u64, LedgerError> {
        self.with_db(|db| {
            let txn = db.begin_read().map_err(fault)?;
            let mut total: u64 = 0;
            for n in [
                txn.open_table(SCOPES).map_err(fault)?.len(),
                txn.open_table(CALLS).map_err(fault)?.len(),
                txn.open_table(ACKS).map_err(fault)?.len(),
                txn.open_table(RELEASES).map_err(fault)?.len(),
            ] {
                total = total.saturating_add(n.map_err(fault)?);
            }
            Ok(total)
        })
    }
}

/// A request that may write: load, decide and apply in one write
/// transaction, committed only on success. A refusal aborts it, so nothing
/// it might have written is kept (and [`decide`] refuses before any effect
/// is applied anyway).
fn execute_write(db: &Database, limits: &Limits, req: &Request) -> Result<Answer, LedgerError> {
    let txn = db.begin_write().map_err(fault)?;
    match decide_and_apply(&txn, limits, req) {
        Ok(answer) => {
            txn.commit().map_err(fault)?;
            Ok(answer)
        }
        Err(refusal) => {
            // The refusal is the answer; an abort that fails still commits
            // nothing.
            let _ = txn.abort();
            Err(refusal)
        }
    }
}

/// The body of a write transaction. The tables borrow `txn` and are dropped
/// on return, before the caller commits.
fn decide_and_apply(
    txn: &WriteTransaction,
    limits: &Limits,
    req: &Request,
) -> Result<Answer, LedgerError> {
    let mut tables = Tables {
        scopes: txn.open_table(SCOPES).map_err(fault)?,
        calls: txn.open_table(CALLS).map_err(fault)?,
        acks: txn.open_table(ACKS).map_err(fault)?,
        releases: txn.open_table(RELEASES).map_err(fault)?,
    };
    let view = tables.view(&req.footprint())?;
    let decision = decide(&view, limits, req)?;
    tables.apply(&decision.effects)?;
    Ok(decision.answer)
}

/// A read-only request: load and decide in a read transaction (a snapshot;
/// it never waits for a writer).
fn execute_read(db: &Database, limits: &Limits, req: &Request) -> Result<Answer, LedgerError> {
    let txn = db.begin_read().map_err(fault)?;
    let tables = Tables {
        scopes: txn.open_table(SCOPES).map_err(fault)?,
        calls: txn.open_table(CALLS).map_err(fault)?,
        acks: txn.open_table(ACKS).map_err(fault)?,
        releases: txn.open_table(RELEASES).map_err(fault)?,
    };
    let decision = decide(&tables.view(&req.footprint())?, limits, req)?;
    if !decision.effects.is_empty() {
        // `Request::writes` said this request never writes; a decision that
        // does is a bug to report, not writes to drop silently.
        return Err(LedgerError::BackendFault {
            reason: format!("the read-only request {req:?} decided writes"),
        });
    }
    Ok(decision.answer)
}

/// The ledger's four tables, opened in one transaction: read-only tables of
/// a read transaction, or writable ones of a write transaction.
struct Tables<S, C, A, R> {
    scopes: S,
    calls: C,
    acks: A,
    releases: R,
}

impl<S, C, A, R> Tables<S, C, A, R>
where
    S: ReadableTable<&'static [u8], &'static [u8]>,
    C: ReadableTable<CallKey, &'static [u8]>,
    A: ReadableTable<CallKey, ()>,
    R: ReadableTable<u64, &'static [u8]>,
{
    /// Loads exactly the facts `fp` names (what `LedgerState::view` does
    /// over the memory backend's maps).
    fn view(&self, fp: &Footprint) -> Result<View, LedgerError> {
        let mut view = View::default();
        if let Some(session) = &fp.scope {
            view.scope = self.scope(session)?;
        }
        if let Some(key) = &fp.key {
            let kb = key_bytes(key)?;
            let at = (session_bytes(&key.session), kb.as_slice());
            if let Some(row) = self.calls.get(at).map_err(fault)? {
                view.call = Some(decode_call(at.0, row.value())?.1);
            }
            view.acked = self.acks.get(at).map_err(fault)?.is_some();
        }
        if let Some(session) = &fp.session_calls {
            view.session_calls = self.session_calls(session)?;
        }
        if fp.all_admitted {
            view.admitted = self.all_admitted()?;
        }
        if fp.totals {
            (view.ledger_bytes, view.unclean_scopes) = self.totals()?;
        }
        if fp.releases {
            view.releases = self.releases()?;
        }
        Ok(view)
    }

    fn scope(&self, session: &SessionId) -> Result<Option<Scope>, LedgerError> {
        match self.scopes.get(session_bytes(session)).map_err(fault)? {
            None => Ok(None),
            Some(v) => {
                let scope: Scope = decode("ledger_scopes", v.value())?;
                if scope.session != *session {
                    return Err(malformed("ledger_scopes", "a scope under another session"));
                }
                Ok(Some(scope))
            }
        }
    }

    /// Every call row of `session`, ascending by [`Key`] (sorted here: the
    /// table's order is the JSON's, which is not [`Key`]'s).
    fn session_calls(&self, session: &SessionId) -> Result<Vec<(Key, CallRow)>, LedgerError> {
        let s = session_bytes(session);
        let mut rows = Vec::new();
        for item in self.calls.range((s, LOWEST)..).map_err(fault)? {
            let (k, v) = item.map_err(fault)?;
            if k.value().0 != s {
                break;
            }
            rows.push(decode_call(s, v.value())?);
        }
        rows.sort_by(by_key);
        Ok(rows)
    }

    /// Every `admitted` row of the ledger, ascending by [`Key`]. A full scan
    /// of the calls table: this example keeps no index of admitted rows
    /// (only restart recovery asks for them).
    fn all_admitted(&self) -> Result<Vec<(Key, CallRow)>, LedgerError> {
        let mut rows = Vec::new();
        for item in self.calls.iter().map_err(fault)? {
            let (k, v) = item.map_err(fault)?;
            let (key, row) = decode_call(k.value().0, v.value())?;
            if matches!(row.state, RowState::Admitted { .. }) {
                rows.push((key, row));
            }
        }
        rows.sort_by(by_key);
        Ok(rows)
    }

    /// `(ledger_bytes, unclean_scopes)`, computed by scanning every call and
    /// every scope (the example's shortcut: a production shell would keep
    /// both as maintained counters, updated by the effects).
    fn totals(&self) -> Result<(u64, u64), LedgerError> {
        let mut bytes: u64 = 0;
        for item in self.calls.iter().map_err(fault)? {
            let (k, v) = item.map_err(fault)?;
            let (_, row) = decode_call(k.value().0, v.value())?;
            bytes = bytes.saturating_add(row.outcome_bytes());
        }
        let mut unclean: u64 = 0;
        for item in self.scopes.iter().map_err(fault)? {
            let (_, v) = item.map_err(fault)?;
            let scope: Scope = decode("ledger_scopes", v.value())?;
            if scope.state.is_unclean() {
                unclean = unclean.saturating_add(1);
            }
        }
        Ok((bytes, unclean))
    }

    /// The release log in insertion order (the counter's order).
    fn releases(&self) -> Result<Vec<Release>, LedgerError> {
        let mut out = Vec::new();
        for item in self.releases.iter().map_err(fault)? {
            let (_, v) = item.map_err(fault)?;
            out.push(decode("ledger_releases", v.value())?);
        }
        Ok(out)
    }
}

/// The four tables, writable, in one write transaction.
type WriteTables<'t> = Tables<
    Table<'t, &'static [u8], &'static [u8]>,
    Table<'t, CallKey, &'static [u8]>,
    Table<'t, CallKey, ()>,
    Table<'t, u64, &'static [u8]>,
>;

impl WriteTables<'_> {
    /// Writes a decision's effects, in order (what `LedgerState::apply`
    /// does over the memory backend's maps).
    fn apply(&mut self, effects: &[Effect]) -> Result<(), LedgerError> {
        for effect in effects {
            match effect {
                Effect::PutScope(scope) => {
                    let v = encode(scope)?;
                    self.scopes
                        .insert(session_bytes(&scope.session), v.as_slice())
                        .map_err(fault)?;
                }
                Effect::PutCall(key, row) => {
                    let (kb, v) = (key_bytes(key)?, encode(&(key, row))?);
                    self.calls
                        .insert((session_bytes(&key.session), kb.as_slice()), v.as_slice())
                        .map_err(fault)?;
                }
                Effect::DeleteCall(key) => {
                    let kb = key_bytes(key)?;
                    self.calls
                        .remove((session_bytes(&key.session), kb.as_slice()))
                        .map_err(fault)?;
                }
                Effect::PutAck(key) => {
                    let kb = key_bytes(key)?;
                    self.acks
                        .insert((session_bytes(&key.session), kb.as_slice()), ())
                        .map_err(fault)?;
                }
                Effect::ForgetAcks(session) => self.forget_acks(session)?,
                Effect::PutRelease(release) => {
                    let next = match self.releases.last().map_err(fault)? {
                        None => 0,
                        Some((k, _)) => k.value().checked_add(1).ok_or_else(|| {
                            malformed("ledger_releases", "the release counter is exhausted")
                        })?,
                    };
                    let v = encode(release)?;
                    self.releases.insert(next, v.as_slice()).map_err(fault)?;
                }
            }
        }
        Ok(())
    }

    /// Deletes every tombstone of `session` (one range of the table).
    fn forget_acks(&mut self, session: &SessionId) -> Result<(), LedgerError> {
        let s = session_bytes(session);
        let mut doomed: Vec<Vec<u8>> = Vec::new();
        for item in self.acks.range((s, LOWEST)..).map_err(fault)? {
            let (k, _) = item.map_err(fault)?;
            let (ks, kk) = k.value();
            if ks != s {
                break;
            }
            doomed.push(kk.to_vec());
        }
        for kk in &doomed {
            self.acks.remove((s, kk.as_slice())).map_err(fault)?;
        }
        Ok(())
    }
}

/// Orders loaded rows as the [`View`] promises: ascending by [`Key`].
fn by_key(a: &(Key, CallRow), b: &(Key, CallRow)) -> Ordering {
    a.0.cmp(&b.0)
}

fn session_bytes(session: &SessionId) -> &[u8] {
    session.as_str().as_bytes()
}

/// The second half of a call key: the JSON of the [`Key`] (deterministic:
/// the same key always serializes to the same bytes).
fn key_bytes(key: &Key) -> Result<Vec<u8>, LedgerError> {
    encode(key)
}

/// A call row's value, checked against the session half of its table key.
fn decode_call(session: &[u8], bytes: &[u8]) -> Result<(Key, CallRow), LedgerError> {
    let (key, row): (Key, CallRow) = decode("ledger_calls", bytes)?;
    if session_bytes(&key.session) != session {
        return Err(malformed(
            "ledger_calls",
            "a call row under another session",
        ));
    }
    Ok((key, row))
}

fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, LedgerError> {
    serde_json::to_vec(value).map_err(|e| LedgerError::BackendFault {
        reason: format!("encoding a ledger row: {e}"),
    })
}

/// Decodes a stored row; bytes that fit no row are
/// [`LedgerError::MalformedRow`] (the digest of a terminal outcome is
/// checked by core when the row is read, not here).
fn decode<T: DeserializeOwned>(table: &str, bytes: &[u8]) -> Result<T, LedgerError> {
    serde_json::from_slice(bytes).map_err(|e| malformed(table, &e.to_string()))
}

fn malformed(table: &str, detail: &str) -> LedgerError {
    LedgerError::MalformedRow {
        detail: format!("{table}: {detail}"),
    }
}

/// A redb failure as the ledger's error: corruption redb detected is
/// `MalformedRow`, anything else a `BackendFault` (redb is embedded: there is
/// no connection to lose, so nothing here is `Unavailable`).
fn fault(e: impl Into<redb::Error>) -> LedgerError {
    match e.into() {
        redb::Error::Corrupted(detail) => LedgerError::MalformedRow {
            detail: format!("redb: {detail}"),
        },
        other => LedgerError::BackendFault {
            reason: format!("redb: {other}"),
        },
    }
}

fn refused(r: Refusal) -> LedgerError {
    match r {
        Refusal::Closed => LedgerError::HandleClosed,
        Refusal::Poisoned => LedgerError::BackendFault {
            reason: REASON_POISONED.to_owned(),
        },
    }
}
