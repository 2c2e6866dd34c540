//! The session-storage conformance suite: one public generic function per
//! behaviour of the [`Storage`] port.
//!
//! Every commit a case makes goes through [`commit_checked`], which asserts
//! after *each* transaction — accepted or refused — that the stats projection
//! equals the sum of the usage ledger.
//!
//! Cases panic (via `assert!`) on a violation: they are test bodies.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use crate::Place;
use custos_core::storage::types::{MAX_GET_ENTRIES, MAX_REGISTER_VALUE_LEN};
use custos_core::storage::{
    branch_scan, entry_seq_range, usage_seq_range, BoundError, BranchScan, Commit, CommitError,
    CommitId, CommitReceipt, Entry, EntryHead, EntryScan, KeyPrefix, Kind, Namespace, Payload,
    RecordId, Register, RegisterKey, Seq, Stats, Storage, StorageError, UsageFigures, UsageRow,
    UsageScan, Write,
};

/// The namespaces the suite writes registers into.
pub const NAMESPACES: &[&str] = &["n", "o"];

// ------------------------------------------------------------------ helpers

/// A record id (panics on an invalid literal: test helper).
#[track_caller]
pub fn id(s: &str) -> RecordId {
    RecordId::new(s).expect("valid id literal")
}

/// An entry kind.
#[track_caller]
pub fn kind(s: &str) -> Kind {
    Kind::new(s).expect("valid kind literal")
}

/// A register namespace.
#[track_caller]
pub fn ns(s: &str) -> Namespace {
    Namespace::new(s).expect("valid namespace literal")
}

/// A register key.
#[track_caller]
pub fn key(s: &str) -> RegisterKey {
    RegisterKey::new(s).expect("valid key literal")
}

/// An `InsertEntry` whose payload is `payload:<id>`.
#[track_caller]
pub fn entry(i: &str, parent: Option<&str>, k: &str) -> Write {
    Write::InsertEntry {
        id: id(i),
        parent: parent.map(id),
        kind: kind(k),
        payload: Payload::new(format!("payload:{i}").into_bytes()).expect("small payload"),
    }
}

/// An `InsertUsage` with the given input tokens and cost and `details:<id>`.
#[track_caller]
pub fn usage(i: &str, input: u64, cost: u64) -> Write {
    Write::InsertUsage {
        id: id(i),
        figures: UsageFigures {
            input_tokens: input,
            output_tokens: input / 2,
            cache_read_tokens: 1,
            cache_write_tokens: 0,
            cost_micros: cost,
        },
        details: Payload::new(format!("details:{i}").into_bytes()).expect("small payload"),
    }
}

/// A `SetRegister`.
#[track_caller]
pub fn set(n: &str, k: &str, v: &[u8]) -> Write {
    Write::SetRegister {
        namespace: ns(n),
        key: key(k),
        value: Payload::new(v.to_vec()).expect("small payload"),
    }
}

/// A `DeleteRegister`.
#[track_caller]
pub fn del(n: &str, k: &str) -> Write {
    Write::DeleteRegister {
        namespace: ns(n),
        key: key(k),
    }
}

/// A commit at ts 0 of the entries `ids` (kind `m`), each the child of
/// the one before it, the first a root.
#[track_caller]
fn chained(ids: &[&str]) -> Commit {
    let mut c = Commit::at(0);
    let mut parent = None;
    for &i in ids {
        c = c.write(entry(i, parent, "m"));
        parent = Some(i);
    }
    c
}

/// Asserts that the stats projection equals the sum of the usage ledger.
#[track_caller]
pub fn assert_stats_equal_ledger<S: Storage>(s: &S) {
    let ledger = s.scan_usage(&UsageScan::all()).expect("scan_usage");
    let sum = Stats::of(ledger.iter()).expect("ledger sum fits");
    assert_eq!(
        s.stats().expect("stats"),
        sum,
        "stats differ from the ledger sum"
    );
}

/// Commits and then asserts stats == ledger sum, whatever the outcome.
#[track_caller]
pub fn commit_checked<S: Storage>(s: &S, c: &Commit) -> Result<CommitReceipt, CommitError> {
    let r = s.commit(c);
    assert_stats_equal_ledger(s);
    r
}

/// Commits, requiring success.
#[track_caller]
pub fn ok<S: Storage>(s: &S, c: Commit) -> CommitReceipt {
    match commit_checked(s, &c) {
        Ok(r) => r,
        Err(e) => panic!("commit {c:?} refused: {e}"),
    }
}

/// Commits, requiring refusal, and returns the error.
#[track_caller]
pub fn refused<S: Storage>(s: &S, c: Commit) -> CommitError {
    match commit_checked(s, &c) {
        Ok(r) => panic!("commit {c:?} accepted ({r:?}); expected a refusal"),
        Err(e) => e,
    }
}

/// Everything a caller can observe through the port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dump {
    /// Every entry, ascending seq.
    pub entries: Vec<Entry>,
    /// Every usage row, ascending seq.
    pub usage: Vec<UsageRow>,
    /// Every register of [`NAMESPACES`].
    pub registers: Vec<Register>,
    /// The stats.
    pub stats: Stats,
}

/// Reads everything observable.
#[track_caller]
pub fn dump<S: Storage>(s: &S) -> Dump {
    let mut registers = Vec::new();
    for n in NAMESPACES {
        registers.extend(
            s.list_registers(&ns(n), &KeyPrefix::all())
                .expect("list_registers"),
        );
    }
    Dump {
        entries: s.scan_entries(&EntryScan::all()).expect("scan_entries"),
        usage: s.scan_usage(&UsageScan::all()).expect("scan_usage"),
        registers,
        stats: s.stats().expect("stats"),
    }
}

/// The seq the next write would receive, found by committing a delete of a
/// probe register (which consumes exactly that seq).
#[track_caller]
pub fn probe_next_seq<S: Storage>(s: &S) -> Seq {
    let r = ok(s, Commit::at(0).write(del("o", "probe")));
    assert_eq!(r.seqs.len(), 1);
    r.seqs[0]
}

fn ids(v: &[Entry]) -> Vec<&str> {
    v.iter().map(|e| e.id.as_str()).collect()
}

#[track_caller]
fn list_keys<S: Storage>(s: &S, n: &str, prefix: &str) -> Vec<String> {
    s.list_registers(
        &ns(n),
        &KeyPrefix::new(prefix).expect("valid prefix literal"),
    )
    .expect("list_registers")
    .into_iter()
    .map(|r| r.key.as_str().to_owned())
    .collect()
}

#[track_caller]
fn reg<S: Storage>(s: &S, n: &str, k: &str) -> Option<Register> {
    s.get_register(&ns(n), &key(k)).expect("get_register")
}

/// Builds the tree used by the branch cases:
///
/// ```text
/// r(compaction) ← a(m) ← b(tool) ← c(compaction) ← d(m) ← e(tool) ← f(m)
///                   ↖ s1(m) ← s2(tool)
/// ```
///
/// with usage rows and registers interleaved so that entry seqs have gaps.
#[track_caller]
pub fn branch_tree<S: Storage>(s: &S) {
    ok(
        s,
        Commit::at(1)
            .write(entry("r", None, "compaction"))
            .write(entry("a", Some("r"), "m"))
            .write(usage("u1", 10, 1))
            .write(entry("b", Some("a"), "tool")),
    );
    ok(
        s,
        Commit::at(2)
            .write(entry("s1", Some("a"), "m"))
            .write(set("n", "x", b"1")),
    );
    ok(
        s,
        Commit::at(3)
            .write(entry("c", Some("b"), "compaction"))
            .write(entry("d", Some("c"), "m"))
            .write(entry("s2", Some("s1"), "tool")),
    );
    ok(
        s,
        Commit::at(4)
            .floor(100)
            .write(entry("e", Some("d"), "tool")),
    );
    ok(
        s,
        Commit::at(5)
            .write(usage("u2", 3, 2))
            .write(entry("f", Some("e"), "m")),
    );
}

// -------------------------------------------------------------- seq rules

/// A fresh store is empty: no entries, usage or registers, zero stats.
pub fn fresh_store_is_empty<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let d = dump(&s);
    assert!(d.entries.is_empty() && d.usage.is_empty() && d.registers.is_empty());
    assert_eq!(d.stats, Stats::default());
    assert_eq!(s.get_entries(&[id("a")]).unwrap(), vec![None]);
    assert_eq!(reg(&s, "n", "k"), None);
}

/// The first write of a fresh store gets seq 1; a commit's writes get
/// consecutive seqs in list order.
pub fn first_seq_is_one_and_seqs_follow_list_order<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let r = ok(
        &s,
        Commit::at(0)
            .write(entry("a", None, "m"))
            .write(usage("u", 1, 1))
            .write(set("n", "k", b"v"))
            .write(del("n", "zz")),
    );
    assert_eq!(r.seqs, vec![1, 2, 3, 4]);
    assert_eq!(r.next_seq, 5);
    assert_eq!(
        s.get_entries(&[id("a")]).unwrap()[0].as_ref().unwrap().seq,
        1
    );
    assert_eq!(s.scan_usage(&UsageScan::all()).unwrap()[0].seq, 2);
    assert_eq!(reg(&s, "n", "k").unwrap().seq, 3);
}

/// Seqs strictly increase across commits.
pub fn seqs_strictly_increase_across_commits<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let mut last = 0;
    for i in 0..10 {
        let r = ok(
            &s,
            Commit::at(i)
                .write(set("n", "k", b"v"))
                .write(entry(&format!("e{i}"), None, "m")),
        );
        assert!(r.seqs[0] > last && r.seqs[1] > r.seqs[0]);
        last = r.seqs[1];
    }
    let all = s.scan_entries(&EntryScan::all()).unwrap();
    assert!(all.windows(2).all(|w| w[0].seq < w[1].seq));
}

/// A seq floor above next seq starts the commit there, leaving a gap.
pub fn seq_floor_leaves_a_gap<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, Commit::at(0).write(entry("a", None, "m")));
    let r = ok(
        &s,
        Commit::at(0)
            .floor(50)
            .write(entry("b", Some("a"), "m"))
            .write(set("n", "k", b"v")),
    );
    assert_eq!(r.seqs, vec![50, 51]);
    assert_eq!(r.next_seq, 52);
    assert_eq!(probe_next_seq(&s), 52);
}

/// A floor at or below next seq is already met: no gap, no error.
pub fn seq_floor_below_next_is_already_met<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, Commit::at(0).floor(10).write(set("n", "k", b"v")));
    let r = ok(&s, Commit::at(0).floor(3).write(set("n", "k", b"w")));
    assert_eq!(r.seqs, vec![11]);
    let r = ok(&s, Commit::at(0).floor(12).write(set("n", "k", b"w")));
    assert_eq!(r.seqs, vec![12]);
}

/// Gaps are legal and seq-range scans see the real seqs.
pub fn seq_gaps_are_visible_in_scans<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, Commit::at(0).write(entry("a", None, "m")));
    ok(
        &s,
        Commit::at(0).floor(20).write(entry("b", Some("a"), "m")),
    );
    ok(
        &s,
        Commit::at(0).floor(40).write(entry("c", Some("b"), "m")),
    );
    let seqs: Vec<Seq> = s
        .scan_entries(&EntryScan::all())
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, vec![1, 20, 40]);
    assert_eq!(
        ids(&s.scan_entries(&entry_seq_range(Some(1), Some(39))).unwrap()),
        ["b"]
    );
    assert!(s
        .scan_entries(&entry_seq_range(Some(2), Some(19)))
        .unwrap()
        .is_empty());
}

// --------------------------------------------------------- entries, usage

/// An inserted entry reads back exactly.
pub fn entry_round_trips<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, Commit::at(77).write(entry("root", None, "m")));
    ok(
        &s,
        Commit::at(78).write(Write::InsertEntry {
            id: id("child"),
            parent: Some(id("root")),
            kind: kind("tool"),
            payload: Payload::new(vec![0, 255, 7, 0]).unwrap(),
        }),
    );
    let got = s.get_entries(&[id("child")]).unwrap().remove(0).unwrap();
    assert_eq!(
        got,
        Entry {
            id: id("child"),
            parent: Some(id("root")),
            kind: kind("tool"),
            payload: Payload::new(vec![0, 255, 7, 0]).unwrap(),
            seq: 2,
            ts: 78,
        }
    );
    // An empty payload is legal too.
    ok(
        &s,
        Commit::at(79).write(Write::InsertEntry {
            id: id("empty"),
            parent: None,
            kind: kind("m"),
            payload: Payload::default(),
        }),
    );
    assert!(s.get_entries(&[id("empty")]).unwrap()[0]
        .as_ref()
        .unwrap()
        .payload
        .is_empty());
}

/// `get_entries` answers in request order, `None` for unknown ids,
/// repeated ids repeated.
pub fn get_entries_is_aligned_and_answers_none_for_unknown<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, chained(&["a", "b"]).write(usage("u", 1, 1)));
    let got = s
        .get_entries(&[id("b"), id("zz"), id("a"), id("u"), id("b")])
        .unwrap();
    let names: Vec<Option<&str>> = got
        .iter()
        .map(|e| e.as_ref().map(|e| e.id.as_str()))
        .collect();
    assert_eq!(names, [Some("b"), None, Some("a"), None, Some("b")]);
    assert!(s.get_entries(&[]).unwrap().is_empty());
}

/// Asking for more than `MAX_GET_ENTRIES` ids is a typed bound error.
pub fn get_entries_bound_is_typed<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let many = vec![id("a"); MAX_GET_ENTRIES + 1];
    assert_eq!(
        s.get_entries(&many),
        Err(StorageError::OutOfBounds(BoundError::TooManyIds {
            count: MAX_GET_ENTRIES + 1
        }))
    );
    assert_eq!(
        s.get_entries(&many[..MAX_GET_ENTRIES]).unwrap().len(),
        MAX_GET_ENTRIES
    );
}

/// Every row a commit writes carries the commit's `ts`.
pub fn ts_is_stamped_from_the_commit<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(
        &s,
        Commit::at(1234)
            .write(entry("a", None, "m"))
            .write(usage("u", 1, 1)),
    );
    ok(&s, Commit::at(99).write(entry("b", Some("a"), "m")));
    let e = s.scan_entries(&EntryScan::all()).unwrap();
    assert_eq!((e[0].ts, e[1].ts), (1234, 99));
    assert_eq!(s.scan_usage(&UsageScan::all()).unwrap()[0].ts, 1234);
}

/// A usage row reads back exactly, details included.
pub fn usage_row_round_trips<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let figures = UsageFigures {
        input_tokens: 1000,
        output_tokens: 250,
        cache_read_tokens: 40,
        cache_write_tokens: 8,
        cost_micros: 12_345,
    };
    ok(
        &s,
        Commit::at(5).floor(7).write(Write::InsertUsage {
            id: id("u"),
            figures,
            details: Payload::new(b"{\"model\":\"m\"}".to_vec()).unwrap(),
        }),
    );
    let rows = s.scan_usage(&UsageScan::all()).unwrap();
    assert_eq!(
        rows,
        vec![UsageRow {
            id: id("u"),
            seq: 7,
            ts: 5,
            figures,
            details: Payload::new(b"{\"model\":\"m\"}".to_vec()).unwrap(),
        }]
    );
    assert_eq!(
        s.stats().unwrap(),
        Stats {
            usage_rows: 1,
            totals: figures
        }
    );
}

// ------------------------------------------------------------ parent rules

/// An entry whose parent does not exist is refused.
pub fn parent_must_exist<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let e = refused(&s, Commit::at(0).write(entry("b", Some("a"), "m")));
    assert_eq!(
        e,
        CommitError::ParentMissing {
            id: id("b"),
            parent: id("a")
        }
    );
    assert_eq!(e.reason(), "ParentMissing");
    assert!(dump(&s).entries.is_empty());
}

/// A parent inserted earlier in the same commit counts.
pub fn parent_inserted_earlier_in_the_commit_counts<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, chained(&["a", "b", "c"]));
    assert_eq!(
        ids(&s.scan_branch(&branch_scan(id("c"))).unwrap()),
        ["c", "b", "a"]
    );
}

/// A parent inserted later in the same commit does not count.
pub fn parent_inserted_later_in_the_commit_does_not_count<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let e = refused(
        &s,
        Commit::at(0)
            .write(entry("b", Some("a"), "m"))
            .write(entry("a", None, "m")),
    );
    assert_eq!(
        e,
        CommitError::ParentMissing {
            id: id("b"),
            parent: id("a")
        }
    );
    assert!(dump(&s).entries.is_empty());
}

/// A usage row's id is not an entry, so it is no parent.
pub fn usage_row_is_not_a_parent<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, Commit::at(0).write(usage("u", 1, 1)));
    let e = refused(&s, Commit::at(0).write(entry("b", Some("u"), "m")));
    assert_eq!(
        e,
        CommitError::ParentMissing {
            id: id("b"),
            parent: id("u")
        }
    );
    let e = refused(
        &s,
        Commit::at(0)
            .write(usage("v", 1, 1))
            .write(entry("c", Some("v"), "m")),
    );
    assert_eq!(e.reason(), "ParentMissing");
}

/// A parent failure late in a commit rolls back the earlier writes too.
pub fn failed_parent_applies_nothing<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, Commit::at(0).write(entry("a", None, "m")));
    let before = dump(&s);
    refused(
        &s,
        Commit::at(0)
            .write(entry("b", Some("a"), "m"))
            .write(usage("u", 5, 5))
            .write(set("n", "k", b"v"))
            .write(entry("x", Some("nope"), "m")),
    );
    assert_eq!(dump(&s), before);
}

// ------------------------------------------------------------- duplicates

/// An entry under an existing entry id is corruption.
pub fn duplicate_entry_id_is_corruption<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, Commit::at(0).write(entry("a", None, "m")));
    let e = refused(&s, Commit::at(0).write(entry("a", None, "m")));
    assert_eq!(
        e,
        CommitError::DuplicateId {
            id: id("a"),
            existing: custos_core::storage::RecordKind::Entry
        }
    );
    assert_eq!(e.reason(), "DuplicateId");
}

/// A usage row under an existing usage id is corruption.
pub fn duplicate_usage_id_is_corruption<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, Commit::at(0).write(usage("u", 1, 1)));
    let e = refused(&s, Commit::at(0).write(usage("u", 1, 1)));
    assert_eq!(
        e,
        CommitError::DuplicateId {
            id: id("u"),
            existing: custos_core::storage::RecordKind::Usage
        }
    );
    assert_eq!(s.stats().unwrap().usage_rows, 1);
}

/// Ids are one namespace: a usage row cannot reuse an entry's id.
pub fn entry_id_reused_by_usage_is_corruption<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, Commit::at(0).write(entry("a", None, "m")));
    let e = refused(&s, Commit::at(0).write(usage("a", 1, 1)));
    assert_eq!(
        e,
        CommitError::DuplicateId {
            id: id("a"),
            existing: custos_core::storage::RecordKind::Entry
        }
    );
    assert!(dump(&s).usage.is_empty());
}

/// Ids are one namespace: an entry cannot reuse a usage row's id.
pub fn usage_id_reused_by_entry_is_corruption<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, Commit::at(0).write(usage("u", 1, 1)));
    let e = refused(&s, Commit::at(0).write(entry("u", None, "m")));
    assert_eq!(
        e,
        CommitError::DuplicateId {
            id: id("u"),
            existing: custos_core::storage::RecordKind::Usage
        }
    );
    assert!(dump(&s).entries.is_empty());
}

/// Two records with one id inside a single commit are corruption too.
pub fn duplicate_id_within_one_commit_is_corruption<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let e = refused(
        &s,
        Commit::at(0)
            .write(entry("a", None, "m"))
            .write(entry("a", None, "m")),
    );
    assert_eq!(e.reason(), "DuplicateId");
    let e = refused(
        &s,
        Commit::at(0)
            .write(entry("a", None, "m"))
            .write(usage("a", 1, 1)),
    );
    assert_eq!(e.reason(), "DuplicateId");
    assert_eq!(dump(&s), dump(&factory()));
}

/// A refused duplicate leaves the original record byte-identical.
pub fn duplicate_id_never_updates<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, Commit::at(1).write(entry("a", None, "m")));
    let before = dump(&s);
    refused(
        &s,
        Commit::at(2).write(Write::InsertEntry {
            id: id("a"),
            parent: None,
            kind: kind("other"),
            payload: Payload::new(b"new".to_vec()).unwrap(),
        }),
    );
    assert_eq!(dump(&s), before);
    assert_eq!(
        s.get_entries(&[id("a")]).unwrap()[0]
            .as_ref()
            .unwrap()
            .payload
            .as_bytes(),
        b"payload:a"
    );
}

// --------------------------------------------------------------- registers

/// Setting a register creates it with the seq of the write.
pub fn set_register_creates_with_its_seq<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let r = ok(
        &s,
        Commit::at(0)
            .write(entry("a", None, "m"))
            .write(set("n", "k", b"v1")),
    );
    assert_eq!(
        reg(&s, "n", "k"),
        Some(Register {
            namespace: ns("n"),
            key: key("k"),
            value: Payload::new(b"v1".to_vec()).unwrap(),
            seq: r.seqs[1]
        })
    );
}

/// Setting replaces the value and the seq; no history remains.
pub fn set_register_replaces<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, Commit::at(0).write(set("n", "k", b"v1")));
    let r = ok(&s, Commit::at(0).write(set("n", "k", b"v2")));
    let got = reg(&s, "n", "k").unwrap();
    assert_eq!((got.value.as_bytes(), got.seq), (&b"v2"[..], r.seqs[0]));
    assert_eq!(
        s.list_registers(&ns("n"), &KeyPrefix::all()).unwrap().len(),
        1
    );
}

/// Deleting removes the cell.
pub fn delete_register_removes<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(
        &s,
        Commit::at(0)
            .write(set("n", "k", b"v"))
            .write(set("n", "j", b"w")),
    );
    ok(&s, Commit::at(0).write(del("n", "k")));
    assert_eq!(reg(&s, "n", "k"), None);
    assert!(reg(&s, "n", "j").is_some());
}

/// A deleted cell is gone from listings too, not only from `get_register`:
/// neither the full listing nor a prefix that matches it shows it, and a
/// later set lists it again with the new value and seq.
pub fn list_registers_omits_deleted_cells<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(
        &s,
        Commit::at(0)
            .write(set("n", "a/1", b"1"))
            .write(set("n", "a/2", b"2"))
            .write(set("n", "b", b"3")),
    );
    ok(
        &s,
        Commit::at(0).write(del("n", "a/1")).write(del("n", "b")),
    );
    assert_eq!(list_keys(&s, "n", ""), ["a/2"]);
    assert_eq!(list_keys(&s, "n", "a/"), ["a/2"]);
    assert!(list_keys(&s, "n", "b").is_empty());
    let r = ok(&s, Commit::at(0).write(set("n", "b", b"again")));
    let all = s.list_registers(&ns("n"), &KeyPrefix::all()).unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(
        (all[1].key.as_str(), all[1].value.as_bytes(), all[1].seq),
        ("b", &b"again"[..], r.seqs[0])
    );
}

/// Deleting an absent cell is a no-op that still consumes a seq.
pub fn delete_absent_is_a_noop_that_consumes_a_seq<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, Commit::at(0).write(entry("a", None, "m")));
    let before = dump(&s);
    let r = ok(&s, Commit::at(0).write(del("n", "absent")));
    assert_eq!(r.seqs, vec![2]);
    assert_eq!(r.next_seq, 3);
    assert_eq!(dump(&s), before);
    assert_eq!(probe_next_seq(&s), 3);
}

/// Writes apply in list order: set-then-delete leaves nothing, delete-then-set
/// leaves the set with its (later) seq, and the last of two sets wins.
pub fn writes_apply_in_list_order<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(
        &s,
        Commit::at(0)
            .write(set("n", "a", b"1"))
            .write(del("n", "a")),
    );
    assert_eq!(reg(&s, "n", "a"), None);
    let r = ok(
        &s,
        Commit::at(0)
            .write(del("n", "b"))
            .write(set("n", "b", b"2")),
    );
    assert_eq!(reg(&s, "n", "b").unwrap().seq, r.seqs[1]);
    let r = ok(
        &s,
        Commit::at(0)
            .write(set("n", "c", b"x"))
            .write(set("n", "c", b"y")),
    );
    let c = reg(&s, "n", "c").unwrap();
    assert_eq!((c.value.as_bytes(), c.seq), (&b"y"[..], r.seqs[1]));
}

// --------------------------------------------------------------------- CAS

/// `expected: None` holds while the register is absent.
pub fn cas_absent_holds_on_absent_register<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(
        &s,
        Commit::at(0)
            .expect(ns("n"), key("k"), None)
            .write(set("n", "k", b"v")),
    );
    assert!(reg(&s, "n", "k").is_some());
}

/// `expected: None` is refused once the register exists.
pub fn cas_absent_refused_on_present_register<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let r = ok(&s, Commit::at(0).write(set("n", "k", b"v")));
    let e = refused(
        &s,
        Commit::at(0)
            .expect(ns("n"), key("k"), None)
            .write(set("n", "k", b"w")),
    );
    assert_eq!(
        e,
        CommitError::StaleExpectation {
            namespace: ns("n"),
            key: key("k"),
            expected: None,
            found: Some(r.seqs[0])
        }
    );
    assert_eq!(reg(&s, "n", "k").unwrap().value.as_bytes(), b"v");
}

/// An expectation naming the register's current seq holds.
pub fn cas_matching_seq_applies<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let r1 = ok(&s, Commit::at(0).write(set("n", "k", b"v")));
    let r2 = ok(
        &s,
        Commit::at(0)
            .expect(ns("n"), key("k"), Some(r1.seqs[0]))
            .write(set("n", "k", b"w")),
    );
    let e = refused(
        &s,
        Commit::at(0)
            .expect(ns("n"), key("k"), Some(r1.seqs[0]))
            .write(set("n", "k", b"x")),
    );
    assert_eq!(e.reason(), "StaleExpectation");
    let got = reg(&s, "n", "k").unwrap();
    assert_eq!((got.value.as_bytes(), got.seq), (&b"w"[..], r2.seqs[0]));
}

/// A refused CAS applies nothing at all — entries, usage, registers, stats.
pub fn refused_cas_applies_nothing<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(
        &s,
        Commit::at(0)
            .write(entry("a", None, "m"))
            .write(set("n", "k", b"v"))
            .write(usage("u0", 3, 3)),
    );
    let before = dump(&s);
    let e = refused(
        &s,
        Commit::at(0)
            .expect(ns("n"), key("k"), Some(999))
            .write(entry("b", Some("a"), "m"))
            .write(usage("u1", 50, 50))
            .write(set("n", "k", b"changed"))
            .write(set("o", "new", b"x"))
            .write(del("n", "k")),
    );
    assert_eq!(
        e,
        CommitError::StaleExpectation {
            namespace: ns("n"),
            key: key("k"),
            expected: Some(999),
            found: Some(2)
        }
    );
    assert_eq!(dump(&s), before);
}

/// Expectations see the pre-commit state: a set in the same commit does not
/// satisfy an expectation, and `None` holds even though the commit creates it.
pub fn expectations_are_evaluated_before_writes<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let e = refused(
        &s,
        Commit::at(0)
            .expect(ns("n"), key("k"), Some(1))
            .write(set("n", "k", b"v")),
    );
    assert!(matches!(
        e,
        CommitError::StaleExpectation { found: None, .. }
    ));
    let r = ok(
        &s,
        Commit::at(0)
            .write(set("n", "k", b"v"))
            .expect(ns("n"), key("k"), None),
    );
    assert_eq!(reg(&s, "n", "k").unwrap().seq, r.seqs[0]);
}

/// Every expectation must hold; one stale among several refuses the commit.
pub fn every_expectation_must_hold<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let r = ok(
        &s,
        Commit::at(0)
            .write(set("n", "a", b"1"))
            .write(set("n", "b", b"2")),
    );
    let before = dump(&s);
    let e = refused(
        &s,
        Commit::at(0)
            .expect(ns("n"), key("a"), Some(r.seqs[0]))
            .expect(ns("n"), key("b"), Some(r.seqs[0]))
            .write(set("n", "a", b"x")),
    );
    assert!(matches!(e, CommitError::StaleExpectation { ref key, .. } if key.as_str() == "b"));
    assert_eq!(dump(&s), before);
    ok(
        &s,
        Commit::at(0)
            .expect(ns("n"), key("a"), Some(r.seqs[0]))
            .expect(ns("n"), key("b"), Some(r.seqs[1]))
            .expect(ns("o"), key("c"), None)
            .write(set("n", "a", b"x")),
    );
}

/// A commit with expectations and no writes is legal: it answers, changes
/// nothing and consumes no seq.
pub fn cas_only_commit_is_legal<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let r = ok(&s, Commit::at(0).write(set("n", "k", b"v")));
    let before = dump(&s);
    let c = ok(
        &s,
        Commit::at(0)
            .expect(ns("n"), key("k"), Some(r.seqs[0]))
            .expect(ns("n"), key("z"), None),
    );
    assert!(c.seqs.is_empty());
    assert_eq!(c.next_seq, r.next_seq);
    assert_eq!(dump(&s), before);
    assert_eq!(probe_next_seq(&s), r.next_seq);
}

/// A stale CAS-only commit is refused.
pub fn stale_cas_only_commit_is_refused<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, Commit::at(0).write(set("n", "k", b"v")));
    let e = refused(&s, Commit::at(0).expect(ns("n"), key("k"), None));
    assert_eq!(e.reason(), "StaleExpectation");
}

/// A refused commit, whatever the reason, consumes no seq.
pub fn failed_commit_consumes_no_seq<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(
        &s,
        Commit::at(0)
            .write(entry("a", None, "m"))
            .write(set("n", "k", b"v")),
    );
    refused(
        &s,
        Commit::at(0)
            .expect(ns("n"), key("k"), None)
            .write(entry("b", Some("a"), "m")),
    );
    refused(
        &s,
        Commit::at(0)
            .write(del("n", "k"))
            .write(entry("c", Some("zz"), "m")),
    );
    refused(
        &s,
        Commit::at(0)
            .floor(500)
            .write(set("n", "q", b"1"))
            .write(entry("a", None, "m")),
    );
    assert_eq!(probe_next_seq(&s), 3);
}

/// Stats equal the ledger sum after every commit, accepted or refused
/// (asserted by `commit_checked` at each transaction), and count rows.
pub fn stats_equal_ledger_after_every_commit<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    assert_stats_equal_ledger(&s);
    let mut want = Stats::default();
    for i in 0..20u64 {
        let c = Commit::at(i).write(usage(&format!("u{i}"), i * 7, i * 11));
        let fig = match &c.writes[0] {
            Write::InsertUsage { figures, .. } => *figures,
            _ => unreachable!(),
        };
        ok(&s, c);
        want = want.checked_add(&fig).unwrap();
        // Interleave refusals that carry usage rows.
        let _ = commit_checked(
            &s,
            &Commit::at(i)
                .write(usage(&format!("x{i}"), 100, 100))
                .write(usage(&format!("u{i}"), 1, 1)),
        );
        let _ = commit_checked(
            &s,
            &Commit::at(i)
                .expect(ns("n"), key("k"), Some(1))
                .write(usage(&format!("y{i}"), 1, 1)),
        );
        assert_eq!(s.stats().unwrap(), want);
    }
    assert_eq!(s.stats().unwrap().usage_rows, 20);
}

/// An over-long register value is a typed bound error and applies nothing.
pub fn register_value_bound_is_typed_and_applies_nothing<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let value = Payload::new(vec![1u8; MAX_REGISTER_VALUE_LEN + 1]).unwrap();
    let e = refused(
        &s,
        Commit::at(0)
            .write(entry("a", None, "m"))
            .write(Write::SetRegister {
                namespace: ns("n"),
                key: key("k"),
                value,
            }),
    );
    assert_eq!(
        e,
        CommitError::OutOfBounds(BoundError::RegisterValueTooLarge {
            len: MAX_REGISTER_VALUE_LEN + 1
        })
    );
    assert!(dump(&s).entries.is_empty());
    let value = Payload::new(vec![1u8; MAX_REGISTER_VALUE_LEN]).unwrap();
    ok(
        &s,
        Commit::at(0).write(Write::SetRegister {
            namespace: ns("n"),
            key: key("k"),
            value,
        }),
    );
    assert_eq!(
        reg(&s, "n", "k").unwrap().value.len(),
        MAX_REGISTER_VALUE_LEN
    );
}

/// `list_registers` answers the cells with the prefix, ascending by key.
pub fn list_registers_by_prefix_ascending<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(
        &s,
        Commit::at(0)
            .write(set("n", "b/2", b"3"))
            .write(set("n", "a/2", b"2"))
            .write(set("n", "a/1", b"1"))
            .write(set("n", "a", b"0"))
            .write(set("n", "ab", b"4")),
    );
    let keys = |p: &str| -> Vec<String> {
        s.list_registers(&ns("n"), &KeyPrefix::new(p).unwrap())
            .unwrap()
            .into_iter()
            .map(|r| r.key.as_str().to_owned())
            .collect()
    };
    assert_eq!(keys("a/"), ["a/1", "a/2"]);
    assert_eq!(keys("a"), ["a", "a/1", "a/2", "ab"]);
    assert_eq!(keys(""), ["a", "a/1", "a/2", "ab", "b/2"]);
    assert!(keys("c").is_empty());
    let full = s
        .list_registers(&ns("n"), &KeyPrefix::new("b/").unwrap())
        .unwrap();
    assert_eq!(full[0].value.as_bytes(), b"3");
}

/// A prefix is literal: `_` and `%` in it match only themselves (no
/// pattern matching), and a key that merely sorts after the prefix is not
/// listed.
pub fn list_registers_prefix_is_literal<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(
        &s,
        Commit::at(0)
            .write(set("n", "a_b", b"1"))
            .write(set("n", "axb", b"2"))
            .write(set("n", "a%c", b"3"))
            .write(set("n", "abc", b"4"))
            .write(set("n", "b", b"5")),
    );
    assert_eq!(list_keys(&s, "n", "a_"), ["a_b"]);
    assert_eq!(list_keys(&s, "n", "a%"), ["a%c"]);
    assert!(list_keys(&s, "n", "_").is_empty());
    assert!(list_keys(&s, "n", "%").is_empty());
    assert_eq!(list_keys(&s, "n", "a").len(), 4);
}

/// Namespaces do not see each other's cells.
pub fn list_registers_isolates_namespaces<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(
        &s,
        Commit::at(0)
            .write(set("n", "k", b"1"))
            .write(set("o", "k", b"2")),
    );
    let n = s.list_registers(&ns("n"), &KeyPrefix::all()).unwrap();
    let o = s.list_registers(&ns("o"), &KeyPrefix::all()).unwrap();
    assert_eq!((n.len(), o.len()), (1, 1));
    assert_eq!(
        (n[0].value.as_bytes(), o[0].value.as_bytes()),
        (&b"1"[..], &b"2"[..])
    );
    ok(&s, Commit::at(0).write(del("n", "k")));
    assert!(reg(&s, "o", "k").is_some());
    assert!(s
        .list_registers(&ns("zz"), &KeyPrefix::all())
        .unwrap()
        .is_empty());
}

/// A cell is named by the pair (namespace, key), not by their
/// concatenation: `("n", "x/k")` and `("n/x", "k")` are two cells, each
/// listed under its own namespace only.
pub fn cells_are_keyed_by_the_namespace_key_pair<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(
        &s,
        Commit::at(0)
            .write(set("n", "x/k", b"1"))
            .write(set("n/x", "k", b"2")),
    );
    assert_eq!(reg(&s, "n", "x/k").unwrap().value.as_bytes(), b"1");
    assert_eq!(reg(&s, "n/x", "k").unwrap().value.as_bytes(), b"2");
    let listed = s.list_registers(&ns("n/x"), &KeyPrefix::all()).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].namespace.as_str(), listed[0].key.as_str()),
        ("n/x", "k")
    );
    assert_eq!(list_keys(&s, "n", "x/"), ["x/k"]);
    ok(&s, Commit::at(0).write(del("n/x", "k")));
    assert!(reg(&s, "n", "x/k").is_some());
}

// ----------------------------------------------------------- branch scans

/// A branch scan walks leaf to root by parent links, leaf first.
pub fn branch_scan_walks_leaf_to_root<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    branch_tree(&s);
    let got = s.scan_branch(&branch_scan(id("f"))).unwrap();
    assert_eq!(ids(&got), ["f", "e", "d", "c", "b", "a", "r"]);
    assert!(got
        .windows(2)
        .all(|w| w[0].seq > w[1].seq && w[0].parent.as_ref() == Some(&w[1].id)));
    assert_eq!(ids(&s.scan_branch(&branch_scan(id("r"))).unwrap()), ["r"]);
    // Answers carry payloads.
    assert_eq!(got[0].payload.as_bytes(), b"payload:f");
}

/// A branch scan from an unknown leaf is `UnknownEntry`, also for a usage id.
pub fn branch_scan_unknown_leaf_is_typed<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    branch_tree(&s);
    assert_eq!(
        s.scan_branch(&branch_scan(id("nope"))),
        Err(StorageError::UnknownEntry { id: id("nope") })
    );
    assert_eq!(
        s.scan_branch(&branch_scan(id("nope")).limit(0)),
        Err(StorageError::UnknownEntry { id: id("nope") })
    );
    assert_eq!(
        s.scan_branch(&branch_scan(id("u1"))),
        Err(StorageError::UnknownEntry { id: id("u1") })
    );
}

/// Sibling branches are not on the path.
pub fn branch_scan_excludes_other_branches<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    branch_tree(&s);
    assert_eq!(
        ids(&s.scan_branch(&branch_scan(id("s2"))).unwrap()),
        ["s2", "s1", "a", "r"]
    );
}

/// The walk stops at the first entry of a stop kind and keeps it.
pub fn branch_scan_stop_is_inclusive<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    branch_tree(&s);
    let q = branch_scan(id("f")).stop_at_kind(kind("compaction"));
    assert_eq!(ids(&s.scan_branch(&q).unwrap()), ["f", "e", "d", "c"]);
    // The leaf itself may be the stop.
    let q = branch_scan(id("c")).stop_at_kind(kind("compaction"));
    assert_eq!(ids(&s.scan_branch(&q).unwrap()), ["c"]);
    // Several stop kinds: the first met wins.
    let q = branch_scan(id("f"))
        .stop_at_kind(kind("compaction"))
        .stop_at_kind(kind("tool"));
    assert_eq!(ids(&s.scan_branch(&q).unwrap()), ["f", "e"]);
    // An absent stop kind walks to the root.
    let q = branch_scan(id("s2")).stop_at_kind(kind("nothing"));
    assert_eq!(ids(&s.scan_branch(&q).unwrap()), ["s2", "s1", "a", "r"]);
}

/// Stops are resolved on the unfiltered path: a stop entry the filter drops
/// still ends the walk.
pub fn branch_scan_stop_is_resolved_before_filtering<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    branch_tree(&s);
    let q = branch_scan(id("f"))
        .stop_at_kind(kind("compaction"))
        .kinds([kind("m")]);
    assert_eq!(ids(&s.scan_branch(&q).unwrap()), ["f", "d"]);
    let q = branch_scan(id("f"))
        .stop_at_kind(kind("compaction"))
        .kinds([kind("m"), kind("compaction")]);
    assert_eq!(ids(&s.scan_branch(&q).unwrap()), ["f", "d", "c"]);
    // Stop, then cursor: the cursor does not move the stop.
    let q = branch_scan(id("f"))
        .stop_at_kind(kind("compaction"))
        .cursor(s.get_entries(&[id("d")]).unwrap()[0].as_ref().unwrap().seq);
    assert_eq!(ids(&s.scan_branch(&q).unwrap()), ["c"]);
}

/// The kind filter keeps only the listed kinds, in walk order.
pub fn branch_scan_kind_filter<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    branch_tree(&s);
    assert_eq!(
        ids(&s
            .scan_branch(&branch_scan(id("f")).kinds([kind("tool")]))
            .unwrap()),
        ["e", "b"]
    );
    assert!(s
        .scan_branch(&branch_scan(id("f")).kinds([kind("absent")]))
        .unwrap()
        .is_empty());
    assert!(s
        .scan_branch(&branch_scan(id("f")).kinds([]))
        .unwrap()
        .is_empty());
}

/// Cursor (exclusive, the previous page's last seq) plus limit pages the
/// branch with no overlap and no loss.
pub fn branch_scan_cursor_pages_without_overlap<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    branch_tree(&s);
    for page in 1..=4 {
        let mut q = branch_scan(id("f")).limit(page);
        let mut got = Vec::new();
        for _ in 0..20 {
            let p = s.scan_branch(&q).unwrap();
            assert!(p.len() <= page);
            let Some(last) = p.last() else { break };
            q = q.cursor(last.seq);
            got.extend(p);
        }
        assert_eq!(
            ids(&got),
            ["f", "e", "d", "c", "b", "a", "r"],
            "page size {page}"
        );
    }
    // A filtered, stopped walk pages the same way.
    let q = branch_scan(id("f"))
        .stop_at_kind(kind("compaction"))
        .kinds([kind("m"), kind("tool")])
        .limit(1);
    let p1 = s.scan_branch(&q).unwrap();
    let p2 = s.scan_branch(&q.clone().cursor(p1[0].seq)).unwrap();
    let p3 = s.scan_branch(&q.clone().cursor(p2[0].seq)).unwrap();
    let p4 = s.scan_branch(&q.clone().cursor(p3[0].seq)).unwrap();
    assert_eq!(
        (ids(&p1), ids(&p2), ids(&p3)),
        (vec!["f"], vec!["e"], vec!["d"])
    );
    assert!(p4.is_empty());
}

/// `limit` caps the answer (zero answers nothing); it applies after filtering.
pub fn branch_scan_limit<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    branch_tree(&s);
    assert_eq!(
        ids(&s.scan_branch(&branch_scan(id("f")).limit(3)).unwrap()),
        ["f", "e", "d"]
    );
    assert!(s
        .scan_branch(&branch_scan(id("f")).limit(0))
        .unwrap()
        .is_empty());
    assert_eq!(
        ids(&s
            .scan_branch(&branch_scan(id("f")).kinds([kind("m")]).limit(2))
            .unwrap()),
        ["f", "d"]
    );
    assert_eq!(
        s.scan_branch(&branch_scan(id("f")).limit(100))
            .unwrap()
            .len(),
        7
    );
}

// -------------------------------------------------------- seq-range scans

/// Entry scans answer `after < seq <= through`, ascending.
pub fn scan_entries_seq_range_bounds<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    branch_tree(&s);
    let all = s.scan_entries(&EntryScan::all()).unwrap();
    assert_eq!(all.len(), 9);
    assert!(all.windows(2).all(|w| w[0].seq < w[1].seq));
    let seqs: Vec<Seq> = all.iter().map(|e| e.seq).collect();
    for (i, &lo) in seqs.iter().enumerate() {
        for (j, &hi) in seqs.iter().enumerate() {
            let got = s
                .scan_entries(&entry_seq_range(Some(lo), Some(hi)))
                .unwrap();
            let want: Vec<&Entry> = all[(i + 1).min(all.len())..]
                .iter()
                .take(j.saturating_sub(i))
                .collect();
            assert_eq!(got.iter().collect::<Vec<_>>(), want, "range ({lo}, {hi}]");
        }
    }
    assert!(s
        .scan_entries(&entry_seq_range(Some(Seq::MAX), None))
        .unwrap()
        .is_empty());
    assert_eq!(
        s.scan_entries(&entry_seq_range(None, Some(0))).unwrap(),
        vec![]
    );
    assert_eq!(
        s.scan_entries(&entry_seq_range(Some(0), None)).unwrap(),
        all
    );
}

/// `after` is the cursor and `limit` the page size of an entry scan.
pub fn scan_entries_pages_with_after_and_limit<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    branch_tree(&s);
    let all = s.scan_entries(&EntryScan::all()).unwrap();
    let mut got = Vec::new();
    let mut after = None;
    loop {
        let p = s
            .scan_entries(&entry_seq_range(after, None).limit(2))
            .unwrap();
        assert!(p.len() <= 2);
        let Some(last) = p.last() else { break };
        after = Some(last.seq);
        got.extend(p);
    }
    assert_eq!(got, all);
    assert!(s
        .scan_entries(&EntryScan::all().limit(0))
        .unwrap()
        .is_empty());
}

/// Entry heads are exactly the full scan projected to (id, parent, seq).
pub fn scan_entry_heads_equal_the_full_scan_projected<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    branch_tree(&s);
    for q in [
        EntryScan::all(),
        entry_seq_range(Some(2), Some(100)),
        EntryScan::all().limit(3),
        entry_seq_range(Some(4), None).limit(2),
    ] {
        let full: Vec<EntryHead> = s
            .scan_entries(&q)
            .unwrap()
            .iter()
            .map(Entry::head)
            .collect();
        assert_eq!(s.scan_entry_heads(&q).unwrap(), full, "{q:?}");
    }
    let heads = s.scan_entry_heads(&EntryScan::all()).unwrap();
    assert_eq!(
        heads[0],
        EntryHead {
            id: id("r"),
            parent: None,
            seq: 1
        }
    );
    assert_eq!(
        heads[1],
        EntryHead {
            id: id("a"),
            parent: Some(id("r")),
            seq: 2
        }
    );
}

/// Usage scans answer `after < seq <= through`, ascending, with a limit.
pub fn scan_usage_seq_range<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    branch_tree(&s);
    ok(&s, Commit::at(9).write(usage("u3", 1, 1)));
    let all = s.scan_usage(&UsageScan::all()).unwrap();
    let names: Vec<&str> = all.iter().map(|u| u.id.as_str()).collect();
    assert_eq!(names, ["u1", "u2", "u3"]);
    assert!(all.windows(2).all(|w| w[0].seq < w[1].seq));
    let mid = s
        .scan_usage(&usage_seq_range(Some(all[0].seq), Some(all[1].seq)))
        .unwrap();
    assert_eq!(mid, vec![all[1].clone()]);
    assert_eq!(
        s.scan_usage(&UsageScan::all().limit(1)).unwrap(),
        vec![all[0].clone()]
    );
    assert!(s
        .scan_usage(&usage_seq_range(Some(all[2].seq), None))
        .unwrap()
        .is_empty());
}

// ----------------------------------------------------------------- retries

/// A commit id (panics on an invalid literal: test helper).
#[track_caller]
pub fn commit_id(s: &str) -> CommitId {
    CommitId::new(s).expect("valid commit id literal")
}

/// A lost reply to a commit: the same commit again, under its own
/// [`CommitId`], is answered the first attempt's receipt and applies
/// nothing — an inserted entry is not `DuplicateId`, an unconditional
/// register set does not advance its seq, a compare-and-set is not
/// `StaleExpectation` — while the same id with other content is
/// `CommitIdReused` and applies nothing. Several commits can be in doubt at
/// once (callers sharing a handle): a commit made since under another id,
/// with or without an id, does not make the first one's retry apply again.
pub fn a_retried_commit_gets_its_own_receipt<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let c = Commit::at(5)
        .expect(ns("n"), key("k"), None)
        .write(entry("e1", None, "m"))
        .write(set("n", "k", b"v"))
        .write(set("n", "free", b"w"))
        .write(usage("u1", 3, 4))
        .identified(commit_id("c-1"));
    let first = ok(&s, c.clone());
    let after = dump(&s);
    let retry = commit_checked(&s, &c);
    assert_eq!(
        retry,
        Ok(first.clone()),
        "the retry of an applied commit was not answered its own receipt"
    );
    assert_eq!(dump(&s), after, "a recognised retry applied something");
    // The same id with other content: refused, nothing applied.
    let other = Commit::at(5)
        .write(set("n", "free", b"changed"))
        .identified(commit_id("c-1"));
    assert_eq!(
        refused(&s, other),
        CommitError::CommitIdReused {
            id: commit_id("c-1")
        }
    );
    assert_eq!(dump(&s), after);
    // Commits since, with and without an id, leave the first one kept.
    let plain = ok(&s, Commit::at(6).write(set("o", "x", b"1")));
    let d = Commit::at(7)
        .write(set("n", "free", b"again"))
        .identified(commit_id("c-2"));
    let second = ok(&s, d.clone());
    assert!(second.seqs[0] > plain.seqs[0]);
    let settled = dump(&s);
    assert_eq!(
        commit_checked(&s, &c),
        Ok(first),
        "a retry after another caller's commit was applied again"
    );
    assert_eq!(commit_checked(&s, &d), Ok(second));
    assert_eq!(dump(&s), settled, "a recognised retry applied something");
}

// ------------------------------------------------------------------- close

/// Close is idempotent: a second (and third) close succeeds.
pub fn close_is_idempotent<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    ok(&s, Commit::at(0).write(entry("a", None, "m")));
    assert_eq!(s.close(), Ok(()));
    assert_eq!(s.close(), Ok(()));
    assert_eq!(s.close(), Ok(()));
    assert_eq!(s.stats(), Err(StorageError::HandleClosed));
}

/// After close every read answers `HandleClosed`, never a panic.
pub fn closed_reads_answer_handle_closed<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    branch_tree(&s);
    s.close().unwrap();
    let closed = Err::<(), _>(StorageError::HandleClosed);
    assert_eq!(s.get_entries(&[id("a")]).map(drop), closed);
    assert_eq!(s.get_register(&ns("n"), &key("x")).map(drop), closed);
    assert_eq!(
        s.list_registers(&ns("n"), &KeyPrefix::all()).map(drop),
        closed
    );
    assert_eq!(s.scan_branch(&branch_scan(id("f"))).map(drop), closed);
    assert_eq!(s.scan_entries(&EntryScan::all()).map(drop), closed);
    assert_eq!(s.scan_entry_heads(&EntryScan::all()).map(drop), closed);
    assert_eq!(s.scan_usage(&UsageScan::all()).map(drop), closed);
    assert_eq!(s.stats().map(drop), closed);
    s.close().unwrap();
    assert_eq!(s.stats().map(drop), closed);
}

/// After close a commit answers `Faulted`, never a panic, and never applies.
pub fn closed_commit_answers_faulted<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    s.close().unwrap();
    for c in [
        Commit::at(0).write(entry("a", None, "m")),
        Commit::at(0).expect(ns("n"), key("k"), None),
        Commit::at(0),
    ] {
        let e = s.commit(&c).unwrap_err();
        assert_eq!(e.reason(), "Faulted", "{e}");
    }
    s.close().unwrap();
    assert_eq!(
        s.commit(&Commit::at(0).write(del("n", "k")))
            .unwrap_err()
            .reason(),
        "Faulted"
    );
}

// ------------------------------------------------------------- query plan

/// Checks a branch scan's query plan (one line per plan line) for the
/// branch contract: no sort and no full scan of the entries table.
///
/// - SQLite (`EXPLAIN QUERY PLAN` detail lines): no `USE TEMP B-TREE FOR
///   ORDER BY`, and no `SCAN entries` step (with or without an index;
///   `SEARCH` is fine). Backends must reference the table as `entries`
///   (unaliased) in branch queries so that this check can see it.
/// - PostgreSQL (`EXPLAIN` text lines): no `Sort` or `Incremental Sort`
///   node, and no `Seq Scan` (or `Parallel Seq Scan`) on `entries` or
///   `storage_entries` (schema-qualified or not); index, index-only and
///   bitmap scans are fine.
pub fn check_branch_plan(lines: &[String]) -> Result<(), String> {
    for (line, l) in crate::plan_lines(lines)? {
        if l.contains("USE TEMP B-TREE FOR ORDER BY") {
            return Err(format!("branch scan sorts through a temp b-tree: {line}"));
        }
        let mut words = l.split_whitespace();
        if words.next() == Some("SCAN") && words.next() == Some("entries") {
            return Err(format!("branch scan scans the entries table: {line}"));
        }
        // PostgreSQL: a plan node's line starts with its name.
        let node = l.split("  (").next().unwrap_or(l);
        if node == "Sort" || node == "Incremental Sort" {
            return Err(format!("branch scan sorts: {line}"));
        }
        let scanned = l
            .strip_prefix("Seq Scan on ")
            .or_else(|| l.strip_prefix("Parallel Seq Scan on "))
            .and_then(|rest| rest.split_whitespace().next())
            .map(|table| table.rsplit('.').next().unwrap_or(table));
        if matches!(scanned, Some("entries" | "storage_entries")) {
            return Err(format!("branch scan scans the entries table: {line}"));
        }
    }
    Ok(())
}

/// For backends that expose query plans: the branch scan, with and without a
/// kind filter, a stop, a cursor and a limit, never sorts through a temp
/// b-tree nor scans `entries`. Every backend also answers the scans right.
pub fn branch_scan_query_plan_uses_no_table_scan<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    branch_tree(&s);
    let f = s.get_entries(&[id("f")]).unwrap()[0].as_ref().unwrap().seq;
    let queries: Vec<BranchScan> = vec![
        branch_scan(id("f")),
        branch_scan(id("f")).kinds([kind("m")]),
        branch_scan(id("f")).stop_at_kind(kind("compaction")),
        branch_scan(id("f"))
            .stop_at_kind(kind("compaction"))
            .kinds([kind("tool")])
            .cursor(f)
            .limit(2),
    ];
    let want: [&[&str]; 4] = [
        &["f", "e", "d", "c", "b", "a", "r"],
        &["f", "d", "a"],
        &["f", "e", "d", "c"],
        &["e"],
    ];
    for (q, want) in queries.iter().zip(want) {
        assert_eq!(ids(&s.scan_branch(q).unwrap()), want, "{q:?}");
        if let Some(plan) = s.explain_branch_scan(q).unwrap() {
            if let Err(why) = check_branch_plan(&plan) {
                panic!("{why}\nquery: {q:?}\nplan:\n{}", plan.join("\n"));
            }
        }
    }
}

// ------------------------------------------------------------- the table

/// Register listings are in byte order of the key: not insertion order,
/// not its reverse, not a case-insensitive or locale collation, not a
/// numeric-aware order ([`crate::ORDER_PROBE`]), for a full listing and for
/// a prefix.
pub fn listed_registers_are_in_byte_order_not_collation_or_insertion<S: Storage, F: Fn() -> S>(
    factory: F,
) {
    let s = factory();
    for k in crate::ORDER_PROBE {
        ok(&s, Commit::at(0).write(set("n", k, k.as_bytes())));
    }
    assert_eq!(list_keys(&s, "n", ""), crate::ORDER_PROBE_BYTES);
    assert_eq!(list_keys(&s, "n", "a"), ["a-2", "a10", "a2"]);
}

/// Entry and usage scans are in seq order: entries inserted with ids that
/// sort the other way, more than nine of them (so seq 10 sorts before seq
/// 2 as text), come back by seq, in full scans and in pages.
pub fn scans_are_in_seq_order_not_id_or_text_order<S: Storage, F: Fn() -> S>(factory: F) {
    let s = factory();
    let names: Vec<String> = (0..12).map(|i| format!("z{:02}", 12 - i)).collect();
    let mut c = Commit::at(0);
    let mut parent: Option<&str> = None;
    for n in &names {
        c = c.write(entry(n, parent, "m"));
        parent = Some(n);
    }
    ok(&s, c);
    let mut c = Commit::at(0);
    for n in &names {
        c = c.write(usage(&format!("u{n}"), 1, 1));
    }
    ok(&s, c);
    let got = s.scan_entries(&EntryScan::all()).unwrap();
    assert_eq!(
        ids(&got),
        names.iter().map(String::as_str).collect::<Vec<_>>()
    );
    let seqs: Vec<Seq> = got.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=12).collect::<Vec<Seq>>());
    let usage_ids: Vec<String> = s
        .scan_usage(&UsageScan::all())
        .unwrap()
        .into_iter()
        .map(|u| u.id.as_str().to_owned())
        .collect();
    let want: Vec<String> = names.iter().map(|n| format!("u{n}")).collect();
    assert_eq!(usage_ids, want);
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = s
            .scan_entries(&EntryScan {
                after,
                through: None,
                limit: Some(5),
            })
            .unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.seq);
        paged.extend(page.iter().map(|e| e.seq));
    }
    assert_eq!(paged, (1..=12).collect::<Vec<Seq>>());
}

// ------------------------------------------------------------ reopen cases

/// A history of acknowledged commits over every kind of write: the branch
/// tree, usage rows, registers set, replaced and deleted in two namespaces,
/// a seq floor, and last of all one more register (the write a store that
/// loses its tail would lose). Returns the last commit's receipt.
fn acknowledged_history<S: Storage>(s: &S) -> CommitReceipt {
    branch_tree(s);
    ok(
        s,
        Commit::at(0)
            .write(usage("use-1", 10, 5))
            .write(usage("use-2", 3, 1)),
    );
    ok(
        s,
        Commit::at(0)
            .write(set("n", "k", b"one"))
            .write(set("o", "k", b"other")),
    );
    ok(
        s,
        Commit::at(0)
            .write(set("n", "k", b"two"))
            .write(set("n", "gone", b"x")),
    );
    ok(s, Commit::at(0).write(del("n", "gone")));
    ok(
        s,
        Commit::at(40).write(entry("after-floor", Some("f"), "m")),
    );
    ok(s, Commit::at(0).write(set("n", "last", b"the last write")))
}

/// Everything acknowledged survives a drop and a reopen: every entry,
/// usage row, register and the stats read back the same, the last commit
/// included, and the next commit's seq is above every seq handed out.
pub fn acknowledged_commits_survive_a_reopen<P: Place>(f: impl Fn() -> P)
where
    P::Store: Storage,
{
    let place = f();
    let (s, last, before) = crate::open_with_history(&place, acknowledged_history, dump);
    assert!(reg(&s, "n", "last").is_some());
    drop(s);
    let s = place.open();
    assert_eq!(dump(&s), before, "the reopened store differs");
    let next = probe_next_seq(&s);
    assert!(
        last.seqs.iter().all(|&q| q < next),
        "a reopened store handed out seq {next} again (last commit: {:?})",
        last.seqs
    );
    drop(s);
    let s = place.open();
    // The probe deleted an absent register: it moved the seq and nothing
    // a reader sees.
    assert_eq!(dump(&s), before, "a second reopen differs");
}

/// A refused commit leaves the stored state unchanged across a reopen: a
/// missing parent and a stale expectation write nothing a later handle
/// sees, and consume no seq.
pub fn a_refusal_leaves_the_store_unchanged_across_a_reopen<P: Place>(f: impl Fn() -> P)
where
    P::Store: Storage,
{
    let place = f();
    let (s, last, before) = crate::open_with_history(&place, acknowledged_history, dump);
    refused(
        &s,
        Commit::at(0)
            .write(set("n", "x", b"v"))
            .write(entry("orphan", Some("nobody"), "m")),
    );
    refused(
        &s,
        Commit::at(0)
            .expect(ns("n"), key("k"), None)
            .write(set("n", "k", b"overwritten")),
    );
    drop(s);
    let s = place.open();
    assert_eq!(dump(&s), before, "a refusal changed the stored state");
    let next = probe_next_seq(&s);
    let top = last.seqs.iter().copied().max().unwrap_or(0);
    assert_eq!(next, top + 1, "the refused commits consumed seqs");
}

/// The kept last identified commit is stored, not held by the handle: a
/// commit whose reply was lost, retried on a handle opened after a drop, is
/// answered its own receipt and applies nothing.
pub fn a_retried_commit_is_recognised_across_a_reopen<P: Place>(f: impl Fn() -> P)
where
    P::Store: Storage,
{
    let place = f();
    let s = place.open();
    acknowledged_history(&s);
    let c = Commit::at(9)
        .write(entry("late", None, "m"))
        .write(set("n", "late", b"v"))
        .identified(commit_id("reopened"));
    let first = ok(&s, c.clone());
    let before = dump(&s);
    drop(s);
    let s = place.open();
    assert_eq!(
        commit_checked(&s, &c),
        Ok(first),
        "a reopened store did not recognise the retry"
    );
    assert_eq!(dump(&s), before, "the retry applied something");
}

/// A closed handle refuses every read and commit; a handle opened after it
/// works and sees what the closed one committed.
pub fn a_closed_handle_refuses_and_a_reopened_one_works<P: Place>(f: impl Fn() -> P)
where
    P::Store: Storage,
{
    let place = f();
    let (s, _, before) = crate::open_with_history(&place, acknowledged_history, dump);
    s.close().unwrap();
    assert_eq!(s.stats(), Err(StorageError::HandleClosed));
    assert!(s
        .commit(&Commit::at(0).write(set("n", "after", b"v")))
        .is_err());
    drop(s);
    let s = place.open();
    assert_eq!(dump(&s), before);
    ok(&s, Commit::at(0).write(set("n", "after", b"v")));
    drop(s);
    assert!(reg(&place.open(), "n", "after").is_some());
}

/// Every storage case, by name, in suite order.
pub const STORAGE_CASES: &[&str] = &crate::__with_storage_cases!(__emit_names!());

/// A storage case runnable at run time, for a backend type `S`.
pub type StorageCase<S> = (&'static str, fn(&dyn Fn() -> S));

/// Every case as `(name, function)`, for runners that print pass/fail per
/// case (run each under `std::panic::catch_unwind`).
pub fn storage_cases<S: Storage>() -> Vec<StorageCase<S>> {
    crate::__with_storage_cases!(__emit_table!(storage, S))
}

/// Every reopen case, by name, in suite order.
pub const STORAGE_REOPEN_CASES: &[&str] = &crate::__with_storage_reopen_cases!(__emit_names!());

/// Every reopen case as `(name, function)`; each takes a factory of places.
pub fn storage_reopen_cases<P: Place>() -> Vec<StorageCase<P>>
where
    P::Store: Storage,
{
    crate::__with_storage_reopen_cases!(__emit_table!(storage, P))
}

/// Invokes `$crate::$callback! { ($args) case, … }` with every storage
/// reopen case.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_storage_reopen_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            acknowledged_commits_survive_a_reopen,
            a_refusal_leaves_the_store_unchanged_across_a_reopen,
            a_closed_handle_refuses_and_a_reopened_one_works,
            a_retried_commit_is_recognised_across_a_reopen,
        }
    };
}
