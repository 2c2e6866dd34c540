//! One handle shared by 32 threads over a pool of 8 connections: the
//! server sees at most 8 of its connections and more than one at a time;
//! the postmaster is SIGKILLed mid-run and restarted; every thread's
//! commits are acknowledged in the end (each retried under its own commit
//! id), every acknowledged commit is present and none half-applied, and
//! the pool serves commits again after the restart. A thread finding every
//! connection busy past the checkout bound is `Unavailable`, naming it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use custos_conformance::storage::{key as rkey, ns};
use custos_core::lease::Owner;
use custos_core::storage::{Commit, CommitError, CommitId, Payload, Storage, Write};
use custos_postgres::catalogue::PgCatalogue;
use custos_postgres::conn::{Client, Conn, Waits};
use custos_postgres::control::PgControlCatalog;
use custos_postgres::ledger::PgLedger;
use custos_postgres::storage::{PgStorage, StorageConfig};
use custos_postgres::Target;
use custos_testkit::pg_cluster::{shared, unique_schema, Cluster};

mod support;

const THREADS: usize = 32;
const POOL: usize = 8;
const OPS: usize = 40;

fn send_sync<T: Send + Sync>() {}

#[test]
fn every_handle_is_send_and_sync() {
    send_sync::<PgStorage>();
    send_sync::<PgLedger>();
    send_sync::<PgCatalogue>();
    send_sync::<PgControlCatalog>();
    send_sync::<Conn>();
}

fn set(tag: &str, v: &str) -> Write {
    Write::SetRegister {
        namespace: ns("n"),
        key: rkey(tag),
        value: Payload::new(v.as_bytes().to_vec()).unwrap(),
    }
}

/// Thread `t`'s commit `n`: `a{t}_{n}` (which must be absent) and
/// `b{t}_{n}`, under its own commit id.
fn op(t: usize, n: usize) -> Commit {
    let tag = format!("{t}_{n}");
    Commit::at((t * 1000 + n) as u64)
        .expect(ns("n"), rkey(&format!("a{tag}")), None)
        .write(set(&format!("a{tag}"), &tag))
        .write(set(&format!("b{tag}"), &tag))
        .identified(CommitId::new(format!("c{tag}")).unwrap())
}

/// The connections the server sees from the handle (its application name,
/// this database, not the probe's own).
fn server_connections(probe: &mut Client) -> i64 {
    probe
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'custos' \
             AND datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .map_or(-1, |r| r.get(0))
}

#[test]
fn thirty_two_threads_share_one_handle_through_a_server_kill() {
    let cluster = Cluster::start().unwrap();
    let target = Target::new(cluster.url(), unique_schema("pool"))
        .unwrap()
        .pool_size(POOL);
    let s = Arc::new(
        PgStorage::open(
            StorageConfig::new(target.clone(), "s", Owner::new("pool").unwrap()).ttl(120_000),
        )
        .unwrap(),
    );
    let acked = Arc::new(AtomicUsize::new(0));
    let after_restart = Arc::new(AtomicUsize::new(0));
    let restarted = Arc::new(AtomicBool::new(false));
    let unavailable = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(THREADS + 1));
    let mut threads = Vec::new();
    for t in 0..THREADS {
        let (s, acked, after_restart, restarted, unavailable, start) = (
            Arc::clone(&s),
            Arc::clone(&acked),
            Arc::clone(&after_restart),
            Arc::clone(&restarted),
            Arc::clone(&unavailable),
            Arc::clone(&start),
        );
        threads.push(std::thread::spawn(move || {
            start.wait();
            let deadline = Instant::now() + Duration::from_secs(120);
            for n in 0..OPS {
                loop {
                    match s.commit(&op(t, n)) {
                        Ok(_) => break,
                        Err(CommitError::Unavailable { .. }) if Instant::now() < deadline => {
                            unavailable.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        Err(e) => panic!("thread {t} commit {n}: {e}"),
                    }
                }
                acked.fetch_add(1, Ordering::Relaxed);
                if restarted.load(Ordering::Relaxed) {
                    after_restart.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let mut probe = Target::new(cluster.url(), "public")
        .unwrap()
        .connect()
        .unwrap();
    start.wait();
    let mut peak = 0;
    let total = THREADS * OPS;
    while acked.load(Ordering::Relaxed) < total / 3 {
        peak = peak.max(server_connections(&mut probe));
        std::thread::sleep(Duration::from_millis(5));
    }
    let acked_at_kill = acked.load(Ordering::Relaxed);
    cluster.kill().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    cluster.restart().unwrap();
    restarted.store(true, Ordering::Relaxed);
    let mut probe = Target::new(cluster.url(), "public")
        .unwrap()
        .connect()
        .unwrap();
    while threads.iter().any(|h| !h.is_finished()) {
        peak = peak.max(server_connections(&mut probe));
        std::thread::sleep(Duration::from_millis(5));
    }
    for h in threads {
        h.join().unwrap();
    }
    check_every_commit(&s, total);
    let unavailable = unavailable.load(Ordering::Relaxed);
    let after = after_restart.load(Ordering::Relaxed);
    assert!(unavailable > 0, "no thread saw the server go away");
    assert!(after > 0, "no commit acknowledged after the restart");
    assert!(
        (2..=POOL as i64).contains(&peak),
        "the server saw {peak} of the handle's connections at once (pool of {POOL})"
    );
    println!(
        "{THREADS} threads, one handle, pool of {POOL}: {total} commits acknowledged and present \
         ({acked_at_kill} before the postmaster SIGKILL, {after} after the restart), 0 lost, \
         0 half-applied; {unavailable} Unavailable answers retried; at most {peak} server \
         connections at once"
    );
}

#[test]
fn a_thread_waits_for_a_free_connection_no_longer_than_the_checkout_bound() {
    let c = shared().unwrap();
    let waits = Waits {
        checkout: Duration::from_millis(300),
        ..Waits::default()
    };
    let target = Target::new(c.url(), unique_schema("checkout"))
        .unwrap()
        .pool_size(1)
        .with_waits(waits);
    let conn = Arc::new(Conn::open(target).unwrap());
    let holding = Arc::new(Barrier::new(2));
    let release = Arc::new(Barrier::new(2));
    let holder = {
        let (conn, holding, release) = (
            Arc::clone(&conn),
            Arc::clone(&holding),
            Arc::clone(&release),
        );
        std::thread::spawn(move || {
            conn.read::<_, ()>(|_tx| {
                holding.wait();
                release.wait();
                Ok(())
            })
            .unwrap();
        })
    };
    holding.wait();
    let t0 = Instant::now();
    let e = conn.read::<(), ()>(|_tx| Ok(())).unwrap_err();
    let waited = t0.elapsed();
    release.wait();
    holder.join().unwrap();
    let text = format!("{e:?}");
    assert!(text.contains("Waits::checkout"), "{text}");
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert_eq!(conn.open_connections(), 1);
    // Freed, the connection serves the next caller.
    conn.read::<(), ()>(|_tx| Ok(())).unwrap();
}

/// Every thread's every commit is present, both its registers.
fn check_every_commit(s: &PgStorage, total: usize) {
    let regs = support::registers(s);
    for t in 0..THREADS {
        for n in 0..OPS {
            let tag = format!("{t}_{n}");
            assert_eq!(
                regs.get(&format!("a{tag}")).map(Vec::as_slice),
                Some(tag.as_bytes()),
                "commit {tag} lost"
            );
            assert_eq!(
                regs.get(&format!("b{tag}")).map(Vec::as_slice),
                Some(tag.as_bytes()),
                "commit {tag} half-applied"
            );
        }
    }
    assert_eq!(regs.len(), 2 * total);
}

#[test]
fn an_idle_connection_the_server_ended_is_replaced_before_use() {
    let c = shared().unwrap();
    let t = Target::new(c.url(), unique_schema("idle")).unwrap();
    let conn = Conn::open(t.clone()).unwrap();
    let pid = conn.backend_pid().unwrap();
    let mut probe = t.connect().unwrap();
    probe
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // The next call sees no failure: the ended connection is noticed at
    // checkout and replaced.
    conn.read::<_, ()>(|tx| Ok(tx.query_one("SELECT 1", &[]).unwrap().get::<_, i32>(0)))
        .unwrap();
    assert_ne!(conn.backend_pid().unwrap(), pid);
    assert_eq!(conn.open_connections(), 1);
}

#[test]
fn a_lock_timeout_keeps_the_connection() {
    let c = shared().unwrap();
    let waits = Waits {
        lock: Duration::from_millis(200),
        ..Waits::default()
    };
    let t = Target::new(c.url(), unique_schema("locktimeout"))
        .unwrap()
        .with_waits(waits);
    let conn = Conn::open(t.clone()).unwrap();
    let schema = t.schema().to_owned();
    conn.write::<_, ()>(|tx| {
        tx.batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.held (k bigint PRIMARY KEY);
             INSERT INTO {schema}.held VALUES (1)"
        ))
        .unwrap();
        Ok(())
    })
    .unwrap();
    let pid = conn.backend_pid().unwrap();
    let mut holder = t.connect().unwrap();
    let mut hold = holder.transaction().unwrap();
    hold.query("SELECT k FROM held WHERE k = 1 FOR UPDATE", &[])
        .unwrap();
    let e = conn
        .write::<(), ()>(|tx| {
            tx.query("SELECT k FROM held WHERE k = 1 FOR UPDATE", &[])
                .map_err(|e| {
                    custos_postgres::conn::TxError::Failure(custos_postgres::conn::classify(
                        "lock", &e,
                    ))
                })?;
            Ok(())
        })
        .unwrap_err();
    assert!(format!("{e:?}").contains("lock_timeout"), "{e:?}");
    hold.rollback().unwrap();
    // The server only cancelled the statement: the same connection serves.
    assert_eq!(conn.backend_pid().unwrap(), pid);
    assert_eq!(conn.open_connections(), 1);
}
