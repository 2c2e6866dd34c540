//! Server faults under load, on a private cluster of its own.
//!
//! 1. The postmaster is SIGKILLed (twice) while four processes commit —
//!    two to session storage, two to the execution ledger — and print each
//!    commit the server acknowledged. Each storage commit sets two
//!    registers under a compare-and-set "absent" on the first, so a retry
//!    of an in-doubt commit converges — under its own commit id it is
//!    answered its own receipt, and any refusal fails the loader — and a
//!    half-applied commit would show as one register without the other. Each ledger step admits one key with its
//!    own request id; a retry must answer `Fresh` — its own answer, whether
//!    or not the lost attempt applied — and any other answer fails.
//!    After the restart every acknowledged commit is present, no commit is
//!    half-applied, no key was admitted twice, and every client saw a typed
//!    `Unavailable`.
//! 2. A backend is terminated (`pg_terminate_backend`) while its
//!    transaction waits inside a commit: the caller gets `Unavailable`,
//!    nothing of the transaction is stored, and the retry converges.
//! 3. No error message, Debug output or server log line carries the
//!    password of the connection URL.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use custos_conformance::ledger::{key, sid, tok, tool, ws};
use custos_conformance::storage::{key as rkey, ns};
use custos_core::lease::Owner;
use custos_core::ledger::{Admission, Ledger, Limits, Lookup, RequestId};
use custos_core::storage::{Commit, CommitError, CommitId, KeyPrefix, Payload, Storage, Write};
use custos_postgres::ledger::PgLedger;
use custos_postgres::storage::{PgStorage, StorageConfig};
use custos_postgres::Target;
use custos_testkit::pg_cluster::{unique_schema, Cluster};

mod support;

/// Commits each loader makes.
const OPS: u64 = 800;
const STORAGE_LOADERS: usize = 2;
const LEDGER_LOADERS: usize = 2;
/// Room for every admission of the load.
const LIMITS: Limits = Limits {
    max_unclean_scopes: 8,
    max_ledger_bytes: 1 << 30,
    reservation_bytes: 16,
};

fn main() {
    if support::listed_or_child(child) {
        return;
    }
    let cluster = Cluster::start().unwrap();
    let mut messages = Vec::new();
    postmaster_kills(&cluster, &mut messages);
    terminated_backend(&cluster, &mut messages);
    passwords_stay_secret(&cluster, &messages);
    println!("faults: every scenario held");
}

fn target(c: &Cluster, schema: &str) -> Target {
    Target::new(c.url(), schema).unwrap()
}

fn set(tag: &str, v: &str) -> Write {
    Write::SetRegister {
        namespace: ns("n"),
        key: rkey(tag),
        value: Payload::new(v.as_bytes().to_vec()).unwrap(),
    }
}

/// Commit `n`: `a{n}` (which must be absent) and `b{n}`, under its own
/// commit id `c{n}`, so a retry is answered its own receipt.
fn storage_op(n: u64) -> Commit {
    Commit::at(n)
        .expect(ns("n"), rkey(&format!("a{n}")), None)
        .write(set(&format!("a{n}"), &format!("v{n}")))
        .write(set(&format!("b{n}"), &format!("v{n}")))
        .identified(CommitId::new(format!("c{n}")).unwrap())
}

fn postmaster_kills(cluster: &Cluster, messages: &mut Vec<String>) {
    let schema = unique_schema("faults");
    let l = PgLedger::open(target(cluster, &schema)).unwrap();
    for i in 0..LEDGER_LOADERS {
        l.attach(&LIMITS, &sid(&format!("s{i}")), &ws("w"), 1, &tok("t"))
            .unwrap();
    }
    drop(l);
    let (tx, rx) = mpsc::channel::<(usize, String)>();
    let mut children = Vec::new();
    for i in 0..STORAGE_LOADERS + LEDGER_LOADERS {
        let role = if i < STORAGE_LOADERS {
            "storage"
        } else {
            "ledger"
        };
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env("CUSTOS_PG_ROLE", role)
            .env("CUSTOS_PG_URL", cluster.url())
            .env("CUSTOS_PG_SCHEMA", &schema)
            .env("CUSTOS_PG_INDEX", i.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                if tx.send((i, line)).is_err() {
                    break;
                }
            }
        });
        children.push(child);
    }
    drop(tx);
    let mut acked: BTreeMap<usize, BTreeSet<u64>> = BTreeMap::new();
    let mut unavailable: BTreeMap<usize, u64> = BTreeMap::new();
    let mut kills = 0;
    let mut acked_at_kill = Vec::new();
    let mut done = BTreeSet::new();
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok((i, line)) => {
                if let Some(n) = line.strip_prefix("ack ") {
                    acked.entry(i).or_default().insert(n.parse().unwrap());
                } else if let Some(m) = line.strip_prefix("unavailable ") {
                    *unavailable.entry(i).or_default() += 1;
                    messages.push(m.to_owned());
                } else if line == "done" {
                    done.insert(i);
                } else {
                    panic!("loader {i} said {line:?}");
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        let total: usize = acked.values().map(BTreeSet::len).sum();
        // Kill once the load is well under way, twice: at a quarter and at
        // a half of it (by progress, not by the clock, so a fast machine
        // cannot finish the load between them).
        let whole = OPS as usize * (STORAGE_LOADERS + LEDGER_LOADERS);
        if kills < 2 && total > (kills + 1) * whole / 4 {
            cluster.kill().unwrap();
            kills += 1;
            acked_at_kill.push(total);
            std::thread::sleep(Duration::from_millis(700));
            cluster.restart().unwrap();
        }
    }
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a loader failed");
    }
    assert_eq!(kills, 2, "the load finished before both kills");
    assert_eq!(done.len(), STORAGE_LOADERS + LEDGER_LOADERS);
    // Every loader saw the server go away as a typed Unavailable.
    for i in 0..STORAGE_LOADERS + LEDGER_LOADERS {
        assert!(
            unavailable.get(&i).copied().unwrap_or(0) > 0,
            "loader {i} never saw Unavailable: {unavailable:?}"
        );
    }
    let total = check_acknowledged(cluster, &schema, &acked);
    println!(
        "postmaster SIGKILL ×{kills} (after {acked_at_kill:?} acknowledged): {total} acknowledged commits checked, 0 lost, 0 half-applied; Unavailable seen per loader {unavailable:?}"
    );
}

/// Every acknowledged commit is present and none half-applied (storage);
/// every acknowledged admission stands (ledger). Returns the count checked.
fn check_acknowledged(
    cluster: &Cluster,
    schema: &str,
    acked: &BTreeMap<usize, BTreeSet<u64>>,
) -> usize {
    // Storage: every acknowledged commit present, none half-applied.
    let mut checked = 0;
    for i in 0..STORAGE_LOADERS {
        let s = PgStorage::open(
            StorageConfig::new(
                target(cluster, schema),
                format!("s{i}"),
                Owner::new("checker").unwrap(),
            )
            .ttl(1_000),
        )
        .or_else(|_| {
            std::thread::sleep(Duration::from_secs(31));
            PgStorage::open(StorageConfig::new(
                target(cluster, schema),
                format!("s{i}"),
                Owner::new("checker").unwrap(),
            ))
        })
        .unwrap();
        let regs = support::registers(&s);
        for n in 0..OPS {
            let a = regs.get(&format!("a{n}"));
            let b = regs.get(&format!("b{n}"));
            assert_eq!(
                a.is_some(),
                b.is_some(),
                "loader {i} commit {n} half-applied"
            );
            if acked.get(&i).is_some_and(|s| s.contains(&n)) {
                assert_eq!(
                    a.map(Vec::as_slice),
                    Some(format!("v{n}").as_bytes()),
                    "loader {i} lost commit {n}"
                );
                checked += 1;
            }
        }
    }
    // Ledger: every acknowledged admission present, each key once.
    let l = PgLedger::open(target(cluster, schema)).unwrap();
    for i in STORAGE_LOADERS..STORAGE_LOADERS + LEDGER_LOADERS {
        let s = format!("s{}", i - STORAGE_LOADERS);
        for n in acked.get(&i).into_iter().flatten() {
            let k = key(&s, &format!("op{n}"), 1);
            match l.query(&LIMITS, &k).unwrap() {
                Lookup::Found(_) => checked += 1,
                other => panic!("loader {i} lost admission {n}: {other:?}"),
            }
        }
    }
    let total: usize = acked.values().map(BTreeSet::len).sum();
    assert_eq!(checked, total);
    total
}

fn terminated_backend(cluster: &Cluster, messages: &mut Vec<String>) {
    let schema = unique_schema("terminate");
    let s = PgStorage::open(StorageConfig::new(
        target(cluster, &schema),
        "t",
        Owner::new("writer").unwrap(),
    ))
    .unwrap();
    s.commit(&storage_op(0)).unwrap();
    let mut locker = target(cluster, &schema).connect().unwrap();
    let mut lock = locker.transaction().unwrap();
    // Every table but the head (the first lock a commit takes): the commit
    // gets its head lock, then waits inside its transaction.
    let tables: Vec<String> = lock
        .query(
            "SELECT tablename FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'storage%' \
             AND tablename <> 'storage_sessions'",
            &[&schema],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!tables.is_empty());
    lock.batch_execute(&format!(
        "LOCK TABLE {} IN EXCLUSIVE MODE",
        tables.join(", ")
    ))
    .unwrap();
    let writer = std::thread::spawn(move || {
        let r = s.commit(&storage_op(1));
        (s, r)
    });
    // Find the waiting backend and terminate it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let pid: i32 = loop {
        let mut probe = target(cluster, &schema).connect().unwrap();
        let rows = probe
            .query(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
                &[],
            )
            .unwrap();
        if let Some(r) = rows.first() {
            break r.get(0);
        }
        assert!(
            Instant::now() < deadline,
            "the commit never waited on the lock"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut killer = target(cluster, &schema).connect().unwrap();
    let ok: bool = killer
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap()
        .get(0);
    assert!(ok);
    let (s, r) = writer.join().unwrap();
    let e = r.unwrap_err();
    assert!(matches!(e, CommitError::Unavailable { .. }), "{e:?}");
    messages.push(e.to_string());
    lock.rollback().unwrap();
    // Nothing of the terminated transaction is stored.
    let before: Vec<String> = s
        .list_registers(&ns("n"), &KeyPrefix::all())
        .unwrap()
        .iter()
        .map(|r| r.key.as_str().to_owned())
        .collect();
    assert_eq!(before, vec!["a0".to_owned(), "b0".to_owned()]);
    // The retry (same commit) converges: applied once, and a further retry
    // is answered the same receipt.
    let applied = s.commit(&storage_op(1)).unwrap();
    assert_eq!(s.commit(&storage_op(1)), Ok(applied));
    let after = s.list_registers(&ns("n"), &KeyPrefix::all()).unwrap();
    assert_eq!(after.len(), 4);
    println!("pg_terminate_backend mid-commit: Unavailable ({e}), nothing stored, the retry applied once");
}

fn passwords_stay_secret(cluster: &Cluster, messages: &[String]) {
    let pw = cluster.password();
    // A dead port, a wrong password: the errors name the endpoint only.
    let dead = cluster
        .url()
        .replace(&format!(":{}/", cluster.port()), ":1/");
    let mut all: Vec<String> = messages.to_vec();
    let t = Target::new(dead, "s").unwrap();
    all.push(format!("{t:?}"));
    match PgLedger::open(t) {
        Err(e) => {
            all.push(e.to_string());
            all.push(format!("{e:?}"));
        }
        Ok(_) => panic!("a dead port opened"),
    }
    let wrong = Target::new(cluster.url().replace(pw, "not-the-password-zz"), "s").unwrap();
    match PgStorage::open(StorageConfig::new(wrong, "x", Owner::new("o").unwrap())) {
        Err(e) => {
            let m = e.to_string();
            assert!(!m.contains("not-the-password-zz"), "{m}");
            all.push(m);
        }
        Ok(_) => panic!("a wrong password opened"),
    }
    all.push(cluster.log());
    for m in &all {
        assert!(!m.contains(pw), "the password leaked: {m}");
    }
    println!(
        "passwords: {} messages and the server log ({} bytes) searched, the password in none",
        all.len() - 1,
        cluster.log().len()
    );
}

// ------------------------------------------------------------------ child

fn child(role: &str) {
    let url = std::env::var("CUSTOS_PG_URL").unwrap();
    let schema = std::env::var("CUSTOS_PG_SCHEMA").unwrap();
    let index: usize = std::env::var("CUSTOS_PG_INDEX").unwrap().parse().unwrap();
    let target = Target::new(url, schema).unwrap();
    let mut out = std::io::stdout();
    // One line per message, whatever a reason holds.
    let mut say = |l: String| {
        writeln!(out, "{}", l.replace('\n', "\\n")).unwrap();
        out.flush().unwrap();
    };
    let backoff = || std::thread::sleep(Duration::from_millis(100));
    match role {
        "storage" => {
            let s = PgStorage::open(StorageConfig::new(
                target,
                format!("s{index}"),
                Owner::new(format!("loader-{index}")).unwrap(),
            ))
            .unwrap();
            for n in 0..OPS {
                loop {
                    match s.commit(&storage_op(n)) {
                        Ok(_) => break,
                        Err(CommitError::Unavailable { reason }) => {
                            say(format!("unavailable {reason}"));
                            backoff();
                        }
                        // A retry is answered its own receipt whether or not
                        // the lost attempt applied: any refusal is a failure.
                        Err(e) => panic!("commit {n}: {e}"),
                    }
                }
                say(format!("ack {n}"));
            }
        }
        "ledger" => {
            let l = PgLedger::open(target).unwrap();
            let s = format!("s{}", index - STORAGE_LOADERS);
            for n in 0..OPS {
                let k = key(&s, &format!("op{n}"), 1);
                // The admission's own id: a retry after a lost reply is
                // answered as its own (`Fresh`); `Existing` would mean the
                // ledger took the retry for another caller's admission.
                let id = RequestId::new(format!("{s}-op{n}")).unwrap();
                loop {
                    match l.admit_once(&LIMITS, &k, &tool("program"), &tok("t"), &id) {
                        Ok(Admission::Fresh) => break,
                        Ok(other) => {
                            panic!("admit {n}: a retry answered {other:?}, not its own Fresh")
                        }
                        Err(custos_core::ledger::LedgerError::Unavailable { reason }) => {
                            say(format!("unavailable {reason}"));
                            backoff();
                        }
                        Err(e) => panic!("admit {n}: {e}"),
                    }
                }
                say(format!("ack {n}"));
            }
        }
        other => panic!("unknown role {other}"),
    }
    say("done".to_owned());
}
