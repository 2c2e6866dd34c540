//! A lost reply to `COMMIT`: a loopback proxy between the handle and the
//! server forwards everything, and once armed it swallows the server's
//! `CommandComplete("COMMIT")` and closes both sides. The transaction is
//! committed; the caller sees `Unavailable` and cannot know whether it
//! landed. Its retry (the same request, on the same handle, through the
//! proxy again) must be answered as the first attempt would have been.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use custos_conformance::ledger::{key, sid, tok, tool, ws, LIMITS};
use custos_conformance::storage::{entry, ns, set};
use custos_core::lease::Owner;
use custos_core::ledger::{Admission, CallState, Ledger, LedgerError, Lookup, RequestId};
use custos_core::storage::{Commit, CommitError, CommitId, KeyPrefix, Storage};
use custos_postgres::ledger::PgLedger;
use custos_postgres::storage::{PgStorage, StorageConfig};
use custos_postgres::Target;
use custos_testkit::pg_cluster::{shared, unique_schema};

/// The server's `CommandComplete` for `COMMIT`: tag `C`, length 11
/// (itself and "COMMIT\0").
const COMMIT_COMPLETE: &[u8] = b"C\x00\x00\x00\x0bCOMMIT\x00";

/// The proxy: armed, it drops the next `COMMIT` reply and the connection.
#[derive(Clone)]
struct Proxy {
    port: u16,
    armed: Arc<AtomicBool>,
    dropped: Arc<AtomicUsize>,
}

impl Proxy {
    fn start(upstream_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = Proxy {
            port: listener.local_addr().unwrap().port(),
            armed: Arc::new(AtomicBool::new(false)),
            dropped: Arc::new(AtomicUsize::new(0)),
        };
        let p = proxy.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)) else {
                    continue;
                };
                let p = p.clone();
                pump(client, server, p);
            }
        });
        proxy
    }

    /// Drops the next `COMMIT` reply; panics unless one was dropped by the
    /// end of `f`.
    fn lose_next_commit<T>(&self, f: impl FnOnce() -> T) -> T {
        let before = self.dropped.load(Ordering::SeqCst);
        self.armed.store(true, Ordering::SeqCst);
        let out = f();
        self.armed.store(false, Ordering::SeqCst);
        assert_eq!(
            self.dropped.load(Ordering::SeqCst),
            before + 1,
            "the proxy saw no COMMIT reply to drop"
        );
        out
    }
}

fn pump(client: TcpStream, server: TcpStream, p: Proxy) {
    let (mut c_read, mut s_write) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n) = c_read.read(&mut buf) {
            if n == 0 || s_write.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = s_write.shutdown(Shutdown::Both);
    });
    let (mut s_read, mut c_write) = (server, client);
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        // The tail of the previous chunk, so a tag split across two reads
        // is still seen.
        let mut window: Vec<u8> = Vec::new();
        while let Ok(n) = s_read.read(&mut buf) {
            if n == 0 {
                break;
            }
            window.extend_from_slice(&buf[..n]);
            let seen = window
                .windows(COMMIT_COMPLETE.len())
                .any(|w| w == COMMIT_COMPLETE);
            if seen && p.armed.swap(false, Ordering::SeqCst) {
                p.dropped.fetch_add(1, Ordering::SeqCst);
                let _ = c_write.shutdown(Shutdown::Both);
                let _ = s_read.shutdown(Shutdown::Both);
                return;
            }
            let keep = window.len().saturating_sub(COMMIT_COMPLETE.len() - 1);
            window.drain(..keep);
            if c_write.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = c_write.shutdown(Shutdown::Both);
    });
}

fn target_through(proxy: &Proxy) -> Target {
    let c = shared().unwrap();
    let url = c
        .url()
        .replace(&format!(":{}/", c.port()), &format!(":{}/", proxy.port));
    assert_ne!(url, c.url(), "the URL was not pointed at the proxy");
    Target::new(url, unique_schema("lost_reply")).unwrap()
}

fn ledger_through(proxy: &Proxy) -> PgLedger {
    PgLedger::open(target_through(proxy)).unwrap()
}

fn unavailable<T: std::fmt::Debug>(r: Result<T, LedgerError>) {
    assert!(
        matches!(r, Err(LedgerError::Unavailable { .. })),
        "a lost COMMIT reply answered {r:?}"
    );
}

#[test]
fn a_retried_admission_after_a_lost_commit_reply_is_fresh() {
    let proxy = Proxy::start(shared().unwrap().port());
    let l = ledger_through(&proxy);
    l.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("t"))
        .unwrap();
    let k = key("s", "o", 1);
    let id = RequestId::new("admit-o-1").unwrap();
    unavailable(
        proxy.lose_next_commit(|| l.admit_once(&LIMITS, &k, &tool("program"), &tok("t"), &id)),
    );
    // It landed; the retry is answered as its own.
    assert_eq!(
        l.admit_once(&LIMITS, &k, &tool("program"), &tok("t"), &id),
        Ok(Admission::Fresh)
    );
    assert_eq!(l.query(&LIMITS, &k), Ok(Lookup::Found(CallState::Admitted)));
    // Without a request id nothing tells the retry from another caller's
    // admission: it is `Existing`, and must not start the call.
    let k2 = key("s", "p", 1);
    unavailable(proxy.lose_next_commit(|| l.admit(&LIMITS, &k2, &tool("program"), &tok("t"))));
    assert_eq!(
        l.admit(&LIMITS, &k2, &tool("program"), &tok("t")),
        Ok(Admission::Existing(CallState::Admitted))
    );
    println!("lost COMMIT reply: admit_once retry Fresh; admit (no id) retry Existing(Admitted)");
}

#[test]
fn a_retried_finish_after_a_lost_commit_reply_is_finished() {
    let proxy = Proxy::start(shared().unwrap().port());
    let l = ledger_through(&proxy);
    l.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("t"))
        .unwrap();
    let k = key("s", "o", 1);
    l.admit(&LIMITS, &k, &tool("program"), &tok("t")).unwrap();
    unavailable(proxy.lose_next_commit(|| l.finish(&LIMITS, &k, b"outcome")));
    assert_eq!(l.finish(&LIMITS, &k, b"outcome"), Ok(()));
    assert_eq!(
        l.query(&LIMITS, &k),
        Ok(Lookup::Found(CallState::Terminal(b"outcome".to_vec())))
    );
    println!("lost COMMIT reply: finish retry Finished");
}

#[test]
fn a_retried_commit_after_a_lost_commit_reply_gets_its_own_receipt() {
    let proxy = Proxy::start(shared().unwrap().port());
    let s = PgStorage::open(StorageConfig::new(
        target_through(&proxy),
        "s",
        Owner::new("writer").unwrap(),
    ))
    .unwrap();
    // An inserted entry, a compare-and-set and an unconditional set: each
    // refused or applied twice by a retry that is not recognised.
    let c = Commit::at(1)
        .expect(ns("n"), custos_conformance::storage::key("cas"), None)
        .write(entry("e1", None, "m"))
        .write(set("n", "cas", b"1"))
        .write(set("n", "free", b"2"))
        .identified(CommitId::new("commit-1").unwrap());
    let lost = proxy.lose_next_commit(|| s.commit(&c));
    assert!(
        matches!(lost, Err(CommitError::Unavailable { .. })),
        "a lost COMMIT reply answered {lost:?}"
    );
    let retry = s.commit(&c).unwrap();
    assert_eq!(retry.seqs, vec![1, 2, 3], "the retry was applied anew");
    let cells = s.list_registers(&ns("n"), &KeyPrefix::all()).unwrap();
    let seqs: Vec<u64> = cells.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, vec![2, 3], "a register moved on the retry");
    // Without an id, the same retry is refused: the entry is taken.
    let plain = Commit::at(2).write(entry("e2", None, "m"));
    assert!(matches!(
        proxy.lose_next_commit(|| s.commit(&plain)),
        Err(CommitError::Unavailable { .. })
    ));
    assert_eq!(s.commit(&plain).unwrap_err().reason(), "DuplicateId");
    println!("lost COMMIT reply: identified commit retry answered {retry:?}; unidentified retry DuplicateId");
}

#[test]
fn a_close_whose_release_reply_was_lost_is_retried_by_the_next_close() {
    let proxy = Proxy::start(shared().unwrap().port());
    let t = target_through(&proxy);
    let s = PgStorage::open(StorageConfig::new(t.clone(), "s", Owner::new("a").unwrap())).unwrap();
    s.commit(&Commit::at(1).write(set("n", "k", b"v"))).unwrap();
    let first = proxy.lose_next_commit(|| s.close());
    assert!(
        matches!(
            first,
            Err(custos_core::storage::StorageError::Unavailable { .. })
        ),
        "a lost release reply answered {first:?}"
    );
    // Everything but close is refused from the first close on.
    assert!(s.commit(&Commit::at(2).write(set("n", "k", b"w"))).is_err());
    assert_eq!(
        s.close(),
        Ok(()),
        "the second close did not retry the release"
    );
    assert_eq!(s.close(), Ok(()));
    // The lease is free: another owner opens at once (no ttl wait).
    let other = PgStorage::open(StorageConfig::new(t, "s", Owner::new("b").unwrap())).unwrap();
    assert_eq!(
        other
            .get_register(&ns("n"), &custos_conformance::storage::key("k"))
            .unwrap()
            .map(|r| r.value.as_bytes().to_vec()),
        Some(b"v".to_vec())
    );
    println!("lost release reply: close Unavailable, the next close Ok, the lease free for another owner");
}
