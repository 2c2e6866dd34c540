//! Differential test: random commit sequences and queries through
//! `MemoryStorage` (the oracle), `SqliteStorage` and `PgStorage` must answer
//! identically, commit by commit and query by query.
//!
//! Cases: `DIFF_CASES` (default 96), each up to 24 steps; every step is a
//! commit followed by a batch of random queries, and the whole observable
//! state is compared at the end of each case. Every PostgreSQL case is a
//! new session in one shared schema (so the cases also run side by side
//! with every earlier case's rows in the same tables). Seq floors include
//! `2^63` and `u64::MAX - 2`: the whole `u64` seq range, `SeqExhausted`
//! included, must answer like the oracle.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use custos_core::lease::Owner;
use custos_core::storage::{
    BranchScan, Commit, EntryScan, KeyPrefix, Kind, MemoryStorage, Namespace, Payload, RecordId,
    RegisterKey, SeqExpectation, Storage, UsageFigures, UsageScan, Write,
};
use custos_postgres::storage::{PgStorage, StorageConfig};
use custos_postgres::Target;
use custos_sqlite::SqliteStorage;
use custos_testkit::pg_cluster::{shared, unique_schema};
use proptest::prelude::*;

const IDS: usize = 24;
const KINDS: &[&str] = &["m", "tool", "compaction"];
const NSS: &[&str] = &["n", "o"];
const KEYS: &[&str] = &["a", "ab", "abc", "b"];

fn rid(i: usize) -> RecordId {
    RecordId::new(format!("i{i}")).unwrap()
}
fn kind(i: usize) -> Kind {
    Kind::new(KINDS[i % KINDS.len()]).unwrap()
}
fn ns(i: usize) -> Namespace {
    Namespace::new(NSS[i % NSS.len()]).unwrap()
}
fn key(i: usize) -> RegisterKey {
    RegisterKey::new(KEYS[i % KEYS.len()]).unwrap()
}

#[derive(Clone, Debug)]
enum W {
    Entry(usize, Option<usize>, usize, Vec<u8>),
    Usage(usize, u64, u64),
    Set(usize, usize, Vec<u8>),
    Del(usize, usize),
}

#[derive(Clone, Debug)]
enum Expect {
    /// Expect whatever the oracle currently holds (so CAS often succeeds).
    Current(usize, usize),
    Fixed(usize, usize, Option<u64>),
}

#[derive(Clone, Debug)]
struct Step {
    expect: Vec<Expect>,
    writes: Vec<W>,
    floor: Option<u64>,
    ts: u64,
    queries: Vec<Q>,
}

#[derive(Clone, Debug)]
enum Q {
    Branch {
        leaf: usize,
        stops: Vec<usize>,
        kinds: Option<Vec<usize>>,
        cursor: Option<u64>,
        limit: Option<usize>,
    },
    Entries(Option<u64>, Option<u64>, Option<usize>),
    Heads(Option<u64>, Option<u64>, Option<usize>),
    Usage(Option<u64>, Option<u64>, Option<usize>),
    Get(Vec<usize>),
    Reg(usize, usize),
    List(usize, usize),
    Stats,
}

fn w() -> impl Strategy<Value = W> {
    let payload = prop::collection::vec(any::<u8>(), 0..12);
    prop_oneof![
        4 => (0..IDS, prop::option::weighted(0.8, 0..IDS), 0..KINDS.len(), payload.clone())
            .prop_map(|(i, p, k, b)| W::Entry(i, p, k, b)),
        1 => (0..IDS, 0..1000u64, 0..50u64).prop_map(|(i, t, c)| W::Usage(i, t, c)),
        2 => (0..NSS.len(), 0..KEYS.len(), payload).prop_map(|(n, k, b)| W::Set(n, k, b)),
        1 => (0..NSS.len(), 0..KEYS.len()).prop_map(|(n, k)| W::Del(n, k)),
    ]
}

fn expect() -> impl Strategy<Value = Expect> {
    prop_oneof![
        3 => (0..NSS.len(), 0..KEYS.len()).prop_map(|(n, k)| Expect::Current(n, k)),
        1 => (0..NSS.len(), 0..KEYS.len(), prop::option::of(0..40u64))
            .prop_map(|(n, k, s)| Expect::Fixed(n, k, s)),
    ]
}

fn bound() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        3 => Just(None),
        3 => (0..80u64).prop_map(Some),
        1 => Just(Some(u64::MAX)),
        1 => Just(Some(u64::MAX - 1)),
    ]
}

fn q() -> impl Strategy<Value = Q> {
    let limit = prop::option::of(0..6usize);
    prop_oneof![
        4 => (
            0..IDS,
            prop::collection::vec(0..KINDS.len(), 0..2),
            prop::option::of(prop::collection::vec(0..KINDS.len(), 0..3)),
            prop::option::of(0..80u64),
            limit.clone(),
        )
            .prop_map(|(leaf, stops, kinds, cursor, limit)| Q::Branch { leaf, stops, kinds, cursor, limit }),
        1 => (bound(), bound(), limit.clone()).prop_map(|(a, t, l)| Q::Entries(a, t, l)),
        1 => (bound(), bound(), limit.clone()).prop_map(|(a, t, l)| Q::Heads(a, t, l)),
        1 => (bound(), bound(), limit).prop_map(|(a, t, l)| Q::Usage(a, t, l)),
        1 => prop::collection::vec(0..IDS + 2, 0..4).prop_map(Q::Get),
        1 => (0..NSS.len(), 0..KEYS.len()).prop_map(|(n, k)| Q::Reg(n, k)),
        1 => (0..NSS.len(), 0..KEYS.len() + 1).prop_map(|(n, k)| Q::List(n, k)),
        1 => Just(Q::Stats),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop::collection::vec(expect(), 0..3),
        prop::collection::vec(w(), 0..5),
        prop::option::weighted(
            0.15,
            prop_oneof![0..60u64, Just(u64::MAX - 2), Just(1u64 << 63)],
        ),
        0..1_000u64,
        prop::collection::vec(q(), 0..4),
    )
        .prop_map(|(expect, writes, floor, ts, queries)| Step {
            expect,
            writes,
            floor,
            ts,
            queries,
        })
}

fn build(step: &Step, oracle: &MemoryStorage) -> Commit {
    let mut c = Commit::at(step.ts);
    c.seq_floor = step.floor;
    for e in &step.expect {
        let (n, k, s) = match e {
            Expect::Current(n, k) => {
                let s = oracle
                    .get_register(&ns(*n), &key(*k))
                    .unwrap()
                    .map(|r| r.seq);
                (*n, *k, s)
            }
            Expect::Fixed(n, k, s) => (*n, *k, *s),
        };
        c.expectations.push(SeqExpectation {
            namespace: ns(n),
            key: key(k),
            expected: s,
        });
    }
    for w in &step.writes {
        c.writes.push(match w {
            W::Entry(i, p, k, b) => Write::InsertEntry {
                id: rid(*i),
                parent: p.map(rid),
                kind: kind(*k),
                payload: Payload::new(b.clone()).unwrap(),
            },
            W::Usage(i, t, cost) => Write::InsertUsage {
                id: rid(*i),
                figures: UsageFigures {
                    input_tokens: *t,
                    output_tokens: t / 3,
                    cache_read_tokens: 1,
                    cache_write_tokens: 2,
                    cost_micros: *cost,
                },
                details: Payload::new(t.to_le_bytes().to_vec()).unwrap(),
            },
            W::Set(n, k, b) => Write::SetRegister {
                namespace: ns(*n),
                key: key(*k),
                value: Payload::new(b.clone()).unwrap(),
            },
            W::Del(n, k) => Write::DeleteRegister {
                namespace: ns(*n),
                key: key(*k),
            },
        });
    }
    c
}

fn ask<S: Storage>(s: &S, q: &Q) -> String {
    match q {
        Q::Branch {
            leaf,
            stops,
            kinds,
            cursor,
            limit,
        } => {
            let bs = BranchScan {
                leaf: rid(*leaf),
                stop_at_kinds: stops.iter().map(|k| kind(*k)).collect::<BTreeSet<_>>(),
                kinds: kinds.as_ref().map(|v| v.iter().map(|k| kind(*k)).collect()),
                cursor: *cursor,
                limit: *limit,
            };
            format!("{:?}", s.scan_branch(&bs))
        }
        Q::Entries(a, t, l) => {
            format!(
                "{:?}",
                s.scan_entries(&EntryScan {
                    after: *a,
                    through: *t,
                    limit: *l
                })
            )
        }
        Q::Heads(a, t, l) => {
            format!(
                "{:?}",
                s.scan_entry_heads(&EntryScan {
                    after: *a,
                    through: *t,
                    limit: *l
                })
            )
        }
        Q::Usage(a, t, l) => {
            format!(
                "{:?}",
                s.scan_usage(&UsageScan {
                    after: *a,
                    through: *t,
                    limit: *l
                })
            )
        }
        Q::Get(ids) => format!(
            "{:?}",
            s.get_entries(&ids.iter().map(|i| rid(*i)).collect::<Vec<_>>())
        ),
        Q::Reg(n, k) => format!("{:?}", s.get_register(&ns(*n), &key(*k))),
        Q::List(n, k) => {
            let p = KEYS
                .get(*k)
                .map_or_else(KeyPrefix::all, |p| KeyPrefix::new(*p).unwrap());
            format!("{:?}", s.list_registers(&ns(*n), &p))
        }
        Q::Stats => format!("{:?}", s.stats()),
    }
}

fn everything<S: Storage>(s: &S) -> String {
    let mut out = format!(
        "{:?}\n{:?}\n{:?}\n",
        s.scan_entries(&EntryScan::all()),
        s.scan_usage(&UsageScan::all()),
        s.stats()
    );
    for n in 0..NSS.len() {
        out.push_str(&format!(
            "{:?}\n",
            s.list_registers(&ns(n), &KeyPrefix::all())
        ));
    }
    for leaf in 0..IDS {
        out.push_str(&format!(
            "{:?}\n",
            s.scan_branch(&custos_core::storage::branch_scan(rid(leaf)))
        ));
    }
    out
}

fn cases() -> u32 {
    std::env::var("DIFF_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96)
}

/// A new session in the schema every case shares.
fn open_pg() -> PgStorage {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static T: OnceLock<Target> = OnceLock::new();
    static N: AtomicU64 = AtomicU64::new(0);
    let t = T
        .get_or_init(|| {
            Target::new(shared().unwrap().url(), unique_schema("storage_diff")).unwrap()
        })
        .clone();
    let session = format!("case-{}", N.fetch_add(1, Ordering::Relaxed));
    PgStorage::open(StorageConfig::new(
        t,
        session,
        Owner::new("differential").unwrap(),
    ))
    .unwrap()
}

fn run_case(steps: &[Step], counts: &mut (u64, u64, u64, u64)) -> Result<(), TestCaseError> {
    let mem = MemoryStorage::new();
    let sql = SqliteStorage::open_temp().unwrap();
    let pg = open_pg();
    for st in steps {
        let c = build(st, &mem);
        let a = mem.commit(&c);
        let b = sql.commit(&c);
        let p = pg.commit(&c);
        prop_assert_eq!(&a, &b, "sqlite commit {:?}", c);
        prop_assert_eq!(&a, &p, "postgres commit {:?}", c);
        counts.1 += 1;
        match &a {
            Err(_) => counts.2 += 1,
            Ok(r) if r.seqs.iter().any(|s| *s >= 1 << 63) => counts.3 += 1,
            Ok(_) => {}
        }
        for q in &st.queries {
            let want = ask(&mem, q);
            prop_assert_eq!(&want, &ask(&sql, q), "sqlite query {:?}", q);
            prop_assert_eq!(&want, &ask(&pg, q), "postgres query {:?}", q);
        }
    }
    let want = everything(&mem);
    prop_assert_eq!(&want, &everything(&sql), "sqlite: everything");
    prop_assert_eq!(&want, &everything(&pg), "postgres: everything");
    let closed = mem.close();
    prop_assert_eq!(&closed, &sql.close());
    prop_assert_eq!(&closed, &pg.close());
    let want = ask(&mem, &Q::Stats);
    prop_assert_eq!(&want, &ask(&sql, &Q::Stats));
    prop_assert_eq!(&want, &ask(&pg, &Q::Stats));
    counts.0 += 1;
    Ok(())
}

#[test]
fn sqlite_and_postgres_answer_exactly_like_memory() {
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let counts = std::cell::RefCell::new((0u64, 0u64, 0u64, 0u64));
    let started = std::time::Instant::now();
    let result = runner.run(&prop::collection::vec(step(), 1..24), |steps| {
        run_case(&steps, &mut counts.borrow_mut())
    });
    let (cases_run, commits, refused, high) = *counts.borrow();
    println!(
        "differential: {cases_run} cases passed ({} configured), {commits} commits compared ({refused} refused by all three, {high} accepted with seqs >= 2^63) in {:?}",
        cases(),
        started.elapsed()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}
