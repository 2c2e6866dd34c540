//! custos-conformance — the suites that define what a correct backend is.
//!
//! Shaped like `object_store`'s shared integration suite: every behaviour is a
//! public generic function taking a backend **factory** (`Fn() -> S`, called
//! once or more per case for a fresh, empty store), and a macro emits one
//! `#[test]` per case for a backend crate:
//!
//! ```
//! use custos_core::storage::MemoryStorage;
//! custos_conformance::storage_suite!(memory, MemoryStorage::new, reopen: || {
//!     let first = MemoryStorage::new();
//!     move || first.reopen()
//! });
//! ```
//!
//! A behaviour without a case here is not guaranteed. Each suite lists its
//! cases once (a hidden `__with_<suite>_cases!` macro); from that one list
//! come the suite macro's tests, the names (e.g. [`storage::STORAGE_CASES`])
//! and a runtime table of `(name, case)` ([`storage::storage_cases`],
//! [`ledger::ledger_cases`], [`custody::custody_cases`],
//! [`catalogue::catalogue_cases`], …) for a harness of your own that runs a
//! subset or reports per case. The emitters below are
//! shared by every suite.
//!
//! ## Reopen cases
//!
//! A backend that keeps everything in memory, or one that skips its restart
//! recovery on open, answers every request of a single handle correctly: only
//! a case that drops a handle and opens the same store again can tell it from
//! a durable one. The suites with such cases (the ledger, session storage, the
//! catalogue, custody, the access plane, the control catalog, its
//! administration and the deployment catalog) take a second argument: a
//! factory of [`Place`]s, each a store that can be opened, dropped and opened
//! again (a temporary file, a schema, a directory). The object-store suite's
//! fixture reopens a root itself ([`objects::ObjectFixture::reopen`]). The
//! snapshot suite has none: a snapshot source keeps no state of its own (each
//! page is a fresh cut of the session store, whose reopen cases cover it);
//! nor has the table-store suite, whose Iceberg tables are immutable
//! snapshots behind a catalog pointer that Iceberg's own commit protocol
//! makes durable.
//!
//! ```
//! use custos_core::ledger::MemoryLedger;
//! custos_conformance::ledger_suite!(memory, MemoryLedger::new, reopen: || {
//!     // The memory backend's "reopen" keeps its maps (nothing in it is
//!     // durable): a second handle over the first one's state.
//!     let first = MemoryLedger::new();
//!     move || first.reopen().expect("reopen")
//! });
//! ```
//!
//! Any `Fn() -> S` is a place. Its reopen cases check that everything
//! acknowledged survives a drop and a reopen, that a refusal leaves the
//! stored state unchanged across one, that a closed handle refuses while a
//! reopened one works, and each port's own open-time duty (the ledger's
//! restart recovery).
//!
//! ## Promised orders
//!
//! Every order a port promises, and the case whose data tells it apart from
//! the plausible wrong ones (insertion order, its reverse, a text collation,
//! a numeric-aware order, string order of a number, the id instead of the
//! seq). Keys that must sort in byte order come from [`ORDER_PROBE`].
//!
//! | Port | Listing | Promised order | Case |
//! |---|---|---|---|
//! | ledger | `admitted`, `unacked` (and the loaded rows behind them) | the key's own order: step and source index numerically (2 before 10), not text or insertion | [`ledger::listed_keys_come_back_in_key_order_not_text_or_insertion_order`] |
//! | ledger | `releases` | the order released, not by session id | [`ledger::releases_read_in_release_order`] |
//! | session storage | `list_registers` | byte order of the key | [`storage::listed_registers_are_in_byte_order_not_collation_or_insertion`] |
//! | session storage | `scan_entries`, `scan_entry_heads`, `scan_usage` | ascending seq (10 after 9), not id or seq-as-text | [`storage::scans_are_in_seq_order_not_id_or_text_order`], [`storage::scan_usage_seq_range`] |
//! | session storage | `scan_branch` | leaf to root | [`storage::branch_scan_walks_leaf_to_root`] |
//! | catalogue | `page` | byte order of the session id, across continuations | [`catalogue::listings_are_in_their_promised_order_not_text_collation_or_insertion`] |
//! | catalogue | `recent_folders` | newest first by id, past id 9 | the same case |
//! | access plane | `principals_page`, `session_members_page`, `memberships_page` | byte order of the principal or session id, across continuations | [`access::listings_are_in_byte_order_not_collation_or_insertion`] |
//! | control catalog | `discover_worlds` | byte order of the world id, destroyed worlds included | [`control::discovery_is_in_byte_order_not_collation_or_registration`], [`control::discovery_includes_destroyed_worlds_in_id_order`] |
//! | control catalog | a world's signatures | table id order, not registration order | [`control::signatures_round_trip_and_list`] |
//! | deployment catalog | `page` | byte order of the deployment id, across continuations | [`deployment::pages_are_in_byte_order_not_collation_or_apply_order`] |
//! | deployment catalog | default-route candidates | ascending revision, not deployment id | [`deployment::weighted_selection_is_deterministic_over_revisions`] |
//! | snapshot source | key pages, descriptor pages, lineage | ascending key; ascending descriptor; parents ascending | [`snapshot::key_page_bounds_limit_and_cursor`], [`snapshot::descriptor_pages_are_bounded_ascending_and_below_the_cut`], [`snapshot::lineage_walks_parents_ascending_within_limit`] |
//!
//! The broken backends in `conformance/teeth` answer in a wrong order for
//! the ledger's loaded rows and releases, registers, entry and usage scans,
//! catalogue pages, the principals listing, discovery, signatures,
//! deployment pages and default-route candidates; each fails its case.

pub mod access;
pub mod bench;
pub mod catalogue;
pub mod control;
pub mod control_admin;
pub mod custody;
pub mod deployment;
pub mod ledger;
pub mod objects;
pub mod snapshot;
pub mod storage;
pub mod tables;

/// Keys whose plausible orders all differ, listed in the order a case
/// inserts them: insertion order, its reverse, byte order
/// ([`ORDER_PROBE_BYTES`]), a case-insensitive or locale collation (a text
/// column's default `ORDER BY` in many databases: `a`, `A`, `a10`, …), and a
/// natural, numeric-aware order (`a2` before `a10`). A listing promised in
/// byte order is checked against it.
pub const ORDER_PROBE: [&str; 7] = ["b", "B", "a-2", "a10", "a2", "A", "\u{e9}"];

/// [`ORDER_PROBE`] in byte order (UTF-8 bytes compared as unsigned).
pub const ORDER_PROBE_BYTES: [&str; 7] = ["A", "B", "a-2", "a10", "a2", "b", "\u{e9}"];

/// A store that can be opened, dropped and opened again: what a suite's
/// reopen cases take. The first [`Place::open`] creates the store; every
/// later one opens the same store, as a process restart would (running the
/// backend's open-time recovery). Every `Fn() -> S` is a place.
pub trait Place {
    /// The handle an open returns.
    type Store;
    /// Opens a new handle over this place's store.
    fn open(&self) -> Self::Store;
}

impl<S, F: Fn() -> S> Place for F {
    type Store = S;
    fn open(&self) -> S {
        self()
    }
}

/// The start of a reopen case: opens `place`, writes a history into the
/// new store (`history`), and answers the open store, what `history`
/// answered, and what `seen` reads back after it.
#[track_caller]
pub fn open_with_history<P: Place, H, V>(
    place: &P,
    history: impl FnOnce(&P::Store) -> H,
    seen: impl FnOnce(&P::Store) -> V,
) -> (P::Store, H, V) {
    let store = place.open();
    let written = history(&store);
    let read = seen(&store);
    (store, written, read)
}

/// The lines of an exposed query plan, each with its text from its first
/// letter or digit on (a plan tree's drawing trimmed); an empty plan is
/// refused.
pub(crate) fn plan_lines(lines: &[String]) -> Result<Vec<(&str, &str)>, String> {
    if lines.is_empty() {
        return Err("the backend exposed an empty query plan".to_owned());
    }
    Ok(lines
        .iter()
        .map(|line| {
            let l = line.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
            (line.as_str(), l.trim())
        })
        .collect())
}

/// Every substring of four or more characters of `secret` that `text`
/// contains: what a message, a log line or a `Debug` form must not show
/// of a secret, even in part.
pub fn leaked_parts(text: &str, secret: &str) -> Vec<String> {
    let chars: Vec<char> = secret.chars().collect();
    let mut found = Vec::new();
    for i in 0..chars.len() {
        for j in i + 4..=chars.len() {
            let part: String = chars[i..j].iter().collect();
            if text.contains(&part) {
                found.push(part);
            }
        }
    }
    found
}

/// One row of a suite's runtime table (e.g. [`storage::storage_cases`]):
/// the case's name, and the case called with a backend factory.
pub type TableCase<B> = (&'static str, fn(&dyn Fn() -> B));

/// The names of the cases of `table` that fail (panic) against backends
/// built by `factory`, in table order. Each case runs under
/// [`std::panic::catch_unwind`]; a failing case's panic message is printed
/// as usual.
pub fn failing_table_cases<B>(
    table: &[TableCase<B>],
    factory: &dyn Fn() -> B,
) -> Vec<&'static str> {
    table
        .iter()
        .filter(|(_, case)| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(factory))).is_err()
        })
        .map(|(name, _)| *name)
        .collect()
}

/// Asserts that `table` lists exactly the cases `names` lists (a suite's
/// `*_CASES`), in the same order, none twice.
#[track_caller]
pub fn assert_table_lists<B>(table: &[TableCase<B>], names: &[&str]) {
    let listed: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
    assert_eq!(listed, names, "the runtime table and the case list differ");
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), listed.len(), "duplicate case names");
}

/// The runtime table names the suite's cases (`names`, its `*_CASES`), and
/// every one passes through it against `factory`: asserts both, then
/// prints `<backend>: N of N <what> pass`.
#[track_caller]
pub fn assert_every_case_passes<B>(
    backend: &str,
    what: &str,
    table: &[TableCase<B>],
    names: &[&str],
    factory: &dyn Fn() -> B,
) {
    assert_table_lists(table, names);
    let failed = failing_table_cases(table, factory);
    assert!(failed.is_empty(), "failed: {failed:?}");
    println!("{backend}: {} of {} {what} pass", table.len(), names.len());
}

/// The body of every `<suite>_suite!` macro: `mod $name { #[test] fn
/// <case>() … }` over the cases `$cases` lists, each calling
/// `$crate::$module::<case>($factory)`.
#[doc(hidden)]
#[macro_export]
macro_rules! __suite {
    ($cases:ident, $module:ident, $name:ident, $factory:expr) => {
        #[allow(unused_imports)]
        mod $name {
            use super::*;
            $crate::$cases!(__emit_tests!($module, $factory));
        }
    };
    ($cases:ident, $reopen:ident, $module:ident, $name:ident, $factory:expr, $places:expr) => {
        #[allow(unused_imports)]
        mod $name {
            use super::*;
            $crate::$cases!(__emit_tests!($module, $factory));
            $crate::$reopen!(__emit_tests!($module, $places));
        }
    };
}

/// One `#[test]` per case.
#[doc(hidden)]
#[macro_export]
macro_rules! __emit_tests {
    (($module:ident, $factory:expr) $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::$module::$case($factory);
            }
        )*
    };
}

/// The case names, as an array.
#[doc(hidden)]
#[macro_export]
macro_rules! __emit_names {
    (() $($case:ident),* $(,)?) => { [$(stringify!($case)),*] };
}

/// The cases as a runtime table of `(name, case)`.
#[doc(hidden)]
#[macro_export]
macro_rules! __emit_table {
    (($module:ident, $t:ty) $($case:ident),* $(,)?) => {
        vec![$(
            (stringify!($case), (|f: &dyn Fn() -> $t| $crate::$module::$case(f)) as fn(&dyn Fn() -> $t))
        ),*]
    };
}

/// Emits `mod $name { #[test] fn <case>() … }`: one test per storage
/// conformance case, each calling the case with `$factory` (an expression of
/// a type implementing `Fn() -> S` with `S: Storage`; it is evaluated once per
/// test, and names in the calling module are in scope), and one per reopen
/// case, each calling it with `$places` (`Fn() -> P`, `P: `[`Place`]
/// opening a store: a fresh store per call, opened again by every
/// [`Place::open`]).
#[macro_export]
macro_rules! storage_suite {
    ($name:ident, $factory:expr, reopen: $places:expr $(,)?) => {
        $crate::__suite!(
            __with_storage_cases,
            __with_storage_reopen_cases,
            storage,
            $name,
            $factory,
            $places
        );
    };
}

/// Invokes `$crate::$callback! { ($args) case, case, … }` with every storage case
/// name, so the macro and the runtime table cannot drift.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_storage_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            fresh_store_is_empty,
            first_seq_is_one_and_seqs_follow_list_order,
            seqs_strictly_increase_across_commits,
            seq_floor_leaves_a_gap,
            seq_floor_below_next_is_already_met,
            seq_gaps_are_visible_in_scans,
            entry_round_trips,
            get_entries_is_aligned_and_answers_none_for_unknown,
            get_entries_bound_is_typed,
            ts_is_stamped_from_the_commit,
            usage_row_round_trips,
            parent_must_exist,
            parent_inserted_earlier_in_the_commit_counts,
            parent_inserted_later_in_the_commit_does_not_count,
            usage_row_is_not_a_parent,
            failed_parent_applies_nothing,
            duplicate_entry_id_is_corruption,
            duplicate_usage_id_is_corruption,
            entry_id_reused_by_usage_is_corruption,
            usage_id_reused_by_entry_is_corruption,
            duplicate_id_within_one_commit_is_corruption,
            duplicate_id_never_updates,
            set_register_creates_with_its_seq,
            set_register_replaces,
            delete_register_removes,
            list_registers_omits_deleted_cells,
            delete_absent_is_a_noop_that_consumes_a_seq,
            writes_apply_in_list_order,
            cas_absent_holds_on_absent_register,
            cas_absent_refused_on_present_register,
            cas_matching_seq_applies,
            refused_cas_applies_nothing,
            expectations_are_evaluated_before_writes,
            every_expectation_must_hold,
            cas_only_commit_is_legal,
            stale_cas_only_commit_is_refused,
            failed_commit_consumes_no_seq,
            stats_equal_ledger_after_every_commit,
            register_value_bound_is_typed_and_applies_nothing,
            list_registers_by_prefix_ascending,
            listed_registers_are_in_byte_order_not_collation_or_insertion,
            scans_are_in_seq_order_not_id_or_text_order,
            list_registers_prefix_is_literal,
            list_registers_isolates_namespaces,
            cells_are_keyed_by_the_namespace_key_pair,
            branch_scan_walks_leaf_to_root,
            branch_scan_unknown_leaf_is_typed,
            branch_scan_excludes_other_branches,
            branch_scan_stop_is_inclusive,
            branch_scan_stop_is_resolved_before_filtering,
            branch_scan_kind_filter,
            branch_scan_cursor_pages_without_overlap,
            branch_scan_limit,
            scan_entries_seq_range_bounds,
            scan_entries_pages_with_after_and_limit,
            scan_entry_heads_equal_the_full_scan_projected,
            scan_usage_seq_range,
            close_is_idempotent,
            closed_reads_answer_handle_closed,
            closed_commit_answers_faulted,
            a_retried_commit_gets_its_own_receipt,
            branch_scan_query_plan_uses_no_table_scan,
        }
    };
}

/// Emits `mod $name { #[test] fn <case>() … }`: one test per snapshot
/// conformance case, each calling the case with `$factory` (an expression
/// of a type implementing `Fn() -> S` with `S: Storage + SnapshotSource`).
#[macro_export]
macro_rules! snapshot_suite {
    ($name:ident, $factory:expr $(,)?) => {
        $crate::__suite!(__with_snapshot_cases, snapshot, $name, $factory);
    };
}

/// Invokes `$crate::$callback! { ($args) case, case, … }` with every snapshot
/// case name, so the macro and the runtime table cannot drift.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_snapshot_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            capture_copies_high_water_stats_and_selected_cells,
            capture_namespace_selection_isolates_namespaces_and_dedups,
            capture_prefix_is_a_literal_index_range,
            capture_exact_keys_probe_the_index_and_omit_missing,
            capture_follows_optional_prefixed_field,
            capture_omits_missing_optional_metadata,
            capture_refuses_malformed_references_and_invalid_plans,
            capture_over_cell_budget_is_refused_before_values,
            capture_over_byte_budget_is_refused_before_values,
            capture_counts_referenced_cells,
            key_page_bounds_limit_and_cursor,
            key_page_removed_cursor_still_bounds,
            key_page_accounts_only_its_window,
            each_page_is_a_fresh_cut,
            descriptor_pages_are_bounded_ascending_and_below_the_cut,
            fragments_slice_within_bounds,
            oversized_record_is_refused_before_its_payload,
            lineage_walks_parents_ascending_within_limit,
            lineage_before_seq_is_exclusive,
            lineage_byte_bound_always_returns_the_first,
            lineage_corrupt_parent_link_ends_the_walk,
            lineage_missing_parent_ends_the_walk,
            closed_handle_answers_handle_closed,
            snapshot_query_plans_use_indexes,
        }
    };
}
