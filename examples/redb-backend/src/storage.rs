//! [`RedbStorage`]: the session-storage port ([`Storage`]) over redb.
//!
//! ## Tables
//!
//! | table | key | value |
//! |---|---|---|
//! | `storage_entries` | entry id (bytes) | JSON of the entry's head: parent, kind, seq, ts |
//! | `storage_payloads` | entry id (bytes) | the payload's raw bytes |
//! | `storage_entry_seqs` | `u64` seq | entry id (the seq index of entry scans) |
//! | `storage_usage` | usage id (bytes) | JSON [`UsageRow`] |
//! | `storage_usage_seqs` | `u64` seq | usage id (the seq index of usage scans) |
//! | `storage_registers` | (namespace, key) as bytes | the cell's seq (8 bytes, big-endian), then its value |
//! | `storage_meta` | `next_seq` / `stats` | 8 bytes, big-endian / JSON [`Stats`] |
//!
//! Orders come from redb's key order: `&[u8]` compares bytewise, which is
//! exactly the byte order [`Storage::list_registers`] promises (and
//! [`RegisterKey`]'s `Ord`, a `String`'s), and `u64` compares numerically,
//! which is the ascending seq the scans promise.
//!
//! A payload lives apart from its entry's head, so
//! [`Storage::scan_entry_heads`] reads no payload and a branch scan reads
//! only the payloads of the entries it answers ([`BranchScan::refine_heads`]).

use std::path::Path;

use custos_core::storage::types::MAX_GET_ENTRIES;
use custos_core::storage::{
    decide, BoundError, BranchScan, Commit, CommitContext, CommitError, CommitReceipt, Effect,
    Entry, EntryHead, EntryScan, KeyPrefix, Kind, Namespace, Payload, RecordId, RecordKind,
    Register, RegisterKey, Seq, Stats, Storage, StorageError, UsageRow, UsageScan,
    REASON_HANDLE_CLOSED,
};
use custos_core::Millis;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::handle::{self, Handle, Refusal, REASON_POISONED};

/// A register cell's key: (namespace, key).
type CellKey = (&'static [u8], &'static [u8]);

const ENTRIES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("storage_entries");
const PAYLOADS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("storage_payloads");
const ENTRY_SEQS: TableDefinition<u64, &[u8]> = TableDefinition::new("storage_entry_seqs");
const USAGE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("storage_usage");
const USAGE_SEQS: TableDefinition<u64, &[u8]> = TableDefinition::new("storage_usage_seqs");
const REGISTERS: TableDefinition<CellKey, &[u8]> = TableDefinition::new("storage_registers");
const META: TableDefinition<&[u8], &[u8]> = TableDefinition::new("storage_meta");

const NEXT_SEQ: &[u8] = b"next_seq";
const STATS: &[u8] = b"stats";
/// The kept identified commits, oldest first (`Vec<custos_core::storage::
/// LastCommit>`, JSON, at most `KEPT_COMMITS`), whose retries are answered,
/// not applied again.
const KEPT: &[u8] = b"kept_commits";

/// An entry without its id (the table key) and payload (its own table).
#[derive(Debug, Serialize, Deserialize)]
struct EntryMeta {
    parent: Option<RecordId>,
    kind: Kind,
    seq: Seq,
    ts: Millis,
}

/// A session store in one redb file.
///
/// [`Storage::commit`] runs in one redb write transaction: it loads the
/// commit's footprint facts into a [`CommitContext`], calls [`decide`], and
/// applies the decision's [`Effect`]s in order, committing only an accepted
/// decision. Every
/// read runs in one read transaction (a consistent snapshot).
#[derive(Debug)]
pub struct RedbStorage {
    handle: Handle,
}

impl RedbStorage {
    /// Creates the store file at `path` (or opens the existing one) and
    /// makes sure its tables exist. Nothing else happens on open: the
    /// session store has no restart recovery. redb locks the file: a
    /// second open while this handle is open fails with
    /// [`StorageError::BackendFault`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StorageError> {
        let db = handle::create_with_tables(path.as_ref(), |txn| {
            handle::ensure(txn, ENTRIES)?;
            handle::ensure(txn, PAYLOADS)?;
            handle::ensure(txn, ENTRY_SEQS)?;
            handle::ensure(txn, USAGE)?;
            handle::ensure(txn, USAGE_SEQS)?;
            handle::ensure(txn, REGISTERS)?;
            handle::ensure(txn, META)
        })
        .map_err(backend)?;
        Ok(RedbStorage {
            handle: Handle::new(db),
        })
    }

    /// Runs `f` in a read transaction of the open database.
    fn read<T>(
        &self,
        f: impl FnOnce(&redb::ReadTransaction) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        self.handle.with_db(refused_read, |db| {
            let txn = db.begin_read().map_err(backend)?;
            f(&txn)
        })
    }
}

impl Storage for RedbStorage {
    fn commit(&self, commit: &Commit) -> Result<CommitReceipt, CommitError> {
        self.handle
            .with_db(refused_commit, |db| commit_in(db, commit))
    }

    fn get_entries(&self, ids: &[RecordId]) -> Result<Vec<Option<Entry>>, StorageError> {
        self.read(|txn| {
            if ids.len() > MAX_GET_ENTRIES {
                return Err(BoundError::TooManyIds { count: ids.len() }.into());
            }
            let entries = txn.open_table(ENTRIES).map_err(backend)?;
            let payloads = txn.open_table(PAYLOADS).map_err(backend)?;
            ids.iter()
                .map(|id| {
                    entry_meta(&entries, id)?
                        .map(|m| load_entry(&payloads, id.clone(), m))
                        .transpose()
                })
                .collect()
        })
    }

    fn get_register(
        &self,
        namespace: &Namespace,
        key: &RegisterKey,
    ) -> Result<Option<Register>, StorageError> {
        self.read(|txn| {
            let registers = txn.open_table(REGISTERS).map_err(backend)?;
            let cell = (namespace.as_str().as_bytes(), key.as_str().as_bytes());
            let Some(v) = registers.get(cell).map_err(backend)? else {
                return Ok(None);
            };
            let (seq, value) = decode_cell(v.value())?;
            Ok(Some(Register {
                namespace: namespace.clone(),
                key: key.clone(),
                value,
                seq,
            }))
        })
    }

    fn list_registers(
        &self,
        namespace: &Namespace,
        prefix: &KeyPrefix,
    ) -> Result<Vec<Register>, StorageError> {
        self.read(|txn| {
            let registers = txn.open_table(REGISTERS).map_err(backend)?;
            let ns = namespace.as_str().as_bytes();
            let start = (ns, prefix.as_str().as_bytes());
            let mut out = Vec::new();
            for item in registers.range(start..).map_err(backend)? {
                let (k, v) = item.map_err(backend)?;
                let (kns, kkey) = k.value();
                if kns != ns || !kkey.starts_with(prefix.as_str().as_bytes()) {
                    break;
                }
                let (seq, value) = decode_cell(v.value())?;
                out.push(Register {
                    namespace: namespace.clone(),
                    key: RegisterKey::new(utf8(kkey)?).map_err(corrupt)?,
                    value,
                    seq,
                });
            }
            Ok(out)
        })
    }

    fn scan_branch(&self, q: &BranchScan) -> Result<Vec<Entry>, StorageError> {
        self.read(|txn| {
            let entries = txn.open_table(ENTRIES).map_err(backend)?;
            let payloads = txn.open_table(PAYLOADS).map_err(backend)?;
            q.refine_heads(
                walk(&entries, &q.leaf),
                |(_, m)| (&m.kind, m.seq),
                |(id, m)| load_entry(&payloads, id, m),
            )
        })
    }

    fn scan_entries(&self, q: &EntryScan) -> Result<Vec<Entry>, StorageError> {
        self.read(|txn| {
            let heads = entry_range(txn, q.after, q.through, q.limit)?;
            let payloads = txn.open_table(PAYLOADS).map_err(backend)?;
            heads
                .into_iter()
                .map(|(id, m)| load_entry(&payloads, id, m))
                .collect()
        })
    }

    fn scan_entry_heads(&self, q: &EntryScan) -> Result<Vec<EntryHead>, StorageError> {
        self.read(|txn| {
            let heads = entry_range(txn, q.after, q.through, q.limit)?;
            Ok(heads
                .into_iter()
                .map(|(id, m)| EntryHead {
                    id,
                    parent: m.parent,
                    seq: m.seq,
                })
                .collect())
        })
    }

    fn scan_usage(&self, q: &UsageScan) -> Result<Vec<UsageRow>, StorageError> {
        self.read(|txn| {
            let seqs = txn.open_table(USAGE_SEQS).map_err(backend)?;
            let usage = txn.open_table(USAGE).map_err(backend)?;
            let mut out = Vec::new();
            for (seq, id) in seq_range(&seqs, q.after, q.through, q.limit)? {
                let row: UsageRow = match usage.get(id.as_str().as_bytes()).map_err(backend)? {
                    Some(v) => decode(v.value())?,
                    None => return Err(dangling("usage", seq, &id)),
                };
                if row.seq != seq || row.id != id {
                    return Err(dangling("usage", seq, &id));
                }
                out.push(row);
            }
            Ok(out)
        })
    }

    fn stats(&self) -> Result<Stats, StorageError> {
        self.read(|txn| {
            let meta = txn.open_table(META).map_err(backend)?;
            stats(&meta)
        })
    }

    fn close(&self) -> Result<(), StorageError> {
        self.handle
            .close()
            .map_err(|reason| StorageError::BackendFault { reason })
    }
}

/// One commit in one write transaction: committed when [`decide`] accepted
/// it, aborted (nothing written, no seq consumed) when it refused.
fn commit_in(db: &Database, commit: &Commit) -> Result<CommitReceipt, CommitError> {
    let txn = db.begin_write().map_err(|e| faulted(backend(e)))?;
    match decide_and_apply(&txn, commit) {
        Ok(receipt) => {
            txn.commit().map_err(|e| faulted(backend(e)))?;
            Ok(receipt)
        }
        Err(refusal) => {
            // The refusal is the answer; an abort that fails still commits
            // nothing.
            let _ = txn.abort();
            Err(refusal)
        }
    }
}

/// Loads the commit's footprint facts, decides, applies the effects. The
/// tables borrow `txn` and are dropped on return, before the commit.
fn decide_and_apply(txn: &WriteTransaction, commit: &Commit) -> Result<CommitReceipt, CommitError> {
    let open = |e: redb::TableError| faulted(backend(e));
    let mut t = WriteTables {
        entries: txn.open_table(ENTRIES).map_err(open)?,
        payloads: txn.open_table(PAYLOADS).map_err(open)?,
        entry_seqs: txn.open_table(ENTRY_SEQS).map_err(open)?,
        usage: txn.open_table(USAGE).map_err(open)?,
        usage_seqs: txn.open_table(USAGE_SEQS).map_err(open)?,
        registers: txn.open_table(REGISTERS).map_err(open)?,
        meta: txn.open_table(META).map_err(open)?,
    };
    let ctx = t.context(commit).map_err(faulted)?;
    let d = decide(&ctx, commit)?;
    for effect in d.effects {
        t.apply(effect).map_err(faulted)?;
    }
    Ok(d.receipt)
}

/// The store's tables, writable, in one write transaction.
struct WriteTables<'t> {
    entries: redb::Table<'t, &'static [u8], &'static [u8]>,
    payloads: redb::Table<'t, &'static [u8], &'static [u8]>,
    entry_seqs: redb::Table<'t, u64, &'static [u8]>,
    usage: redb::Table<'t, &'static [u8], &'static [u8]>,
    usage_seqs: redb::Table<'t, u64, &'static [u8]>,
    registers: redb::Table<'t, CellKey, &'static [u8]>,
    meta: redb::Table<'t, &'static [u8], &'static [u8]>,
}

impl WriteTables<'_> {
    /// The facts [`decide`] reads: next seq and stats, which footprint ids
    /// exist (and as what), the seqs of the footprint registers.
    fn context(&self, commit: &Commit) -> Result<CommitContext, StorageError> {
        let fp = commit.footprint();
        let mut ctx = CommitContext {
            next_seq: next_seq(&self.meta)?,
            stats: stats(&self.meta)?,
            ..CommitContext::default()
        };
        if let Some(id) = &commit.id {
            ctx.last = kept(&self.meta)?.into_iter().find(|k| &k.id == id);
        }
        for id in &fp.ids {
            let at = id.as_str().as_bytes();
            if self.entries.get(at).map_err(backend)?.is_some() {
                ctx.ids.insert(id.clone(), RecordKind::Entry);
            } else if self.usage.get(at).map_err(backend)?.is_some() {
                ctx.ids.insert(id.clone(), RecordKind::Usage);
            }
        }
        for (ns, keys) in &fp.registers {
            for key in keys {
                let cell = (ns.as_str().as_bytes(), key.as_str().as_bytes());
                if let Some(v) = self.registers.get(cell).map_err(backend)? {
                    let (seq, _) = decode_cell(v.value())?;
                    ctx.registers
                        .entry(ns.clone())
                        .or_default()
                        .insert(key.clone(), seq);
                }
            }
        }
        Ok(ctx)
    }

    /// Applies one effect of an accepted decision.
    fn apply(&mut self, effect: Effect) -> Result<(), StorageError> {
        match effect {
            Effect::InsertEntry(e) => {
                let id = e.id.as_str().as_bytes();
                let meta = encode(&EntryMeta {
                    parent: e.parent.clone(),
                    kind: e.kind.clone(),
                    seq: e.seq,
                    ts: e.ts,
                })?;
                self.entries.insert(id, meta.as_slice()).map_err(backend)?;
                self.payloads
                    .insert(id, e.payload.as_bytes())
                    .map_err(backend)?;
                self.entry_seqs.insert(e.seq, id).map_err(backend)?;
            }
            Effect::InsertUsage(u) => {
                let id = u.id.as_str().as_bytes();
                self.usage
                    .insert(id, encode(&u)?.as_slice())
                    .map_err(backend)?;
                self.usage_seqs.insert(u.seq, id).map_err(backend)?;
            }
            Effect::SetRegister(r) => {
                let cell = (r.namespace.as_str().as_bytes(), r.key.as_str().as_bytes());
                let mut value = r.seq.to_be_bytes().to_vec();
                value.extend_from_slice(r.value.as_bytes());
                self.registers
                    .insert(cell, value.as_slice())
                    .map_err(backend)?;
            }
            Effect::DeleteRegister { namespace, key, .. } => {
                let cell = (namespace.as_str().as_bytes(), key.as_str().as_bytes());
                self.registers.remove(cell).map_err(backend)?;
            }
            Effect::Head { next_seq, stats } => {
                let next = next_seq.to_be_bytes();
                self.meta
                    .insert(NEXT_SEQ, next.as_slice())
                    .map_err(backend)?;
                self.meta
                    .insert(STATS, encode(&stats)?.as_slice())
                    .map_err(backend)?;
            }
            Effect::KeepCommit(last) => {
                let mut all = kept(&self.meta)?;
                all.retain(|k| k.id != last.id);
                all.push(last);
                let excess = all.len().saturating_sub(custos_core::storage::KEPT_COMMITS);
                all.drain(..excess);
                self.meta
                    .insert(KEPT, encode(&all)?.as_slice())
                    .map_err(backend)?;
            }
        }
        Ok(())
    }
}

/// The kept identified commits, oldest first.
fn kept(
    meta: &impl ReadableTable<&'static [u8], &'static [u8]>,
) -> Result<Vec<custos_core::storage::LastCommit>, StorageError> {
    match meta.get(KEPT).map_err(backend)? {
        None => Ok(Vec::new()),
        Some(v) => decode(v.value()),
    }
}

/// The store's next seq: 1 for a store no commit has written.
fn next_seq(meta: &impl ReadableTable<&'static [u8], &'static [u8]>) -> Result<Seq, StorageError> {
    match meta.get(NEXT_SEQ).map_err(backend)? {
        None => Ok(1),
        Some(v) => be_u64(v.value()).ok_or_else(|| StorageError::Corrupt {
            detail: "storage_meta: next_seq is not 8 bytes".to_owned(),
        }),
    }
}

/// The maintained stats projection (the sum of the usage ledger).
fn stats(meta: &impl ReadableTable<&'static [u8], &'static [u8]>) -> Result<Stats, StorageError> {
    match meta.get(STATS).map_err(backend)? {
        None => Ok(Stats::default()),
        Some(v) => decode(v.value()),
    }
}

/// An entry's head row, if the entry exists.
fn entry_meta(
    entries: &impl ReadableTable<&'static [u8], &'static [u8]>,
    id: &RecordId,
) -> Result<Option<EntryMeta>, StorageError> {
    match entries.get(id.as_str().as_bytes()).map_err(backend)? {
        None => Ok(None),
        Some(v) => decode(v.value()).map(Some),
    }
}

/// The whole entry: its head row and its payload.
fn load_entry(
    payloads: &impl ReadableTable<&'static [u8], &'static [u8]>,
    id: RecordId,
    meta: EntryMeta,
) -> Result<Entry, StorageError> {
    let payload = match payloads.get(id.as_str().as_bytes()).map_err(backend)? {
        Some(v) => Payload::try_from(v.value()).map_err(corrupt)?,
        None => {
            return Err(StorageError::Corrupt {
                detail: format!("entry {id} has no payload row"),
            })
        }
    };
    Ok(Entry {
        id,
        parent: meta.parent,
        kind: meta.kind,
        payload,
        seq: meta.seq,
        ts: meta.ts,
    })
}

/// The unfiltered walk from `leaf` to the root, one head at a time (what
/// [`BranchScan::refine_heads`] consumes lazily). A missing leaf is
/// `UnknownEntry`; a parent that is missing or not earlier is `Corrupt`, so
/// a corrupt link ends the walk with an error, never a loop.
fn walk<'a>(
    entries: &'a impl ReadableTable<&'static [u8], &'static [u8]>,
    leaf: &RecordId,
) -> impl Iterator<Item = Result<(RecordId, EntryMeta), StorageError>> + 'a {
    let mut next: Option<Result<(RecordId, EntryMeta), StorageError>> =
        Some(match entry_meta(entries, leaf) {
            Ok(Some(m)) => Ok((leaf.clone(), m)),
            Ok(None) => Err(StorageError::UnknownEntry { id: leaf.clone() }),
            Err(e) => Err(e),
        });
    std::iter::from_fn(move || {
        let current = next.take()?;
        if let Ok((id, m)) = &current {
            if let Some(parent) = &m.parent {
                next = Some(match entry_meta(entries, parent) {
                    Ok(Some(pm)) if pm.seq < m.seq => Ok((parent.clone(), pm)),
                    Ok(_) => Err(StorageError::Corrupt {
                        detail: format!("entry {id}'s parent {parent} is not an earlier entry"),
                    }),
                    Err(e) => Err(e),
                });
            }
        }
        Some(current)
    })
}

/// The `(seq, id)` pairs of a seq index with `after < seq <= through`,
/// ascending, at most `limit` of them.
fn seq_range(
    seqs: &impl ReadableTable<u64, &'static [u8]>,
    after: Option<Seq>,
    through: Option<Seq>,
    limit: Option<usize>,
) -> Result<Vec<(Seq, RecordId)>, StorageError> {
    let mut out = Vec::new();
    let start = match after {
        None => 0,
        Some(a) => match a.checked_add(1) {
            Some(s) => s,
            None => return Ok(out),
        },
    };
    let limit = limit.unwrap_or(usize::MAX);
    if through.is_some_and(|t| t < start) || limit == 0 {
        return Ok(out);
    }
    for item in seqs.range(start..).map_err(backend)? {
        let (k, v) = item.map_err(backend)?;
        let seq = k.value();
        if through.is_some_and(|t| seq > t) {
            break;
        }
        out.push((seq, RecordId::new(utf8(v.value())?).map_err(corrupt)?));
        if out.len() >= limit {
            break;
        }
    }
    Ok(out)
}

/// The entry heads of an entry seq-range scan, checked against the index.
fn entry_range(
    txn: &redb::ReadTransaction,
    after: Option<Seq>,
    through: Option<Seq>,
    limit: Option<usize>,
) -> Result<Vec<(RecordId, EntryMeta)>, StorageError> {
    let seqs = txn.open_table(ENTRY_SEQS).map_err(backend)?;
    let entries = txn.open_table(ENTRIES).map_err(backend)?;
    let mut out = Vec::new();
    for (seq, id) in seq_range(&seqs, after, through, limit)? {
        match entry_meta(&entries, &id)? {
            Some(m) if m.seq == seq => out.push((id, m)),
            _ => return Err(dangling("entry", seq, &id)),
        }
    }
    Ok(out)
}

fn dangling(what: &str, seq: Seq, id: &RecordId) -> StorageError {
    StorageError::Corrupt {
        detail: format!("the {what} seq index names {id} at seq {seq}, which has no such row"),
    }
}

/// A register cell's value: its seq (8 bytes, big-endian), then the value.
fn decode_cell(bytes: &[u8]) -> Result<(Seq, Payload), StorageError> {
    let (seq, value) = bytes
        .split_at_checked(8)
        .and_then(|(s, v)| Some((be_u64(s)?, v)))
        .ok_or_else(|| StorageError::Corrupt {
            detail: "storage_registers: a cell shorter than its seq".to_owned(),
        })?;
    Ok((seq, Payload::try_from(value).map_err(corrupt)?))
}

fn be_u64(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.try_into().ok()?))
}

fn utf8(bytes: &[u8]) -> Result<&str, StorageError> {
    std::str::from_utf8(bytes).map_err(corrupt)
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StorageError> {
    serde_json::to_vec(value).map_err(|e| StorageError::BackendFault {
        reason: format!("encoding a storage row: {e}"),
    })
}

/// Decodes a stored row; bytes that fit none are `Corrupt`.
fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, StorageError> {
    serde_json::from_slice(bytes).map_err(corrupt)
}

fn corrupt(e: impl std::fmt::Display) -> StorageError {
    StorageError::Corrupt {
        detail: e.to_string(),
    }
}

/// A redb failure as a read error: corruption redb detected is `Corrupt`,
/// anything else a `BackendFault` (redb is embedded: there is no connection
/// to lose, so nothing here is `Unavailable`).
fn backend(e: impl Into<redb::Error>) -> StorageError {
    match e.into() {
        redb::Error::Corrupted(detail) => StorageError::Corrupt {
            detail: format!("redb: {detail}"),
        },
        other => StorageError::BackendFault {
            reason: format!("redb: {other}"),
        },
    }
}

/// A read-path failure met inside a commit: the commit path has no
/// `Corrupt` or `BackendFault`, so it is `Faulted` with the read error's
/// text (`Unavailable` stays itself).
fn faulted(e: StorageError) -> CommitError {
    match e {
        StorageError::Unavailable { reason } => CommitError::Unavailable { reason },
        other => CommitError::Faulted {
            reason: other.to_string(),
        },
    }
}

fn refused_read(r: Refusal) -> StorageError {
    match r {
        Refusal::Closed => StorageError::HandleClosed,
        Refusal::Poisoned => StorageError::BackendFault {
            reason: REASON_POISONED.to_owned(),
        },
    }
}

fn refused_commit(r: Refusal) -> CommitError {
    CommitError::Faulted {
        reason: match r {
            Refusal::Closed => REASON_HANDLE_CLOSED,
            Refusal::Poisoned => REASON_POISONED,
        }
        .to_owned(),
    }
}
