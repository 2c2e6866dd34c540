//! Multi-process SIGKILL test of the execution ledger (`SqliteLedger`). The
//! test binary re-executes itself as a child (`CUSTOS_LEDGER_KILL_DB=<path>`)
//! that opens the ledger (restart recovery), brings the one session's scope
//! to `Open` under its own attach token — taking over, finishing a close,
//! releasing an unclean scope or reopening at `incarnation + 1` — acks the
//! keys the attach answered unacknowledged, then drives calls in a loop:
//! admit → finish → ack, admit → mark unknown, admit → stop, fence a
//! missing key, bar a missing key, sometimes leaving a settled row
//! unacknowledged, and every few calls a whole close cycle (begin, finish,
//! release when unclean, reopen). It prints `TRY …` before each request and
//! `ACK …` only after it returned Ok. The parent SIGKILLs it after a delay
//! drawn from a seed (printed; `CUSTOS_SIGKILL_SEED` replays a run;
//! `CUSTOS_TORTURE_ITERATIONS` sets the count), then checks before
//! reopening that no row is `admitted` but the dead child's last admitted
//! key, reopens (recovery) and checks: that row is `unknown` now and
//! nothing is `admitted`; every key the child touched reads exactly as its
//! acknowledged requests left it (or as the one request cut off mid-way
//! would have: wholly old or wholly new); a key once admitted is never
//! `Fresh` again (an admit with the dead child's token answers `Existing`
//! at the open incarnation and is refused elsewhere); the session's
//! unacknowledged keys are exactly the model's; the scope's incarnation
//! and state never fall behind an acknowledged one; the release log holds
//! every acknowledged release.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use custos_core::ledger::{
    Admission, AttachToken, CallState, CloseOutcome, Fencing, Incarnation, Key, Ledger,
    LedgerError, Limits, Lookup, OpId, ScopeState, SessionId, Stopping, Tool, WorkspaceId,
};
use custos_sqlite::ledger::SqliteLedger;
use custos_torture::{self as torture, xorshift, KillChild, Kills, Out, Replay};

const DB_ENV: &str = "CUSTOS_LEDGER_KILL_DB";
const TAG_ENV: &str = "CUSTOS_LEDGER_KILL_TAG";
const SEED_ENV: &str = "CUSTOS_LEDGER_KILL_CHILD_SEED";
/// The child every iteration runs.
const CHILD: KillChild = KillChild {
    test: "ledger_kill_child",
    store_env: DB_ENV,
    tag_env: TAG_ENV,
    seed_env: SEED_ENV,
};
/// The default count, so that `cargo test` stays fast; `make torture` sets more.
const DEFAULT_ITERATIONS: u64 = 24;
/// A child that was never killed stops by itself after this long.
const CHILD_CAP: Duration = Duration::from_secs(20);
/// The did-not-start outcome of a fenced key.
const FENCED: &[u8] = b"did-not-start";

const LIMITS: Limits = Limits {
    max_unclean_scopes: 4,
    max_ledger_bytes: 1 << 20,
    reservation_bytes: 64,
};

fn session() -> SessionId {
    SessionId::new("s").unwrap()
}

fn workspace() -> WorkspaceId {
    WorkspaceId::new("w").unwrap()
}

fn program() -> Tool {
    Tool::new("program").unwrap()
}

fn key(op: &str, step: u32, incarnation: Incarnation) -> Key {
    Key {
        session: session(),
        op: OpId::new(op).unwrap(),
        step,
        source_index: 0,
        incarnation,
    }
}

/// The outcome `finish` records for a key.
fn outcome(k: &Key) -> Vec<u8> {
    format!("out {} {} {}", k.op, k.step, k.incarnation).into_bytes()
}

/// The child's output: a line per request, flushed at once.
fn k_words(k: &Key) -> String {
    format!("{} {} {}", k.op, k.step, k.incarnation)
}

/// Child mode: a no-op unless `CUSTOS_LEDGER_KILL_DB` names a file.
#[test]
fn ledger_kill_child() {
    let Ok(path) = std::env::var(DB_ENV) else {
        return;
    };
    let tag: u64 = std::env::var(TAG_ENV).unwrap().parse().unwrap();
    let mut rng: u64 = std::env::var(SEED_ENV).unwrap().parse().unwrap();
    let l = SqliteLedger::open(&path).unwrap();
    let token = AttachToken::new(format!("t{tag}")).unwrap();
    let mut out = Out::stdout();
    out.line("OPEN");
    let op = format!("c{tag}");
    let mut step = 0u32;
    let started = Instant::now();
    while started.elapsed() < CHILD_CAP {
        let inc = bring_open(&l, &token, &mut out);
        // Calls until a close cycle.
        let calls = 2 + xorshift(&mut rng) % 8;
        for _ in 0..calls {
            let k = key(&op, step, inc);
            step += 1;
            call(&l, &k, &token, xorshift(&mut rng) % 12, &mut out);
        }
        let s = session();
        out.line(&format!("TRY BEGINCLOSE {inc}"));
        l.begin_close(&LIMITS, &s, inc).unwrap();
        out.line(&format!("ACK BEGINCLOSE {inc}"));
    }
}

/// Drives the scope to `Open` under `token` (closing, releasing and
/// reopening as it stands) and acks what the attach answered; the
/// incarnation.
fn bring_open(l: &SqliteLedger, token: &AttachToken, out: &mut Out) -> Incarnation {
    let s = session();
    loop {
        let scope = l.scope(&LIMITS, &s).unwrap();
        let (verb, inc) = match scope.as_ref().map(|c| (c.incarnation, c.state)) {
            None => ("ATTACH", 1),
            Some((inc, ScopeState::Open)) => ("ATTACH", inc),
            Some((inc, ScopeState::Closing)) => {
                out.line(&format!("TRY FINISHCLOSE {inc}"));
                let o = l.finish_close(&LIMITS, &s, inc).unwrap();
                let n = match o {
                    CloseOutcome::AllRetired => 0,
                    CloseOutcome::UnknownCleanup(n) => n,
                };
                out.line(&format!("ACK FINISHCLOSE {inc} {n}"));
                continue;
            }
            Some((inc, ScopeState::Closed(CloseOutcome::UnknownCleanup(_)))) => {
                out.line(&format!("TRY RELEASE {inc}"));
                l.release(&LIMITS, &s, 1).unwrap();
                out.line(&format!("ACK RELEASE {inc}"));
                continue;
            }
            Some((inc, ScopeState::Closed(CloseOutcome::AllRetired))) => ("REOPEN", inc + 1),
        };
        out.line(&format!("TRY {verb} {inc}"));
        let a = l.attach(&LIMITS, &s, &workspace(), inc, token).unwrap();
        let (t, u) = (a.unacked.terminal.len(), a.unacked.unknown.len());
        out.line(&format!("ACK {verb} {inc} {t} {u}"));
        for k in a.unacked.terminal.iter().chain(&a.unacked.unknown) {
            out.line(&format!("TRY ACKCALL {}", k_words(k)));
            assert!(!l.ack(&LIMITS, k).unwrap());
            out.line(&format!("ACK ACKCALL {}", k_words(k)));
        }
        return inc;
    }
}

/// One call of the child, by `choice`.
fn call(l: &SqliteLedger, k: &Key, token: &AttachToken, choice: u64, out: &mut Out) {
    let w = k_words(k);
    let admit = |out: &mut Out| {
        out.line(&format!("TRY ADMIT {w}"));
        assert_eq!(
            l.admit(&LIMITS, k, &program(), token).unwrap(),
            Admission::Fresh
        );
        out.line(&format!("ACK ADMIT {w}"));
    };
    match choice {
        // A fence of a missing key: terminal, did-not-start.
        0 => {
            out.line(&format!("TRY FENCE {w}"));
            assert_eq!(
                l.query_or_fence(&LIMITS, k, FENCED).unwrap(),
                Fencing::Fenced
            );
            out.line(&format!("ACK FENCE {w}"));
        }
        // A bar of a missing key: unknown, never starts.
        1 => {
            out.line(&format!("TRY BAR {w}"));
            assert_eq!(
                l.stop_or_fence(&LIMITS, k, &program()).unwrap(),
                Stopping::Barred
            );
            out.line(&format!("ACK BAR {w}"));
        }
        // Admitted, then stopped: unknown.
        2 => {
            admit(out);
            out.line(&format!("TRY STOP {w}"));
            assert_eq!(
                l.stop_or_fence(&LIMITS, k, &program()).unwrap(),
                Stopping::Stopped
            );
            out.line(&format!("ACK STOP {w}"));
        }
        // Admitted, then lost: unknown.
        3 => {
            admit(out);
            out.line(&format!("TRY UNKNOWN {w}"));
            l.mark_unknown(&LIMITS, k).unwrap();
            out.line(&format!("ACK UNKNOWN {w}"));
        }
        _ => {
            admit(out);
            out.line(&format!("TRY FINISH {w}"));
            l.finish(&LIMITS, k, &outcome(k)).unwrap();
            out.line(&format!("ACK FINISH {w}"));
        }
    }
    // Most settled calls are acknowledged; a few are left to the close.
    if choice != 11 {
        out.line(&format!("TRY ACKCALL {w}"));
        assert!(!l.ack(&LIMITS, k).unwrap());
        out.line(&format!("ACK ACKCALL {w}"));
    }
}

/// What the parent expects of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Exp {
    Admitted,
    Terminal(Vec<u8>),
    Unknown,
    Acked,
    /// Acked, and its tombstone dropped since (reopen, clean close, release).
    Forgotten,
}

/// The ledger as the acknowledged requests left it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Model {
    scope: Option<(Incarnation, ScopeState)>,
    calls: BTreeMap<Key, Exp>,
    releases: u64,
}

impl Model {
    fn forget_acks(&mut self) {
        for e in self.calls.values_mut() {
            if *e == Exp::Acked {
                *e = Exp::Forgotten;
            }
        }
    }

    /// The unretired rows of incarnation `inc`.
    fn unretired(&self, inc: Incarnation) -> u64 {
        self.calls
            .iter()
            .filter(|(k, e)| k.incarnation == inc && matches!(e, Exp::Terminal(_) | Exp::Unknown))
            .count() as u64
    }

    /// Restart recovery: every admitted row becomes unknown.
    fn recover(&mut self) {
        for e in self.calls.values_mut() {
            if *e == Exp::Admitted {
                *e = Exp::Unknown;
            }
        }
    }

    /// Applies one acknowledged request (`w`: the words after `ACK`/`TRY`).
    fn apply(&mut self, w: &[&str]) {
        let num = |i: usize| -> u64 { w[i].parse().unwrap() };
        let k = || key(w[1], w[2].parse().unwrap(), w[3].parse().unwrap());
        match w[0] {
            "ATTACH" => self.scope = Some((num(1), ScopeState::Open)),
            "REOPEN" => {
                self.scope = Some((num(1), ScopeState::Open));
                self.forget_acks();
            }
            "BEGINCLOSE" => self.scope = Some((num(1), ScopeState::Closing)),
            "FINISHCLOSE" => {
                let inc = num(1);
                let n = self.unretired(inc);
                if n == 0 {
                    self.scope = Some((inc, ScopeState::Closed(CloseOutcome::AllRetired)));
                    self.forget_acks();
                } else {
                    let o = CloseOutcome::UnknownCleanup(n);
                    self.scope = Some((inc, ScopeState::Closed(o)));
                }
            }
            "RELEASE" => {
                self.scope = Some((num(1), ScopeState::Closed(CloseOutcome::AllRetired)));
                self.forget_acks();
                self.releases += 1;
            }
            "ADMIT" => {
                self.calls.insert(k(), Exp::Admitted);
            }
            "FINISH" => {
                let k = k();
                let o = outcome(&k);
                self.calls.insert(k, Exp::Terminal(o));
            }
            "FENCE" => {
                self.calls.insert(k(), Exp::Terminal(FENCED.to_vec()));
            }
            "UNKNOWN" | "STOP" | "BAR" => {
                self.calls.insert(k(), Exp::Unknown);
            }
            "ACKCALL" => {
                self.calls.insert(k(), Exp::Acked);
            }
            other => panic!("unknown request {other}"),
        }
    }
}

/// The keys whose rows are `admitted` in the file as the dead child left
/// it (read before any reopen runs recovery). A child killed before its
/// first open committed leaves no `call` table (or no file); that is
/// only allowed while no child has ever printed `OPEN`.
fn admitted_rows(path: &Path, opened_ever: bool, iteration: u64) -> Vec<Key> {
    if !path.exists() {
        assert!(
            !opened_ever,
            "iteration {iteration}: the ledger file is gone after an acknowledged open"
        );
        return vec![];
    }
    let c =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
            .unwrap();
    let tables: i64 = c
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'call'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    if tables == 0 {
        assert!(
            !opened_ever,
            "iteration {iteration}: the call table is gone after an acknowledged open"
        );
        return vec![];
    }
    let mut st = c
        .prepare("SELECT op, step, incarnation FROM call WHERE state = 'admitted'")
        .unwrap();
    let rows = st
        .query_map([], |r| {
            let op: String = r.get(0)?;
            let step: i64 = r.get(1)?;
            let inc: i64 = r.get(2)?;
            Ok(key(&op, step as u32, inc as u64))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    rows
}

#[derive(Default)]
struct Tally {
    /// Some child printed `OPEN`: the schema was committed.
    opened_ever: bool,
    kills: Kills,
    recovered: u64,
    probes: u64,
    closes: u64,
    releases: u64,
    reopens: u64,
}

/// Whether the stored key reads as `e` expects.
fn reads_as(l: &SqliteLedger, k: &Key, e: &Exp) -> bool {
    let got = l.query(&LIMITS, k).unwrap();
    let want = match e {
        Exp::Admitted => return false, // never after recovery
        Exp::Terminal(o) => Lookup::Found(CallState::Terminal(o.clone())),
        Exp::Unknown => Lookup::Found(CallState::Unknown),
        Exp::Acked => Lookup::Found(CallState::Acked),
        Exp::Forgotten => Lookup::Missing,
    };
    got == want
}

/// The scope as stored.
fn stored_scope(l: &SqliteLedger) -> Option<(Incarnation, ScopeState)> {
    l.scope(&LIMITS, &session())
        .unwrap()
        .map(|s| (s.incarnation, s.state))
}

/// Whether the ledger matches `m` on the scope and the pending key.
fn matches_at(l: &SqliteLedger, m: &Model, pending: Option<&Key>) -> bool {
    stored_scope(l) == m.scope
        && l.releases(&LIMITS).unwrap().len() as u64 == m.releases
        && pending.is_none_or(|k| m.calls.get(k).is_none_or(|e| reads_as(l, k, e)))
        && pending.is_none_or(|k| {
            m.calls.contains_key(k) || l.query(&LIMITS, k).unwrap() == Lookup::Missing
        })
}

/// Checks every key of `keys` against the model and probes a second
/// admission of each: never `Fresh`. Counts mismatches as lost.
fn check_keys<'k>(
    l: &SqliteLedger,
    m: &Model,
    keys: impl Iterator<Item = &'k Key>,
    iteration: u64,
    t: &mut Tally,
) {
    let scope = l.scope(&LIMITS, &session()).unwrap();
    for k in keys {
        let e = &m.calls[k];
        if !reads_as(l, k, e) {
            t.kills.lost += 1;
            eprintln!(
                "iteration {iteration}: key {} reads {:?}, acknowledged {e:?}",
                k_words(k),
                l.query(&LIMITS, k)
            );
        }
        // A second admission, as the dead child's stale runtime would try it.
        let Some(s) = &scope else {
            panic!("iteration {iteration}: the scope is gone")
        };
        let again = l.admit(&LIMITS, k, &program(), &s.attach_token);
        t.probes += 1;
        let open_here = s.state == ScopeState::Open && s.incarnation == k.incarnation;
        match again {
            Ok(Admission::Fresh) => panic!(
                "iteration {iteration}: key {} admitted a second time",
                k_words(k)
            ),
            Ok(Admission::Existing(_)) => assert!(open_here, "iteration {iteration}"),
            Err(
                LedgerError::StaleIncarnation { .. }
                | LedgerError::ScopeClosing
                | LedgerError::ScopeNotOpen { .. },
            ) => assert!(!open_here, "iteration {iteration}"),
            Err(e) => panic!("iteration {iteration}: admit {}: {e}", k_words(k)),
        }
    }
}

/// Folds one child's lines into the model: the request cut off, if any.
fn fold(lines: &[String], m: &mut Model, t: &mut Tally) -> Option<Vec<String>> {
    let mut pending: Option<Vec<String>> = None;
    let mut acks = 0;
    for line in lines {
        let w: Vec<&str> = line.split(' ').collect();
        match w.first().copied() {
            Some("OPEN") => t.opened_ever = true,
            Some("TRY") => pending = Some(w[1..].iter().map(|s| (*s).to_owned()).collect()),
            Some("ACK") => {
                let p = pending.take().unwrap();
                assert_eq!(p[..], w[1..p.len() + 1], "ack {line} of another request");
                if matches!(w[1], "ATTACH" | "REOPEN") {
                    // The attach answers the model's unacknowledged rows
                    // (restart recovery turned the dead child's admitted
                    // ones unknown, so none is admitted).
                    let (tn, un): (usize, usize) = (w[3].parse().unwrap(), w[4].parse().unwrap());
                    let mut after = m.clone();
                    after.apply(&w[1..3]);
                    let term = after
                        .calls
                        .values()
                        .filter(|e| matches!(e, Exp::Terminal(_)))
                        .count();
                    let unk = after.calls.values().filter(|e| **e == Exp::Unknown).count();
                    assert_eq!((tn, un), (term, unk), "attach reply {line}");
                }
                match w[1] {
                    "FINISHCLOSE" => {
                        let n: u64 = w[3].parse().unwrap();
                        assert_eq!(n, m.unretired(w[2].parse().unwrap()), "{line}");
                        t.closes += 1;
                    }
                    "RELEASE" => t.releases += 1,
                    "REOPEN" => t.reopens += 1,
                    _ => {}
                }
                m.apply(&w[1..]);
                acks += 1;
            }
            // The test harness's own lines.
            _ => {}
        }
    }
    t.kills.acked(acks);
    pending
}

/// The key a pending request names, if it names one.
fn pending_key(p: &[String]) -> Option<Key> {
    (p.len() == 4).then(|| key(&p[1], p[2].parse().unwrap(), p[3].parse().unwrap()))
}

/// After one kill: the admitted rows before recovery, then the reopened
/// ledger against the model (old or new for the request cut off).
fn check_kill(
    path: &Path,
    iteration: u64,
    m: &mut Model,
    pending: Option<&[String]>,
    t: &mut Tally,
    rng: &mut u64,
) {
    let pk = pending.and_then(pending_key);
    let before = admitted_rows(path, t.opened_ever, iteration);
    for k in &before {
        let ours = m.calls.get(k) == Some(&Exp::Admitted)
            || (pk.as_ref() == Some(k) && pending.is_some_and(|p| p[0] == "ADMIT"));
        assert!(
            ours,
            "iteration {iteration}: key {} admitted, not by the dead child's last admission",
            k_words(k)
        );
    }
    assert!(before.len() <= 1, "iteration {iteration}: {before:?}");
    let l = SqliteLedger::open(path)
        .unwrap_or_else(|e| panic!("iteration {iteration}: reopen after SIGKILL: {e}"));
    for k in &before {
        assert_eq!(
            l.query(&LIMITS, k).unwrap(),
            Lookup::Found(CallState::Unknown),
            "iteration {iteration}: restart recovery left {} admitted",
            k_words(k)
        );
        t.recovered += 1;
    }
    assert_eq!(l.admitted(&LIMITS, &session(), &program()), Ok(vec![]));
    // The request cut off: wholly old or wholly new.
    let mut old = m.clone();
    old.recover();
    if let Some(p) = pending {
        let mut new = m.clone();
        let words: Vec<&str> = p.iter().map(String::as_str).collect();
        new.apply(&words);
        new.recover();
        let (is_new, is_old) = (
            matches_at(&l, &new, pk.as_ref()),
            matches_at(&l, &old, pk.as_ref()),
        );
        if is_new && !is_old {
            t.kills.cut_committed += 1;
            old = new;
        } else if is_old {
            t.kills.cut_not += 1;
        } else {
            t.kills.lost += 1;
            eprintln!(
                "iteration {iteration}: {p:?} cut off; the ledger is neither old nor new: \
                 scope {:?}",
                stored_scope(&l)
            );
        }
    }
    *m = old;
    if stored_scope(&l) != m.scope {
        t.kills.lost += 1;
        eprintln!(
            "iteration {iteration}: scope {:?}, acknowledged {:?}",
            stored_scope(&l),
            m.scope
        );
    }
    assert_eq!(l.releases(&LIMITS).unwrap().len() as u64, m.releases);
    // Unacknowledged rows: exactly the model's.
    let u = l.unacked(&LIMITS, &session()).unwrap();
    let want = |f: fn(&Exp) -> bool| -> Vec<Key> {
        m.calls
            .iter()
            .filter(|(_, e)| f(e))
            .map(|(k, _)| k.clone())
            .collect()
    };
    assert_eq!(u.terminal, want(|e| matches!(e, Exp::Terminal(_))));
    assert_eq!(u.unknown, want(|e| *e == Exp::Unknown));
    // The dead child's keys, the open incarnation's, and a sample of older.
    let op = format!("c{iteration}");
    let inc = m.scope.map_or(0, |s| s.0);
    let mut keys: Vec<&Key> = m
        .calls
        .keys()
        .filter(|k| k.op.as_str() == op || k.incarnation == inc)
        .collect();
    let all: Vec<&Key> = m.calls.keys().collect();
    for _ in 0..8.min(all.len()) {
        keys.push(all[(xorshift(rng) % all.len() as u64) as usize]);
    }
    check_keys(&l, m, keys.into_iter(), iteration, t);
    l.close().unwrap();
}

#[test]
fn sigkilled_ledger_loses_no_acknowledged_call() {
    if std::env::var(DB_ENV).is_ok() {
        return;
    }
    let iterations = torture::iterations(DEFAULT_ITERATIONS);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let seed = torture::seed("ledger", None);
    let started = Instant::now();
    let mut m = Model::default();
    let mut t = Tally::default();
    let mut rng = seed;
    for iteration in 0..iterations {
        let _replay = Replay {
            store: "ledger",
            seed,
            iteration,
        };
        let lines = CHILD.run(&path, seed, iteration);
        let lost = t.kills.lost;
        let pending = fold(&lines, &mut m, &mut t);
        check_kill(
            &path,
            iteration,
            &mut m,
            pending.as_deref(),
            &mut t,
            &mut rng,
        );
        if t.kills.lost > lost {
            eprintln!("torture ledger: loss at iteration {iteration}, seed {seed}");
        }
    }
    // A last sweep over every key ever touched.
    let l = SqliteLedger::open(&path).unwrap();
    check_keys(&l, &m, m.calls.keys(), iterations, &mut t);
    l.close().unwrap();
    println!(
        "torture ledger: {iterations} SIGKILLs, {}; {} admitted rows recovered unknown; {} \
         second admissions refused over {} keys; {} closes, {} releases, {} reopens; seed \
         {seed}; {:.1}s",
        t.kills.summary(),
        t.recovered,
        t.probes,
        m.calls.len(),
        t.closes,
        t.releases,
        t.reopens,
        started.elapsed().as_secs_f64()
    );
    t.kills.assert_held(seed, iterations);
    assert!(t.closes > 0 && t.reopens > 0, "no close cycle ran");
}
