//! Multi-process SIGKILL test of the control catalog
//! (`SqliteControlCatalog`). The test binary re-executes itself as a child
//! (`CUSTOS_CONTROL_KILL_DB=<path>`) that opens the catalog and, in a loop,
//! registers worlds (a shared pool of resumable ones and a few of its own,
//! resumable or cleanup-only), retires its own, acquires writer fences
//! (resume on the pool, migration on its own), commits ticks under its
//! current epoch, and checks refusals that write nothing: a commit under an
//! epoch it staled itself, a resume of a cleanup-only world. It prints
//! `TRY …` before each request and `ACK …` only after it returned (Ok, or
//! the expected refusal). The parent SIGKILLs it after a delay drawn from a
//! seed (printed; `CUSTOS_SIGKILL_SEED` replays a run;
//! `CUSTOS_TORTURE_ITERATIONS` sets the count), reopens and checks: every
//! acknowledged world is discoverable with its identity, writer mode,
//! status (destroyed stays destroyed) and at least its acknowledged tick
//! head; nothing else is (but the one registration cut off); every world's
//! issued epoch is exactly its last acknowledged one, or one more when an
//! acquire was cut off (an acknowledged epoch is never lost, and each
//! acquire issued exactly previous + 1, staling the previous); then the
//! parent acquires every pool world's fence itself — strictly above
//! everything the dead child held, staling the stored epoch — and a commit
//! under the dead child's epoch is `StaleFence`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use custos_core::fence::{Epoch, Holder};
use custos_core::world::{
    ControlCatalog, FencePurpose, WorldIdentity, WorldRecord, WorldStatus, WriterMode,
};
use custos_sqlite::control::SqliteControlCatalog;
use custos_torture::{self as torture, xorshift, KillChild, Kills, Out, Replay};

const DB_ENV: &str = "CUSTOS_CONTROL_KILL_DB";
const TAG_ENV: &str = "CUSTOS_CONTROL_KILL_TAG";
const SEED_ENV: &str = "CUSTOS_CONTROL_KILL_CHILD_SEED";
/// The child every iteration runs.
const CHILD: KillChild = KillChild {
    test: "control_kill_child",
    store_env: DB_ENV,
    tag_env: TAG_ENV,
    seed_env: SEED_ENV,
};
/// The default count, so that `cargo test` stays fast; `make torture` sets more.
const DEFAULT_ITERATIONS: u64 = 24;
/// A child that was never killed stops by itself after this long.
const CHILD_CAP: Duration = Duration::from_secs(20);
/// The shared pool of resumable worlds.
const POOL: [&str; 3] = ["p0", "p1", "p2"];
/// How many worlds of its own a child keeps active at most.
const OWN: usize = 3;

/// The record of world `wid`: a pool world and an even own world are
/// resumable, an odd own world cleanup-only.
fn record(wid: &str) -> WorldRecord {
    let odd = wid
        .rsplit('-')
        .next()
        .and_then(|n| n.parse::<u64>().ok())
        .is_some_and(|n| n % 2 == 1);
    let mode = if wid.starts_with('k') && odd {
        WriterMode::CleanupOnly
    } else {
        WriterMode::Resumable
    };
    let mut id = WorldIdentity::new(wid, format!("name of {wid}"));
    id.run_id = Some("torture".into());
    WorldRecord::active(id, mode)
}

/// Child mode: a no-op unless `CUSTOS_CONTROL_KILL_DB` names a file.
#[test]
fn control_kill_child() {
    let Ok(path) = std::env::var(DB_ENV) else {
        return;
    };
    let tag: u64 = std::env::var(TAG_ENV).unwrap().parse().unwrap();
    let mut rng: u64 = std::env::var(SEED_ENV).unwrap().parse().unwrap();
    let c = SqliteControlCatalog::open(&path).unwrap();
    let holder = Holder::new(format!("child-{tag}")).unwrap();
    let mut out = Out::stdout();
    out.line("OPEN");
    // The epoch this child holds per world, and its own active worlds.
    let mut held: BTreeMap<String, Epoch> = BTreeMap::new();
    let mut own: Vec<String> = Vec::new();
    let mut next_own = 0u64;
    let started = Instant::now();
    while started.elapsed() < CHILD_CAP {
        let choice = xorshift(&mut rng) % 12;
        let pool = POOL[(xorshift(&mut rng) % POOL.len() as u64) as usize].to_owned();
        match choice {
            // A world of its own.
            0 if own.len() < OWN && next_own < 4 => {
                let wid = format!("k{tag}-{next_own}");
                next_own += 1;
                out.line(&format!("TRY REGISTER {wid}"));
                c.register(&record(&wid)).unwrap();
                out.line(&format!("ACK REGISTER {wid}"));
                own.push(wid);
            }
            1 if !own.is_empty() => {
                let wid = own.remove(0);
                out.line(&format!("TRY RETIRE {wid}"));
                c.retire(&record(&wid)).unwrap();
                out.line(&format!("ACK RETIRE {wid}"));
                held.remove(&wid);
            }
            // A migration fence on an own world, or a refused resume.
            2 if !own.is_empty() => {
                let wid = own[(xorshift(&mut rng) % own.len() as u64) as usize].clone();
                if record(&wid).writer_mode == WriterMode::CleanupOnly
                    && xorshift(&mut rng) % 2 == 0
                {
                    let e = c
                        .acquire_fence(&wid, &holder, FencePurpose::Resume)
                        .unwrap_err();
                    assert_eq!(e.reason(), "ResumeRefused", "{e}");
                    out.line(&format!("ACK REFUSED {wid}"));
                } else {
                    fence(
                        &c,
                        &wid,
                        &holder,
                        FencePurpose::Migration,
                        &mut held,
                        &mut out,
                    );
                }
            }
            // A commit under an epoch this child staled itself.
            3 if held.get(&pool).is_some_and(|e| *e > 1) => {
                let stale = held[&pool] - 1;
                let e = c.commit_tick(&pool, stale, u64::MAX / 2).unwrap_err();
                assert_eq!(e.reason(), "StaleFence", "{e}");
                out.line(&format!("ACK STALE {pool} {stale}"));
            }
            4..=7 if held.contains_key(&pool) => {
                let epoch = held[&pool];
                let tick = 1 + xorshift(&mut rng) % 1_000_000;
                out.line(&format!("TRY TICK {pool} {epoch} {tick}"));
                let head = c.commit_tick(&pool, epoch, tick).unwrap();
                out.line(&format!("ACK TICK {pool} {epoch} {tick} {head}"));
            }
            _ => {
                out.line(&format!("TRY REGISTER {pool}"));
                c.register(&record(&pool)).unwrap();
                out.line(&format!("ACK REGISTER {pool}"));
                fence(
                    &c,
                    &pool,
                    &holder,
                    FencePurpose::Resume,
                    &mut held,
                    &mut out,
                );
            }
        }
    }
}

/// Acquires a fence on `wid`, acknowledged with the epoch and what it staled.
fn fence(
    c: &SqliteControlCatalog,
    wid: &str,
    holder: &Holder,
    purpose: FencePurpose,
    held: &mut BTreeMap<String, Epoch>,
    out: &mut Out,
) {
    out.line(&format!("TRY FENCE {wid}"));
    let (epoch, staled) = c.acquire_fence(wid, holder, purpose).unwrap();
    out.line(&format!("ACK FENCE {wid} {epoch} {}", staled.unwrap_or(0)));
    held.insert(wid.to_owned(), epoch);
}

/// What the parent knows of one world.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct World {
    destroyed: bool,
    /// The last issued epoch acknowledged (0: none).
    issued: Epoch,
    /// Who holds it.
    holder: Option<String>,
    /// The tick head acknowledged.
    head: u64,
}

type Model = BTreeMap<String, World>;

#[derive(Default)]
struct Tally {
    kills: Kills,
    fences: u64,
    ticks: u64,
    refusals: u64,
    retires: u64,
    registrations: u64,
    parent_fences: u64,
}

/// Folds one child's lines into the model: the request cut off, if any.
fn fold(lines: &[String], tag: u64, m: &mut Model, t: &mut Tally) -> Option<Vec<String>> {
    let mut pending: Option<Vec<String>> = None;
    let mut acks = 0;
    let child = format!("child-{tag}");
    for line in lines {
        let w: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| -> u64 { w[i].parse().unwrap() };
        match w.as_slice() {
            ["TRY", rest @ ..] => pending = Some(rest.iter().map(|s| (*s).to_owned()).collect()),
            ["ACK", "REFUSED", _] | ["ACK", "STALE", ..] => {
                t.refusals += 1;
                acks += 1;
            }
            ["ACK", op, wid, ..] => {
                let p = pending.take().unwrap();
                assert_eq!((p[0].as_str(), p[1].as_str()), (*op, *wid), "{line}");
                match *op {
                    "REGISTER" => {
                        let world = m.entry((*wid).to_owned()).or_default();
                        assert!(!world.destroyed, "{line}: a destroyed world registered");
                        t.registrations += 1;
                    }
                    "RETIRE" => {
                        m.get_mut(*wid).unwrap().destroyed = true;
                        t.retires += 1;
                    }
                    "FENCE" => {
                        let world = m.get_mut(*wid).unwrap();
                        let (epoch, staled) = (num(3), num(4));
                        assert_eq!(
                            (epoch, staled),
                            (world.issued + 1, world.issued),
                            "{line}: not previous + 1, staling the previous"
                        );
                        world.issued = epoch;
                        world.holder = Some(child.clone());
                        t.fences += 1;
                    }
                    "TICK" => {
                        let world = m.get_mut(*wid).unwrap();
                        let (epoch, tick, head) = (num(3), num(4), num(5));
                        assert_eq!(epoch, world.issued, "{line}: a commit under a stale epoch");
                        assert_eq!(head, world.head.max(tick), "{line}");
                        world.head = head;
                        t.ticks += 1;
                    }
                    _ => panic!("unexpected ack {line}"),
                }
                acks += 1;
            }
            // OPEN and the test harness's own lines.
            _ => {}
        }
    }
    t.kills.acked(acks);
    pending
}

/// The model with the cut-off request `p` applied (the dead child's
/// holder `child`).
fn applied(m: &Model, p: &[String], child: &str) -> Model {
    let mut new = m.clone();
    match p[0].as_str() {
        "REGISTER" => {
            new.entry(p[1].clone()).or_default();
        }
        "RETIRE" => new.get_mut(&p[1]).unwrap().destroyed = true,
        "FENCE" => {
            let w = new.get_mut(&p[1]).unwrap();
            w.issued += 1;
            w.holder = Some(child.to_owned());
        }
        "TICK" => {
            let w = new.get_mut(&p[1]).unwrap();
            w.head = w.head.max(p[3].parse().unwrap());
        }
        other => panic!("unexpected request {other}"),
    }
    new
}

/// The catalog as stored, in the model's terms. Fences are read for the
/// pool and for the worlds `fresh` names (the others were read after an
/// earlier kill and taken from `m`: only their own child's requests
/// touched them) — all of them when `fresh` is `None`.
fn stored(
    c: &SqliteControlCatalog,
    worlds: &[WorldRecord],
    m: &Model,
    fresh: Option<&str>,
) -> Model {
    worlds
        .iter()
        .map(|r| {
            let wid = r.identity.world_id.clone();
            let (issued, holder) = match m.get(&wid) {
                Some(w) if fresh.is_some_and(|p| !POOL.contains(&&*wid) && !wid.starts_with(p)) => {
                    (w.issued, w.holder.clone())
                }
                _ => {
                    let f = c.open_world_readonly(&wid).unwrap().fence;
                    (f.issued, f.holder.map(|h| h.as_str().to_owned()))
                }
            };
            let w = World {
                destroyed: r.status == WorldStatus::Destroyed,
                issued,
                holder,
                head: r.tick_head,
            };
            (wid, w)
        })
        .collect()
}

/// After one kill: the reopened catalog against the model (old or new for
/// the request cut off), then the parent's own fences on the pool.
fn check_kill(path: &Path, tag: u64, m: &mut Model, pending: Option<&[String]>, t: &mut Tally) {
    let c = SqliteControlCatalog::open(path)
        .unwrap_or_else(|e| panic!("iteration {tag}: reopen after SIGKILL: {e}"));
    let worlds = c.discover_worlds().unwrap();
    for r in &worlds {
        assert_eq!(
            *r,
            WorldRecord {
                status: r.status,
                tick_head: r.tick_head,
                ..record(&r.identity.world_id)
            },
            "iteration {tag}: identity or writer mode changed"
        );
    }
    let child = format!("child-{tag}");
    let got = stored(&c, &worlds, m, Some(&format!("k{tag}-")));
    let want = match pending {
        Some(p) => {
            let new = applied(m, p, &child);
            if got == new && got != *m {
                t.kills.cut_committed += 1;
                new
            } else {
                t.kills.cut_not += 1;
                m.clone()
            }
        }
        None => m.clone(),
    };
    if got != want {
        for (wid, w) in &want {
            let g = got.get(wid);
            if g != Some(w) {
                t.kills.lost += 1;
                eprintln!("iteration {tag}: world {wid} is {g:?}, acknowledged {w:?}");
            }
        }
        assert_eq!(got.len(), want.len(), "iteration {tag}: unknown worlds");
    }
    *m = got;
    // The parent takes every pool world's fence: strictly above the dead
    // child's, staling the stored epoch; the child's epoch is refused.
    let parent = Holder::new(format!("parent-{tag}")).unwrap();
    for wid in POOL {
        let Some(w) = m.get_mut(wid) else { continue };
        let dead = w.issued;
        let (epoch, staled) = c.acquire_fence(wid, &parent, FencePurpose::Resume).unwrap();
        assert!(
            epoch > dead,
            "iteration {tag}: {wid} epoch {epoch} <= {dead}"
        );
        assert_eq!((epoch, staled), (dead + 1, (dead > 0).then_some(dead)));
        if dead > 0 {
            let e = c.commit_tick(wid, dead, w.head + 1).unwrap_err();
            assert_eq!(e.reason(), "StaleFence", "iteration {tag}: {e}");
        }
        assert_eq!(c.commit_tick(wid, epoch, w.head).unwrap(), w.head);
        w.issued = epoch;
        w.holder = Some(parent.as_str().to_owned());
        t.parent_fences += 1;
    }
}

#[test]
fn sigkilled_control_catalog_loses_no_acknowledged_epoch() {
    if std::env::var(DB_ENV).is_ok() {
        return;
    }
    let iterations = torture::iterations(DEFAULT_ITERATIONS);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("control.db");
    let seed = torture::seed("control", None);
    let started = Instant::now();
    let mut m = Model::new();
    let mut t = Tally::default();
    for iteration in 0..iterations {
        let _replay = Replay {
            store: "control",
            seed,
            iteration,
        };
        let lines = CHILD.run(&path, seed, iteration);
        let lost = t.kills.lost;
        let pending = fold(&lines, iteration, &mut m, &mut t);
        check_kill(&path, iteration, &mut m, pending.as_deref(), &mut t);
        if t.kills.lost > lost {
            eprintln!("torture control: loss at iteration {iteration}, seed {seed}");
        }
    }
    // A last sweep: every world's fence read again.
    let c = SqliteControlCatalog::open(&path).unwrap();
    let all = stored(&c, &c.discover_worlds().unwrap(), &m, None);
    assert_eq!(all, m, "the last sweep");
    drop(c);
    let high: Epoch = m.values().map(|w| w.issued).max().unwrap_or(0);
    println!(
        "torture control: {iterations} SIGKILLs, {}; {} fences, {} tick commits, {} \
         registrations, {} retirements, {} refusals acknowledged; {} parent fences strictly \
         above the dead child's; {} worlds, highest epoch {high}; seed {seed}; {:.1}s",
        t.kills.summary(),
        t.fences,
        t.ticks,
        t.registrations,
        t.retires,
        t.refusals,
        t.parent_fences,
        m.len(),
        started.elapsed().as_secs_f64()
    );
    t.kills.assert_held(seed, iterations);
    assert!(t.fences > 0 && t.ticks > 0 && t.retires > 0);
}
