//! Multi-process crash test. The test binary re-executes itself as a child
//! (`CUSTOS_CRASH_CHILD=<path>`) that opens the session with a short lease
//! TTL and commits in a loop, printing `ACK <seq>` after each acknowledged
//! commit. The parent SIGKILLs it after a random short delay, waits out the
//! TTL, reopens as a new owner and checks: no acknowledged commit is lost,
//! the fence was bumped past the child's, and stats equal the ledger. The
//! delays come from a seed (printed; `CUSTOS_SIGKILL_SEED` replays a run);
//! `CUSTOS_TORTURE_ITERATIONS` sets the count.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use custos_core::lease::Owner;
use custos_core::storage::{
    branch_scan, Commit, EntryScan, Kind, Payload, RecordId, Stats, Storage, UsageFigures,
    UsageScan, Write,
};
use custos_sqlite::{Config, SqliteStorage};
use custos_torture as torture;

const CHILD_ENV: &str = "CUSTOS_CRASH_CHILD";
const TTL_MS: u64 = 100;
/// The default count, so that `cargo test` stays fast; `make torture` sets more.
const DEFAULT_ITERATIONS: u64 = 24;

/// Child mode: a no-op unless `CUSTOS_CRASH_CHILD` names a database.
#[test]
fn crash_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let tag = std::env::var("CUSTOS_CRASH_TAG").unwrap();
    let cfg = Config::new(&path, Owner::new(format!("child-{tag}")).unwrap()).ttl(TTL_MS);
    let s = SqliteStorage::open(cfg).unwrap();
    let (_, fence) = s.lease_pair().unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "FENCE {fence}").unwrap();
    out.flush().unwrap();
    // Continue the chain from the newest entry, if any.
    let mut parent = s
        .scan_entry_heads(&EntryScan::all())
        .unwrap()
        .last()
        .map(|h| h.id.clone());
    for n in 0u64.. {
        let id = RecordId::new(format!("{tag}-{n}")).unwrap();
        let c = Commit::at(n)
            .write(Write::InsertEntry {
                id: id.clone(),
                parent: parent.clone(),
                kind: Kind::new("m").unwrap(),
                payload: Payload::new(vec![7u8; 64]).unwrap(),
            })
            .write(Write::InsertUsage {
                id: RecordId::new(format!("{tag}-u{n}")).unwrap(),
                figures: UsageFigures {
                    input_tokens: n,
                    output_tokens: 1,
                    ..UsageFigures::default()
                },
                details: Payload::default(),
            });
        let r = s.commit(&c).unwrap();
        writeln!(out, "ACK {}", r.seqs[0]).unwrap();
        out.flush().unwrap();
        parent = Some(id);
    }
}

/// Runs child `tag` for `delay`, SIGKILLs it; the fence it printed and
/// the sequence numbers it acknowledged (complete lines only).
fn run_child(path: &Path, tag: u64, delay: Duration) -> (Option<u64>, Vec<u64>) {
    let mut cmd = torture::child("crash_child");
    cmd.env(CHILD_ENV, path)
        .env("CUSTOS_CRASH_TAG", tag.to_string());
    let killed = torture::Running::spawn(cmd).kill_after(delay);
    let mut fence = None;
    let mut acks = Vec::new();
    for line in &killed.lines {
        if let Some(f) = line.strip_prefix("FENCE ") {
            fence = f.trim().parse().ok();
        } else if let Some(seq) = line
            .strip_prefix("ACK ")
            .and_then(|s| s.trim().parse().ok())
        {
            acks.push(seq);
        }
    }
    (fence, acks)
}

#[test]
fn sigkilled_writer_loses_no_acknowledged_commit() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let iterations = torture::iterations(DEFAULT_ITERATIONS);
    let seed = torture::seed("session", None);
    let mut rng = seed;
    let started = Instant::now();
    let mut all_acked: Vec<u64> = Vec::new();
    let mut last_fence = 0;
    let mut killed_with_acks = 0;
    let mut lost = 0u64;
    let mut checked = 0u64;
    for i in 0..iterations {
        let _replay = torture::Replay {
            store: "session",
            seed,
            iteration: i,
        };
        let delay = Duration::from_millis(30 + torture::xorshift(&mut rng) % 150);
        let (child_fence, acks) = run_child(&path, i, delay);
        if !acks.is_empty() {
            killed_with_acks += 1;
        }
        all_acked.extend(&acks);
        checked += acks.len() as u64;
        // Wait out the dead child's lease, then reopen as a new owner.
        std::thread::sleep(Duration::from_millis(TTL_MS + 50));
        let s = SqliteStorage::open(
            Config::new(&path, Owner::new(format!("parent-{i}")).unwrap()).ttl(10_000),
        )
        .unwrap_or_else(|e| panic!("iteration {i}: reopen failed: {e}"));
        let (_, fence) = s.lease_pair().unwrap();
        if let Some(cf) = child_fence {
            assert!(
                fence > cf,
                "iteration {i}: fence {fence} not above the child's {cf}"
            );
        }
        assert!(fence > last_fence, "iteration {i}: fence did not increase");
        last_fence = fence;
        let stored: std::collections::BTreeSet<u64> = s
            .scan_entries(&EntryScan::all())
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        for seq in &all_acked {
            if !stored.contains(seq) {
                lost += 1;
                eprintln!("iteration {i}: acknowledged seq {seq} lost (seed {seed})");
            }
        }
        all_acked.retain(|seq| stored.contains(seq));
        let ledger = s.scan_usage(&UsageScan::all()).unwrap();
        assert_eq!(
            Some(s.stats().unwrap()),
            Stats::of(ledger.iter()),
            "iteration {i}"
        );
        // The chain is intact end to end.
        if let Some(last) = s.scan_entry_heads(&EntryScan::all()).unwrap().last() {
            let walk = s.scan_branch(&branch_scan(last.id.clone())).unwrap();
            assert_eq!(
                walk.len(),
                stored.len(),
                "iteration {i}: the chain is broken"
            );
        }
        s.close().unwrap();
    }
    println!(
        "torture session: {iterations} SIGKILLs, {checked} acknowledged operations checked, \
         {lost} lost; {killed_with_acks} kills landed after at least one ack; final fence \
         {last_fence}; seed {seed}; {:.1}s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(lost, 0, "acknowledged commits lost (seed {seed})");
    assert!(
        killed_with_acks >= iterations / 2,
        "the child rarely got to commit"
    );
}
