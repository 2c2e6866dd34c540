#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The access plane on PostgreSQL (its conformance suite runs in
//! `tests/catalogue.rs`): a differential against the memory backend over random
//! streams of access and catalogue requests, races of eight handles, the
//! migration from catalogue version 1, the cascade on a session's delete,
//! corrupt stored values, a lost server, and a search of every stored row for plaintext.

use custos_core::catalogue::access::{
    browser_digest, claim_digest, credential_digest, Access, AccessError, AccessOutcome,
    AccessRequest, ClaimDigest, ClaimRefusal, CredentialKind, Digest, Enrollment, Role,
};
use custos_core::catalogue::{Catalogue, Creation, MemoryCatalogue, Request};
use custos_postgres::access::TABLES;
use custos_postgres::catalogue::{OpenError, PgCatalogue, CATALOGUE_VERSION, COMPONENT, STEPS};
use custos_postgres::conn::{Component, Conn};
use custos_postgres::{AccessClock, Target};
use custos_testkit::access::{
    arb_claim, arb_digest, arb_principal, arb_request, arb_role, arb_session,
};
use custos_testkit::pg_cluster::{shared, unique_schema, Cluster};
use postgres::Client;
use proptest::prelude::*;

// Time is data in these tests (as on memory and SQLite): the caller's
// clock judges expiries. `expiries_are_judged_by_the_servers_clock` tests
// the default.
mod support;
use support::{caller_clock_target as target, client, schema_dump as dump};

/// A handle on `t` (a racing thread's).
fn open(t: Target) -> PgCatalogue {
    PgCatalogue::open(t).unwrap()
}

fn fresh() -> PgCatalogue {
    PgCatalogue::open(target("acc")).unwrap()
}

// The access conformance suite runs in tests/catalogue.rs, beside the
// catalogue's suites.

fn reserve<C: Catalogue>(c: &C, id: &str) {
    c.apply(&Request::Reserve {
        session_id: id.into(),
        creation: Creation::local(&format!("key-{id}"), &format!("name {id}"), "/w"),
        now: 1,
    })
    .unwrap();
}

fn bearer(t: &str) -> Digest {
    credential_digest(t.as_bytes())
}

fn claim(t: &str) -> ClaimDigest {
    claim_digest(t.as_bytes())
}

/// The invitation of the unnamed `principal` into session `s1`.
fn invite_to_s1(principal: &str, role: Role, enrollment: Enrollment, now_ms: u64) -> AccessRequest {
    AccessRequest::InviteMember {
        principal: principal.into(),
        name: None,
        session_id: "s1".into(),
        role,
        enrollment,
        now_ms,
    }
}

/// An enrollment by `claim`, open until 1,000 ms.
fn claim_until_1000(claim: ClaimDigest) -> Enrollment {
    Enrollment::Claim {
        claim,
        expires_at_ms: 1_000,
    }
}

fn ok<A: Access>(a: &A, req: AccessRequest) -> AccessOutcome {
    a.apply_access(&req)
        .unwrap_or_else(|e| panic!("{req:?}: {e}"))
}

// ------------------------------------------------------------- differential

#[derive(Clone, Debug)]
enum Op {
    Access(AccessRequest),
    Reserve(String),
    Delete(String),
}

/// Invitations by claim and claims that can succeed (the uniform generator
/// rarely lines an open claim up with its redemption in 40 steps).
fn arb_claim_path() -> impl Strategy<Value = AccessRequest> {
    prop_oneof![
        (arb_principal(), 0u8..2, arb_role(), arb_claim(), 0u64..10).prop_map(
            |(principal, s, role, claim, now_ms)| AccessRequest::InviteMember {
                principal,
                name: None,
                session_id: format!("s{s}"),
                role,
                enrollment: Enrollment::Claim {
                    claim,
                    expires_at_ms: 30,
                },
                now_ms,
            }
        ),
        (
            arb_claim(),
            arb_digest(),
            10u64..35,
            prop::option::of("[A-Z][a-z]{0,3}")
        )
            .prop_map(|(claim, digest, now_ms, name)| {
                if digest.kind() == CredentialKind::Browser {
                    AccessRequest::ClaimLogin {
                        claim,
                        digest,
                        name,
                        now_ms,
                        expires_at_ms: 50,
                    }
                } else {
                    AccessRequest::Claim {
                        claim,
                        digest,
                        name,
                        now_ms,
                    }
                }
            }),
    ]
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => arb_request().prop_map(Op::Access),
        3 => arb_claim_path().prop_map(Op::Access),
        1 => arb_session().prop_map(Op::Reserve),
        1 => arb_session().prop_map(Op::Delete),
    ]
}

/// Every digest the generator can make, and the claim digests as bearers
/// (a claim authenticates nothing).
fn every_digest() -> Vec<Digest> {
    custos_conformance::access::generated_digests()
}

/// Walks every page of `page` from the start, `limit` rows at a time,
/// answering each page (or the error that stopped the walk).
fn walk<T: std::fmt::Debug, E: std::fmt::Debug>(
    mut page: impl FnMut(Option<&str>) -> Result<(Vec<T>, bool), E>,
    key: impl Fn(&T) -> String,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..20 {
        match page(after.as_deref()) {
            Ok((rows, more)) => {
                out.push(format!("{rows:?} more={more}"));
                match (more, rows.last()) {
                    (true, Some(last)) => after = Some(key(last)),
                    _ => break,
                }
            }
            Err(e) => {
                out.push(format!("error {e:?}"));
                break;
            }
        }
    }
    out
}

/// Everything a client can read, as text.
fn observe<C: Access + Catalogue>(c: &C) -> Vec<String> {
    let mut out = vec![
        format!("owner {:?}", c.owner()),
        format!("revision {:?}", c.revision()),
    ];
    let digests = every_digest();
    for now in [10, 45] {
        for d in &digests {
            out.push(format!("auth {d:?} @{now} {:?}", c.authenticate(d, now)));
        }
    }
    for d in &digests {
        for s in ["s0", "s1", "s2"] {
            out.push(format!("authz {d:?} {s} {:?}", c.authorization(d, s, 10)));
        }
    }
    for k in 0..4 {
        let cd = claim(&format!("claim{k}"));
        out.push(format!("claim {k} {:?}", c.claim_known(&cd)));
    }
    for now in [5, 30] {
        out.extend(walk(
            |a| c.principals_page(a, 2, now).map(|p| (p.rows, p.more)),
            |l| l.principal.clone(),
        ));
    }
    let principals = ["p0", "p1", "p2", "p3"];
    for p in principals {
        out.extend(walk(
            |a| c.memberships_page(p, a, 1).map(|p| (p.rows, p.more)),
            |r| r.session_id.clone(),
        ));
        out.extend(walk(
            |a| c.signins_page(p, a, 1, 20).map(|p| (p.rows, p.more)),
            |r| r.fingerprint.clone(),
        ));
    }
    for s in ["s0", "s1", "s2"] {
        out.extend(walk(
            |a| c.session_members_page(s, a, 1).map(|p| (p.rows, p.more)),
            |r| r.principal.clone(),
        ));
    }
    out
}

fn step<C: Access + Catalogue>(c: &C, op: &Op) -> String {
    match op {
        Op::Access(req) => format!("{:?}", c.apply_access(req)),
        Op::Reserve(id) => format!(
            "{:?}",
            c.apply(&Request::Reserve {
                session_id: id.clone(),
                creation: Creation::local(&format!("key-{id}"), &format!("name {id}"), "/w"),
                now: 1,
            })
        ),
        Op::Delete(id) => format!(
            "{:?}",
            c.apply(&Request::Delete {
                session_id: id.clone()
            })
        ),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, max_shrink_iters: 64, ..ProptestConfig::default() })]

    #[test]
    fn postgres_answers_as_memory_does(ops in proptest::collection::vec(arb_op(), 1..40)) {
        let mem = MemoryCatalogue::new();
        let pg = fresh();
        for id in ["s0", "s1"] {
            reserve(&mem, id);
            reserve(&pg, id);
        }
        prop_assert_eq!(observe(&mem), observe(&pg));
        let (mut done, mut bound) = (0, 0);
        for (i, op) in ops.iter().enumerate() {
            let (m, p) = (step(&mem, op), step(&pg, op));
            prop_assert_eq!(&m, &p, "step {} {:?}", i, op);
            done += usize::from(m.starts_with("Ok("));
            bound += usize::from(m.contains("bound: true"));
            let (m, p) = (observe(&mem), observe(&pg));
            for (a, b) in m.iter().zip(&p) {
                prop_assert_eq!(a, b, "after step {} {:?}", i, op);
            }
            prop_assert_eq!(m.len(), p.len());
        }
        println!("differential case: {} ops, {done} accepted, {bound} claims bound, answers equal", ops.len());
    }
}

// ------------------------------------------------------------- races

#[test]
fn eight_bootstraps_at_once_create_one_owner() {
    let t = target("race_owner");
    drop(PgCatalogue::open(t.clone()).unwrap());
    let results = support::race(&t, 8, open, |i, c| {
        c.apply_access(&AccessRequest::BootstrapOwner {
            principal: format!("owner{i}"),
            name: None,
            digest: bearer(&format!("owner-token-{i}")),
            now_ms: 1,
        })
    });
    let created: Vec<_> = results
        .iter()
        .filter_map(|r| match r {
            Ok(AccessOutcome::Owner {
                principal,
                created: true,
            }) => Some(principal.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(created.len(), 1, "{results:?}");
    let refused = results
        .iter()
        .filter(|r| matches!(r, Err(AccessError::OwnerExists { owner }) if *owner == created[0]))
        .count();
    assert_eq!(refused, 7, "{results:?}");
    let c = PgCatalogue::open(t).unwrap();
    assert_eq!(c.owner().unwrap().map(|o| o.0), Some(created[0].clone()));
    println!(
        "eight bootstraps: one owner {}, {refused} OwnerExists",
        created[0]
    );
}

#[test]
fn eight_claims_of_one_claim_bind_once() {
    let t = target("race_claim");
    let c = PgCatalogue::open(t.clone()).unwrap();
    reserve(&c, "s1");
    ok(
        &c,
        invite_to_s1(
            "m1",
            Role::Operator,
            claim_until_1000(claim("the-claim")),
            1,
        ),
    );
    let results = support::race(&t, 8, open, |i, c| {
        let r = c.apply_access(&AccessRequest::Claim {
            claim: claim("the-claim"),
            digest: bearer(&format!("claimer-{i}")),
            name: None,
            now_ms: 5,
        });
        (i, r)
    });
    let bound: Vec<usize> = results
        .iter()
        .filter(|(_, r)| matches!(r, Ok(AccessOutcome::Claimed { bound: true, .. })))
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(bound.len(), 1, "{results:?}");
    let conflicts = results
        .iter()
        .filter(|(_, r)| {
            matches!(
                r,
                Err(AccessError::Claim(ClaimRefusal::ConflictingClaim {
                    rule: "claimed-by-another"
                }))
            )
        })
        .count();
    assert_eq!(conflicts, 7, "{results:?}");
    for i in 0..8 {
        let who = c.authenticate(&bearer(&format!("claimer-{i}")), 6).unwrap();
        assert_eq!(who.is_some(), i == bound[0], "claimer {i}");
    }
    println!(
        "eight claims: claimer {} bound, {conflicts} ConflictingClaim",
        bound[0]
    );
}

// ------------------------------------------------------------- schema

fn tables_present(t: &Target) -> Vec<String> {
    client(t)
        .query(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = $1 AND table_name LIKE 'access_%' ORDER BY table_name",
            &[&t.schema()],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[test]
fn a_version_one_catalogue_migrates_on_open() {
    assert_eq!(CATALOGUE_VERSION, 3);
    let t = target("migrate");
    // Catalogue version 1, as the previous build created it, with a row.
    let v1 = Component {
        name: COMPONENT,
        steps: &STEPS[..1],
    };
    v1.prepare(&Conn::open(t.clone()).unwrap()).unwrap();
    client(&t)
        .batch_execute(
            "INSERT INTO catalogue_sessions (session_id, creation_key, name, workspace,
                 created_at_ms, state) VALUES ('s1', 'k1', 'one', '/w', 1, 'reserved');
             UPDATE catalogue_head SET revision = 1",
        )
        .unwrap();
    // A read-only open neither migrates nor writes.
    let before = dump(&t);
    let e = PgCatalogue::open_read_only(t.clone()).unwrap_err();
    assert!(matches!(e, OpenError::NotReadable { .. }), "{e}");
    assert_eq!(dump(&t), before);
    assert!(tables_present(&t).is_empty());
    // A writing open migrates, keeping the rows.
    let c = PgCatalogue::open(t.clone()).unwrap();
    let mut want: Vec<String> = TABLES.iter().map(|s| (*s).to_owned()).collect();
    want.sort();
    assert_eq!(tables_present(&t), want);
    let v: i64 = support::stored_version(&t, COMPONENT);
    assert_eq!(v, 3);
    assert_eq!(c.get("s1").unwrap().unwrap().creation.name, "one");
    assert_eq!(c.revision().unwrap(), 1);
    ok(
        &c,
        invite_to_s1(
            "m1",
            Role::Observer,
            Enrollment::Digest(bearer("m1-token")),
            2,
        ),
    );
    assert_eq!(c.revision().unwrap(), 2);
    // Reopening (writing or not) finds version 3 and changes nothing.
    let before = dump(&t);
    drop(PgCatalogue::open(t.clone()).unwrap());
    let ro = PgCatalogue::open_read_only(t.clone()).unwrap();
    assert_eq!(
        ro.memberships_page("m1", None, 10).unwrap().rows[0].role,
        Role::Observer
    );
    let e = ro
        .apply_access(&AccessRequest::RevokeMember {
            principal: "m1".into(),
        })
        .unwrap_err();
    assert_eq!(e.reason(), "BackendFault", "{e}");
    assert_eq!(dump(&t), before);
    // A newer version is refused before anything is written.
    client(&t)
        .execute(
            "UPDATE custos_versions SET version = 4 WHERE component = $1",
            &[&COMPONENT],
        )
        .unwrap();
    let before = dump(&t);
    let e = PgCatalogue::open(t.clone()).unwrap_err();
    assert!(
        matches!(
            e,
            OpenError::UnsupportedVersion {
                found: 4,
                supported: 3,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(dump(&t), before);
}

#[test]
fn deleting_a_session_cascades_to_its_memberships() {
    let t = target("cascade");
    let pg = PgCatalogue::open(t.clone()).unwrap();
    let mem = MemoryCatalogue::new();
    for id in ["s1", "s2"] {
        reserve(&pg, id);
        reserve(&mem, id);
    }
    let reqs = [
        AccessRequest::InviteMember {
            principal: "m1".into(),
            name: Some("Em".into()),
            session_id: "s1".into(),
            role: Role::Operator,
            enrollment: Enrollment::Digest(bearer("m1")),
            now_ms: 1,
        },
        AccessRequest::Grant {
            principal: "m1".into(),
            session_id: "s2".into(),
            role: Role::Observer,
        },
    ];
    for r in reqs {
        assert_eq!(ok(&pg, r.clone()), ok(&mem, r));
    }
    let del = Request::Delete {
        session_id: "s1".into(),
    };
    assert_eq!(pg.apply(&del).unwrap(), mem.apply(&del).unwrap());
    let rows = |c: &dyn Access| {
        c.memberships_page("m1", None, 10)
            .unwrap()
            .rows
            .into_iter()
            .map(|r| r.session_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(rows(&pg), vec!["s2".to_owned()]);
    assert_eq!(rows(&pg), rows(&mem));
    assert_eq!(pg.revision().unwrap(), mem.revision().unwrap());
    let left: i64 = client(&t)
        .query_one(
            "SELECT count(*) FROM access_memberships WHERE session_id = 's1'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
    assert_eq!(pg.authorization(&bearer("m1"), "s1", 2).unwrap(), None);
    assert!(pg.session_members_page("s1", None, 10).is_err());
    // A grant on the deleted session is refused, as in memory.
    let g = AccessRequest::Grant {
        principal: "m1".into(),
        session_id: "s1".into(),
        role: Role::Operator,
    };
    assert_eq!(pg.apply_access(&g), mem.apply_access(&g));
}

// ------------------------------------------------------------- corruption

fn corrupt<T: std::fmt::Debug>(r: Result<T, AccessError>, needle: &str) {
    match r {
        Err(AccessError::Corrupt { what, detail }) => {
            let text = format!("{what}: {detail}");
            assert!(text.contains(needle), "{text} lacks {needle:?}");
        }
        other => panic!("expected Corrupt naming {needle:?}, got {other:?}"),
    }
}

fn seeded(prefix: &str) -> (Target, PgCatalogue) {
    let t = target(prefix);
    let c = PgCatalogue::open(t.clone()).unwrap();
    reserve(&c, "s1");
    for r in [
        AccessRequest::BootstrapOwner {
            principal: "own".into(),
            name: Some("Olive".into()),
            digest: bearer("own-tok"),
            now_ms: 1,
        },
        invite_to_s1("m1", Role::Operator, claim_until_1000(claim("m1-claim")), 1),
        invite_to_s1(
            "m2",
            Role::Observer,
            Enrollment::Digest(bearer("m2-tok")),
            1,
        ),
        AccessRequest::IssueLogin {
            principal: "m2".into(),
            digest: browser_digest(b"m2-login"),
            now_ms: 1,
            expires_at_ms: 1_000,
            issued_by: None,
        },
    ] {
        ok(&c, r);
    }
    (t, c)
}

#[test]
fn corrupt_stored_values_fail_the_read_never_absent() {
    let (t, c) = seeded("corrupt");
    let mut raw = client(&t);
    let mut sql = |q: &str| raw.batch_execute(q).unwrap();
    let own = bearer("own-tok").sha().hex();
    // A credential state no grammar knows: the probe fails, not None.
    sql(&format!(
        "UPDATE access_credentials SET state = 'garbage' WHERE digest = '{own}'"
    ));
    corrupt(c.authenticate(&bearer("own-tok"), 2), "column state");
    corrupt(c.authorization(&bearer("own-tok"), "s1", 2), "column state");
    corrupt(c.principals_page(None, 10, 2), "access_credentials");
    // A write whose footprint holds it is refused, writing nothing.
    let before = dump(&t);
    corrupt(
        c.apply_access(&AccessRequest::RotateCredential {
            principal: "own".into(),
            digest: bearer("own-tok-2"),
            now_ms: 2,
        }),
        "column state",
    );
    assert_eq!(dump(&t), before);
    sql(&format!(
        "UPDATE access_credentials SET state = 'active', issued_at_ms = -4 WHERE digest = '{own}'"
    ));
    corrupt(c.authenticate(&bearer("own-tok"), 2), "column issued_at_ms");
    sql(&format!(
        "UPDATE access_credentials SET issued_at_ms = 1 WHERE digest = '{own}'"
    ));
    assert!(c.authenticate(&bearer("own-tok"), 2).unwrap().is_some());
    // Bad hex in a login's digest: its principal's listings fail.
    sql("UPDATE access_credentials SET digest = upper(digest) WHERE kind = 'browser'");
    corrupt(c.signins_page("m2", None, 10, 2), "not 64 lower-case hex");
    corrupt(c.principals_page(None, 10, 2), "not 64 lower-case hex");
    sql("UPDATE access_credentials SET digest = lower(digest) WHERE kind = 'browser'");
    assert_eq!(c.signins_page("m2", None, 10, 2).unwrap().rows.len(), 1);
    // A claimed claim without its bound digest.
    sql("UPDATE access_claims SET state = 'claimed'");
    corrupt(
        c.claim_known(&claim("m1-claim")),
        "without its bound digest",
    );
    sql("UPDATE access_claims SET state = 'halfway'");
    corrupt(c.claim_known(&claim("m1-claim")), "halfway");
    corrupt(c.principals_page(None, 10, 2), "halfway");
    sql("UPDATE access_claims SET state = 'open'");
    assert!(c.claim_known(&claim("m1-claim")).unwrap());
    // A role no grammar knows (past its CHECK): never "no role".
    sql(
        "ALTER TABLE access_memberships DROP CONSTRAINT access_memberships_role_check;
         UPDATE access_memberships SET role = 'admin' WHERE principal_id = 'm2'",
    );
    corrupt(c.authorization(&bearer("m2-tok"), "s1", 2), "admin");
    corrupt(c.memberships_page("m2", None, 10), "admin");
    corrupt(c.session_members_page("s1", None, 10), "admin");
    // A principal's bad row: the owner is never read as absent.
    sql("UPDATE access_principals SET created_at_ms = -1 WHERE principal_id = 'own'");
    corrupt(c.owner(), "access_principals row own: column created_at_ms");
    sql("UPDATE access_principals SET created_at_ms = 1, name = '  Olive ' WHERE principal_id = 'own'");
    corrupt(c.owner(), "column name");
    sql(
        "ALTER TABLE access_principals DROP CONSTRAINT access_principals_kind_check;
         UPDATE access_principals SET kind = 'boss' WHERE principal_id = 'm1'",
    );
    corrupt(c.principals_page(None, 10, 2), "boss");
    // A missing head row fails a write, never read as revision 0.
    sql("DELETE FROM catalogue_head");
    corrupt(
        c.apply_access(&AccessRequest::RevokeAllLogins),
        "catalogue_head",
    );
}

#[test]
fn a_timestamp_beyond_bigint_is_refused_writing_nothing() {
    let (t, c) = seeded("big");
    let before = dump(&t);
    let e = c
        .apply_access(&AccessRequest::IssueLogin {
            principal: "m2".into(),
            digest: browser_digest(b"later"),
            now_ms: 5,
            expires_at_ms: u64::MAX,
            issued_by: None,
        })
        .unwrap_err();
    assert_eq!(e.reason(), "Invalid", "{e}");
    assert!(e.to_string().contains("exceeds a bigint"), "{e}");
    assert_eq!(dump(&t), before);
}

// ------------------------------------------------------------- failures

#[test]
fn a_dropped_connection_reconnects_and_a_lost_server_is_unavailable() {
    let (t, c) = seeded("reconnect");
    let pid = c.backend_pid().unwrap();
    client(&t)
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap();
    // The first use may see the dropped connection; the next reconnects.
    if let Err(e) = c.owner() {
        assert_eq!(e.reason(), "Unavailable", "{e}");
    }
    assert_eq!(c.owner().unwrap().map(|o| o.0).as_deref(), Some("own"));
    ok(
        &c,
        AccessRequest::Rename {
            principal: "m2".into(),
            name: Some("Em".into()),
        },
    );
    // A private server, stopped under an open handle: every call is
    // Unavailable, and no message shows the password or the url.
    let private = Cluster::start().unwrap();
    let url = private.url();
    let t = Target::new(url.clone(), unique_schema("lost")).unwrap();
    let c = PgCatalogue::open(t).unwrap();
    reserve(&c, "s1");
    private.stop().unwrap();
    let errors = [
        c.apply_access(&AccessRequest::BootstrapOwner {
            principal: "own".into(),
            name: None,
            digest: bearer("own-tok"),
            now_ms: 1,
        })
        .unwrap_err(),
        c.authenticate(&bearer("own-tok"), 1).unwrap_err(),
        c.principals_page(None, 10, 1).unwrap_err(),
    ];
    for e in errors {
        assert_eq!(e.reason(), "Unavailable", "{e}");
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains(private.password()), "{shown}");
        assert!(!shown.contains(&url), "{shown}");
    }
}

// ------------------------------------------------------------- plaintext

#[test]
fn no_plaintext_token_reaches_storage() {
    let t = target("plain");
    let c = PgCatalogue::open(t.clone()).unwrap();
    reserve(&c, "s1");
    for r in plaintext_requests() {
        ok(&c, r);
    }
    let tokens = [
        "owner",
        "owner2",
        "claim1",
        "m1bearer",
        "m2bearer",
        "claim2",
        "m2login",
        "ownlogin",
        "m1bearer2",
    ];
    let mut raw = client(&t);
    let mut text = Vec::new();
    for table in TABLES {
        for r in raw
            .query(&format!("SELECT t::text FROM {table} t"), &[])
            .unwrap()
        {
            text.push(r.get::<_, String>(0));
        }
    }
    assert!(text.len() >= 12, "{text:?}");
    for n in tokens {
        let plain = tok(n);
        assert!(
            !text
                .iter()
                .any(|row| row.contains(&plain) || row.contains("PLAINTEXT")),
            "{plain} is stored: {text:?}"
        );
    }
    let hex = tb("owner").sha().hex();
    assert!(text.iter().any(|row| row.contains(&hex)), "{hex} not found");
    let claim_hex = tk("claim2").sha().hex();
    assert!(text.iter().any(|row| row.contains(&claim_hex)));
    println!("plaintext search: {} rows, no token found", text.len());
}

fn tok(n: &str) -> String {
    format!("PLAINTEXT-{n}-7f3a9c")
}

fn tb(n: &str) -> Digest {
    bearer(&tok(n))
}

fn tk(n: &str) -> ClaimDigest {
    claim(&tok(n))
}

/// Known plaintext tokens through every access path that takes one.
fn plaintext_requests() -> Vec<AccessRequest> {
    let b = tb;
    let w = |n: &str| browser_digest(tok(n).as_bytes());
    let k = tk;
    vec![
        AccessRequest::BootstrapOwner {
            principal: "own".into(),
            name: None,
            digest: b("owner"),
            now_ms: 1,
        },
        AccessRequest::RotateCredential {
            principal: "own".into(),
            digest: b("owner2"),
            now_ms: 2,
        },
        invite_to_s1("m1", Role::Operator, claim_until_1000(k("claim1")), 3),
        AccessRequest::Claim {
            claim: k("claim1"),
            digest: b("m1bearer"),
            name: None,
            now_ms: 4,
        },
        invite_to_s1("m2", Role::Observer, Enrollment::Digest(b("m2bearer")), 5),
        AccessRequest::RotateMember {
            principal: "m2".into(),
            enrollment: Enrollment::Claim {
                claim: k("claim2"),
                expires_at_ms: 1_000,
            },
            now_ms: 6,
        },
        AccessRequest::ClaimLogin {
            claim: k("claim2"),
            digest: w("m2login"),
            name: None,
            now_ms: 7,
            expires_at_ms: 900,
        },
        AccessRequest::IssueLogin {
            principal: "own".into(),
            digest: w("ownlogin"),
            now_ms: 8,
            expires_at_ms: 900,
            issued_by: Some(b("owner2").fingerprint()),
        },
        AccessRequest::Resumed {
            digest: w("ownlogin"),
            now_ms: 100,
        },
        AccessRequest::RotateMember {
            principal: "m1".into(),
            enrollment: Enrollment::Digest(b("m1bearer2")),
            now_ms: 9,
        },
    ]
}

/// The server's clock, in milliseconds.
fn server_ms(c: &mut Client) -> u64 {
    let ms: i64 = c
        .query_one(
            "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint",
            &[],
        )
        .unwrap()
        .get(0);
    u64::try_from(ms).unwrap()
}

#[test]
fn expiries_are_judged_by_the_servers_clock() {
    // The default clock: the server's. The caller's clock here is ten
    // minutes ahead of the server's.
    let t = Target::new(shared().unwrap().url(), unique_schema("acc_clock")).unwrap();
    assert_eq!(t.judges_access_by(), AccessClock::Server);
    let c = PgCatalogue::open(t.clone()).unwrap();
    let mut raw = t.connect().unwrap();
    let ahead = 10 * 60 * 1000;
    let caller = server_ms(&mut raw) + ahead;
    c.apply_access(&AccessRequest::BootstrapOwner {
        principal: "owner".into(),
        name: None,
        digest: credential_digest(b"owner-token"),
        now_ms: caller,
    })
    .unwrap();
    // A login meant to last 3 s from the caller's now.
    let login = browser_digest(b"login-token");
    let before = server_ms(&mut raw);
    c.apply_access(&AccessRequest::IssueLogin {
        principal: "owner".into(),
        digest: login,
        now_ms: caller,
        expires_at_ms: caller + 3_000,
        issued_by: None,
    })
    .unwrap();
    let after = server_ms(&mut raw);
    // Stored at the server's now + 3 s, not the caller's.
    let stored: i64 = raw
        .query_one(
            "SELECT expires_at_ms FROM access_credentials WHERE kind = 'browser'",
            &[],
        )
        .unwrap()
        .get(0);
    let stored = u64::try_from(stored).unwrap();
    assert!(
        (before + 3_000..=after + 3_000).contains(&stored),
        "stored {stored}, server {before}..{after}"
    );
    // Whatever the caller's clock says, the login is live until the
    // server's clock passes its deadline…
    for now in [0, caller, caller + 3_600_000] {
        assert!(c.authenticate(&login, now).unwrap().is_some(), "at {now}");
        assert_eq!(
            c.signins_page("owner", None, 10, now).unwrap().rows.len(),
            1
        );
    }
    // …and dead after, whatever the caller's clock says.
    while server_ms(&mut raw) <= stored {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for now in [0, caller - ahead, stored - 1] {
        assert!(c.authenticate(&login, now).unwrap().is_none(), "at {now}");
    }
    // The caller's clock, when asked for, judges as given.
    let by_caller = PgCatalogue::open(t.access_clock(AccessClock::Caller)).unwrap();
    assert!(by_caller
        .authenticate(&login, stored - 1)
        .unwrap()
        .is_some());
    assert!(by_caller.authenticate(&login, stored).unwrap().is_none());
}

#[test]
fn a_retried_invitation_is_recognised_under_the_servers_clock() {
    // Each attempt is re-based onto the server's clock at its own time: the
    // retry's claim expires later than the first attempt's, by as much as
    // the retry came later, and is still recognised as its own.
    let t = Target::new(shared().unwrap().url(), unique_schema("acc_retry")).unwrap();
    let c = PgCatalogue::open(t).unwrap();
    c.apply(&Request::Reserve {
        session_id: "s1".into(),
        creation: Creation::local("k-s1", "s", "/w"),
        now: 1,
    })
    .unwrap();
    c.apply_access(&AccessRequest::BootstrapOwner {
        principal: "owner".into(),
        name: None,
        digest: credential_digest(b"owner-token"),
        now_ms: 1,
    })
    .unwrap();
    let invite = AccessRequest::InviteMember {
        principal: "member-1".into(),
        name: Some("Member".into()),
        session_id: "s1".into(),
        role: Role::Observer,
        enrollment: Enrollment::Claim {
            claim: claim_digest(b"claim-token"),
            expires_at_ms: 60_000,
        },
        now_ms: 0,
    };
    assert_eq!(
        c.apply_access(&invite).unwrap(),
        AccessOutcome::Done { changed: true }
    );
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(
        c.apply_access(&invite).unwrap(),
        AccessOutcome::Done { changed: false }
    );
    // Another lifetime is another invitation: refused.
    let other = match invite {
        AccessRequest::InviteMember {
            principal,
            name,
            session_id,
            role,
            enrollment: Enrollment::Claim { claim, .. },
            now_ms,
        } => AccessRequest::InviteMember {
            principal,
            name,
            session_id,
            role,
            enrollment: Enrollment::Claim {
                claim,
                expires_at_ms: 90_000,
            },
            now_ms,
        },
        other => other,
    };
    assert!(matches!(
        c.apply_access(&other),
        Err(AccessError::PrincipalExists { .. })
    ));
}
