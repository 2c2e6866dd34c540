//! Many hosts on one PostgreSQL server: races of 8 processes over TCP
//! loopback, each with its own connection, repeated for several rounds, and
//! two clients whose local clocks disagree by minutes.
//!
//! A custom harness (`harness = false`): the parent runs every scenario and
//! re-executes this binary as the children (`CUSTOS_PG_ROLE` names the
//! child's part). A child opens its port, prints `ready`, waits for `go` on
//! stdin — so every child is connected before any acts — does one
//! operation and prints one `result …` line.
//!
//! - same-world registration: one row, one `created`, every other answer a
//!   no-op;
//! - ledger admission of one key: exactly one `Fresh`;
//! - the delegate limit (3 of 8 claimants): exactly 3 claimed, never more;
//! - a lease steal after expiry: one winner, its fence above the expired
//!   holder's, every other open refused with the lease held, the expired
//!   holder's commit refused and nothing of it applied;
//! - clocks: children run under libfaketime ten minutes ahead of and behind
//!   the server; a lease written by one is judged by the server's clock for
//!   the other (held while live, stolen after its ttl), the ledger admits
//!   one key once;
//! - a frozen holder: a child locks the ledger's head row inside a
//!   transaction on a connection made by [`Target::connect`] (custos's
//!   waits) and is stopped with `SIGSTOP`; a second host's admission of
//!   another key must come back — admitted once the server ends the frozen
//!   session (`idle_in_transaction_session_timeout`), or refused
//!   `Unavailable` naming the lock timeout — and never wait on the frozen
//!   host for good. The elapsed time is printed, not asserted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use custos_conformance::catalogue::{local, reserve};
use custos_conformance::ledger::{key, sid, tok, tool, ws, LIMITS};
use custos_core::catalogue::{Catalogue, Claim, Outcome as CatOutcome, Request as CatRequest};
use custos_core::lease::Owner;
use custos_core::ledger::{Admission, Ledger};
use custos_core::storage::{Commit, Payload, Storage, Write};
use custos_core::world::{
    ControlCatalog, Outcome as WorldOutcome, WorldIdentity, WorldRecord, WriterMode,
};
use custos_postgres::catalogue::PgCatalogue;
use custos_postgres::control::PgControlCatalog;
use custos_postgres::ledger::PgLedger;
use custos_postgres::storage::{PgStorage, StorageConfig};
use custos_postgres::Target;
use custos_testkit::pg_cluster::{shared, unique_schema};

mod support;

const PROCESSES: usize = 8;
const ROUNDS: usize = 4;
const DELEGATE_LIMIT: u32 = 3;
/// libfaketime's preload library (Debian's `faketime` package).
const FAKETIME_LIBS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
];

fn main() {
    if support::listed_or_child(child) {
        return;
    }
    let started = Instant::now();
    registration_race();
    admission_race();
    delegate_limit_race();
    lease_steal_race();
    clocks_that_disagree();
    a_frozen_holder_does_not_stop_another_host();
    println!(
        "hosts: every scenario held ({PROCESSES} processes × {ROUNDS} rounds) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

// ------------------------------------------------------------------ parent

struct Kid {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Kid {
    fn spawn(role: &str, schema: &str, index: usize, env: &[(&str, String)]) -> Kid {
        let c = shared().unwrap();
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.env("CUSTOS_PG_ROLE", role)
            .env("CUSTOS_PG_URL", c.url())
            .env("CUSTOS_PG_SCHEMA", schema)
            .env("CUSTOS_PG_INDEX", index.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Kid {
            child,
            stdin,
            stdout,
        }
    }

    fn line(&mut self) -> String {
        let mut s = String::new();
        self.stdout.read_line(&mut s).unwrap();
        if s.is_empty() {
            panic!("child {:?} ended without a line", self.child.id());
        }
        s.trim_end().to_owned()
    }

    fn expect(&mut self, prefix: &str) -> String {
        let l = self.line();
        match l.strip_prefix(prefix) {
            Some(rest) => rest.trim().to_owned(),
            None => panic!("child said {l:?}, expected {prefix:?}"),
        }
    }

    fn say(&mut self, word: &str) {
        writeln!(self.stdin, "{word}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn finish(mut self) {
        drop(self.stdin);
        let st = self.child.wait().unwrap();
        assert!(st.success(), "child failed: {st}");
    }
}

/// Spawns `PROCESSES` children in `role`, waits until every one is ready,
/// releases them together and returns their results by index.
fn race(role: &str, schema: &str) -> Vec<String> {
    let mut kids: Vec<Kid> = (0..PROCESSES)
        .map(|i| Kid::spawn(role, schema, i, &[]))
        .collect();
    for k in &mut kids {
        k.expect("ready");
    }
    for k in &mut kids {
        k.say("go");
    }
    let results: Vec<String> = kids.iter_mut().map(|k| k.expect("result")).collect();
    for k in kids {
        k.finish();
    }
    results
}

fn target(schema: &str) -> Target {
    Target::new(shared().unwrap().url(), schema).unwrap()
}

fn tally(results: &[String]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in results {
        *m.entry(r.split_whitespace().next().unwrap_or("").to_owned())
            .or_insert(0) += 1;
    }
    m
}

fn world() -> WorldRecord {
    WorldRecord::active(
        WorldIdentity {
            world_id: "w-race".into(),
            name: "the raced world".into(),
            run_id: Some("run-1".into()),
            parent_world_id: None,
        },
        WriterMode::Resumable,
    )
}

fn registration_race() {
    for round in 0..ROUNDS {
        let schema = unique_schema("race_reg");
        PgControlCatalog::open(target(&schema)).unwrap();
        let results = race("register", &schema);
        let t = tally(&results);
        assert_eq!(t.get("created"), Some(&1), "round {round}: {results:?}");
        assert_eq!(
            t.get("noop"),
            Some(&(PROCESSES - 1)),
            "round {round}: {results:?}"
        );
        let worlds = PgControlCatalog::open_read_only(target(&schema))
            .unwrap()
            .discover_worlds()
            .unwrap();
        assert_eq!(worlds, vec![world()], "round {round}");
        println!(
            "race registration round {round}: 1 created, {} no-ops, 1 row",
            PROCESSES - 1
        );
    }
}

fn admission_race() {
    for round in 0..ROUNDS {
        let schema = unique_schema("race_admit");
        let l = PgLedger::open(target(&schema)).unwrap();
        l.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("t"))
            .unwrap();
        let results = race("admit", &schema);
        let t = tally(&results);
        assert_eq!(t.get("Fresh"), Some(&1), "round {round}: {results:?}");
        assert_eq!(l.records().unwrap(), 2, "one scope and one call row");
        println!(
            "race admission round {round}: 1 Fresh, {} not ({results:?})",
            PROCESSES - 1
        );
    }
}

fn delegate_limit_race() {
    for round in 0..ROUNDS {
        let schema = unique_schema("race_claim");
        let c = PgCatalogue::open(target(&schema)).unwrap();
        for i in 0..PROCESSES {
            reserve(&c, &format!("d{i}"), local(&format!("k{i}")));
        }
        let results = race("claim", &schema);
        let t = tally(&results);
        assert_eq!(
            t.get("claimed"),
            Some(&(DELEGATE_LIMIT as usize)),
            "round {round}: {results:?}"
        );
        assert_eq!(
            t.get("at-limit"),
            Some(&(PROCESSES - DELEGATE_LIMIT as usize)),
            "round {round}: {results:?}"
        );
        assert_eq!(c.delegates_held("orch").unwrap(), DELEGATE_LIMIT);
        println!("race delegate limit round {round}: {DELEGATE_LIMIT} claimed of {PROCESSES}, held {DELEGATE_LIMIT}");
    }
}

fn one_write(tag: &str) -> Commit {
    Commit::at(1).write(Write::SetRegister {
        namespace: custos_conformance::storage::ns("n"),
        key: custos_conformance::storage::key(tag),
        value: Payload::new(tag.as_bytes().to_vec()).unwrap(),
    })
}

fn lease_steal_race() {
    for round in 0..ROUNDS {
        let schema = unique_schema("race_lease");
        let first = PgStorage::open(
            StorageConfig::new(target(&schema), "s", Owner::new("first").unwrap()).ttl(1_000),
        )
        .unwrap();
        let (_, before) = first.lease_pair().unwrap();
        first.commit(&one_write("before")).unwrap();
        // The children connect now and are released after the lease expired
        // by the server's clock.
        let mut kids: Vec<Kid> = (0..PROCESSES)
            .map(|i| Kid::spawn("steal", &schema, i, &[]))
            .collect();
        for k in &mut kids {
            k.expect("ready");
        }
        std::thread::sleep(Duration::from_millis(1_300));
        for k in &mut kids {
            k.say("go");
        }
        let results: Vec<String> = kids.iter_mut().map(|k| k.expect("result")).collect();
        let t = tally(&results);
        assert_eq!(t.get("opened"), Some(&1), "round {round}: {results:?}");
        assert_eq!(
            t.get("held"),
            Some(&(PROCESSES - 1)),
            "round {round}: {results:?}"
        );
        let fence: u64 = results
            .iter()
            .find_map(|r| r.strip_prefix("opened "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            fence > before,
            "round {round}: fence {fence} after {before}"
        );
        // The expired holder is fenced out: its commit is refused, nothing applies.
        let e = first.commit(&one_write("after")).unwrap_err();
        assert_eq!(e.reason(), "LeaseLost", "round {round}: {e}");
        for k in &mut kids {
            k.say("exit");
        }
        for k in kids {
            k.finish();
        }
        let reader = PgStorage::open(
            StorageConfig::new(target(&schema), "s", Owner::new("reader").unwrap()).ttl(1_000),
        )
        .unwrap();
        let regs = reader
            .list_registers(
                &custos_conformance::storage::ns("n"),
                &custos_core::storage::KeyPrefix::all(),
            )
            .unwrap();
        let keys: Vec<String> = regs.iter().map(|r| r.key.as_str().to_owned()).collect();
        assert!(
            keys.contains(&"before".to_owned()),
            "round {round}: {keys:?}"
        );
        assert!(
            !keys.contains(&"after".to_owned()),
            "round {round}: {keys:?}"
        );
        println!(
            "race lease steal round {round}: 1 winner at fence {fence} (expired holder's {}), {} held, stale commit refused",
            before,
            PROCESSES - 1
        );
    }
}

fn faketime_lib() -> String {
    if let Ok(p) = std::env::var("CUSTOS_FAKETIME_LIB") {
        return p;
    }
    FAKETIME_LIBS
        .iter()
        .find(|p| std::path::Path::new(p).is_file())
        .map(|p| (*p).to_owned())
        .unwrap_or_else(|| {
            panic!(
                "libfaketime is missing: install Debian's `faketime` package \
                 (make servers does) or set CUSTOS_FAKETIME_LIB; the clock test needs \
                 clients whose local clocks disagree"
            )
        })
}

fn skewed(role: &str, schema: &str, offset: &str) -> Kid {
    Kid::spawn(
        role,
        schema,
        0,
        &[
            ("LD_PRELOAD", faketime_lib()),
            ("FAKETIME", offset.to_owned()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
        ],
    )
}

/// The child's local clock minus the server's, in minutes (checked so the
/// skew is real).
fn skew_minutes(k: &mut Kid) -> i64 {
    k.expect("skew").parse::<i64>().unwrap() / 60_000
}

fn clocks_that_disagree() {
    // A holder ten minutes behind and a challenger ten minutes ahead: by the
    // challenger's clock the lease expired ten minutes ago; by the server's
    // it is live, so the open is refused.
    let schema = unique_schema("clock");
    let mut behind = skewed("clock-hold", &schema, "-10m");
    assert_eq!(skew_minutes(&mut behind), -10);
    let fence_behind: u64 = behind.expect("held").parse().unwrap();
    let mut ahead = skewed("clock-open", &schema, "+10m");
    assert_eq!(skew_minutes(&mut ahead), 10);
    assert_eq!(ahead.expect("result"), "held");
    ahead.finish();
    // After the ttl by the server's clock, a challenger ten minutes behind
    // (by whose clock a lease written by an ahead host would last twenty
    // more minutes) steals it at once.
    std::thread::sleep(Duration::from_millis(2_300));
    let mut late = skewed("clock-open", &schema, "-10m");
    assert_eq!(skew_minutes(&mut late), -10);
    let stolen = late.expect("result");
    let fence: u64 = stolen.strip_prefix("opened ").unwrap().parse().unwrap();
    assert!(fence > fence_behind, "{fence} after {fence_behind}");
    late.finish();
    behind.say("commit");
    assert_eq!(behind.expect("result"), "LeaseLost");
    behind.finish();
    // The ledger: two skewed clients admit one key; one is Fresh.
    let l = PgLedger::open(target(&schema)).unwrap();
    l.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("t"))
        .unwrap();
    let mut a = skewed("admit", &schema, "+10m");
    let mut b = skewed("admit", &schema, "-10m");
    a.expect("ready");
    b.expect("ready");
    a.say("go");
    b.say("go");
    let answers = [a.expect("result"), b.expect("result")];
    let fresh = answers.iter().filter(|a| *a == "Fresh").count();
    assert_eq!(fresh, 1, "{answers:?}");
    a.finish();
    b.finish();
    println!(
        "clocks: holder -10 min, challenger +10 min refused while live; -10 min challenger stole after the ttl (fence {fence_behind} -> {fence}); ledger admitted once ({answers:?})"
    );
}

// ------------------------------------------------------------------ child

fn a_frozen_holder_does_not_stop_another_host() {
    let schema = unique_schema("frozen");
    let l = PgLedger::open(target(&schema)).unwrap();
    l.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("t"))
        .unwrap();
    let mut holder = Kid::spawn("freeze", &schema, 0, &[]);
    holder.expect("locked");
    let pid = holder.child.id().to_string();
    let stop = Command::new("kill").args(["-STOP", &pid]).status().unwrap();
    assert!(stop.success(), "SIGSTOP failed");
    // The second host, on its own handle, admits another key. A hang guard
    // (not a timing assertion): the answer must come back at all.
    let schema2 = schema.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let started = Instant::now();
    std::thread::spawn(move || {
        let r = match PgLedger::open(target(&schema2)) {
            Ok(l2) => l2
                .admit(&LIMITS, &key("s", "other", 1), &tool("program"), &tok("t"))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let _ = tx.send(r);
    });
    let answer = rx.recv_timeout(Duration::from_secs(120));
    let elapsed = started.elapsed();
    let _ = Command::new("kill").args(["-CONT", &pid]).status();
    let answer = answer.expect("the second host waited on the frozen holder past 120 s");
    match &answer {
        Ok(Admission::Fresh) => {}
        Err(e) if e.contains("Unavailable") && e.contains("lock_timeout") => {}
        other => panic!("the second host's admission: {other:?}"),
    }
    // Resumed, the frozen host finds its session ended by the server: its
    // commit fails and nothing of its transaction applied.
    holder.say("commit");
    let said = holder.expect("result");
    assert!(
        said.starts_with("commit-failed"),
        "the frozen host's transaction outlived the idle bound: {said}"
    );
    holder.finish();
    println!(
        "frozen holder: the second host answered {answer:?} after {:.1} s; the frozen host then said {said:?}",
        elapsed.as_secs_f64()
    );
}

fn child(role: &str) {
    let url = std::env::var("CUSTOS_PG_URL").unwrap();
    let schema = std::env::var("CUSTOS_PG_SCHEMA").unwrap();
    let index: usize = std::env::var("CUSTOS_PG_INDEX").unwrap().parse().unwrap();
    let target = Target::new(url, schema).unwrap();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut wait = |word: &str| {
        let l = lines.next().unwrap().unwrap();
        assert_eq!(l, word);
    };
    match role {
        "freeze" => {
            // custos's own connection settings; the head row every ledger
            // writer locks first, held inside an open transaction.
            let mut c = target.connect().unwrap();
            c.batch_execute("BEGIN; SELECT id FROM ledger_head FOR UPDATE")
                .unwrap();
            println!("locked");
            wait("commit");
            match c.batch_execute("COMMIT") {
                Ok(()) => println!("result committed"),
                Err(e) => println!("result commit-failed {}", e.to_string().replace('\n', " ")),
            }
        }
        "register" => {
            let c = PgControlCatalog::open(target).unwrap();
            println!("ready");
            wait("go");
            match c.register(&world()) {
                Ok(WorldOutcome::Registered { created: true }) => println!("result created"),
                Ok(WorldOutcome::Registered { created: false }) => println!("result noop"),
                other => println!("result other {other:?}"),
            }
        }
        "admit" => {
            let l = PgLedger::open(target).unwrap();
            println!("ready");
            wait("go");
            match l.admit(&LIMITS, &key("s", "op", 1), &tool("program"), &tok("t")) {
                Ok(Admission::Fresh) => println!("result Fresh"),
                Ok(other) => println!("result {other:?}"),
                Err(e) => println!("result error {e}"),
            }
        }
        "claim" => {
            let c = PgCatalogue::open(target).unwrap();
            println!("ready");
            wait("go");
            let r = c.apply(&CatRequest::ClaimDelegate {
                spawner: "orch".into(),
                parent_session: format!("p{index}"),
                session_id: format!("d{index}"),
                now: 10,
                limit: DELEGATE_LIMIT,
            });
            match r {
                Ok(CatOutcome::Delegate(Claim::Claimed(_))) => println!("result claimed"),
                Ok(CatOutcome::Delegate(Claim::AtLimit { .. })) => println!("result at-limit"),
                other => println!("result other {other:?}"),
            }
        }
        "steal" => {
            // Connected before the race; the open is the raced step.
            let cfg = StorageConfig::new(target, "s", Owner::new(format!("h{index}")).unwrap());
            custos_postgres::Target::connect(&cfg.target).unwrap();
            println!("ready");
            wait("go");
            let opened = PgStorage::open(cfg);
            match &opened {
                Ok(s) => println!("result opened {}", s.lease_pair().unwrap().1),
                Err(e) if e.to_string().contains("LeaseHeld") => println!("result held"),
                Err(e) => println!("result error {e}"),
            }
            wait("exit");
            drop(opened);
        }
        "clock-hold" | "clock-open" => {
            print_skew(&target);
            let cfg = StorageConfig::new(
                target,
                "s",
                Owner::new(format!("{role}-{}", std::process::id())).unwrap(),
            )
            .ttl(2_000);
            let opened = PgStorage::open(cfg);
            if role == "clock-open" {
                match &opened {
                    Ok(s) => println!("result opened {}", s.lease_pair().unwrap().1),
                    Err(e) if e.to_string().contains("LeaseHeld") => println!("result held"),
                    Err(e) => println!("result error {e}"),
                }
                return;
            }
            let s = opened.unwrap();
            println!("held {}", s.lease_pair().unwrap().1);
            wait("commit");
            match s.commit(&one_write("late")) {
                Ok(_) => println!("result committed"),
                Err(e) => println!("result {}", e.reason()),
            }
        }
        other => panic!("unknown role {other}"),
    }
}

fn print_skew(target: &Target) {
    let mut client = target.connect().unwrap();
    let server: i64 = client
        .query_one(
            "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint",
            &[],
        )
        .unwrap()
        .get(0);
    let local = i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    // Round to the nearest minute boundary of the offset.
    let d = local - server;
    println!("skew {}", (d + d.signum() * 30_000) / 60_000 * 60_000);
}
