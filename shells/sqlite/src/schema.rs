//! The session file's schema, its identity pragmas and the migration chain.
//!
//! ## Wire (storage_version 3)
//!
//! | table            | role |
//! |------------------|------|
//! | `writer_lease`   | at most one row: the lease holder `(owner, fence, expires_at)` |
//! | `lease_fence`    | one row: the highest fence ever issued (survives a release) |
//! | `session`        | one row: `storage_version`, rewrite `generation`, the projected `session_id` / `parent_session_id`, and the store head (`next_seq`, the stats projection) |
//! | `entries`        | write-once entries, keyed by seq (`INTEGER PRIMARY KEY`), `id` unique, with their branch-index place `(segment, pos)` |
//! | `usage_ledger`   | write-once usage rows, keyed by seq, `id` unique |
//! | `registers`      | mutable cells `(namespace, key) → (value, seq)` |
//! | `branch_meta`    | one row per branch **segment**: its parent segment and position |
//! | `branch_entries` | `(segment, pos) → (seq, kind)`: every entry's place in its segment |
//! | `kept_commits`   | version 3: the last `KEPT_COMMITS` identified commits — each id, its place in the order they were kept, the SHA-256 of its content, its receipt's seqs (little-endian `u64`s) and next seq — so that a retry is answered, not applied again |
//!
//! `writer_lease` and `lease_fence` are created by the admission transaction
//! (they must exist before anything else can be claimed); everything else is
//! created by the version-1 step after the lease is held.
//!
//! ## The store head (version 2)
//!
//! The durable next seq is **derived**: `max(session.next_seq,
//! 1 + max(entries.seq), 1 + max(usage_ledger.seq))`, three primary-key
//! seeks. A commit that inserts an entry or usage row at its own seq
//! therefore records its seq in that row, and writes the `session` row only
//! when something the row alone holds changes: the stats projection (a
//! usage row), or a seq that no inserted row records (register-only and
//! CAS-only commits). A single-entry commit writes three B-tree pages
//! (`entries`, its `id` index, `branch_entries`) instead of four. Version 1
//! kept `session.next_seq` exact, which the derivation reads correctly, so
//! the 1 → 2 step only bumps the version: what it protects against is an
//! older build, which would trust a stale `session.next_seq` and refuses a
//! version-2 file instead.
//!
//! ## The branch index
//!
//! Entries form a tree by parent links. The index cuts the tree into
//! **segments**: maximal chains in which each entry is its predecessor's
//! first child. A new entry extends its parent's segment when the parent is
//! that segment's tail (no `(segment, pos + 1)` row exists yet); otherwise
//! (a root, or a fork) it opens a new segment whose `branch_meta` row names
//! the parent's `(segment, pos)`. A branch scan therefore reads, per segment
//! on the path, one descending primary-key range of `branch_entries` (a page
//! at a time, covering: seq and kind are in the index) and hops to the parent
//! segment; it touches `entries` only by `INTEGER PRIMARY KEY` lookups for
//! the entries the answer keeps. No temp B-tree, no scan of `entries`, no
//! per-entry parent walk. The leaf's place is read from its `entries` row
//! (found through the `id` index), so `branch_entries` needs no second index
//! and extending a chain writes one index row and no `branch_meta` row. A parent segment always has a smaller number than
//! its child (checked), so a corrupt index ends in an error, never a loop.
//!
//! ## Integer encodings
//!
//! SQLite integers are `i64`; the store's numbers are `u64`. Every **seq**
//! is stored order-preserving as `seq XOR 2^63` reinterpreted as `i64`, so
//! seq-range queries and `ORDER BY seq` are exact over the whole `u64`
//! range. Every other `u64` (timestamps, figures, fences, generation) is
//! stored bit-for-bit as `i64`. Both maps are bijections, so decoding is
//! total.

use rusqlite::Connection;

use crate::codec;
use crate::config::OpenError;
use crate::fault::Fault;

/// The storage version this build writes and reads.
pub const STORAGE_VERSION: i64 = 3;

/// `PRAGMA application_id` of a custos session file (`"CuSe"` in ASCII).
pub const APPLICATION_ID: i64 = 0x4375_5365;

/// The tables the admission transaction creates (idempotent).
pub(crate) const LEASE_DDL: &str = "
CREATE TABLE IF NOT EXISTS writer_lease (
    slot INTEGER PRIMARY KEY CHECK (slot = 1),
    owner TEXT NOT NULL,
    fence INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS lease_fence (
    slot INTEGER PRIMARY KEY CHECK (slot = 1),
    high_water INTEGER NOT NULL
) STRICT;
";

/// Tables a version-0 file may hold: exactly the admission tables.
pub(crate) const ADMISSION_TABLES: &[&str] = &["writer_lease", "lease_fence"];

/// The write-once guards on `entries` and `usage_ledger`.
pub(crate) const WRITE_ONCE_TRIGGERS: &str = "
CREATE TRIGGER entries_write_once_update BEFORE UPDATE ON entries
BEGIN SELECT RAISE(ABORT, 'entries are write-once'); END;
CREATE TRIGGER entries_write_once_delete BEFORE DELETE ON entries
BEGIN SELECT RAISE(ABORT, 'entries are write-once'); END;
CREATE TRIGGER usage_write_once_update BEFORE UPDATE ON usage_ledger
BEGIN SELECT RAISE(ABORT, 'usage rows are write-once'); END;
CREATE TRIGGER usage_write_once_delete BEFORE DELETE ON usage_ledger
BEGIN SELECT RAISE(ABORT, 'usage rows are write-once'); END;
";

/// Drops [`WRITE_ONCE_TRIGGERS`] (only the offline rewrite does, on its copy).
pub(crate) const DROP_WRITE_ONCE_TRIGGERS: &str = "
DROP TRIGGER entries_write_once_update;
DROP TRIGGER entries_write_once_delete;
DROP TRIGGER usage_write_once_update;
DROP TRIGGER usage_write_once_delete;
";

/// The version-1 schema (run after the lease is held).
pub(crate) const SCHEMA_V1: &str = "
CREATE TABLE session (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    storage_version INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    session_id TEXT,
    parent_session_id TEXT,
    next_seq INTEGER NOT NULL,
    usage_rows INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cost_micros INTEGER NOT NULL
) STRICT;
CREATE TABLE entries (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    parent TEXT,
    kind TEXT NOT NULL,
    payload BLOB NOT NULL,
    ts INTEGER NOT NULL,
    segment INTEGER NOT NULL,
    pos INTEGER NOT NULL
) STRICT;
CREATE TABLE usage_ledger (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    ts INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cost_micros INTEGER NOT NULL,
    details BLOB NOT NULL
) STRICT;
CREATE TABLE registers (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (namespace, key)
) STRICT, WITHOUT ROWID;
CREATE TABLE branch_meta (
    segment INTEGER PRIMARY KEY,
    parent_segment INTEGER,
    parent_pos INTEGER,
    CHECK ((parent_segment IS NULL) = (parent_pos IS NULL)),
    CHECK (parent_segment IS NULL OR parent_segment < segment)
) STRICT;
CREATE TABLE branch_entries (
    segment INTEGER NOT NULL,
    pos INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    PRIMARY KEY (segment, pos)
) STRICT, WITHOUT ROWID;
";

/// Version 3: the kept identified commits (see
/// `custos_core::storage::commit`, "Retries").
pub(crate) const KEPT_COMMITS_DDL: &str = "
CREATE TABLE kept_commits (
    id TEXT PRIMARY KEY,
    position INTEGER NOT NULL UNIQUE,
    digest BLOB NOT NULL,
    seqs BLOB NOT NULL,
    next_seq INTEGER NOT NULL
) STRICT;
";

/// One migrate-on-open step: the statements that take a file from
/// `from_version` to `from_version + 1`. A step's statements and its version
/// bump commit in one transaction.
#[derive(Clone, Copy, Debug)]
pub struct Migration {
    /// The version the step starts from.
    pub from_version: i64,
    /// The statements, run as one batch.
    pub statements: &'static str,
}

/// The migration chain after version 1 (version 0 → 1 is the initial
/// schema, and a fresh file is created at [`STORAGE_VERSION`] directly).
/// 1 → 2 changes no table: `session.next_seq` becomes a floor under the
/// derived head (see the module docs), which version-1 files already meet.
/// 2 → 3 adds the `kept_commits` table.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        from_version: 1,
        statements: "",
    },
    Migration {
        from_version: 2,
        statements: KEPT_COMMITS_DDL,
    },
];

/// Whether this build can open a file of `version` (0 = fresh).
pub fn supports(version: i64) -> bool {
    version == 0
        || version == STORAGE_VERSION
        || MIGRATIONS.iter().any(|m| m.from_version == version)
}

/// The bound on a schema object's name read from `sqlite_master`.
const MAX_SCHEMA_NAME_LEN: usize = 4096;

/// Reads `PRAGMA user_version` and `application_id` and refuses what this
/// build cannot read. Writes nothing.
pub(crate) fn check_identity(conn: &Connection) -> Result<i64, OpenError> {
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(Fault::db("read-version"))?;
    if !supports(version) {
        return Err(OpenError::UnsupportedVersion {
            found: version,
            supported: STORAGE_VERSION,
        });
    }
    let app: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(Fault::db("read-application-id"))?;
    let tables = {
        let mut st = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .map_err(Fault::db("read-schema"))?;
        // Schema names are bounded too: a foreign file's are not ours to copy.
        let rows = st
            .query_map([], |r| {
                Ok(codec::text_ref(r, 0, MAX_SCHEMA_NAME_LEN).map(|n| n.map(str::to_owned)))
            })
            .map_err(Fault::db("read-schema"))?;
        let mut names = Vec::new();
        for row in rows {
            match row.map_err(Fault::db("read-schema"))? {
                Ok(Some(name)) => names.push(name),
                Ok(None) => {}
                Err(e) => {
                    return Err(OpenError::ForeignDatabase {
                        detail: format!("sqlite_master: a table name: {e}"),
                    })
                }
            }
        }
        names
    };
    if version == 0 {
        if app != 0 {
            return Err(OpenError::ForeignDatabase {
                detail: format!("version 0 with application_id {app:#x}"),
            });
        }
        if let Some(t) = tables
            .iter()
            .find(|t| !ADMISSION_TABLES.contains(&t.as_str()))
        {
            return Err(OpenError::ForeignDatabase {
                detail: format!("a version-0 file holds table {t}"),
            });
        }
    } else if app != APPLICATION_ID {
        return Err(OpenError::ForeignDatabase {
            detail: format!("application_id {app:#x}, expected {APPLICATION_ID:#x}"),
        });
    } else if !ADMISSION_TABLES
        .iter()
        .all(|t| tables.iter().any(|x| x == t))
    {
        return Err(OpenError::Corrupt {
            detail: "a versioned session file without its lease tables".to_owned(),
        });
    }
    Ok(version)
}
