//! Offline operations over a **closed** session file: the precise rewrite
//! ([`rewrite_into`]), the export cut ([`export_closed`] /
//! [`release_export`]) and the lease-free projections ([`generation`],
//! [`identity`]). They take a path, not a handle.
//!
//! ## The precise rewrite
//!
//! The one sanctioned exception to "entries are never modified", in this
//! order:
//!
//! 1. **Claim.** One `BEGIN IMMEDIATE` transaction checks the file's version
//!    and claims the writer lease as owner [`REWRITE_OWNER`] through
//!    `lease::decide` (the open's admission step, shared with the store); an unexpired lease of anyone else is
//!    [`RewriteError::RewriteLeaseHeld`]. The claim is held for the whole
//!    rewrite, so a concurrent open is refused `LeaseHeld` rather than
//!    committing into a file the swap would discard.
//! 2. **Cut** (shared with [`export_closed`], so the two cannot drift): a
//!    `wal_checkpoint(TRUNCATE)` whose result is verified (not busy, the
//!    `-wal` file empty) retires the WAL — otherwise SQLite would replay a
//!    matching WAL into the swapped-in file and resurrect erased text — then
//!    `VACUUM INTO` a sibling copy.
//! 3. **Transform the copy** with `secure_delete` on and an in-memory
//!    journal: the entry transform reaches every entry, the value transform
//!    every register value and usage-details payload;
//!    `custos_core::storage::rewrite` refuses any change of an entry's id,
//!    parent, kind, seq or ts (the whole rewrite aborts, nothing swapped).
//!    The generation counter is bumped; the copy is vacuumed again so
//!    replaced bytes survive in no free page.
//! 4. **Re-verify** the claim in the original (a renew of the exact pair)
//!    immediately before the swap; a stolen claim aborts. The same renewal
//!    is then decided over the copy's rows (the original's as of the cut),
//!    so the new file holds the renewed claim until step 6.
//! 5. **Swap**: fsync the copy, atomic rename over the original, fsync the
//!    directory, unlink the original's `-wal` / `-shm` (errors propagated).
//! 6. **Release** the claim in the new file.
//!
//! Every failure before the rename deletes the copy and releases the claim;
//! the original's content is untouched.
//!
//! [`generation`] and [`identity`] only read: they open read-only
//! ([`crate::readonly`]), so they create and write nothing, not even
//! beside the file.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use custos_core::columns::ColumnError;
use custos_core::lease::{self, LeaseError, Owner};
use custos_core::storage::rewrite::{
    check_details_rewrite, check_entry_rewrite, check_register_rewrite, RewriteViolation,
};
use custos_core::storage::stored::payload;
use custos_core::storage::types::{MAX_ID_LEN, MAX_KEY_LEN, MAX_NAMESPACE_LEN};
use custos_core::storage::{Entry, Payload};
use custos_core::Millis;
use rusqlite::{
    params, Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior,
};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::codec::{self, cells, seq_to_sql, u64_from_sql, u64_to_sql, MAX_TEXT_LEN};
use crate::config::{
    self, system_clock, with_suffix, Clock, OpenError, DEFAULT_BUSY_TIMEOUT, DEFAULT_LEASE_TTL_MS,
};
use crate::fault::Fault;
use crate::lease_rows::{self, Held, LeaseFailure};
use crate::readonly::ReadOnly;
use crate::schema::{self, check_identity, STORAGE_VERSION};

pub use crate::config::siblings;

/// The reserved lease owner of a precise rewrite.
pub const REWRITE_OWNER: &str = "rewrite";

/// Settings of an offline operation.
#[derive(Clone)]
pub struct Offline {
    /// The lifetime of the claim the operation takes.
    pub lease_ttl_ms: Millis,
    /// SQLite's busy timeout.
    pub busy_timeout: Duration,
    /// The clock the lease is judged by.
    pub now: Clock,
}

impl Default for Offline {
    fn default() -> Self {
        Offline {
            lease_ttl_ms: DEFAULT_LEASE_TTL_MS,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            now: system_clock(),
        }
    }
}

impl std::fmt::Debug for Offline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offline")
            .field("lease_ttl_ms", &self.lease_ttl_ms)
            .field("busy_timeout", &self.busy_timeout)
            .finish_non_exhaustive()
    }
}

/// What a rewrite did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RewriteReport {
    /// The file's generation after the rewrite.
    pub generation: u64,
    /// Entries whose payload changed.
    pub entries_rewritten: u64,
    /// Register values and usage details that changed.
    pub values_rewritten: u64,
}

/// The session identity projection of the `session` row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The projected session id, if recorded.
    pub session_id: Option<String>,
    /// The projected parent session id, if recorded.
    pub parent_session_id: Option<String>,
}

/// Why an offline operation failed. Stable reason strings are the variant names.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RewriteError {
    /// The file does not exist (offline operations never create one).
    #[error("Missing: {0} is not a file")]
    Missing(PathBuf),
    /// The claim was refused because another owner holds an unexpired
    /// writer lease: the file is not closed. The lease machine's
    /// [`LeaseError::LeaseHeld`], under the offline reason
    /// `RewriteLeaseHeld` (its message is `Rewrite` + the lease machine's,
    /// which starts `LeaseHeld: `).
    #[error("Rewrite{0}")]
    RewriteLeaseHeld(LeaseError),
    /// The claim was lost after it was taken (stolen before the swap, or
    /// found displaced in the export's copy): the lease machine's
    /// [`LeaseError::LeaseLost`], shown as it is. Nothing was swapped.
    #[error(transparent)]
    Lease(LeaseError),
    /// A transform result breaks the rewrite rule; nothing was swapped.
    #[error("Violation: {0}")]
    Violation(RewriteViolation),
    /// A transform reported failure (corruption); nothing was swapped.
    #[error("TransformFailed: {at}: {reason}")]
    TransformFailed {
        /// Which record.
        at: String,
        /// The transform's reason.
        reason: String,
    },
    /// The WAL could not be retired.
    #[error("CheckpointIncomplete: {detail}")]
    CheckpointIncomplete {
        /// What the checkpoint answered.
        detail: String,
    },
    /// The file cannot be opened (version, foreign file, pragma, …).
    #[error("Open: {0}")]
    Open(OpenError),
    /// A filesystem step failed.
    #[error("Io: {op} {path}: {message}")]
    Io {
        /// The step.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        message: String,
    },
    /// SQLite failed.
    #[error("Sqlite: {op}: {message}")]
    Sqlite {
        /// The step.
        op: &'static str,
        /// SQLite's message.
        message: String,
    },
    /// A stored row does not decode.
    #[error("Corrupt: {detail}")]
    Corrupt {
        /// What was found.
        detail: String,
    },
}

impl From<Fault> for RewriteError {
    fn from(f: Fault) -> Self {
        match f {
            Fault::Corrupt(detail) => RewriteError::Corrupt { detail },
            Fault::Db(op, e) => RewriteError::Sqlite {
                op,
                message: e.to_string(),
            },
        }
    }
}

impl From<LeaseFailure> for RewriteError {
    fn from(e: LeaseFailure) -> Self {
        match e {
            LeaseFailure::Fault(f) => f.into(),
            // The re-verification's refusal: the claim was stolen.
            LeaseFailure::Refused(lost @ LeaseError::LeaseLost { .. }) => RewriteError::Lease(lost),
            refused => OpenError::from(refused).into(),
        }
    }
}

impl From<OpenError> for RewriteError {
    fn from(e: OpenError) -> Self {
        match e {
            // The claim's refusal: the file is not closed.
            OpenError::Lease(held @ LeaseError::LeaseHeld { .. }) => {
                RewriteError::RewriteLeaseHeld(held)
            }
            other => RewriteError::Open(other),
        }
    }
}

fn io<'p>(op: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> RewriteError + 'p {
    move |e| RewriteError::Io {
        op,
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Removes a file; a missing file is fine, any other error propagates.
fn unlink(path: &Path) -> Result<(), RewriteError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("unlink", path)(e)),
        _ => Ok(()),
    }
}

fn fsync_file(path: &Path) -> Result<(), RewriteError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io("fsync", path))
}

fn fsync_parent(path: &Path) -> Result<(), RewriteError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(io("fsync-dir", dir))
}

fn path_str(path: &Path) -> Result<&str, RewriteError> {
    path.to_str().ok_or_else(|| RewriteError::Io {
        op: "path",
        path: path.to_path_buf(),
        message: "not valid UTF-8".to_owned(),
    })
}

/// Opens an existing session file read-write, never creating it.
fn open_existing(path: &Path, busy: Duration) -> Result<Connection, RewriteError> {
    if !path.is_file() {
        return Err(RewriteError::Missing(path.to_path_buf()));
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(Fault::db("open"))?;
    config::configure(&conn, busy)?;
    Ok(conn)
}

fn require_current(conn: &Connection) -> Result<(), RewriteError> {
    let v = check_identity(conn)?;
    // Every stored version from 1 on is read the same way (version 2 only
    // derives the head, which a version-1 file's exact head already meets),
    // and the rewrite keeps the copy's version, so both are rewritable.
    if !(1..=STORAGE_VERSION).contains(&v) {
        return Err(OpenError::UnsupportedVersion {
            found: v,
            supported: STORAGE_VERSION,
        }
        .into());
    }
    Ok(())
}

/// Retires the WAL (verified) and takes the `VACUUM INTO` copy at `to`.
fn cut_closed(conn: &Connection, path: &Path, to: &Path) -> Result<(), RewriteError> {
    let (busy, log, done): (i64, i64, i64) = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .map_err(Fault::db("checkpoint"))?;
    if busy != 0 {
        return Err(RewriteError::CheckpointIncomplete {
            detail: format!("busy={busy} log={log} checkpointed={done}"),
        });
    }
    let wal = with_suffix(path, "-wal");
    match fs::metadata(&wal) {
        Ok(m) if m.len() != 0 => {
            return Err(RewriteError::CheckpointIncomplete {
                detail: format!("{} still holds {} bytes", wal.display(), m.len()),
            })
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("stat", &wal)(e)),
    }
    if to.exists() {
        return Err(RewriteError::Io {
            op: "vacuum-into",
            path: to.to_path_buf(),
            message: "the target exists".to_owned(),
        });
    }
    conn.execute("VACUUM INTO ?1", [path_str(to)?])
        .map_err(Fault::db("vacuum-into"))?;
    Ok(())
}

/// Opens a fresh copy for editing: nothing of it may reach a journal or WAL
/// on disk, and freed content is zeroed.
fn open_copy(to: &Path, busy: Duration) -> Result<Connection, RewriteError> {
    let c = open_existing(to, busy)?;
    config::set_journal_mode(&c, "memory")?;
    c.execute_batch("PRAGMA secure_delete = ON; PRAGMA temp_store = MEMORY;")
        .map_err(Fault::db("copy-pragmas"))?;
    let sd: i64 = c
        .query_row("PRAGMA secure_delete", [], |r| r.get(0))
        .map_err(Fault::db("copy-pragmas"))?;
    if sd != 1 {
        return Err(OpenError::PragmaDeclined {
            pragma: "secure_delete",
            wanted: "1".to_owned(),
            got: sd.to_string(),
        }
        .into());
    }
    Ok(c)
}

/// Leaves a finished copy in rollback-journal mode and closes it.
fn seal_copy(c: Connection) -> Result<(), RewriteError> {
    config::set_journal_mode(&c, "delete")?;
    c.close().map_err(|(_, e)| Fault::Db("copy-close", e))?;
    Ok(())
}

const PAGE: i64 = 256;

/// Transforms the copy in one transaction (the write-once triggers dropped
/// for it and restored): every entry, register value and usage detail
/// through the caller's transforms, each change checked by the rewrite
/// rule; then the generation bump and a `VACUUM`.
fn transform_copy(
    c: &mut Connection,
    entry_fn: &mut dyn FnMut(Entry) -> Result<Entry, String>,
    value_fn: &mut dyn FnMut(Payload) -> Result<Payload, String>,
) -> Result<RewriteReport, RewriteError> {
    let tx = c
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(Fault::db("transform-begin"))?;
    tx.execute_batch(schema::DROP_WRITE_ONCE_TRIGGERS)
        .map_err(Fault::db("transform"))?;
    let entries_rewritten = transform_entries(&tx, entry_fn)?;
    let values_rewritten = transform_registers(&tx, value_fn)? + transform_usage(&tx, value_fn)?;
    let generation = bump_generation(&tx)?;
    tx.execute_batch(schema::WRITE_ONCE_TRIGGERS)
        .map_err(Fault::db("transform"))?;
    tx.commit().map_err(Fault::db("transform-commit"))?;
    // No replaced byte survives in a free page.
    c.execute_batch("VACUUM")
        .map_err(Fault::db("transform-vacuum"))?;
    Ok(RewriteReport {
        generation,
        entries_rewritten,
        values_rewritten,
    })
}

/// Entries, a page at a time in seq order: how many changed.
fn transform_entries(
    tx: &Transaction<'_>,
    entry_fn: &mut dyn FnMut(Entry) -> Result<Entry, String>,
) -> Result<u64, RewriteError> {
    let mut rewritten_count = 0;
    let mut after = i64::MIN;
    let mut first = true;
    loop {
        let page: Vec<Entry> = {
            let mut st = tx
                .prepare_cached(
                    "SELECT seq, id, parent, kind, payload, ts FROM entries
                     WHERE seq > ?1 OR ?2 ORDER BY seq LIMIT ?3",
                )
                .map_err(Fault::db("transform-entries"))?;
            let mut rows = st
                .query(params![after, first, PAGE])
                .map_err(Fault::db("transform-entries"))?;
            let mut v = Vec::new();
            while let Some(row) = rows.next().map_err(Fault::db("transform-entries"))? {
                v.push(Entry::read(&mut cells(row, "entries")).map_err(Fault::from)?);
            }
            v
        };
        first = false;
        let Some(last) = page.last() else { break };
        after = seq_to_sql(last.seq);
        for before in page {
            let at = format!("entry {}", before.id);
            let rewritten = entry_fn(before.clone())
                .map_err(|reason| RewriteError::TransformFailed { at, reason })?;
            if check_entry_rewrite(&before, &rewritten).map_err(RewriteError::Violation)? {
                tx.prepare_cached("UPDATE entries SET payload = ?1 WHERE seq = ?2")
                    .map_err(Fault::db("transform-entries"))?
                    .execute(params![
                        rewritten.payload.as_bytes(),
                        seq_to_sql(before.seq)
                    ])
                    .map_err(Fault::db("transform-entries"))?;
                rewritten_count += 1;
            }
        }
    }
    Ok(rewritten_count)
}

/// Register values: how many changed.
fn transform_registers(
    tx: &Transaction<'_>,
    value_fn: &mut dyn FnMut(Payload) -> Result<Payload, String>,
) -> Result<u64, RewriteError> {
    let mut rewritten_count = 0;
    let cells: Vec<(String, String, Payload)> = {
        let mut st = tx
            .prepare("SELECT namespace, key, value FROM registers ORDER BY namespace, key")
            .map_err(Fault::db("transform-registers"))?;
        let mut rows = st.query([]).map_err(Fault::db("transform-registers"))?;
        let mut v = Vec::new();
        while let Some(row) = rows.next().map_err(Fault::db("transform-registers"))? {
            let c = cells(row, "registers");
            let cell = (|| {
                Ok::<_, ColumnError>((
                    c.text(0, "namespace", MAX_NAMESPACE_LEN)?,
                    c.text(1, "key", MAX_KEY_LEN)?,
                    payload(&c, 2, "value")?,
                ))
            })();
            v.push(cell.map_err(Fault::from)?);
        }
        v
    };
    for (ns, key, before) in cells {
        let at = format!("register {ns}/{key}");
        let rewritten = value_fn(before.clone())
            .map_err(|reason| RewriteError::TransformFailed { at, reason })?;
        if check_register_rewrite(&before, &rewritten).map_err(RewriteError::Violation)? {
            tx.execute(
                "UPDATE registers SET value = ?1 WHERE namespace = ?2 AND key = ?3",
                params![rewritten.as_bytes(), ns, key],
            )
            .map_err(Fault::db("transform-registers"))?;
            rewritten_count += 1;
        }
    }
    Ok(rewritten_count)
}

/// Usage details: how many changed.
fn transform_usage(
    tx: &Transaction<'_>,
    value_fn: &mut dyn FnMut(Payload) -> Result<Payload, String>,
) -> Result<u64, RewriteError> {
    let mut rewritten_count = 0;
    let usage: Vec<(i64, String, Payload)> = {
        let mut st = tx
            .prepare("SELECT seq, id, details FROM usage_ledger ORDER BY seq")
            .map_err(Fault::db("transform-usage"))?;
        let mut rows = st.query([]).map_err(Fault::db("transform-usage"))?;
        let mut v = Vec::new();
        while let Some(row) = rows.next().map_err(Fault::db("transform-usage"))? {
            let c = cells(row, "usage_ledger");
            let row = (|| {
                Ok::<_, ColumnError>((
                    c.int(0, "seq")?,
                    c.text(1, "id", MAX_ID_LEN)?,
                    payload(&c, 2, "details")?,
                ))
            })();
            v.push(row.map_err(Fault::from)?);
        }
        v
    };
    for (seq, id, before) in usage {
        let at = format!("usage {id}");
        let rewritten = value_fn(before.clone())
            .map_err(|reason| RewriteError::TransformFailed { at, reason })?;
        if check_details_rewrite(&before, &rewritten) {
            tx.execute(
                "UPDATE usage_ledger SET details = ?1 WHERE seq = ?2",
                params![rewritten.as_bytes(), seq],
            )
            .map_err(Fault::db("transform-usage"))?;
            rewritten_count += 1;
        }
    }
    Ok(rewritten_count)
}

/// Bumps the generation counter: the new generation.
fn bump_generation(tx: &Transaction<'_>) -> Result<u64, RewriteError> {
    let generation: i64 = tx
        .query_row(
            "SELECT generation FROM session WHERE singleton = 1",
            [],
            |r| r.get(0),
        )
        .map_err(Fault::db("transform-generation"))?;
    let next = u64_from_sql(generation)
        .checked_add(1)
        .ok_or_else(|| RewriteError::Corrupt {
            detail: "the generation counter is exhausted".to_owned(),
        })?;
    tx.execute(
        "UPDATE session SET generation = ?1 WHERE singleton = 1",
        [u64_to_sql(next)],
    )
    .map_err(Fault::db("transform-generation"))?;
    Ok(next)
}

/// Claims the lease as `owner` after checking the file's version
/// (refusing another owner's unexpired lease): [`lease_rows::admit`].
fn claim(conn: &mut Connection, owner: &Owner, offline: &Offline) -> Result<Held, RewriteError> {
    let ((), held) = lease_rows::admit(
        conn,
        owner,
        offline.lease_ttl_ms,
        &offline.now,
        require_current,
    )?;
    Ok(held)
}

/// The re-verification before a swap: one renewal of the exact claim,
/// decided in the original (a stolen claim is [`RewriteError::Lease`])
/// and then, the same request, in the copy. The copy's rows are the
/// original's as of the cut, which the live claim kept unchanged, so the
/// two decisions are the same and the new file holds the renewed claim
/// until step 6 — the modelled renewal, not a lease written by hand.
fn reverify_into_copy(
    conn: &mut Connection,
    copy: &Connection,
    held: &Held,
) -> Result<(), RewriteError> {
    let req = held.renew_request();
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(Fault::db("reverify-begin"))?;
    let lease = lease_rows::renew(&tx, &req)?;
    tx.commit().map_err(Fault::db("reverify-commit"))?;
    let in_copy = lease_rows::renew(copy, &req)?;
    if in_copy != lease {
        return Err(RewriteError::Corrupt {
            detail: format!("the copy's claim {in_copy:?} differs from the original's {lease:?}"),
        });
    }
    Ok(())
}

/// The precise rewrite of a closed session file (see the module docs).
///
/// `entry` maps each entry to its rewrite (only the payload may change);
/// `value` maps each register value and usage-details payload. Either may
/// return `Err(reason)` to abort the whole rewrite with nothing swapped.
pub fn rewrite_into<FE, FV>(
    path: &Path,
    offline: &Offline,
    mut entry: FE,
    mut value: FV,
) -> Result<RewriteReport, RewriteError>
where
    FE: FnMut(Entry) -> Result<Entry, String>,
    FV: FnMut(Payload) -> Result<Payload, String>,
{
    let owner = Owner::new(REWRITE_OWNER).map_err(|e| RewriteError::Open(OpenError::Lease(e)))?;
    let mut conn = open_existing(path, offline.busy_timeout)?;
    let held = claim(&mut conn, &owner, offline)?;
    let tmp = with_suffix(path, ".rewrite-tmp");
    let prepared = (|| {
        unlink(&tmp)?;
        for s in siblings(&tmp) {
            unlink(&s)?;
        }
        cut_closed(&conn, path, &tmp)?;
        let mut copy = open_copy(&tmp, offline.busy_timeout)?;
        let report = transform_copy(&mut copy, &mut entry, &mut value)?;
        reverify_into_copy(&mut conn, &copy, &held)?;
        seal_copy(copy)?;
        fsync_file(&tmp)?;
        Ok(report)
    })();
    let report = match prepared {
        Ok(r) => r,
        Err(e) => {
            abandon(&tmp, conn, &held);
            return Err(e);
        }
    };
    if let Err((conn, e)) = conn.close() {
        abandon(&tmp, conn, &held);
        return Err(Fault::Db("close", e).into());
    }
    if let Err(e) = fs::rename(&tmp, path) {
        let err = io("rename", path)(e);
        let _ = fs::remove_file(&tmp);
        if let Ok(mut c) = open_existing(path, offline.busy_timeout) {
            let _ = lease_rows::release(&mut c, &held);
        }
        return Err(err);
    }
    fsync_parent(path)?;
    unlink(&with_suffix(path, "-wal"))?;
    unlink(&with_suffix(path, "-shm"))?;
    let mut fresh = open_existing(path, offline.busy_timeout)?;
    lease_rows::release(&mut fresh, &held)?;
    fresh
        .close()
        .map_err(|(_, e)| RewriteError::from(Fault::Db("close", e)))?;
    tracing::info!(path = %path.display(), generation = report.generation, "precise rewrite swapped in");
    Ok(report)
}

/// Failure before the swap: drop the copy, give the claim back.
fn abandon(tmp: &Path, mut conn: Connection, held: &Held) {
    let _ = fs::remove_file(tmp);
    for s in siblings(tmp) {
        let _ = fs::remove_file(s);
    }
    if let Err(e) = lease_rows::release(&mut conn, held) {
        tracing::warn!(error = %e.reason(), "releasing the rewrite claim failed");
    }
}

/// The rewrite's first half with no transform: claims the lease under
/// `owner` (the same owner may re-cut over its own unexpired claim), retires
/// the WAL, takes the `VACUUM INTO` copy at `to` (which must not exist),
/// releases the claim in the copy and answers the copy's SHA-256 as
/// lowercase hex. The claim stays held in the original; see [`release_export`].
///
/// The copy's release is the modelled fenced release of the claim's exact
/// pair (`lease::Request::Release`), decided over the copy's rows, which
/// are the original's as of the cut: the copy keeps its fence high-water
/// mark and no holder. A claim found displaced in the copy (another
/// incarnation of `owner` claimed between this claim and the cut) is
/// [`RewriteError::Lease`], and the copy is removed.
pub fn export_closed(
    path: &Path,
    to: &Path,
    owner: &Owner,
    offline: &Offline,
) -> Result<String, RewriteError> {
    let mut conn = open_existing(path, offline.busy_timeout)?;
    let held = claim(&mut conn, owner, offline)?;
    let done = (|| {
        cut_closed(&conn, path, to)?;
        let copy = open_copy(to, offline.busy_timeout)?;
        match lease_rows::release_in(&copy, &held)? {
            lease::Outcome::Released => {}
            lease::Outcome::NotHeld { held_by } => {
                return Err(RewriteError::Lease(LeaseError::LeaseLost { held_by }))
            }
            other => {
                return Err(RewriteError::Corrupt {
                    detail: format!("a release answered {other:?}"),
                })
            }
        }
        seal_copy(copy)?;
        fsync_file(to)?;
        fsync_parent(to)?;
        sha256_hex(to)
    })();
    match done {
        Ok(hex) => {
            conn.close()
                .map_err(|(_, e)| RewriteError::from(Fault::Db("close", e)))?;
            Ok(hex)
        }
        Err(e) => {
            let _ = fs::remove_file(to);
            if let Err(re) = lease_rows::release(&mut conn, &held) {
                tracing::warn!(error = %re.reason(), "releasing the export claim failed");
            }
            Err(e)
        }
    }
}

/// Deletes `owner`'s claim from the original, under whichever fence it
/// holds (another owner's claim is left alone): the lease machine's
/// `Request::ReleaseByOwner`, for an owner name that names one operation
/// (`move:<op>`), whose caller may have restarted and lost the fence.
/// Answers whether a claim was deleted.
pub fn release_export(path: &Path, owner: &Owner, offline: &Offline) -> Result<bool, RewriteError> {
    let mut conn = open_existing(path, offline.busy_timeout)?;
    let released = lease_rows::release_by_owner(&mut conn, owner)?;
    conn.close()
        .map_err(|(_, e)| RewriteError::from(Fault::Db("close", e)))?;
    Ok(released)
}

fn sha256_hex(path: &Path) -> Result<String, RewriteError> {
    let mut f = File::open(path).map_err(io("open", path))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf).map_err(io("read", path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(custos_core::hex::encode(h.finalize()))
}

/// Reads the `session` row of a closed or live file without taking the
/// lease and without writing: a read-only open ([`crate::readonly`]) that
/// creates nothing (a missing file is [`RewriteError::Missing`]), then the
/// version check of [`require_current`] and `sql`, in one read transaction.
fn read_session<T>(
    path: &Path,
    sql: &str,
    f: impl Fn(&rusqlite::Row<'_>) -> Result<T, Fault>,
) -> Result<T, RewriteError> {
    if !path.is_file() {
        return Err(RewriteError::Missing(path.to_path_buf()));
    }
    let mut ro = ReadOnly::open(path, None, DEFAULT_BUSY_TIMEOUT)?;
    ro.read(|tx| {
        require_current(tx)?;
        tx.query_row(sql, [], |row| Ok(f(row)))
            .optional()
            .map_err(Fault::db("read-session"))?
            .ok_or_else(|| RewriteError::Corrupt {
                detail: "the session row is missing".to_owned(),
            })?
            .map_err(RewriteError::from)
    })?
}

/// The rewrite generation of a session file, read without taking the lease.
/// A missing file is [`RewriteError::Missing`]; nothing is created.
pub fn generation(path: &Path) -> Result<u64, RewriteError> {
    read_session(
        path,
        "SELECT generation FROM session WHERE singleton = 1",
        |row| codec::u64c(row, 0, "session"),
    )
}

/// The identity projection of a session file, read without taking the lease.
pub fn identity(path: &Path) -> Result<Identity, RewriteError> {
    read_session(
        path,
        "SELECT session_id, parent_session_id FROM session WHERE singleton = 1",
        |row| {
            Ok(Identity {
                session_id: codec::opt_text(row, 0, "session", MAX_TEXT_LEN)?.map(str::to_owned),
                parent_session_id: codec::opt_text(row, 1, "session", MAX_TEXT_LEN)?
                    .map(str::to_owned),
            })
        },
    )
}
