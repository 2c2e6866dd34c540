//! The snapshot conformance suite: one public generic function per
//! behaviour of the snapshot reader over a backend's [`SnapshotSource`]
//! (each case also commits through the backend's [`Storage`]).
//!
//! Two wrappers make the "before" and "never" rules observable on any
//! backend: [`Probe`] records every port call, so a case can assert that a
//! refusal came before any value or payload was fetched, or that an exact
//! selection never asked for a key window; [`Rewire`] answers chosen parent
//! links differently, standing in for a corrupt store (a commit can never
//! write a parent link that loops or dangles) so that the walk's
//! termination is tested over the backend's own probes.
//!
//! Cases panic (via `assert!`) on a violation: they are test bodies.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::cell::RefCell;
use std::collections::BTreeMap;

use custos_core::snapshot::{
    Budget, CellHeader, CutView, Descriptor, Head, KeyRange, Limits, Plan, Reader, SnapshotError,
    SnapshotSource, SnapshotStep, LINEAGE_BYTES_LIMIT, MAX_CAPTURE_BYTES, MAX_CAPTURE_CELLS,
    MAX_FRAGMENT_BYTES, MAX_SELECTIONS, PAGE_LIMIT,
};
use custos_core::storage::{
    Commit, KeyPrefix, Namespace, Payload, RecordId, Register, RegisterKey, Seq, Storage,
    StorageError, Write,
};

use crate::storage::{entry, id, key, ns, ok, set, usage};

// ------------------------------------------------------------ wrappers

/// One port call, as [`Probe`] records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// A cut began.
    Cut,
    /// [`CutView::head`].
    Head,
    /// [`CutView::header`] of a key.
    Header(String),
    /// [`CutView::headers`] with its limit.
    Headers(KeyRange, usize),
    /// [`CutView::cells`] of keys.
    Cells(Vec<String>),
    /// [`SnapshotSource::descriptors`].
    Descriptors,
    /// [`SnapshotSource::entry_head`] of an id below a seq.
    EntryHead(String, Seq),
    /// [`SnapshotSource::fragment_bytes`].
    Fragment,
}

/// A [`SnapshotSource`] that forwards to `inner` and records every call.
#[derive(Debug)]
pub struct Probe<'a, S> {
    inner: &'a S,
    log: RefCell<Vec<Call>>,
}

impl<'a, S: SnapshotSource> Probe<'a, S> {
    /// Wraps a backend.
    pub fn new(inner: &'a S) -> Self {
        Probe {
            inner,
            log: RefCell::new(Vec::new()),
        }
    }

    /// The calls so far (and forgets them).
    pub fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.log.borrow_mut())
    }

    fn note(&self, c: Call) {
        self.log.borrow_mut().push(c);
    }
}

struct ProbeView<'v> {
    view: &'v dyn CutView,
    log: &'v RefCell<Vec<Call>>,
}

impl CutView for ProbeView<'_> {
    fn head(&self) -> Result<Head, StorageError> {
        self.log.borrow_mut().push(Call::Head);
        self.view.head()
    }

    fn header(
        &self,
        namespace: &Namespace,
        key: &RegisterKey,
    ) -> Result<Option<CellHeader>, StorageError> {
        self.log
            .borrow_mut()
            .push(Call::Header(key.as_str().to_owned()));
        self.view.header(namespace, key)
    }

    fn headers(
        &self,
        namespace: &Namespace,
        range: &KeyRange,
        limit: usize,
    ) -> Result<Vec<CellHeader>, StorageError> {
        self.log
            .borrow_mut()
            .push(Call::Headers(range.clone(), limit));
        self.view.headers(namespace, range, limit)
    }

    fn cells(
        &self,
        namespace: &Namespace,
        keys: &[RegisterKey],
    ) -> Result<Vec<Option<Register>>, StorageError> {
        self.log.borrow_mut().push(Call::Cells(
            keys.iter().map(|k| k.as_str().to_owned()).collect(),
        ));
        self.view.cells(namespace, keys)
    }
}

impl<S: SnapshotSource> SnapshotSource for Probe<'_, S> {
    fn with_cut<T>(
        &self,
        body: impl FnOnce(&dyn CutView) -> Result<T, SnapshotError>,
    ) -> Result<T, SnapshotError> {
        self.note(Call::Cut);
        self.inner.with_cut(|view| {
            body(&ProbeView {
                view,
                log: &self.log,
            })
        })
    }

    fn descriptors(
        &self,
        after: Option<Seq>,
        below: Seq,
        limit: usize,
    ) -> Result<Vec<Descriptor>, StorageError> {
        self.note(Call::Descriptors);
        self.inner.descriptors(after, below, limit)
    }

    fn entry_head(&self, id: &RecordId, below: Seq) -> Result<Option<Descriptor>, StorageError> {
        self.note(Call::EntryHead(id.as_str().to_owned(), below));
        self.inner.entry_head(id, below)
    }

    fn fragment_bytes(
        &self,
        head: &Descriptor,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, StorageError> {
        self.note(Call::Fragment);
        self.inner.fragment_bytes(head, offset, len)
    }
}

/// A [`SnapshotSource`] that forwards to `inner` but answers the parent
/// links named in `parents` instead of the stored ones: a stand-in for a
/// corrupt store (a loop, a dangling parent).
#[derive(Debug)]
pub struct Rewire<'a, S> {
    inner: &'a S,
    parents: BTreeMap<RecordId, Option<RecordId>>,
}

impl<'a, S: SnapshotSource> Rewire<'a, S> {
    /// Wraps a backend with rewired parent links.
    pub fn new(inner: &'a S, links: &[(&str, Option<&str>)]) -> Self {
        Rewire {
            inner,
            parents: links.iter().map(|(c, p)| (id(c), p.map(id))).collect(),
        }
    }

    fn fix(&self, mut d: Descriptor) -> Descriptor {
        if let Some(p) = self.parents.get(&d.id) {
            d.parent = p.clone();
        }
        d
    }
}

impl<S: SnapshotSource> SnapshotSource for Rewire<'_, S> {
    fn with_cut<T>(
        &self,
        body: impl FnOnce(&dyn CutView) -> Result<T, SnapshotError>,
    ) -> Result<T, SnapshotError> {
        self.inner.with_cut(body)
    }

    fn descriptors(
        &self,
        after: Option<Seq>,
        below: Seq,
        limit: usize,
    ) -> Result<Vec<Descriptor>, StorageError> {
        Ok(self
            .inner
            .descriptors(after, below, limit)?
            .into_iter()
            .map(|d| self.fix(d))
            .collect())
    }

    fn entry_head(&self, id: &RecordId, below: Seq) -> Result<Option<Descriptor>, StorageError> {
        Ok(self.inner.entry_head(id, below)?.map(|d| self.fix(d)))
    }

    fn fragment_bytes(
        &self,
        head: &Descriptor,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, StorageError> {
        self.inner.fragment_bytes(head, offset, len)
    }
}

// ------------------------------------------------------------- helpers

/// A key prefix literal.
#[track_caller]
pub fn prefix(s: &str) -> KeyPrefix {
    KeyPrefix::new(s).expect("valid prefix literal")
}

/// One commit of every write in `writes`.
#[track_caller]
pub fn commit_all<S: Storage>(s: &S, ts: u64, writes: impl IntoIterator<Item = Write>) -> Seq {
    let c = writes.into_iter().fold(Commit::at(ts), Commit::write);
    ok(s, c).next_seq
}

/// A new store from `factory` holding `writes`, one commit at ts 1.
#[track_caller]
fn fresh_with<S: Storage>(factory: impl Fn() -> S, writes: impl IntoIterator<Item = Write>) -> S {
    let s = factory();
    commit_all(&s, 1, writes);
    s
}

/// A `SetRegister` of `len` bytes.
#[track_caller]
pub fn set_len(n: &str, k: &str, len: usize) -> Write {
    Write::SetRegister {
        namespace: ns(n),
        key: key(k),
        value: Payload::new(vec![b'v'; len]).expect("register-sized"),
    }
}

/// An `InsertEntry` with a payload of `len` bytes (byte `i` is `i % 251`).
#[track_caller]
pub fn entry_len(i: &str, parent: Option<&str>, len: usize) -> Write {
    Write::InsertEntry {
        id: id(i),
        parent: parent.map(id),
        kind: crate::storage::kind("m"),
        payload: Payload::new(pattern(len)).expect("payload-sized"),
    }
}

/// The payload [`entry_len`] writes.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

fn keys(cells: &[Register]) -> Vec<String> {
    cells
        .iter()
        .map(|r| format!("{}/{}", r.namespace, r.key))
        .collect()
}

fn page_keys(cells: &[Register]) -> Vec<&str> {
    cells.iter().map(|r| r.key.as_str()).collect()
}

fn desc_ids(d: &[Descriptor]) -> Vec<&str> {
    d.iter().map(|e| e.id.as_str()).collect()
}

fn no_value_fetched(calls: &[Call]) -> bool {
    !calls.iter().any(|c| matches!(c, Call::Cells(_)))
}

#[track_caller]
fn register<S: Storage>(s: &S, n: &str, k: &str) -> Register {
    s.get_register(&ns(n), &key(k))
        .expect("get_register")
        .expect("present")
}

/// Builds a chain `r ← a ← b ← c ← d` with a side branch `a ← x` and other
/// commits between, answering the high-water after it.
#[track_caller]
pub fn chain<S: Storage>(s: &S) -> Seq {
    commit_all(s, 1, [entry("r", None, "m"), entry("a", Some("r"), "m")]);
    commit_all(s, 2, [entry("x", Some("a"), "m"), set("n", "k", b"1")]);
    commit_all(s, 3, [entry("b", Some("a"), "m"), usage("u", 1, 1)]);
    commit_all(
        s,
        4,
        [entry("c", Some("b"), "m"), entry("y", Some("x"), "m")],
    );
    commit_all(s, 5, [entry("d", Some("c"), "m")])
}

#[track_caller]
fn seq_of<S: Storage>(s: &S, i: &str) -> Seq {
    s.get_entries(&[id(i)]).unwrap()[0].as_ref().unwrap().seq
}

// --------------------------------------------------------------- capture

/// A capture copies the high-water, the stats and exactly the selected
/// cells; every header is read before any value, and reading writes
/// nothing (a second capture sees the same high-water).
pub fn capture_copies_high_water_stats_and_selected_cells<
    S: Storage + SnapshotSource,
    F: Fn() -> S,
>(
    factory: F,
) {
    let s = fresh_with(&factory, [entry("e1", None, "m"), usage("u1", 10, 5)]);
    let next = commit_all(
        &s,
        2,
        [
            set("n", "a1", b"x"),
            set("n", "a2", b"yy"),
            set("n", "b1", b"z"),
            set("o", "x", b"ooo"),
        ],
    );
    let probe = Probe::new(&s);
    let plan = Plan::new()
        .prefix(ns("n"), prefix("a"))
        .exact(ns("o"), key("x"));
    let cut = Reader::new(&probe).capture(&plan).unwrap();
    assert_eq!(cut.high_water, next);
    assert_eq!(cut.stats, s.stats().unwrap());
    assert_eq!(keys(&cut.cells), ["n/a1", "n/a2", "o/x"]);
    for r in &cut.cells {
        assert_eq!(r, &register(&s, r.namespace.as_str(), r.key.as_str()));
    }
    assert_eq!(
        cut.cost,
        Budget {
            cells: 3,
            bytes: (1 + 2 + 1) + (1 + 2 + 2) + (1 + 1 + 3)
        }
    );
    let calls = probe.take();
    let first_value = calls.iter().position(|c| matches!(c, Call::Cells(_)));
    let last_header = calls
        .iter()
        .rposition(|c| matches!(c, Call::Header(_) | Call::Headers(..)));
    assert!(
        first_value > last_header,
        "a value was fetched before every header was accounted: {calls:?}"
    );
    assert_eq!(calls.iter().filter(|c| **c == Call::Cut).count(), 1);
    let again = Reader::new(&s).capture(&plan).unwrap();
    assert_eq!(again, cut, "a capture changed the store");
    let empty = Reader::new(&s).capture(&Plan::new()).unwrap();
    assert_eq!((empty.high_water, empty.cells.len()), (next, 0));
}

/// A namespace selection holds that namespace's cells only; overlapping
/// selections hold (and count) each cell once.
pub fn capture_namespace_selection_isolates_namespaces_and_dedups<
    S: Storage + SnapshotSource,
    F: Fn() -> S,
>(
    factory: F,
) {
    let s = fresh_with(
        &factory,
        [
            set("n", "a", b"1"),
            set("n", "b", b"2"),
            set("o", "a", b"3"),
            set("nn", "a", b"4"),
        ],
    );
    let plan = Plan::new()
        .namespace(ns("n"))
        .prefix(ns("n"), prefix("a"))
        .exact(ns("n"), key("b"));
    let cut = Reader::new(&s).capture(&plan).unwrap();
    assert_eq!(keys(&cut.cells), ["n/a", "n/b"]);
    assert_eq!(cut.cost.cells, 2);
}

/// A prefix is literal (`%`, `_` and `*` match only themselves) and
/// bounded by its successor; a prefix without successor is open above;
/// the empty prefix selects the namespace.
pub fn capture_prefix_is_a_literal_index_range<S: Storage + SnapshotSource, F: Fn() -> S>(
    factory: F,
) {
    let s = factory();
    let all = [
        "a",
        "a%",
        "a%b",
        "a&",
        "a_",
        "a_b",
        "ab",
        "a*",
        "b",
        "\u{10FFFF}",
        "\u{10FFFF}z",
        "\u{10FFFF}\u{10FFFF}",
    ];
    commit_all(&s, 1, all.iter().map(|k| set("n", k, b"v")));
    let sel = |p: &str| {
        let cut = Reader::new(&s)
            .capture(&Plan::new().prefix(ns("n"), prefix(p)))
            .unwrap();
        page_keys(&cut.cells)
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(sel("a%"), ["a%", "a%b"]);
    assert_eq!(sel("a_"), ["a_", "a_b"]);
    assert_eq!(sel("a*"), ["a*"]);
    assert_eq!(sel("a"), ["a", "a%", "a%b", "a&", "a*", "a_", "a_b", "ab"]);
    assert_eq!(
        sel("\u{10FFFF}"),
        ["\u{10FFFF}", "\u{10FFFF}z", "\u{10FFFF}\u{10FFFF}"]
    );
    assert_eq!(sel("").len(), all.len());
    assert!(sel("c").is_empty());
}

/// An exact key is one indexed header lookup — no key window is asked
/// for — and a missing exact key is omitted; the port's `cells` of present
/// and absent keys stays aligned with the keys.
pub fn capture_exact_keys_probe_the_index_and_omit_missing<
    S: Storage + SnapshotSource,
    F: Fn() -> S,
>(
    factory: F,
) {
    let s = fresh_with(
        &factory,
        [
            set("n", "ab", b"2"),
            set("n", "b", b"3"),
            set("n", "ba", b"4"),
        ],
    );
    let probe = Probe::new(&s);
    // `a` is missing but its prefix neighbour `ab` exists; `b` exists and
    // so does its neighbour `ba`: neither neighbour may show.
    let plan = Plan::new()
        .exact(ns("n"), key("a"))
        .exact(ns("n"), key("b"))
        .exact(ns("o"), key("b"));
    let cut = Reader::new(&probe).capture(&plan).unwrap();
    assert_eq!(keys(&cut.cells), ["n/b"]);
    let calls = probe.take();
    assert!(
        !calls.iter().any(|c| matches!(c, Call::Headers(..))),
        "an exact selection asked for a key window: {calls:?}"
    );
    assert_eq!(
        calls
            .iter()
            .filter(|c| matches!(c, Call::Header(_)))
            .count(),
        3
    );
    assert_cells_align_with_keys(&factory());
}

/// `OptionalPrefixedField` follows a selected cell's string field into
/// the exact key `prefix + value`.
pub fn capture_follows_optional_prefixed_field<S: Storage + SnapshotSource, F: Fn() -> S>(
    factory: F,
) {
    let s = fresh_with(
        &factory,
        [
            set("strand", "s1", br#"{"latest":"op-7","other":1}"#),
            set("op", "life/op-7", b"running"),
            set("op", "life/op-6", b"done"),
        ],
    );
    let plan = Plan::new()
        .exact(ns("strand"), key("s1"))
        .optional_prefixed_field(0, "latest", ns("op"), prefix("life/"));
    let cut = Reader::new(&s).capture(&plan).unwrap();
    assert_eq!(keys(&cut.cells), ["op/life/op-7", "strand/s1"]);
    assert_eq!(
        cut.cell(&ns("op"), &key("life/op-7"))
            .unwrap()
            .value
            .as_bytes(),
        b"running"
    );
}

/// Missing optional metadata is omitted: a missing source, a missing or
/// `null` field, a target that does not exist.
pub fn capture_omits_missing_optional_metadata<S: Storage + SnapshotSource, F: Fn() -> S>(
    factory: F,
) {
    let s = fresh_with(
        &factory,
        [
            set("strand", "null", br#"{"latest":null}"#),
            set("strand", "absent", br#"{"x":"1"}"#),
            set("strand", "dangling", br#"{"latest":"gone"}"#),
        ],
    );
    let mut plan = Plan::new();
    for (i, k) in ["null", "absent", "dangling", "no-source"]
        .iter()
        .enumerate()
    {
        plan = plan.exact(ns("strand"), key(k)).optional_prefixed_field(
            i,
            "latest",
            ns("op"),
            prefix("life/"),
        );
    }
    let cut = Reader::new(&s).capture(&plan).unwrap();
    assert_eq!(
        keys(&cut.cells),
        ["strand/absent", "strand/dangling", "strand/null"]
    );
}

/// A source whose field is present but not a string (or not JSON) is a
/// typed refusal, not an omission; so is a plan outside its bounds.
pub fn capture_refuses_malformed_references_and_invalid_plans<
    S: Storage + SnapshotSource,
    F: Fn() -> S,
>(
    factory: F,
) {
    let s = fresh_with(
        &factory,
        [
            set("strand", "num", br#"{"latest":7}"#),
            set("strand", "raw", b"not json"),
        ],
    );
    for k in ["num", "raw"] {
        let plan = Plan::new()
            .exact(ns("strand"), key(k))
            .optional_prefixed_field(0, "latest", ns("op"), prefix(""));
        let e = Reader::new(&s).capture(&plan).map(|_| ()).unwrap_err();
        assert_eq!(e.reason(), "MalformedReference", "{k}: {e}");
    }
    let from_window = Plan::new().namespace(ns("strand")).optional_prefixed_field(
        0,
        "latest",
        ns("op"),
        prefix(""),
    );
    let e = Reader::new(&s)
        .capture(&from_window)
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.reason(), "InvalidPlan");
    let mut many = Plan::new();
    for _ in 0..=MAX_SELECTIONS {
        many = many.namespace(ns("n"));
    }
    assert_eq!(
        Reader::new(&s)
            .capture(&many)
            .map(|_| ())
            .unwrap_err()
            .reason(),
        "InvalidPlan"
    );
}

/// 1,024 cells are admitted; 1,025 are refused — not truncated — from
/// their headers, before any value is fetched, and the window asked for
/// is bounded by the budget.
pub fn capture_over_cell_budget_is_refused_before_values<
    S: Storage + SnapshotSource,
    F: Fn() -> S,
>(
    factory: F,
) {
    let s = factory();
    let n = MAX_CAPTURE_CELLS;
    commit_all(&s, 1, (0..n).map(|i| set("n", &format!("k{i:05}"), b"v")));
    let cut = Reader::new(&s)
        .capture(&Plan::new().namespace(ns("n")).prefix(ns("n"), prefix("k")))
        .unwrap();
    assert_eq!(cut.cells.len(), n);
    commit_all(&s, 2, [set("n", "k99999", b"v")]);
    let probe = Probe::new(&s);
    let e = Reader::new(&probe).capture(&Plan::new().namespace(ns("n")));
    match e {
        Ok(cut) => panic!("a capture over budget answered {} cells", cut.cells.len()),
        Err(SnapshotError::OverBudget { cells, limit, .. }) => {
            assert_eq!(cells, n + 1);
            assert_eq!(limit.cells, n);
        }
        Err(other) => panic!("expected OverBudget, got {other}"),
    }
    let calls = probe.take();
    assert!(no_value_fetched(&calls), "a value was fetched");
    for c in &calls {
        if let Call::Headers(_, limit) = c {
            assert!(*limit <= n + 1, "an unbounded window: {c:?}");
        }
    }
}

/// Cells whose bytes pass 1 MiB are refused before any value is fetched.
pub fn capture_over_byte_budget_is_refused_before_values<
    S: Storage + SnapshotSource,
    F: Fn() -> S,
>(
    factory: F,
) {
    let s = fresh_with(
        &factory,
        [set_len("n", "a", 600 * 1024), set_len("n", "b", 600 * 1024)],
    );
    let probe = Probe::new(&s);
    let e = Reader::new(&probe)
        .capture(&Plan::new().namespace(ns("n")))
        .map(|_| ())
        .unwrap_err();
    match e {
        SnapshotError::OverBudget {
            cells,
            bytes,
            limit,
        } => {
            assert_eq!(cells, 2);
            assert!(bytes > MAX_CAPTURE_BYTES);
            assert_eq!(limit.bytes, MAX_CAPTURE_BYTES);
        }
        other => panic!("expected OverBudget, got {other}"),
    }
    assert!(no_value_fetched(&probe.take()));
    let one = Reader::new(&s)
        .capture(&Plan::new().exact(ns("n"), key("a")))
        .unwrap();
    assert_eq!(one.cells[0].value.len(), 600 * 1024);
}

/// Referenced cells count against the budget: a source and its target
/// that fit alone but not together are refused.
pub fn capture_counts_referenced_cells<S: Storage + SnapshotSource, F: Fn() -> S>(factory: F) {
    let s = factory();
    let source = br#"{"t":"k"}"#;
    let source_cost = "strand".len() + "s".len() + source.len();
    let target_len = MAX_CAPTURE_BYTES as usize - "op".len() - "k".len() - source_cost + 1;
    commit_all(
        &s,
        1,
        [set("strand", "s", source), set_len("op", "k", target_len)],
    );
    let alone = Reader::new(&s)
        .capture(&Plan::new().exact(ns("op"), key("k")))
        .unwrap();
    assert_eq!(alone.cells.len(), 1);
    let plan = Plan::new()
        .exact(ns("strand"), key("s"))
        .optional_prefixed_field(0, "t", ns("op"), prefix(""));
    match Reader::new(&s).capture(&plan).map(|_| ()).unwrap_err() {
        SnapshotError::OverBudget { cells, bytes, .. } => {
            assert_eq!((cells, bytes), (2, MAX_CAPTURE_BYTES + 1));
        }
        other => panic!("expected OverBudget, got {other}"),
    }
}

// ------------------------------------------------------------- key pages

/// A key page holds at most `limit` (1..=100) ascending cells strictly
/// after the cursor, inside the prefix, with the next cursor while more
/// follow; limits of 0 or above 100 are refused.
pub fn key_page_bounds_limit_and_cursor<S: Storage + SnapshotSource, F: Fn() -> S>(factory: F) {
    let s = fresh_with(
        &factory,
        (0..250)
            .map(|i| set("n", &format!("k{i:03}"), b"v"))
            .chain([
                set("n", "j", b"v"),
                set("n", "l", b"v"),
                set("o", "k000", b"v"),
            ]),
    );
    let r = Reader::new(&s);
    let (n, p) = (ns("n"), prefix("k"));
    let first = r.key_page(&n, &p, None, PAGE_LIMIT).unwrap();
    assert_eq!(first.cells.len(), 100);
    assert_eq!(first.cells[0].key.as_str(), "k000");
    assert_eq!(first.next.as_ref().map(RegisterKey::as_str), Some("k099"));
    let second = r.key_page(&n, &p, first.next.as_ref(), PAGE_LIMIT).unwrap();
    assert_eq!(second.cells[0].key.as_str(), "k100");
    assert_eq!(second.next.as_ref().map(RegisterKey::as_str), Some("k199"));
    let third = r
        .key_page(&n, &p, second.next.as_ref(), PAGE_LIMIT)
        .unwrap();
    assert_eq!(third.cells.len(), 50);
    assert_eq!(third.cells[49].key.as_str(), "k249");
    assert_eq!(third.next, None);
    let small = r.key_page(&n, &p, Some(&key("k010")), 7).unwrap();
    assert_eq!(
        page_keys(&small.cells),
        ["k011", "k012", "k013", "k014", "k015", "k016", "k017"]
    );
    assert_eq!(small.cells[0], register(&s, "n", "k011"));
    let exact_end = r.key_page(&n, &p, Some(&key("k244")), 5).unwrap();
    assert_eq!(exact_end.cells.len(), 5);
    assert_eq!(exact_end.next, None, "nothing follows k249");
    for bad in [0, PAGE_LIMIT + 1] {
        assert_eq!(
            r.key_page(&n, &p, None, bad)
                .map(|_| ())
                .unwrap_err()
                .reason(),
            "LimitOutOfRange"
        );
    }
}

/// A cursor key that was removed still names the same boundary; a cursor
/// below the prefix starts at the prefix, one above it answers nothing.
pub fn key_page_removed_cursor_still_bounds<S: Storage + SnapshotSource, F: Fn() -> S>(factory: F) {
    let s = fresh_with(&factory, (0..10).map(|i| set("n", &format!("k{i}"), b"v")));
    let r = Reader::new(&s);
    let (n, p) = (ns("n"), prefix("k"));
    let page = r.key_page(&n, &p, None, 5).unwrap();
    let cursor = page.next.clone().unwrap();
    assert_eq!(cursor.as_str(), "k4");
    commit_all(&s, 2, [crate::storage::del("n", "k4")]);
    let next = r.key_page(&n, &p, Some(&cursor), 3).unwrap();
    assert_eq!(page_keys(&next.cells), ["k5", "k6", "k7"]);
    let below = r.key_page(&n, &p, Some(&key("a")), 2).unwrap();
    assert_eq!(page_keys(&below.cells), ["k0", "k1"]);
    let above = r.key_page(&n, &p, Some(&key("z")), 2).unwrap();
    assert!(above.cells.is_empty() && above.next.is_none());
}

/// A key page whose window passes the byte budget is refused before its
/// values are fetched; one outside that window is not affected.
pub fn key_page_accounts_only_its_window<S: Storage + SnapshotSource, F: Fn() -> S>(factory: F) {
    let s = fresh_with(
        &factory,
        [
            set_len("n", "a1", 600 * 1024),
            set_len("n", "a2", 600 * 1024),
            set("n", "b1", b"v"),
        ],
    );
    let probe = Probe::new(&s);
    let r = Reader::new(&probe);
    let e = r
        .key_page(&ns("n"), &prefix("a"), None, 2)
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.reason(), "OverBudget");
    assert!(no_value_fetched(&probe.take()));
    let ok = r.key_page(&ns("n"), &prefix("a"), None, 1).unwrap();
    assert_eq!(ok.cells.len(), 1);
    let b = r.key_page(&ns("n"), &prefix("b"), None, 100).unwrap();
    assert_eq!(page_keys(&b.cells), ["b1"]);
}

/// Every key page is a fresh cut: a commit between pages shows in the next
/// key page (with a higher high-water), while descriptor pages of the first
/// cut stay below its high-water.
pub fn each_page_is_a_fresh_cut<S: Storage + SnapshotSource, F: Fn() -> S>(factory: F) {
    let s = fresh_with(
        &factory,
        [
            entry("e1", None, "m"),
            set("n", "k1", b"1"),
            set("n", "k2", b"2"),
        ],
    );
    let r = Reader::new(&s);
    let cut = r.capture(&Plan::new().namespace(ns("n"))).unwrap();
    let page = r.key_page(&ns("n"), &prefix("k"), None, 1).unwrap();
    assert_eq!(page.high_water, cut.high_water);
    commit_all(
        &s,
        2,
        [
            entry("e2", Some("e1"), "m"),
            set("n", "k3", b"3"),
            set("n", "k2", b"22"),
        ],
    );
    let next = r
        .key_page(&ns("n"), &prefix("k"), page.next.as_ref(), 10)
        .unwrap();
    assert_eq!(page_keys(&next.cells), ["k2", "k3"]);
    assert_eq!(next.cells[0].value.as_bytes(), b"22");
    assert!(next.high_water > cut.high_water);
    let old = r.descriptors(cut.high_water, None, 10).unwrap();
    assert_eq!(desc_ids(&old.descriptors), ["e1"]);
    let new = r.descriptors(next.high_water, None, 10).unwrap();
    assert_eq!(desc_ids(&new.descriptors), ["e1", "e2"]);
    let e = r
        .fragment(cut.high_water, &id("e2"), 0, 10)
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.reason(), "UnknownEntry", "a fragment above the cut");
    assert_eq!(
        r.lineage(&id("e2"), cut.high_water, 10)
            .map(|_| ())
            .unwrap_err()
            .reason(),
        "UnknownEntry"
    );
}

// ------------------------------------------------------ descriptors, fragments

/// Descriptor pages hold at most `limit` (1..=100) ascending descriptors
/// below the high-water, after the cursor, with payload sizes; the next
/// cursor is set while more follow.
pub fn descriptor_pages_are_bounded_ascending_and_below_the_cut<
    S: Storage + SnapshotSource,
    F: Fn() -> S,
>(
    factory: F,
) {
    let s = fresh_with(
        &factory,
        (0..230).map(|i| entry_len(&format!("e{i:03}"), None, i)),
    );
    let hw = commit_all(&s, 2, [usage("u", 1, 1)]);
    commit_all(&s, 3, [entry("late", None, "m")]);
    let r = Reader::new(&s);
    let mut after = None;
    let mut seen = Vec::new();
    let mut sizes = Vec::new();
    loop {
        let page = r.descriptors(hw, after, PAGE_LIMIT).unwrap();
        assert!(page.descriptors.len() <= PAGE_LIMIT);
        seen.push(page.descriptors.len());
        for d in &page.descriptors {
            assert!(d.seq < hw);
            sizes.push(d.size);
        }
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(seen, [100, 100, 30]);
    assert_eq!(sizes, (0..230u64).collect::<Vec<_>>());
    let small = r.descriptors(hw, Some(seq_of(&s, "e009")), 2).unwrap();
    assert_eq!(desc_ids(&small.descriptors), ["e010", "e011"]);
    let e010 = &small.descriptors[0];
    assert_eq!(e010.parent, None);
    assert_eq!(e010.kind.as_str(), "m");
    assert_eq!(e010.ts, 1);
    for bad in [0, PAGE_LIMIT + 1] {
        assert_eq!(
            r.descriptors(hw, None, bad)
                .map(|_| ())
                .unwrap_err()
                .reason(),
            "LimitOutOfRange"
        );
    }
    assert!(r.descriptors(1, None, 10).unwrap().descriptors.is_empty());
}

/// Fragments slice a payload within 190 KiB; longer asks, offsets past the
/// end and unknown entries are typed refusals.
pub fn fragments_slice_within_bounds<S: Storage + SnapshotSource, F: Fn() -> S>(factory: F) {
    let s = factory();
    let len = 400 * 1024;
    let hw = commit_all(&s, 1, [entry_len("big", None, len)]);
    let want = pattern(len);
    let r = Reader::new(&s);
    let f = r.fragment(hw, &id("big"), 0, MAX_FRAGMENT_BYTES).unwrap();
    assert_eq!(f.size, len as u64);
    assert_eq!(f.bytes, want[..MAX_FRAGMENT_BYTES]);
    let tail = r
        .fragment(hw, &id("big"), (len - 1000) as u64, MAX_FRAGMENT_BYTES)
        .unwrap();
    assert_eq!(tail.bytes, want[len - 1000..]);
    let mid = r.fragment(hw, &id("big"), 12345, 17).unwrap();
    assert_eq!(mid.bytes, want[12345..12345 + 17]);
    assert!(r
        .fragment(hw, &id("big"), len as u64, 10)
        .unwrap()
        .bytes
        .is_empty());
    let e = r
        .fragment(hw, &id("big"), len as u64 + 1, 10)
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.reason(), "OffsetOutOfRange");
    let e = r
        .fragment(hw, &id("big"), 0, MAX_FRAGMENT_BYTES + 1)
        .map(|_| ())
        .unwrap_err();
    assert_eq!(
        e,
        SnapshotError::FragmentTooLarge {
            len: MAX_FRAGMENT_BYTES + 1,
            limit: MAX_FRAGMENT_BYTES
        }
    );
    let e = r.fragment(hw, &id("nope"), 0, 10).map(|_| ()).unwrap_err();
    assert_eq!(e.reason(), "UnknownEntry");
}

/// A record above the record bound is refused from its descriptor before
/// any payload byte is fetched (the bound is tightened to 1 KiB here: a
/// commit cannot store a record above the standard 32 MiB).
pub fn oversized_record_is_refused_before_its_payload<S: Storage + SnapshotSource, F: Fn() -> S>(
    factory: F,
) {
    let s = factory();
    let hw = commit_all(
        &s,
        1,
        [entry_len("big", None, 2048), entry_len("ok", None, 1024)],
    );
    let probe = Probe::new(&s);
    let limits = Limits {
        record_bytes: 1024,
        ..Limits::STANDARD
    };
    let r = Reader::with_limits(&probe, limits).unwrap();
    let e = r.fragment(hw, &id("big"), 0, 10).map(|_| ()).unwrap_err();
    assert_eq!(
        e,
        SnapshotError::RecordTooLarge {
            id: id("big"),
            size: 2048,
            limit: 1024
        }
    );
    let calls = probe.take();
    assert!(
        !calls.contains(&Call::Fragment),
        "payload fetched: {calls:?}"
    );
    assert_eq!(r.fragment(hw, &id("ok"), 0, 10).unwrap().bytes, pattern(10));
}

// --------------------------------------------------------------- lineage

/// Lineage answers `from` and its ancestors ascending — not the other
/// branch's entries — at most `limit` (1..=100) of them, one probe per
/// record.
pub fn lineage_walks_parents_ascending_within_limit<S: Storage + SnapshotSource, F: Fn() -> S>(
    factory: F,
) {
    let s = factory();
    let hw = chain(&s);
    let probe = Probe::new(&s);
    let r = Reader::new(&probe);
    let all = r.lineage(&id("d"), hw, PAGE_LIMIT).unwrap();
    assert_eq!(desc_ids(&all), ["r", "a", "b", "c", "d"]);
    assert!(all.windows(2).all(|w| w[0].seq < w[1].seq));
    let probes = probe.take();
    assert_eq!(probes.len(), 5, "one probe per record: {probes:?}");
    for w in all.windows(2) {
        assert!(probes.contains(&Call::EntryHead(w[0].id.as_str().to_owned(), w[1].seq)));
    }
    assert_eq!(desc_ids(&r.lineage(&id("d"), hw, 2).unwrap()), ["c", "d"]);
    assert_eq!(
        desc_ids(&r.lineage(&id("y"), hw, 100).unwrap()),
        ["r", "a", "x", "y"]
    );
    for bad in [0, PAGE_LIMIT + 1] {
        assert_eq!(
            r.lineage(&id("d"), hw, bad)
                .map(|_| ())
                .unwrap_err()
                .reason(),
            "LimitOutOfRange"
        );
    }
}

/// `before_seq` is an exclusive high-water: `from` at or above it is
/// unknown, below it the walk answers as usual.
pub fn lineage_before_seq_is_exclusive<S: Storage + SnapshotSource, F: Fn() -> S>(factory: F) {
    let s = factory();
    chain(&s);
    let r = Reader::new(&s);
    let c = seq_of(&s, "c");
    assert_eq!(
        r.lineage(&id("c"), c, 10).map(|_| ()).unwrap_err(),
        SnapshotError::UnknownEntry {
            id: id("c"),
            below: c
        }
    );
    assert_eq!(
        desc_ids(&r.lineage(&id("c"), c + 1, 10).unwrap()),
        ["r", "a", "b", "c"]
    );
    assert_eq!(
        r.lineage(&id("nope"), Seq::MAX, 10)
            .map(|_| ())
            .unwrap_err()
            .reason(),
        "UnknownEntry"
    );
}

/// At most 2 MiB of payload past the first record, which is always
/// returned (here 3 MiB); the walk stops before the record that would pass
/// the bound.
pub fn lineage_byte_bound_always_returns_the_first<S: Storage + SnapshotSource, F: Fn() -> S>(
    factory: F,
) {
    let s = factory();
    let mib = 1024 * 1024;
    commit_all(&s, 1, [entry_len("p3", None, mib)]);
    commit_all(&s, 2, [entry_len("p2", Some("p3"), mib)]);
    commit_all(&s, 3, [entry_len("p1", Some("p2"), mib - 1)]);
    let hw = commit_all(&s, 4, [entry_len("first", Some("p1"), 3 * mib)]);
    let r = Reader::new(&s);
    let out = r.lineage(&id("first"), hw, 100).unwrap();
    assert_eq!(desc_ids(&out), ["p2", "p1", "first"]);
    let past_first: u64 = out[..2].iter().map(|d| d.size).sum();
    assert!(past_first <= LINEAGE_BYTES_LIMIT);
    let only = r.lineage(&id("p3"), hw, 100).unwrap();
    assert_eq!(desc_ids(&only), ["p3"]);
}

/// A corrupt parent link that would loop (to a descendant, or to itself)
/// ends the walk: every step asks below the seq of the entry before.
pub fn lineage_corrupt_parent_link_ends_the_walk<S: Storage + SnapshotSource, F: Fn() -> S>(
    factory: F,
) {
    let s = factory();
    let hw = chain(&s);
    let looped = Rewire::new(&s, &[("a", Some("d"))]);
    let out = Reader::new(&looped).lineage(&id("d"), hw, 100).unwrap();
    assert_eq!(desc_ids(&out), ["a", "b", "c", "d"]);
    let own = Rewire::new(&s, &[("c", Some("c"))]);
    assert_eq!(
        desc_ids(&Reader::new(&own).lineage(&id("d"), hw, 100).unwrap()),
        ["c", "d"]
    );
}

/// A parent the store lacks ends the walk as a root does.
pub fn lineage_missing_parent_ends_the_walk<S: Storage + SnapshotSource, F: Fn() -> S>(factory: F) {
    let s = factory();
    let hw = chain(&s);
    let dangling = Rewire::new(&s, &[("b", Some("ghost"))]);
    let out = Reader::new(&dangling).lineage(&id("d"), hw, 100).unwrap();
    assert_eq!(desc_ids(&out), ["b", "c", "d"]);
}

/// The port's `cells` answers aligned with the keys asked, `None` for an
/// absent key (a read of the present rows only, zipped with the keys,
/// would put a value under the wrong key), on a fresh store `s`.
#[track_caller]
fn assert_cells_align_with_keys<S: Storage + SnapshotSource>(s: &S) {
    commit_all(s, 1, [set_len("n", "a", 3), set_len("n", "c", 5)]);
    let keys = [key("a"), key("b"), key("c"), key("d")];
    let got = s
        .with_cut(|v| v.cells(&ns("n"), &keys).map_err(SnapshotError::Storage))
        .unwrap();
    let seen: Vec<Option<(String, usize)>> = got
        .iter()
        .map(|c| {
            c.as_ref()
                .map(|r| (r.key.as_str().to_owned(), r.value.as_bytes().len()))
        })
        .collect();
    assert_eq!(
        seen,
        vec![Some(("a".into(), 3)), None, Some(("c".into(), 5)), None]
    );
}

// ------------------------------------------------------------ the handle

/// After close every snapshot read answers `HandleClosed`, never a panic.
pub fn closed_handle_answers_handle_closed<S: Storage + SnapshotSource, F: Fn() -> S>(factory: F) {
    let s = factory();
    let hw = chain(&s);
    s.close().unwrap();
    let r = Reader::new(&s);
    let closed = SnapshotError::Storage(StorageError::HandleClosed);
    assert_eq!(r.capture(&Plan::new()).map(|_| ()).unwrap_err(), closed);
    assert_eq!(
        r.key_page(&ns("n"), &prefix(""), None, 10)
            .map(|_| ())
            .unwrap_err(),
        closed
    );
    assert_eq!(r.descriptors(hw, None, 10).map(|_| ()).unwrap_err(), closed);
    assert_eq!(r.lineage(&id("d"), hw, 10).map(|_| ()).unwrap_err(), closed);
    assert_eq!(
        r.fragment(hw, &id("d"), 0, 10).map(|_| ()).unwrap_err(),
        closed
    );
}

/// For backends that expose query plans: no snapshot statement scans
/// `registers` or `entries` or sorts through a temp b-tree; the exact
/// header is a full-key index probe; the bounded window an index range
/// bounded on both sides.
pub fn snapshot_query_plans_use_indexes<S: Storage + SnapshotSource, F: Fn() -> S>(factory: F) {
    let s = factory();
    chain(&s);
    for step in SnapshotStep::ALL {
        let Some(plan) = s.explain_snapshot(step).unwrap() else {
            continue;
        };
        if let Err(why) = check_snapshot_plan(&plan) {
            panic!("{why}\nstep: {step:?}\nplan:\n{}", plan.join("\n"));
        }
    }
}

/// The plan rule of [`snapshot_query_plans_use_indexes`]: SQLite
/// (`EXPLAIN QUERY PLAN` lines) — no `SCAN registers` / `SCAN entries`, no
/// `USE TEMP B-TREE`; PostgreSQL (`EXPLAIN` lines) — no `Seq Scan` of a
/// storage table, no `Sort`.
pub fn check_snapshot_plan(lines: &[String]) -> Result<(), String> {
    for (line, l) in crate::plan_lines(lines)? {
        if l.contains("USE TEMP B-TREE") {
            return Err(format!("sorts through a temp b-tree: {line}"));
        }
        let mut words = l.split_whitespace();
        if words.next() == Some("SCAN") {
            return Err(format!("scans a table: {line}"));
        }
        let node = l.split("  (").next().unwrap_or(l);
        if node == "Sort" || node == "Incremental Sort" {
            return Err(format!("sorts: {line}"));
        }
        if l.starts_with("Seq Scan on ") || l.starts_with("Parallel Seq Scan on ") {
            return Err(format!("scans a table: {line}"));
        }
    }
    Ok(())
}

// ------------------------------------------------------------- the table

/// Every snapshot case, by name, in suite order.
pub const SNAPSHOT_CASES: &[&str] = &crate::__with_snapshot_cases!(__emit_names!());

/// A snapshot case runnable at run time, for a backend type `S`.
pub type SnapshotCase<S> = (&'static str, fn(&dyn Fn() -> S));

/// Every case as `(name, function)`, for runners that report per case
/// (run each under `std::panic::catch_unwind`).
pub fn snapshot_cases<S: Storage + SnapshotSource>() -> Vec<SnapshotCase<S>> {
    crate::__with_snapshot_cases!(__emit_table!(snapshot, S))
}
