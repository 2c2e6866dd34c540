//! The storage suite has teeth: broken backends (wrappers over the memory
//! backend, each with one bug a backend author might write) must each fail
//! at least one case, the honest wrapper must pass them all, and every
//! broken backend still passes some case (a near miss, not a dead store).

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test-only mutant backends

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use custos_conformance::storage as suite;
use custos_core::storage::{
    BranchScan, Commit, CommitError, CommitId, CommitReceipt, Entry, EntryHead, EntryScan,
    KeyPrefix, MemoryStorage, Namespace, RecordId, Register, RegisterKey, Seq, Stats, Storage,
    StorageError, UsageRow, UsageScan, Write,
};
use custos_teeth::{
    assert_reopen_caught, failing_cases, reopen_failing_cases, Disk, Verdicts,
    HONEST_WITHOUT_RECOVERY, LOSSES,
};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Defect {
    /// The honest wrapper.
    None,
    /// `commit` drops the expectations (the CAS check was never wired in).
    IgnoresExpectations,
    /// Reads after `close` are served from a cached copy instead of refused.
    ReadsAfterClose,
    /// The branch walk filters by seq/kind before resolving the stop kind.
    FiltersBeforeStop,
    /// The stats projection drifts by one micro once a few usage rows exist.
    StatsDrift,
    /// `commit` on a closed handle panics instead of answering an error.
    PanicsWhenClosed,
    /// A refused commit still burns a seq (the sequence bumped outside the
    /// transaction).
    BurnsSeqOnRefusal,
    /// A duplicate id is silently dropped (`INSERT OR IGNORE`) instead of
    /// refused as corruption.
    DuplicateIdOverwrites,
    /// The branch scan applies `limit` to the walk, then the kind filter.
    LimitBeforeKindFilter,
    /// `scan_entry_heads` treats `after` as inclusive (`seq >= after`).
    HeadsCursorInclusive,
    /// `list_registers` answers in write (seq) order, not key order.
    RegistersInWriteOrder,
    /// `list_registers` forgets the tombstone filter: deleted cells show.
    ListShowsDeletedRegisters,
    /// `commit` ignores the seq floor.
    SeqFloorIgnored,
    /// `scan_usage` ignores the `through` bound.
    UsageScanIgnoresThrough,
    /// `list_registers` matches the prefix with an unescaped `LIKE 'p%'`:
    /// `_` and `%` in the prefix are wildcards.
    PrefixIsALikePattern,
    /// `get_entries` answers in store order (`WHERE id IN (…)`), not
    /// aligned with the asked ids.
    GetEntriesInStoreOrder,
    /// A set of an existing cell upserts the value but keeps the old seq.
    SetRegisterKeepsOldSeq,
    /// An entry scan applies `limit` before the `after` cursor.
    EntryScanLimitBeforeCursor,
    /// Registers live in one key space as `namespace/key` (a KV-store
    /// layout), so `("n", "x/k")` and `("n/x", "k")` are one cell.
    CompositeRegisterKeys,
    /// `list_registers` answers in a case-insensitive collation (a text
    /// column's default `ORDER BY` under a locale), not byte order.
    RegistersInCollationOrder,
    /// Entry scans order by the id column instead of the seq.
    EntriesInIdOrder,
    /// Usage scans order by the seq rendered as text (`"10" < "2"`).
    UsageInSeqTextOrder,
    /// The store has nowhere to keep the last commit's id: every retry is
    /// decided afresh.
    ForgetsCommitId,
    /// A retry is recognised by its id alone, its content unchecked: an id
    /// reused for another commit replays the old receipt.
    ReplaysByIdAlone,
}

const DEFECTS: &[Defect] = &[
    Defect::RegistersInCollationOrder,
    Defect::EntriesInIdOrder,
    Defect::UsageInSeqTextOrder,
    Defect::IgnoresExpectations,
    Defect::ReadsAfterClose,
    Defect::FiltersBeforeStop,
    Defect::StatsDrift,
    Defect::PanicsWhenClosed,
    Defect::BurnsSeqOnRefusal,
    Defect::DuplicateIdOverwrites,
    Defect::LimitBeforeKindFilter,
    Defect::HeadsCursorInclusive,
    Defect::RegistersInWriteOrder,
    Defect::ListShowsDeletedRegisters,
    Defect::SeqFloorIgnored,
    Defect::UsageScanIgnoresThrough,
    Defect::PrefixIsALikePattern,
    Defect::GetEntriesInStoreOrder,
    Defect::SetRegisterKeepsOldSeq,
    Defect::EntryScanLimitBeforeCursor,
    Defect::CompositeRegisterKeys,
    Defect::ForgetsCommitId,
    Defect::ReplaysByIdAlone,
];

/// The one namespace `CompositeRegisterKeys` stores every cell in.
fn kv() -> Namespace {
    Namespace::new("kv").unwrap()
}

/// `namespace/key`, or the pair unchanged when that is out of bounds.
fn compose(n: &Namespace, k: &RegisterKey) -> (Namespace, RegisterKey) {
    match RegisterKey::new(format!("{}/{}", n.as_str(), k.as_str())) {
        Ok(key) => (kv(), key),
        Err(_) => (n.clone(), k.clone()),
    }
}

/// The `(namespace, key)` a composite key decodes to.
fn decompose(k: &RegisterKey) -> (Namespace, RegisterKey) {
    let (n, k) = k.as_str().split_once('/').unwrap();
    (Namespace::new(n).unwrap(), RegisterKey::new(k).unwrap())
}

/// A commit over composite keys.
fn composite(c: &Commit) -> Commit {
    let mut c = c.clone();
    for e in &mut c.expectations {
        (e.namespace, e.key) = compose(&e.namespace, &e.key);
    }
    for w in &mut c.writes {
        if let Write::SetRegister { namespace, key, .. }
        | Write::DeleteRegister { namespace, key } = w
        {
            (*namespace, *key) = compose(namespace, key);
        }
    }
    c
}

/// Whether `key` matches the SQL pattern `prefix || '%'`, unescaped.
fn like_prefix(key: &[u8], prefix: &[u8]) -> bool {
    match prefix.split_first() {
        None => true,
        Some((b'%', rest)) => (0..=key.len()).any(|i| like_prefix(&key[i..], rest)),
        Some((b'_', rest)) => !key.is_empty() && like_prefix(&key[1..], rest),
        Some((c, rest)) => key.first() == Some(c) && like_prefix(&key[1..], rest),
    }
}

struct Mutant {
    defect: Defect,
    inner: MemoryStorage,
    /// A second copy: the cache `ReadsAfterClose` serves, or the store
    /// whose deletes never land for `ListShowsDeletedRegisters`.
    shadow: MemoryStorage,
    closed: AtomicBool,
    /// The seq each live cell was first set at (`SetRegisterKeepsOldSeq`).
    first_seqs: Mutex<BTreeMap<(Namespace, RegisterKey), Seq>>,
    /// The last identified commit's id and receipt (`ReplaysByIdAlone`).
    last: Mutex<Option<(CommitId, CommitReceipt)>>,
}

impl Mutant {
    fn new(defect: Defect) -> Self {
        Mutant {
            defect,
            inner: MemoryStorage::new(),
            shadow: MemoryStorage::new(),
            closed: AtomicBool::new(false),
            first_seqs: Mutex::new(BTreeMap::new()),
            last: Mutex::new(None),
        }
    }

    /// The seq a cell reads with: its first one under `SetRegisterKeepsOldSeq`.
    fn stale(&self, mut r: Register) -> Register {
        if self.defect == Defect::SetRegisterKeepsOldSeq {
            let first = self.first_seqs.lock().unwrap();
            if let Some(seq) = first.get(&(r.namespace.clone(), r.key.clone())) {
                r.seq = *seq;
            }
        }
        r
    }

    /// Records the first seq of every cell a successful commit set.
    fn remember_seqs(&self, c: &Commit, receipt: &CommitReceipt) {
        let mut first = self.first_seqs.lock().unwrap();
        for (w, seq) in c.writes.iter().zip(&receipt.seqs) {
            match w {
                Write::SetRegister { namespace, key, .. } => {
                    first
                        .entry((namespace.clone(), key.clone()))
                        .or_insert(*seq);
                }
                Write::DeleteRegister { namespace, key } => {
                    first.remove(&(namespace.clone(), key.clone()));
                }
                _ => {}
            }
        }
    }

    fn reads(&self) -> &MemoryStorage {
        if self.defect == Defect::ReadsAfterClose && self.closed.load(Ordering::SeqCst) {
            &self.shadow
        } else {
            &self.inner
        }
    }

    /// Mirrors an applied commit into the shadow store.
    fn mirror(&self, c: &Commit) {
        match self.defect {
            Defect::ReadsAfterClose => {
                let _ = self.shadow.commit(c);
            }
            Defect::ListShowsDeletedRegisters => {
                // Deletes become deletes of an unlisted cell: same seqs.
                let mut c = c.clone();
                c.expectations.clear();
                for w in &mut c.writes {
                    if let Write::DeleteRegister { namespace, key } = w {
                        *namespace = Namespace::new("tomb").unwrap();
                        *key = RegisterKey::new("tomb").unwrap();
                    }
                }
                let _ = self.shadow.commit(&c);
            }
            _ => {}
        }
    }
}

impl Storage for Mutant {
    fn commit(&self, c: &Commit) -> Result<CommitReceipt, CommitError> {
        match self.defect {
            Defect::IgnoresExpectations => {
                let mut c = c.clone();
                c.expectations.clear();
                self.inner.commit(&c)
            }
            Defect::ForgetsCommitId => {
                let mut c = c.clone();
                c.id = None;
                self.inner.commit(&c)
            }
            Defect::ReplaysByIdAlone => {
                let mut last = self.last.lock().unwrap();
                if let (Some(id), Some((kept, receipt))) = (&c.id, last.as_ref()) {
                    if id == kept {
                        return Ok(receipt.clone());
                    }
                }
                let r = self.inner.commit(c)?;
                if let Some(id) = &c.id {
                    *last = Some((id.clone(), r.clone()));
                }
                Ok(r)
            }
            Defect::PanicsWhenClosed if self.closed.load(Ordering::SeqCst) => {
                panic!("mutant: commit on a closed handle")
            }
            Defect::BurnsSeqOnRefusal => {
                let r = self.inner.commit(c);
                if r.is_err() {
                    let _ = self
                        .inner
                        .commit(&Commit::at(0).write(Write::DeleteRegister {
                            namespace: Namespace::new("burn").unwrap(),
                            key: RegisterKey::new("burn").unwrap(),
                        }));
                }
                r
            }
            Defect::DuplicateIdOverwrites => {
                let mut c = c.clone();
                c.writes.retain(|w| match w {
                    Write::InsertEntry { id, .. } | Write::InsertUsage { id, .. } => {
                        self.inner.get_entries(std::slice::from_ref(id)).unwrap()[0].is_none()
                    }
                    _ => true,
                });
                self.inner.commit(&c)
            }
            Defect::CompositeRegisterKeys => {
                self.inner.commit(&composite(c)).map_err(|e| match e {
                    CommitError::StaleExpectation {
                        namespace,
                        key,
                        expected,
                        found,
                    } if namespace == kv() => {
                        let (namespace, key) = decompose(&key);
                        CommitError::StaleExpectation {
                            namespace,
                            key,
                            expected,
                            found,
                        }
                    }
                    e => e,
                })
            }
            Defect::SeqFloorIgnored => {
                let mut c = c.clone();
                c.seq_floor = None;
                self.inner.commit(&c)
            }
            _ => {
                let r = self.inner.commit(c);
                if let Ok(receipt) = &r {
                    self.mirror(c);
                    self.remember_seqs(c, receipt);
                }
                r
            }
        }
    }
    fn get_entries(&self, ids: &[RecordId]) -> Result<Vec<Option<Entry>>, StorageError> {
        let mut got = self.reads().get_entries(ids)?;
        if self.defect == Defect::GetEntriesInStoreOrder {
            let mut found: Vec<Entry> = got.iter().flatten().cloned().collect();
            found.sort_by_key(|e| e.seq);
            found.dedup_by_key(|e| e.seq);
            got = found.into_iter().map(Some).collect();
            got.resize(ids.len(), None);
        }
        Ok(got)
    }
    fn get_register(
        &self,
        n: &Namespace,
        k: &RegisterKey,
    ) -> Result<Option<Register>, StorageError> {
        if self.defect == Defect::CompositeRegisterKeys {
            let (cn, ck) = compose(n, k);
            return Ok(self.inner.get_register(&cn, &ck)?.map(|r| Register {
                namespace: n.clone(),
                key: k.clone(),
                ..r
            }));
        }
        Ok(self.reads().get_register(n, k)?.map(|r| self.stale(r)))
    }
    fn list_registers(&self, n: &Namespace, p: &KeyPrefix) -> Result<Vec<Register>, StorageError> {
        match self.defect {
            Defect::RegistersInCollationOrder => {
                let mut v = self.reads().list_registers(n, p)?;
                v.sort_by_key(|r| r.key.as_str().to_lowercase());
                Ok(v)
            }
            Defect::RegistersInWriteOrder => {
                let mut v = self.reads().list_registers(n, p)?;
                v.sort_by_key(|r| r.seq);
                Ok(v)
            }
            Defect::ListShowsDeletedRegisters => {
                self.inner.list_registers(n, p)?;
                self.shadow.list_registers(n, p)
            }
            Defect::CompositeRegisterKeys => {
                let p = KeyPrefix::new(format!("{}/{}", n.as_str(), p.as_str())).unwrap();
                let mut v = self.inner.list_registers(&kv(), &p)?;
                for r in &mut v {
                    (r.namespace, r.key) = decompose(&r.key);
                }
                Ok(v)
            }
            Defect::PrefixIsALikePattern => {
                let mut v = self.reads().list_registers(n, &KeyPrefix::all())?;
                v.retain(|r| like_prefix(r.key.as_str().as_bytes(), p.as_str().as_bytes()));
                Ok(v)
            }
            _ => Ok(self
                .reads()
                .list_registers(n, p)?
                .into_iter()
                .map(|r| self.stale(r))
                .collect()),
        }
    }
    fn scan_branch(&self, q: &BranchScan) -> Result<Vec<Entry>, StorageError> {
        match self.defect {
            Defect::FiltersBeforeStop => {
                let mut walk = q.clone();
                walk.stop_at_kinds.clear();
                walk.limit = None;
                walk.cursor = None;
                let mut out = Vec::new();
                for e in self.reads().scan_branch(&walk)? {
                    let stop = q.stops_at(&e.kind);
                    if q.keeps_seq(e.seq) {
                        out.push(e);
                    }
                    if stop {
                        break;
                    }
                }
                out.truncate(q.limit.unwrap_or(usize::MAX));
                Ok(out)
            }
            Defect::LimitBeforeKindFilter => {
                let mut walk = q.clone();
                walk.kinds = None;
                let mut out = self.reads().scan_branch(&walk)?;
                out.retain(|e| q.keeps_kind(&e.kind));
                Ok(out)
            }
            _ => self.reads().scan_branch(q),
        }
    }
    fn scan_entries(&self, q: &EntryScan) -> Result<Vec<Entry>, StorageError> {
        if self.defect == Defect::EntryScanLimitBeforeCursor {
            let mut window = q.clone();
            window.after = None;
            let mut out = self.reads().scan_entries(&window)?;
            out.retain(|e| q.after.is_none_or(|a| e.seq > a));
            return Ok(out);
        }
        if self.defect == Defect::EntriesInIdOrder {
            let mut out = self.reads().scan_entries(q)?;
            out.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
            return Ok(out);
        }
        self.reads().scan_entries(q)
    }
    fn scan_entry_heads(&self, q: &EntryScan) -> Result<Vec<EntryHead>, StorageError> {
        if self.defect == Defect::HeadsCursorInclusive {
            let mut q = q.clone();
            q.after = q.after.map(|a| a.saturating_sub(1));
            return self.reads().scan_entry_heads(&q);
        }
        self.reads().scan_entry_heads(q)
    }
    fn scan_usage(&self, q: &UsageScan) -> Result<Vec<UsageRow>, StorageError> {
        if self.defect == Defect::UsageScanIgnoresThrough {
            let mut q = q.clone();
            q.through = None;
            return self.reads().scan_usage(&q);
        }
        if self.defect == Defect::UsageInSeqTextOrder {
            let mut out = self.reads().scan_usage(q)?;
            out.sort_by_key(|u| u.seq.to_string());
            return Ok(out);
        }
        self.reads().scan_usage(q)
    }
    fn stats(&self) -> Result<Stats, StorageError> {
        let mut s = self.reads().stats()?;
        if self.defect == Defect::StatsDrift && s.usage_rows > 3 {
            s.totals.cost_micros += 1;
        }
        Ok(s)
    }
    fn close(&self) -> Result<(), StorageError> {
        self.closed.store(true, Ordering::SeqCst);
        match self.defect {
            Defect::ReadsAfterClose | Defect::PanicsWhenClosed => Ok(()),
            _ => self.inner.close(),
        }
    }
}

#[test]
fn every_broken_storage_backend_fails_a_case_and_only_breaks_what_it_breaks() {
    let cases = suite::storage_cases::<Mutant>();
    let failures = |d| failing_cases(&cases, &move || Mutant::new(d));
    let honest = failures(Defect::None);
    assert!(honest.is_empty(), "the honest wrapper fails {honest:?}");
    let total = suite::STORAGE_CASES.len();
    let mut verdicts = Verdicts::new("storage");
    let mut dead = Vec::new();
    for &d in DEFECTS {
        let failed = failures(d);
        if failed.len() == total {
            dead.push(d);
        }
        verdicts.record(format!("{d:?}"), failed);
    }
    verdicts.assert_all_caught(8);
    // A near miss: each broken backend still passes some case.
    assert!(
        dead.is_empty(),
        "broken backends that fail every case: {dead:?}"
    );
}

/// A store over a [`Disk`] of acknowledged commits: each open replays the
/// disk into a fresh memory store, as the mode allows.
struct Durable {
    inner: MemoryStorage,
    disk: Arc<Disk<Commit>>,
}

impl Durable {
    fn open(disk: &Arc<Disk<Commit>>) -> Self {
        let inner = MemoryStorage::new();
        for c in disk.replay() {
            let _ = inner.commit(&c);
        }
        Durable {
            inner,
            disk: Arc::clone(disk),
        }
    }
}

impl Storage for Durable {
    fn commit(&self, commit: &Commit) -> Result<CommitReceipt, CommitError> {
        let r = self.inner.commit(commit)?;
        self.disk.record(commit.clone());
        Ok(r)
    }
    custos_teeth::forward_storage_reads!(inner);
    fn close(&self) -> Result<(), StorageError> {
        self.inner.close()
    }
}

#[test]
fn every_store_that_loses_durability_fails_a_reopen_case() {
    // Session storage has no open-time recovery to skip.
    let cases = suite::storage_reopen_cases();
    assert_reopen_caught("storage reopen", HONEST_WITHOUT_RECOVERY, LOSSES, |mode| {
        reopen_failing_cases(&cases, mode, Durable::open)
    });
}
