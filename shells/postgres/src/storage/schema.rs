//! The storage component's tables (one PostgreSQL schema, many sessions).
//!
//! ## Tables (component `storage`, version 2)
//!
//! Every table is keyed by `session` first, so one schema holds many
//! sessions and every statement of a session's operation is an index range
//! inside that session.
//!
//! | table                    | role |
//! |--------------------------|------|
//! | `storage_sessions`       | one **head row** per session: the writer lease (`lease_owner`, `lease_fence`, `lease_expires_at`, all null when free), the fence high-water mark, the next seq and the stats projection. Every writing transaction of the session locks it first. |
//! | `storage_kept_commits`   | version 2: each session's last `KEPT_COMMITS` identified commits `(session, id) → (position, digest, seqs, next_seq)`, whose retries are answered, not applied again |
//! | `storage_entries`        | write-once entries, primary key `(session, seq)`, `(session, id)` unique, with their branch-index place `(segment, pos)` |
//! | `storage_usage`          | write-once usage rows, primary key `(session, seq)`, `(session, id)` unique |
//! | `storage_registers`      | mutable cells `(session, namespace, key) → (value, seq)` |
//! | `storage_branch_meta`    | one row per branch **segment** of a session: its parent segment and position |
//! | `storage_branch_entries` | `(session, segment, pos) → (seq, kind)`, the primary key index carrying `seq` and `kind` (`INCLUDE`), so a branch page is one index range |
//!
//! The head row is inserted by the open that first names the session
//! (`INSERT … ON CONFLICT DO NOTHING`, then locked), so sessions are created
//! on demand; nothing else ever deletes or re-creates it.
//!
//! ## Encodings
//!
//! - Every `u64` of the store's data — seqs, timestamps, usage figures and
//!   the stats — is a `numeric(20,0)` column with a `CHECK` holding it to
//!   `0 ..= 2^64 - 1`: PostgreSQL has no unsigned 64-bit integer, and a
//!   `bigint` would refuse half the range the core hands out (a seq floor of
//!   `2^63` is legal). Values are written as decimal text
//!   (`$n::text::numeric`) and read back as text (`col::text`) and parsed;
//!   anything that does not parse as a `u64` (a negative value, say, once
//!   the check is dropped) is a typed corrupt row naming table and column.
//! - Lease fences and expiries are `bigint`s read through
//!   [`crate::conn::to_u64`]: a negative value is corrupt.
//! - Every text key column (`session`, `id`, `parent`, `kind`, `namespace`,
//!   `key`) is `COLLATE "C"`: byte order, which is the order of Rust's
//!   `str` (and of the memory oracle) — `list_registers` answers ascending
//!   by key in exactly that order.
//! - Payloads, details and register values are `bytea`.
//!
//! ## The branch index
//!
//! As in the SQLite shell: the entry tree of a session is cut into
//! **segments**, maximal chains in which each entry is its predecessor's
//! first child. A new entry extends its parent's segment when the parent is
//! that segment's tail (no `(segment, pos + 1)` row yet); otherwise (a root
//! or a fork) it opens a new segment (the session's highest segment + 1)
//! whose `storage_branch_meta` row names the parent's `(segment, pos)`. A
//! branch walk reads, per segment on the path, one descending range of
//! `storage_branch_entries` (a page at a time) and hops to the parent
//! segment; it touches `storage_entries` only by primary-key lookups
//! `(session, seq)` for the entries its answer keeps. A parent segment
//! always has a smaller number than its child (checked by a constraint and
//! by the walk), so a corrupt index ends in an error, never a loop.
//!
//! ## Write-once guards
//!
//! `storage_entries` and `storage_usage` carry `BEFORE UPDATE OR DELETE`
//! row triggers that raise: a bug (or an operator's stray statement) cannot
//! rewrite history through the ordinary path.

use crate::conn::Component;

/// The component's name in `custos_versions`.
pub const COMPONENT_NAME: &str = "storage";

/// The largest `u64`, as the `numeric` bound of the checks.
macro_rules! u64_check {
    ($col:literal) => {
        concat!(
            "CHECK (",
            $col,
            " >= 0 AND ",
            $col,
            " <= 18446744073709551615)"
        )
    };
}

/// Version 1: every table, index and guard.
const V1: &str = concat!(
    "CREATE TABLE storage_sessions (
        session text COLLATE \"C\" PRIMARY KEY,
        lease_owner text COLLATE \"C\",
        lease_fence bigint,
        lease_expires_at bigint,
        fence_high_water bigint NOT NULL DEFAULT 0,
        next_seq numeric(20,0) NOT NULL DEFAULT 1 ",
    u64_check!("next_seq"),
    ",
        usage_rows numeric(20,0) NOT NULL DEFAULT 0 ",
    u64_check!("usage_rows"),
    ",
        input_tokens numeric(20,0) NOT NULL DEFAULT 0 ",
    u64_check!("input_tokens"),
    ",
        output_tokens numeric(20,0) NOT NULL DEFAULT 0 ",
    u64_check!("output_tokens"),
    ",
        cache_read_tokens numeric(20,0) NOT NULL DEFAULT 0 ",
    u64_check!("cache_read_tokens"),
    ",
        cache_write_tokens numeric(20,0) NOT NULL DEFAULT 0 ",
    u64_check!("cache_write_tokens"),
    ",
        cost_micros numeric(20,0) NOT NULL DEFAULT 0 ",
    u64_check!("cost_micros"),
    ",
        CONSTRAINT storage_sessions_lease_whole CHECK (
            (lease_owner IS NULL) = (lease_fence IS NULL)
            AND (lease_owner IS NULL) = (lease_expires_at IS NULL))
    );
    CREATE TABLE storage_entries (
        session text COLLATE \"C\" NOT NULL,
        seq numeric(20,0) NOT NULL CONSTRAINT storage_entries_seq_range ",
    u64_check!("seq"),
    ",
        id text COLLATE \"C\" NOT NULL,
        parent text COLLATE \"C\",
        kind text COLLATE \"C\" NOT NULL,
        payload bytea NOT NULL,
        ts numeric(20,0) NOT NULL CONSTRAINT storage_entries_ts_range ",
    u64_check!("ts"),
    ",
        segment bigint NOT NULL,
        pos bigint NOT NULL,
        PRIMARY KEY (session, seq),
        CONSTRAINT storage_entries_id UNIQUE (session, id)
    );
    CREATE TABLE storage_usage (
        session text COLLATE \"C\" NOT NULL,
        seq numeric(20,0) NOT NULL ",
    u64_check!("seq"),
    ",
        id text COLLATE \"C\" NOT NULL,
        ts numeric(20,0) NOT NULL ",
    u64_check!("ts"),
    ",
        input_tokens numeric(20,0) NOT NULL ",
    u64_check!("input_tokens"),
    ",
        output_tokens numeric(20,0) NOT NULL ",
    u64_check!("output_tokens"),
    ",
        cache_read_tokens numeric(20,0) NOT NULL ",
    u64_check!("cache_read_tokens"),
    ",
        cache_write_tokens numeric(20,0) NOT NULL ",
    u64_check!("cache_write_tokens"),
    ",
        cost_micros numeric(20,0) NOT NULL ",
    u64_check!("cost_micros"),
    ",
        details bytea NOT NULL,
        PRIMARY KEY (session, seq),
        CONSTRAINT storage_usage_id UNIQUE (session, id)
    );
    CREATE TABLE storage_registers (
        session text COLLATE \"C\" NOT NULL,
        namespace text COLLATE \"C\" NOT NULL,
        key text COLLATE \"C\" NOT NULL,
        value bytea NOT NULL,
        seq numeric(20,0) NOT NULL ",
    u64_check!("seq"),
    ",
        PRIMARY KEY (session, namespace, key)
    );
    CREATE TABLE storage_branch_meta (
        session text COLLATE \"C\" NOT NULL,
        segment bigint NOT NULL CHECK (segment > 0),
        parent_segment bigint,
        parent_pos bigint,
        PRIMARY KEY (session, segment),
        CHECK ((parent_segment IS NULL) = (parent_pos IS NULL)),
        CHECK (parent_segment IS NULL OR (parent_segment < segment AND parent_pos >= 0))
    );
    CREATE TABLE storage_branch_entries (
        session text COLLATE \"C\" NOT NULL,
        segment bigint NOT NULL,
        pos bigint NOT NULL CHECK (pos >= 0),
        seq numeric(20,0) NOT NULL ",
    u64_check!("seq"),
    ",
        kind text COLLATE \"C\" NOT NULL,
        PRIMARY KEY (session, segment, pos) INCLUDE (seq, kind)
    );
    CREATE FUNCTION storage_write_once() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '% rows are write-once', TG_TABLE_NAME;
    END
    $$;
    CREATE TRIGGER storage_entries_write_once BEFORE UPDATE OR DELETE ON storage_entries
        FOR EACH ROW EXECUTE FUNCTION storage_write_once();
    CREATE TRIGGER storage_usage_write_once BEFORE UPDATE OR DELETE ON storage_usage
        FOR EACH ROW EXECUTE FUNCTION storage_write_once();
    "
);

/// Version 2: each session's kept identified commits (see
/// `custos_core::storage::commit`, "Retries"): the id, its place in the
/// order they were kept, the SHA-256 of its content, its receipt's seqs
/// (little-endian `u64`s) and next seq.
const V2: &str = "
CREATE TABLE storage_kept_commits (
    session text COLLATE \"C\" NOT NULL,
    id text COLLATE \"C\" NOT NULL,
    position bigint NOT NULL,
    digest bytea NOT NULL,
    seqs bytea NOT NULL,
    next_seq numeric(20,0) NOT NULL CHECK (next_seq >= 0 AND next_seq <= 18446744073709551615),
    PRIMARY KEY (session, id),
    UNIQUE (session, position)
);
";

/// The version history: `STEPS[i]` creates version `i + 1`.
const STEPS: &[&str] = &[V1, V2];

/// The storage component, prepared by every open.
pub const COMPONENT: Component = Component {
    name: COMPONENT_NAME,
    steps: STEPS,
};
