//! The access plane on SQLite against the memory backend: random streams of
//! access requests mixed with catalogue `Reserve` and `Delete` of sessions
//! (so the membership cascade is exercised) go through `MemoryCatalogue`
//! and `SqliteCatalogue`, and every answer is compared: each write's
//! result, and after each step the owner, `authenticate` and
//! `authorization` of every digest in the universe, every page walked with
//! a small limit (principals, memberships, session members, sign-ins),
//! `claim_known` of every claim, and the revision. Before each access write
//! the SQLite loader's partial state is compared with the reference
//! `AccessFootprint::partial` of the memory state. The SQLite file is
//! closed and reopened at a random step.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use custos_core::catalogue::access::{claim_digest, footprint, Access, AccessRequest, Digest};
use custos_core::catalogue::{Catalogue, Creation, MemoryCatalogue, Request};
use custos_sqlite::catalogue::SqliteCatalogue;
use custos_testkit::access::{arb_request, arb_session};
use proptest::prelude::*;

// ---- the testkit's access requests, with catalogue session operations
// added ----

#[derive(Clone, Debug)]
enum Op {
    Access(AccessRequest),
    Reserve(String),
    Delete(String),
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => arb_request().prop_map(Op::Access),
        1 => arb_session().prop_map(Op::Reserve),
        1 => arb_session().prop_map(Op::Delete),
    ]
}

fn reserve(id: &str) -> Request {
    Request::Reserve {
        session_id: id.into(),
        creation: Creation::local(&format!("k-{id}"), &format!("Session {id}"), "/w"),
        now: 1,
    }
}

// ---- what is compared after every step ----

/// Every digest a request can name: the tokens of both kinds, and the
/// claims' own hashes as bearers.
fn digests() -> Vec<Digest> {
    custos_conformance::access::generated_digests()
}

const PRINCIPALS: [&str; 5] = ["p0", "p1", "p2", "p3", "not a principal!"];
const SESSIONS: [&str; 4] = ["s0", "s1", "s2", "s9"];
const READ_TIMES: [u64; 6] = [5, 10, 20, 30, 45, 150_000];

/// Every answer one backend gives, labelled, as debug text.
fn observe<C: Access + Catalogue>(c: &C) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut put = |label: String, v: String| out.push((label, v));
    put("owner".into(), format!("{:?}", c.owner()));
    put("revision".into(), format!("{:?}", c.revision()));
    for d in digests() {
        for now in READ_TIMES {
            put(
                format!("authenticate {d:?} @{now}"),
                format!("{:?}", c.authenticate(&d, now)),
            );
        }
        for s in SESSIONS {
            put(
                format!("authorization {d:?} {s}"),
                format!("{:?}", c.authorization(&d, s, 10)),
            );
        }
    }
    for i in 0..4 {
        let k = claim_digest(format!("claim{i}").as_bytes());
        put(
            format!("claim_known {k:?}"),
            format!("{:?}", c.claim_known(&k)),
        );
    }
    for now in READ_TIMES {
        put(
            format!("principals_page all @{now}"),
            format!("{:?}", c.principals_page(None, 100, now)),
        );
        walk(&mut put, &format!("principals @{now}"), |after| {
            c.principals_page(after, 1, now)
                .map(|p| {
                    (
                        p.rows.last().map(|r| r.principal.clone()),
                        p.more,
                        format!("{p:?}"),
                    )
                })
                .map_err(|e| format!("{e:?}"))
        });
    }
    for p in PRINCIPALS {
        walk(&mut put, &format!("memberships {p}"), |after| {
            c.memberships_page(p, after, 1)
                .map(|g| {
                    (
                        g.rows.last().map(|r| r.session_id.clone()),
                        g.more,
                        format!("{g:?}"),
                    )
                })
                .map_err(|e| format!("{e:?}"))
        });
        for now in READ_TIMES {
            walk(&mut put, &format!("signins {p} @{now}"), |after| {
                c.signins_page(p, after, 1, now)
                    .map(|g| {
                        (
                            g.rows.last().map(|r| r.fingerprint.clone()),
                            g.more,
                            format!("{g:?}"),
                        )
                    })
                    .map_err(|e| format!("{e:?}"))
            });
        }
    }
    for s in SESSIONS {
        walk(&mut put, &format!("session members {s}"), |after| {
            c.session_members_page(s, after, 1)
                .map(|g| {
                    (
                        g.rows.last().map(|r| r.principal.clone()),
                        g.more,
                        format!("{g:?}"),
                    )
                })
                .map_err(|e| format!("{e:?}"))
        });
    }
    out
}

type PageStep = Result<(Option<String>, bool, String), String>;

/// Walks a paged listing from the start, recording each page.
fn walk(
    put: &mut impl FnMut(String, String),
    label: &str,
    mut page: impl FnMut(Option<&str>) -> PageStep,
) {
    let mut after: Option<String> = None;
    for i in 0..12 {
        match page(after.as_deref()) {
            Ok((last, more, shown)) => {
                put(format!("{label} page {i}"), shown);
                if !more || last.is_none() {
                    return;
                }
                after = last;
            }
            Err(e) => {
                put(format!("{label} page {i}"), e);
                return;
            }
        }
    }
    put(label.to_owned(), "more than 12 pages".into());
}

fn compare(
    step: usize,
    op: &Op,
    mem: &MemoryCatalogue,
    sq: &SqliteCatalogue,
) -> Result<(), TestCaseError> {
    let (m, s) = (observe(mem), observe(sq));
    prop_assert_eq!(
        m.len(),
        s.len(),
        "step {} {:?}: observation counts",
        step,
        op
    );
    for ((lm, vm), (ls, vs)) in m.iter().zip(&s) {
        prop_assert_eq!(lm, ls);
        prop_assert_eq!(vm, vs, "step {} after {:?}: {}", step, op, lm);
    }
    Ok(())
}

fn scratch() -> tempfile::TempDir {
    // Writes are fsync'd; a memory file system keeps 64 × 40 commits quick.
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn sqlite_answers_every_access_stream_as_memory_does(
        ops in proptest::collection::vec(arb_op(), 1..40),
        reopen_at in 0usize..40,
    ) {
        let dir = scratch();
        let path = dir.path().join("catalogue.db");
        let mem = MemoryCatalogue::new();
        let mut sq = SqliteCatalogue::open(&path).unwrap();
        for id in ["s0", "s1"] {
            prop_assert_eq!(mem.apply(&reserve(id)), sq.apply(&reserve(id)));
        }
        for (step, op) in ops.iter().enumerate() {
            if step == reopen_at {
                drop(sq);
                sq = SqliteCatalogue::open(&path).unwrap();
            }
            match op {
                Op::Access(req) => {
                    let fp = footprint(req);
                    let reference = fp.partial(&mem.snapshot().unwrap());
                    let loaded = sq.load_access_footprint(&fp).unwrap();
                    prop_assert_eq!(&loaded, &reference, "step {} {:?}: the loaded footprint", step, req);
                    let (a, b) = (mem.apply_access(req), sq.apply_access(req));
                    prop_assert_eq!(&a, &b, "step {} {:?}", step, req);
                }
                Op::Reserve(id) => {
                    prop_assert_eq!(mem.apply(&reserve(id)), sq.apply(&reserve(id)), "step {}", step);
                }
                Op::Delete(id) => {
                    let del = Request::Delete { session_id: id.clone() };
                    prop_assert_eq!(mem.apply(&del), sq.apply(&del), "step {}", step);
                }
            }
            compare(step, op, &mem, &sq)?;
        }
        // A last reopen: everything persisted.
        drop(sq);
        let sq = SqliteCatalogue::open(&path).unwrap();
        compare(ops.len(), &Op::Reserve("(reopened)".into()), &mem, &sq)?;
    }
}
