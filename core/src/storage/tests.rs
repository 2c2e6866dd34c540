//! Unit tests and property tests of the pure store.

use proptest::prelude::*;

use super::*;

fn id(s: &str) -> RecordId {
    RecordId::new(s).unwrap()
}
fn kind(s: &str) -> Kind {
    Kind::new(s).unwrap()
}
fn ns(s: &str) -> Namespace {
    Namespace::new(s).unwrap()
}
fn key(s: &str) -> RegisterKey {
    RegisterKey::new(s).unwrap()
}
fn entry(i: &str, parent: Option<&str>, k: &str) -> Write {
    Write::InsertEntry {
        id: id(i),
        parent: parent.map(id),
        kind: kind(k),
        payload: Payload::new(i.as_bytes().to_vec()).unwrap(),
    }
}
fn usage(i: &str, input: u64, cost: u64) -> Write {
    Write::InsertUsage {
        id: id(i),
        figures: UsageFigures {
            input_tokens: input,
            cost_micros: cost,
            ..UsageFigures::default()
        },
        details: Payload::default(),
    }
}
fn set(n: &str, k: &str, v: &[u8]) -> Write {
    Write::SetRegister {
        namespace: ns(n),
        key: key(k),
        value: Payload::new(v.to_vec()).unwrap(),
    }
}
fn del(n: &str, k: &str) -> Write {
    Write::DeleteRegister {
        namespace: ns(n),
        key: key(k),
    }
}

#[test]
fn first_commit_assigns_consecutive_seqs_from_one() {
    let mut s = StoreState::new();
    let r = s
        .commit(
            &Commit::at(7)
                .write(entry("a", None, "m"))
                .write(entry("b", Some("a"), "m")),
        )
        .unwrap();
    assert_eq!(r.seqs, vec![1, 2]);
    assert_eq!(r.next_seq, 3);
    assert_eq!(s.entry(&id("b")).unwrap().ts, 7);
    assert_eq!(s.children(&id("a")), &[id("b")]);
    s.check_invariants().unwrap();
}

#[test]
fn floor_leaves_a_gap_and_a_low_floor_is_already_met() {
    let mut s = StoreState::new();
    let r = s
        .commit(&Commit::at(0).floor(10).write(set("n", "k", b"v")))
        .unwrap();
    assert_eq!(r.seqs, vec![10]);
    let r = s
        .commit(&Commit::at(0).floor(3).write(set("n", "k", b"w")))
        .unwrap();
    assert_eq!(r.seqs, vec![11]);
    assert_eq!(s.get_register(&ns("n"), &key("k")).unwrap().seq, 11);
}

#[test]
fn stale_expectation_applies_nothing_and_consumes_no_seq() {
    let mut s = StoreState::new();
    s.commit(&Commit::at(0).write(set("n", "k", b"v"))).unwrap();
    let before = s.clone();
    let e = s
        .commit(
            &Commit::at(0)
                .expect(ns("n"), key("k"), Some(99))
                .write(entry("a", None, "m"))
                .write(usage("u", 1, 1)),
        )
        .unwrap_err();
    assert_eq!(
        e,
        CommitError::StaleExpectation {
            namespace: ns("n"),
            key: key("k"),
            expected: Some(99),
            found: Some(1)
        }
    );
    assert_eq!(e.reason(), "StaleExpectation");
    assert_eq!(s, before);
}

#[test]
fn expectations_see_the_pre_commit_state() {
    let mut s = StoreState::new();
    // The set in the same commit does not satisfy an expectation that the
    // register already exists.
    let e = s
        .commit(
            &Commit::at(0)
                .expect(ns("n"), key("k"), Some(1))
                .write(set("n", "k", b"v")),
        )
        .unwrap_err();
    assert!(matches!(
        e,
        CommitError::StaleExpectation { found: None, .. }
    ));
    s.commit(
        &Commit::at(0)
            .expect(ns("n"), key("k"), None)
            .write(set("n", "k", b"v")),
    )
    .unwrap();
}

#[test]
fn cas_only_commit_consumes_nothing() {
    let mut s = StoreState::new();
    s.commit(&Commit::at(0).write(set("n", "k", b"v"))).unwrap();
    let before = s.clone();
    let r = s
        .commit(&Commit::at(0).expect(ns("n"), key("k"), Some(1)))
        .unwrap();
    assert!(r.seqs.is_empty());
    assert_eq!(r.next_seq, 2);
    assert_eq!(s, before);
}

#[test]
fn parent_rules() {
    let mut s = StoreState::new();
    let e = s
        .commit(&Commit::at(0).write(entry("b", Some("a"), "m")))
        .unwrap_err();
    assert_eq!(
        e,
        CommitError::ParentMissing {
            id: id("b"),
            parent: id("a")
        }
    );
    // Parent later in the same commit does not count.
    let e = s
        .commit(
            &Commit::at(0)
                .write(entry("b", Some("a"), "m"))
                .write(entry("a", None, "m")),
        )
        .unwrap_err();
    assert!(matches!(e, CommitError::ParentMissing { .. }));
    // A usage row is not a parent.
    s.commit(&Commit::at(0).write(usage("u", 1, 0))).unwrap();
    let e = s
        .commit(&Commit::at(0).write(entry("b", Some("u"), "m")))
        .unwrap_err();
    assert!(matches!(e, CommitError::ParentMissing { .. }));
    // Self-parent is missing too.
    let e = s
        .commit(&Commit::at(0).write(entry("x", Some("x"), "m")))
        .unwrap_err();
    assert!(matches!(e, CommitError::ParentMissing { .. }));
    assert_eq!(s.next_seq(), 2);
}

#[test]
fn duplicate_ids_are_corruption_across_kinds() {
    let mut s = StoreState::new();
    s.commit(
        &Commit::at(0)
            .write(entry("a", None, "m"))
            .write(usage("u", 1, 0)),
    )
    .unwrap();
    for w in [
        entry("a", None, "m"),
        usage("a", 1, 0),
        entry("u", None, "m"),
        usage("u", 1, 0),
    ] {
        let e = s.commit(&Commit::at(0).write(w)).unwrap_err();
        assert_eq!(e.reason(), "DuplicateId");
    }
    let e = s
        .commit(
            &Commit::at(0)
                .write(usage("z", 1, 0))
                .write(entry("z", None, "m")),
        )
        .unwrap_err();
    assert_eq!(
        e,
        CommitError::DuplicateId {
            id: id("z"),
            existing: RecordKind::Usage
        }
    );
    assert_eq!(s.stats().usage_rows, 1);
}

#[test]
fn delete_absent_consumes_a_seq() {
    let mut s = StoreState::new();
    let r = s.commit(&Commit::at(0).write(del("n", "k"))).unwrap();
    assert_eq!(r.seqs, vec![1]);
    assert_eq!(s.next_seq(), 2);
    assert_eq!(s.get_register(&ns("n"), &key("k")), None);
}

#[test]
fn register_value_bound_is_checked_at_commit() {
    let mut s = StoreState::new();
    let big = Payload::new(vec![0u8; types::MAX_REGISTER_VALUE_LEN + 1]).unwrap();
    let e = s
        .commit(&Commit::at(0).write(Write::SetRegister {
            namespace: ns("n"),
            key: key("k"),
            value: big,
        }))
        .unwrap_err();
    assert_eq!(e.reason(), "OutOfBounds");
    assert_eq!(s.next_seq(), 1);
}

#[test]
fn stats_overflow_is_refused() {
    let mut s = StoreState::new();
    s.commit(&Commit::at(0).write(usage("a", u64::MAX, 0)))
        .unwrap();
    let e = s
        .commit(&Commit::at(0).write(usage("b", 1, 0)))
        .unwrap_err();
    assert_eq!(e, CommitError::StatsOverflow);
    assert_eq!(s.stats().usage_rows, 1);
}

#[test]
fn seq_exhaustion_is_refused() {
    let mut s = StoreState::new();
    let e = s
        .commit(&Commit::at(0).floor(u64::MAX).write(del("n", "k")))
        .unwrap_err();
    assert_eq!(e, CommitError::SeqExhausted);
    let r = s
        .commit(&Commit::at(0).floor(u64::MAX - 1).write(del("n", "k")))
        .unwrap();
    assert_eq!(r.next_seq, u64::MAX);
}

#[test]
fn too_many_writes_is_refused() {
    let mut s = StoreState::new();
    let mut c = Commit::at(0);
    c.writes = vec![del("n", "k"); types::MAX_WRITES_PER_COMMIT + 1];
    assert_eq!(s.commit(&c).unwrap_err().reason(), "OutOfBounds");
}

#[test]
fn name_bounds() {
    assert!(RecordId::new("").is_err());
    assert!(RecordId::new("a\u{0}").is_err());
    assert!(RecordId::new("x".repeat(types::MAX_ID_LEN)).is_ok());
    assert_eq!(
        RecordId::new("x".repeat(types::MAX_ID_LEN + 1)),
        Err(BoundError::InvalidId {
            len: types::MAX_ID_LEN + 1
        })
    );
    assert!(Kind::new("k".repeat(types::MAX_KIND_LEN + 1)).is_err());
    assert!(Namespace::new("").is_err());
    assert!(RegisterKey::new("").is_err());
    assert!(KeyPrefix::new("").is_ok());
    assert!(serde_json::from_str::<RecordId>("\"\"").is_err());
    assert!(serde_json::from_str::<Kind>(&format!("\"{}\"", "k".repeat(65))).is_err());
    assert_eq!(
        serde_json::from_str::<RecordId>("\"ok\"").unwrap(),
        id("ok")
    );
    assert!(Payload::check_len(types::MAX_PAYLOAD_LEN + 1).is_err());
    let p: Payload = serde_json::from_str("[1,2,3]").unwrap();
    assert_eq!(p.as_bytes(), &[1, 2, 3]);
}

fn tree() -> StoreState {
    // r(compaction) <- a(m) <- b(tool) <- c(compaction) <- d(m) <- e(tool)
    let mut s = StoreState::new();
    s.commit(
        &Commit::at(0)
            .write(entry("r", None, "compaction"))
            .write(entry("a", Some("r"), "m"))
            .write(entry("b", Some("a"), "tool"))
            .write(entry("c", Some("b"), "compaction"))
            .write(entry("d", Some("c"), "m"))
            .write(entry("e", Some("d"), "tool"))
            .write(entry("side", Some("a"), "m")),
    )
    .unwrap();
    s
}

fn ids(v: &[Entry]) -> Vec<&str> {
    v.iter().map(|e| e.id.as_str()).collect()
}

#[test]
fn branch_scan_walks_leaf_to_root() {
    let s = tree();
    assert_eq!(
        ids(&s.scan_branch(&branch_scan(id("e"))).unwrap()),
        ["e", "d", "c", "b", "a", "r"]
    );
    assert_eq!(
        ids(&s.scan_branch(&branch_scan(id("side"))).unwrap()),
        ["side", "a", "r"]
    );
    assert_eq!(
        s.scan_branch(&branch_scan(id("zz"))),
        Err(StorageError::UnknownEntry { id: id("zz") })
    );
}

#[test]
fn branch_stop_is_resolved_before_filtering() {
    let s = tree();
    let q = branch_scan(id("e")).stop_at_kind(kind("compaction"));
    assert_eq!(ids(&s.scan_branch(&q).unwrap()), ["e", "d", "c"]);
    // The stop entry is filtered out but still stops the walk.
    let q = q.kinds([kind("m")]);
    assert_eq!(ids(&s.scan_branch(&q).unwrap()), ["d"]);
}

#[test]
fn branch_cursor_and_limit_page() {
    let s = tree();
    let q = branch_scan(id("e")).limit(2);
    let p1 = s.scan_branch(&q).unwrap();
    assert_eq!(ids(&p1), ["e", "d"]);
    let p2 = s.scan_branch(&q.clone().cursor(p1[1].seq)).unwrap();
    assert_eq!(ids(&p2), ["c", "b"]);
    assert!(s.scan_branch(&q.clone().limit(0)).unwrap().is_empty());
    assert!(s.scan_branch(&branch_scan(id("zz")).limit(0)).is_err());
}

/// `refine_heads` answers exactly what `refine` does and loads only the
/// entries it keeps.
#[test]
fn refine_heads_agrees_with_refine_and_loads_only_kept_entries() {
    let s = tree();
    let queries = [
        branch_scan(id("e")),
        branch_scan(id("e")).kinds([kind("m")]),
        branch_scan(id("e"))
            .stop_at_kind(kind("compaction"))
            .kinds([kind("m")]),
        branch_scan(id("e")).cursor(4).limit(2),
        branch_scan(id("e")).limit(0),
        branch_scan(id("side")).kinds([kind("tool")]),
    ];
    for q in queries {
        let walk: Vec<Entry> = s.walk(&q.leaf).collect::<Result<_, _>>().unwrap();
        let mut loaded = Vec::new();
        let lazy = q
            .refine_heads(
                walk.iter()
                    .map(|e| Ok::<_, StorageError>((e.kind.clone(), e.seq, e.id.clone()))),
                |(k, seq, _)| (k, *seq),
                |(_, _, i)| {
                    loaded.push(i.clone());
                    Ok(s.entry(&i).unwrap().clone())
                },
            )
            .unwrap();
        let eager = s.scan_branch(&q).unwrap();
        assert_eq!(lazy, eager, "{q:?}");
        let answered: Vec<RecordId> = eager.iter().map(|e| e.id.clone()).collect();
        assert_eq!(loaded, answered, "{q:?} loaded an entry it did not answer");
    }
    // An error in the walk propagates unchanged, before anything loads.
    let err = branch_scan(id("e")).refine_heads(
        [Err::<(Kind, Seq), _>("boom")],
        |(k, seq)| (k, *seq),
        |_| -> Result<Entry, &str> { panic!("loaded past an error") },
    );
    assert_eq!(err, Err("boom"));
}

#[test]
fn seq_range_scans() {
    let s = tree();
    assert_eq!(
        ids(&s.scan_entries(&entry_seq_range(Some(2), Some(4)))),
        ["b", "c"]
    );
    assert_eq!(ids(&s.scan_entries(&EntryScan::all().limit(2))), ["r", "a"]);
    assert!(s
        .scan_entries(&entry_seq_range(Some(u64::MAX), None))
        .is_empty());
    assert!(s
        .scan_entries(&entry_seq_range(Some(5), Some(3)))
        .is_empty());
    let heads = s.scan_entry_heads(&EntryScan::all());
    let full: Vec<EntryHead> = s
        .scan_entries(&EntryScan::all())
        .iter()
        .map(Entry::head)
        .collect();
    assert_eq!(heads, full);
}

#[test]
fn list_registers_by_prefix() {
    let mut s = StoreState::new();
    s.commit(
        &Commit::at(0)
            .write(set("n", "a/1", b"1"))
            .write(set("n", "a/2", b"2"))
            .write(set("n", "b/1", b"3"))
            .write(set("o", "a/9", b"4")),
    )
    .unwrap();
    let got: Vec<_> = s
        .list_registers(&ns("n"), &KeyPrefix::new("a/").unwrap())
        .into_iter()
        .map(|r| r.key.as_str().to_owned())
        .collect();
    assert_eq!(got, ["a/1", "a/2"]);
    assert_eq!(s.list_registers(&ns("n"), &KeyPrefix::all()).len(), 3);
    assert!(s.list_registers(&ns("zz"), &KeyPrefix::all()).is_empty());
}

#[test]
fn serde_round_trip_and_refusal_of_broken_records() {
    let mut s = tree();
    s.commit(
        &Commit::at(3)
            .write(usage("u", 5, 7))
            .write(set("n", "k", b"v")),
    )
    .unwrap();
    let json = serde_json::to_string(&s).unwrap();
    let back: StoreState = serde_json::from_str(&json).unwrap();
    assert_eq!(back, s);

    let mut bad = s.record();
    bad.stats.totals.input_tokens += 1;
    assert!(matches!(
        StoreState::try_from(bad),
        Err(StateError::StatsMismatch { .. })
    ));
    let mut bad = s.record();
    bad.usage[0].id = id("a");
    assert_eq!(
        StoreState::try_from(bad),
        Err(StateError::DuplicateId(id("a")))
    );
    let mut bad = s.record();
    bad.next_seq = 2;
    assert!(matches!(
        StoreState::try_from(bad),
        Err(StateError::SeqOutOfRange { .. })
    ));
    let mut bad = s.record();
    bad.entries[0].parent = Some(id("e"));
    assert!(matches!(
        StoreState::try_from(bad),
        Err(StateError::BrokenParent { .. })
    ));
}

#[test]
fn memory_storage_close_is_idempotent_and_typed() {
    let m = MemoryStorage::new();
    m.commit(&Commit::at(0).write(entry("a", None, "m")))
        .unwrap();
    m.close().unwrap();
    m.close().unwrap();
    assert_eq!(m.stats(), Err(StorageError::HandleClosed));
    assert_eq!(m.get_entries(&[id("a")]), Err(StorageError::HandleClosed));
    assert_eq!(
        m.commit(&Commit::at(0).write(del("n", "k"))),
        Err(CommitError::Faulted {
            reason: REASON_HANDLE_CLOSED.to_owned()
        })
    );
}

#[test]
fn memory_storage_poisoned_mutex_is_typed() {
    let m = std::sync::Arc::new(MemoryStorage::new());
    let m2 = m.clone();
    let _ = std::thread::spawn(move || {
        let _g = m2.inner_for_test().lock();
        panic!("poison the lock");
    })
    .join();
    assert_eq!(m.stats().unwrap_err().reason(), "BackendFault");
    assert_eq!(m.commit(&Commit::at(0)).unwrap_err().reason(), "Faulted");
    assert_eq!(m.close().unwrap_err().reason(), "BackendFault");
}

// ---------------------------------------------------------------- proptests

/// A small closed operation over a tiny name space, so collisions happen.
#[derive(Clone, Debug)]
enum Op {
    Entry {
        id: u8,
        parent: Option<u8>,
        kind: u8,
    },
    Usage {
        id: u8,
        input: u16,
        cost: u16,
    },
    Set {
        key: u8,
        val: u8,
    },
    Del {
        key: u8,
    },
}

#[derive(Clone, Debug)]
struct Tx {
    expect: Vec<(u8, Option<u8>)>,
    ops: Vec<Op>,
    floor: Option<u8>,
    ts: u16,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..12, proptest::option::of(0u8..12), 0u8..3).prop_map(|(id, parent, kind)| Op::Entry {
            id,
            parent,
            kind
        }),
        (0u8..12, any::<u16>(), any::<u16>()).prop_map(|(id, input, cost)| Op::Usage {
            id,
            input,
            cost
        }),
        (0u8..4, any::<u8>()).prop_map(|(key, val)| Op::Set { key, val }),
        (0u8..4).prop_map(|key| Op::Del { key }),
    ]
}

fn tx() -> impl Strategy<Value = Tx> {
    (
        proptest::collection::vec((0u8..4, proptest::option::of(0u8..40)), 0..3),
        proptest::collection::vec(op(), 0..5),
        proptest::option::of(0u8..60),
        any::<u16>(),
    )
        .prop_map(|(expect, ops, floor, ts)| Tx {
            expect,
            ops,
            floor,
            ts,
        })
}

fn to_commit(t: &Tx, s: &StoreState) -> Commit {
    let mut c = Commit::at(u64::from(t.ts));
    c.seq_floor = t.floor.map(u64::from);
    for (k, e) in &t.expect {
        // Half the time expect the true seq, so that commits succeed often.
        let expected = match e {
            Some(x) if x % 2 == 0 => s
                .get_register(&ns("r"), &key(&format!("k{k}")))
                .map(|r| r.seq),
            other => other.map(u64::from),
        };
        c = c.expect(ns("r"), key(&format!("k{k}")), expected);
    }
    for o in &t.ops {
        c = c.write(match o {
            Op::Entry {
                id: i,
                parent,
                kind: k,
            } => Write::InsertEntry {
                id: id(&format!("i{i}")),
                parent: parent.map(|p| id(&format!("i{p}"))),
                kind: kind(&format!("k{k}")),
                payload: Payload::new(vec![*i]).unwrap(),
            },
            Op::Usage { id: i, input, cost } => Write::InsertUsage {
                id: id(&format!("i{i}")),
                figures: UsageFigures {
                    input_tokens: u64::from(*input),
                    cost_micros: u64::from(*cost),
                    ..UsageFigures::default()
                },
                details: Payload::default(),
            },
            Op::Set { key: k, val } => Write::SetRegister {
                namespace: ns("r"),
                key: key(&format!("k{k}")),
                value: Payload::new(vec![*val]).unwrap(),
            },
            Op::Del { key: k } => Write::DeleteRegister {
                namespace: ns("r"),
                key: key(&format!("k{k}")),
            },
        });
    }
    c
}

/// A backend's commit as the retry property drives it.
type CommitFn = fn(&mut StoreState, &Commit) -> Result<CommitReceipt, CommitError>;

/// The retry rule over a stream: every commit carries its own id and is
/// sent twice (the first reply lost); the second answer must be the
/// first's, and the second attempt must change nothing.
fn retries_converge(commit: CommitFn, txs: &[Tx]) -> Result<(), String> {
    let mut s = StoreState::new();
    for (i, t) in txs.iter().enumerate() {
        let c = to_commit(t, &s).identified(CommitId::new(format!("c{i}")).unwrap());
        let first = commit(&mut s, &c);
        let after = s.clone();
        let retry = commit(&mut s, &c);
        if retry != first {
            return Err(format!("commit {i}: first {first:?}, retry {retry:?}"));
        }
        if s != after {
            return Err(format!("commit {i}: the retry changed the store"));
        }
    }
    Ok(())
}

fn honest_commit(s: &mut StoreState, c: &Commit) -> Result<CommitReceipt, CommitError> {
    s.commit(c)
}

/// A backend with nowhere to keep the commit id.
fn forgetful_commit(s: &mut StoreState, c: &Commit) -> Result<CommitReceipt, CommitError> {
    let mut c = c.clone();
    c.id = None;
    s.commit(&c)
}

#[test]
fn the_retry_property_catches_a_store_that_forgets_commit_ids() {
    let one_entry = Tx {
        expect: Vec::new(),
        ops: vec![Op::Entry {
            id: 1,
            parent: None,
            kind: 0,
        }],
        floor: None,
        ts: 1,
    };
    assert_eq!(
        retries_converge(honest_commit, std::slice::from_ref(&one_entry)),
        Ok(())
    );
    let caught = retries_converge(forgetful_commit, &[one_entry]);
    assert!(
        caught.as_ref().is_err_and(|e| e.contains("DuplicateId")),
        "{caught:?}"
    );
}

#[test]
fn the_store_keeps_its_last_identified_commits_and_forgets_the_oldest() {
    let mut s = StoreState::new();
    let set = |i: usize| {
        Commit::at(1)
            .write(Write::SetRegister {
                namespace: ns("r"),
                key: key("k"),
                value: Payload::new(vec![1]).unwrap(),
            })
            .identified(CommitId::new(format!("c{i}")).unwrap())
    };
    let first = s.commit(&set(0)).unwrap();
    for i in 1..KEPT_COMMITS {
        s.commit(&set(i)).unwrap();
    }
    // Still kept: the retry is its own receipt, nothing applied.
    let before = s.clone();
    assert_eq!(s.commit(&set(0)), Ok(first.clone()));
    assert_eq!(s, before);
    // One more identified commit pushes it out: decided afresh.
    s.commit(&set(KEPT_COMMITS)).unwrap();
    let again = s.commit(&set(0)).unwrap();
    assert_ne!(again, first);
    assert_eq!(s.record().kept_commits.len(), KEPT_COMMITS);
}

#[test]
fn the_same_commit_id_with_other_content_is_refused_and_applies_nothing() {
    let mut s = StoreState::new();
    let c = Commit::at(1)
        .write(Write::SetRegister {
            namespace: ns("r"),
            key: key("k"),
            value: Payload::new(b"v".to_vec()).unwrap(),
        })
        .identified(CommitId::new("c").unwrap());
    let first = s.commit(&c).unwrap();
    let after = s.clone();
    let mut other = c.clone();
    other.ts = 2;
    assert_eq!(
        s.commit(&other),
        Err(CommitError::CommitIdReused {
            id: CommitId::new("c").unwrap()
        })
    );
    assert_eq!(s, after);
    assert_eq!(s.commit(&c), Ok(first));
    assert_eq!(s, after);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_retried_commit_applies_at_most_once_and_gets_its_own_answer(
        txs in proptest::collection::vec(tx(), 1..25),
    ) {
        prop_assert_eq!(retries_converge(honest_commit, &txs), Ok(()));
    }

    #[test]
    fn commits_keep_every_invariant(txs in proptest::collection::vec(tx(), 1..25)) {
        let mut s = StoreState::new();
        for t in &txs {
            let c = to_commit(t, &s);
            let before = s.clone();
            match s.commit(&c) {
                Ok(r) => {
                    // One seq per write, consecutive, from max(next, floor).
                    prop_assert_eq!(r.seqs.len(), c.writes.len());
                    if let Some(first) = r.seqs.first() {
                        let want = before.next_seq().max(c.seq_floor.unwrap_or(0));
                        prop_assert_eq!(*first, want);
                        prop_assert!(r.seqs.windows(2).all(|w| w[1] == w[0] + 1));
                        prop_assert_eq!(r.next_seq, r.seqs[r.seqs.len() - 1] + 1);
                        prop_assert!(s.next_seq() > before.next_seq());
                    } else {
                        prop_assert_eq!(&s, &before);
                    }
                    // Every write is observable under the seq it was given.
                    for (w, seq) in c.writes.iter().zip(&r.seqs) {
                        match w {
                            Write::InsertEntry { id, .. } => prop_assert_eq!(s.entry(id).map(|e| e.seq), Some(*seq)),
                            Write::InsertUsage { id, .. } => prop_assert_eq!(s.usage_row(id).map(|u| u.seq), Some(*seq)),
                            Write::SetRegister { .. } | Write::DeleteRegister { .. } => {}
                        }
                    }
                    // Every expectation held against the pre-commit state.
                    for e in &c.expectations {
                        prop_assert_eq!(before.get_register(&e.namespace, &e.key).map(|r| r.seq), e.expected);
                    }
                }
                Err(_) => prop_assert_eq!(&s, &before, "a refused commit changed the store"),
            }
            // Stats equal the ledger sum after every commit.
            let ledger = s.scan_usage(&UsageScan::all());
            prop_assert_eq!(Stats::of(ledger.iter()), Some(s.stats()));
            prop_assert_eq!(s.check_invariants(), Ok(()));
        }
        // The store has a written form.
        prop_assert_eq!(crate::pairs::round_trips(&s), Ok(()));
    }

    #[test]
    fn branch_scan_pages_concatenate_to_the_filtered_walk(
        txs in proptest::collection::vec(tx(), 1..25),
        leaf in any::<u8>(), stop in proptest::option::of(0u8..3),
        filter in proptest::option::of(0u8..3), page in 1usize..4,
    ) {
        let mut s = StoreState::new();
        for t in &txs {
            let c = to_commit(t, &s);
            let _ = s.commit(&c);
        }
        let all = s.scan_entries(&EntryScan::all());
        if all.is_empty() {
            return Ok(());
        }
        let leaf = all[usize::from(leaf) % all.len()].id.clone();
        let mut q = branch_scan(leaf.clone());
        if let Some(k) = stop { q = q.stop_at_kind(kind(&format!("k{k}"))); }
        if let Some(k) = filter { q = q.kinds([kind(&format!("k{k}"))]); }
        // Reference: walk by parent links, cut after the first stop, filter.
        let mut want = Vec::new();
        let mut cur = s.entry(&leaf).cloned();
        while let Some(e) = cur {
            let stops = stop.is_some_and(|k| e.kind.as_str() == format!("k{k}"));
            cur = e.parent.as_ref().and_then(|p| s.entry(p).cloned());
            if filter.is_none_or(|k| e.kind.as_str() == format!("k{k}")) { want.push(e); }
            if stops { break; }
        }
        prop_assert_eq!(&s.scan_branch(&q).unwrap(), &want);
        // Paging with cursor + limit yields the same sequence.
        let mut got = Vec::new();
        let mut pq = q.clone().limit(page);
        loop {
            let p = s.scan_branch(&pq).unwrap();
            prop_assert!(p.len() <= page);
            let Some(last) = p.last() else { break };
            pq = pq.cursor(last.seq);
            got.extend(p);
        }
        prop_assert_eq!(got, want);
    }

    #[test]
    fn seq_range_scans_partition(txs in proptest::collection::vec(tx(), 1..20), cut in 0u64..80) {
        let mut s = StoreState::new();
        for t in &txs {
            let c = to_commit(t, &s);
            let _ = s.commit(&c);
        }
        let all = s.scan_entries(&EntryScan::all());
        prop_assert!(all.windows(2).all(|w| w[0].seq < w[1].seq));
        let mut lo = s.scan_entries(&entry_seq_range(None, Some(cut)));
        lo.extend(s.scan_entries(&entry_seq_range(Some(cut), None)));
        prop_assert_eq!(&lo, &all);
        let heads: Vec<EntryHead> = all.iter().map(Entry::head).collect();
        prop_assert_eq!(s.scan_entry_heads(&EntryScan::all()), heads);
        let u = s.scan_usage(&UsageScan::all());
        let mut ul = s.scan_usage(&usage_seq_range(None, Some(cut)));
        ul.extend(s.scan_usage(&usage_seq_range(Some(cut), None)));
        prop_assert_eq!(ul, u);
    }
}

#[test]
fn a_lost_lease_is_the_lease_machines_refusal_with_its_reason() {
    use crate::lease::{LeaseError, Owner};
    for held_by in [None, Some(Owner::new("owner-b").unwrap())] {
        let lease = LeaseError::LeaseLost {
            held_by: held_by.clone(),
        };
        let commit = CommitError::from(lease.clone());
        assert_eq!(commit.to_string(), lease.to_string());
        assert_eq!(commit.reason(), "LeaseLost");
        assert_eq!(lease.reason(), "LeaseLost");
        assert_eq!(commit, CommitError::Lease(lease));
    }
    assert_eq!(
        CommitError::from(LeaseError::LeaseLost {
            held_by: Some(Owner::new("owner-b").unwrap())
        })
        .to_string(),
        "LeaseLost: the writer lease is lost to owner-b"
    );
    assert_eq!(
        CommitError::from(LeaseError::LeaseLost { held_by: None }).to_string(),
        "LeaseLost: the writer lease is lost"
    );
}

#[test]
fn every_lease_refusal_message_starts_with_its_reason() {
    use crate::lease::{LeaseError, Owner};
    let all = [
        LeaseError::LeaseHeld {
            holder: Owner::new("a").unwrap(),
            fence: 2,
            expires_at: 9,
        },
        LeaseError::LeaseLost { held_by: None },
        LeaseError::InvalidTtl,
        LeaseError::ClockOverflow { now: 1, ttl: 2 },
        LeaseError::FenceExhausted(7),
        LeaseError::InvalidOwner { len: 0 },
    ];
    for e in all {
        assert!(
            e.to_string().starts_with(&format!("{}: ", e.reason())),
            "{e}"
        );
    }
}

/// Whether row effect `e` is write `w` at `ts` (its seq aside).
fn is_write(e: &Effect, w: &Write, ts: u64) -> bool {
    match (e, w) {
        (
            Effect::InsertEntry(e),
            Write::InsertEntry {
                id,
                parent,
                kind,
                payload,
            },
        ) => {
            e.id == *id
                && e.parent == *parent
                && e.kind == *kind
                && e.payload == *payload
                && e.ts == ts
        }
        (
            Effect::InsertUsage(u),
            Write::InsertUsage {
                id,
                figures,
                details,
            },
        ) => u.id == *id && u.figures == *figures && u.details == *details && u.ts == ts,
        (
            Effect::SetRegister(r),
            Write::SetRegister {
                namespace,
                key,
                value,
            },
        ) => r.namespace == *namespace && r.key == *key && r.value == *value,
        (
            Effect::DeleteRegister { namespace, key, .. },
            Write::DeleteRegister {
                namespace: n,
                key: k,
            },
        ) => namespace == n && key == k,
        _ => false,
    }
}

/// What a decision's effects must say, checked against the commit, its
/// receipt and the context it was decided on: a replay of the kept commit
/// writes nothing and answers the kept receipt; otherwise one row effect
/// per write, in write order, each that very write, carrying the receipt's
/// seqs; ids new to the context and to each other; then the head, once,
/// exactly when something was written, with the receipt's next seq and the
/// context's stats plus the usage rows; then the kept commit, last, exactly
/// for an identified commit, holding the receipt.
fn effects_agree(ctx: &CommitContext, c: &Commit, d: &CommitDecision) -> Result<(), String> {
    if let (Some(id), Some(last)) = (&c.id, &ctx.last) {
        if *id == last.id {
            return match (d.effects.is_empty(), d.receipt == last.receipt) {
                (true, true) => Ok(()),
                _ => Err(format!("a replay answered {d:?}")),
            };
        }
    }
    let mut seqs = Vec::new();
    let mut stats = ctx.stats;
    let mut ids = std::collections::BTreeSet::new();
    let mut head = None;
    let mut keep = None;
    let mut writes = c.writes.iter();
    for (i, e) in d.effects.iter().enumerate() {
        if keep.is_some() {
            return Err(format!("effect {i} after the kept commit: {e:?}"));
        }
        let row = !matches!(e, Effect::Head { .. } | Effect::KeepCommit(_));
        if row {
            if head.is_some() {
                return Err(format!("row effect {i} after the head: {e:?}"));
            }
            match writes.next() {
                Some(w) if is_write(e, w, c.ts) => {}
                w => return Err(format!("effect {i} {e:?} is not write {w:?}")),
            }
        }
        let new_id = match e {
            Effect::InsertEntry(e) => {
                seqs.push(e.seq);
                Some(&e.id)
            }
            Effect::InsertUsage(u) => {
                seqs.push(u.seq);
                stats = stats.checked_add(&u.figures).ok_or("stats overflow")?;
                Some(&u.id)
            }
            Effect::SetRegister(r) => {
                seqs.push(r.seq);
                None
            }
            Effect::DeleteRegister { seq, .. } => {
                seqs.push(*seq);
                None
            }
            Effect::Head { next_seq, stats } => {
                if head.replace((*next_seq, *stats)).is_some() {
                    return Err(format!("a second head at effect {i}"));
                }
                None
            }
            Effect::KeepCommit(k) => {
                keep = Some(k);
                None
            }
        };
        if let Some(id) = new_id {
            if ctx.ids.contains_key(id) || !ids.insert(id.clone()) {
                return Err(format!("effect {i} inserts {id}, which is not new"));
            }
        }
    }
    if let Some(w) = writes.next() {
        return Err(format!("write {w:?} has no effect"));
    }
    if seqs != d.receipt.seqs {
        return Err(format!("row seqs {seqs:?}, receipt {:?}", d.receipt.seqs));
    }
    let want_head = (!seqs.is_empty()).then_some((d.receipt.next_seq, stats));
    if head != want_head {
        return Err(format!("head {head:?}, want {want_head:?}"));
    }
    match (&c.id, keep) {
        (None, None) => Ok(()),
        (Some(id), Some(k)) if k.id == *id && k.receipt == d.receipt => Ok(()),
        (id, k) => Err(format!("commit id {id:?}, kept {k:?}")),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Over a stream of commits (half of them identified), every accepted
    /// decision's effects agree with its receipt and its context
    /// ([`effects_agree`]); applying them to the store gives what the
    /// receipt promises (its next seq, each inserted entry and the last
    /// write of each register cell); and deciding the same identified
    /// commit again applies nothing and answers the same receipt.
    #[test]
    fn a_decisions_effects_agree_with_its_answer(
        txs in proptest::collection::vec((tx(), any::<bool>()), 0..24),
    ) {
        let mut s = StoreState::new();
        for (i, (t, identified)) in txs.iter().enumerate() {
            let mut c = to_commit(t, &s);
            if *identified {
                c = c.identified(CommitId::new(format!("c{i}")).unwrap());
            }
            let ctx = s.context_for(&c.footprint());
            let Ok(d) = decide(&ctx, &c) else {
                continue;
            };
            prop_assert_eq!(effects_agree(&ctx, &c, &d), Ok(()));
            let (before_next, before_stats) = (s.next_seq(), s.stats());
            s.apply(d.effects.clone());
            match d.head() {
                None => {
                    prop_assert_eq!(s.next_seq(), before_next);
                    prop_assert_eq!(s.stats(), before_stats);
                }
                Some((next, stats)) => {
                    prop_assert_eq!(s.next_seq(), d.receipt.next_seq);
                    prop_assert_eq!(next, d.receipt.next_seq);
                    prop_assert_eq!(&s.stats(), stats);
                }
            }
            let mut last: std::collections::BTreeMap<(String, String), Option<Register>> =
                std::collections::BTreeMap::new();
            for e in &d.effects {
                match e {
                    Effect::InsertEntry(e) => {
                        let got = s.get_entries(std::slice::from_ref(&e.id)).unwrap();
                        prop_assert_eq!(got, vec![Some(e.clone())]);
                    }
                    Effect::SetRegister(r) => {
                        last.insert((r.namespace.as_str().into(), r.key.as_str().into()), Some(r.clone()));
                    }
                    Effect::DeleteRegister { namespace, key, .. } => {
                        last.insert((namespace.as_str().into(), key.as_str().into()), None);
                    }
                    _ => {}
                }
            }
            for ((n, k), want) in last {
                prop_assert_eq!(s.get_register(&ns(&n), &key(&k)), want);
            }
            if c.id.is_some() {
                let again = decide(&s.context_for(&c.footprint()), &c).unwrap();
                prop_assert!(again.effects.is_empty());
                prop_assert_eq!(again.receipt, d.receipt);
            }
        }
    }
}

/// The agreement check has teeth: a decision that drops its head, writes
/// a seq the receipt does not name, keeps nothing for an identified
/// commit, puts its head before a row or after the kept commit, writes two
/// heads, or drops a write from both its effects and its receipt is
/// refused.
#[test]
fn the_effects_check_refuses_what_it_must() {
    let s = StoreState::new();
    let c = Commit::at(1)
        .write(set("r", "k", b"v"))
        .identified(CommitId::new("c").unwrap());
    let ctx = s.context_for(&c.footprint());
    let d = decide(&ctx, &c).unwrap();
    assert_eq!(effects_agree(&ctx, &c, &d), Ok(()));
    let broken = |f: fn(&mut Vec<Effect>)| {
        let mut d = d.clone();
        f(&mut d.effects);
        effects_agree(&ctx, &c, &d)
    };
    assert!(broken(|e| e.retain(|e| !matches!(e, Effect::Head { .. }))).is_err());
    assert!(broken(|e| e.retain(|e| !matches!(e, Effect::KeepCommit(_)))).is_err());
    assert!(broken(|e| {
        if let Some(Effect::SetRegister(r)) = e.first_mut() {
            r.seq += 1;
        }
    })
    .is_err());
    assert!(broken(|e| e.swap(1, 2)).is_err());
    assert!(broken(|e| e.swap(0, 1)).is_err());
    assert!(broken(|e| {
        let head = e[1].clone();
        e.insert(1, head);
    })
    .is_err());
    // A write dropped from both the effects and the receipt.
    let two = Commit::at(1)
        .write(set("r", "k", b"v"))
        .write(del("r", "j"));
    let ctx = s.context_for(&two.footprint());
    let d = decide(&ctx, &two).unwrap();
    assert_eq!(effects_agree(&ctx, &two, &d), Ok(()));
    let mut dropped = d.clone();
    dropped.effects.remove(1);
    dropped.receipt.seqs.pop();
    let Some(Effect::Head { next_seq, .. }) = dropped.effects.get_mut(1) else {
        panic!("{dropped:?}");
    };
    *next_seq -= 1;
    dropped.receipt.next_seq -= 1;
    assert!(effects_agree(&ctx, &two, &dropped).is_err());
}
