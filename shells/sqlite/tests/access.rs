//! The access plane on real catalogue files: no plaintext token reaches any
//! byte of the database or its siblings; a version-4 catalogue migrates on
//! open with its sessions intact; a newer one is refused byte-untouched; a
//! read-only open creates and migrates nothing; stored values that break
//! their grammar read as `Corrupt`; a catalogue `Delete` cascades to the
//! session's memberships; the one-owner and one-open-claim indexes hold
//! against direct SQL; and the authentication probe's plan is a primary-key
//! search.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use custos_core::catalogue::access::{
    browser_digest, claim_digest, credential_digest, Access, AccessError, AccessOutcome,
    AccessRequest, Authorization, Enrollment, PrincipalKind, Role,
};
use custos_core::catalogue::{Catalogue, Creation, Request};
use custos_sqlite::catalogue::{
    identity, SqliteCatalogue, CATALOGUE_APPLICATION_ID, CATALOGUE_VERSION, STEPS,
};
use custos_sqlite::OpenError;
use rusqlite::Connection;

mod support;
use support::sibling;

fn dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

const SIBLINGS: [&str; 4] = ["", "-wal", "-shm", "-journal"];

/// The bytes of the file and of each sibling (`None` when absent).
fn files(path: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    SIBLINGS
        .iter()
        .map(|s| {
            let p = sibling(path, s);
            let b = std::fs::read(&p).ok();
            (p, b)
        })
        .collect()
}

fn reserve(c: &SqliteCatalogue, id: &str) {
    c.apply(&Request::Reserve {
        session_id: id.into(),
        creation: Creation::local(&format!("k-{id}"), &format!("Session {id}"), "/w"),
        now: 1,
    })
    .unwrap();
}

fn apply(c: &SqliteCatalogue, req: AccessRequest) -> AccessOutcome {
    c.apply_access(&req)
        .unwrap_or_else(|e| panic!("{req:?}: {e}"))
}

fn bootstrap(c: &SqliteCatalogue, token: &str) {
    apply(
        c,
        AccessRequest::BootstrapOwner {
            principal: "owner".into(),
            name: Some("The Owner".into()),
            digest: credential_digest(token.as_bytes()),
            now_ms: 1,
        },
    );
}

fn invite(c: &SqliteCatalogue, principal: &str, session: &str, token: &str) {
    apply(
        c,
        AccessRequest::InviteMember {
            principal: principal.into(),
            name: Some("Member".into()),
            session_id: session.into(),
            role: Role::Operator,
            enrollment: Enrollment::Digest(credential_digest(token.as_bytes())),
            now_ms: 2,
        },
    );
}

fn raw(path: &Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch("PRAGMA ignore_check_constraints = ON; PRAGMA foreign_keys = ON;")
        .unwrap();
    conn
}

// ------------------------------------------------------------------ plaintext

/// The owner, invitation and claim paths.
fn enrolment_paths(t: &dyn Fn(&str) -> String) -> Vec<AccessRequest> {
    let b = |n: &str| credential_digest(t(n).as_bytes());
    let k = |n: &str| claim_digest(t(n).as_bytes());
    vec![
        AccessRequest::BootstrapOwner {
            principal: "owner".into(),
            name: Some("O".into()),
            digest: b("bootstrap"),
            now_ms: 1,
        },
        // The bootstrap retry proves itself with the same token.
        AccessRequest::BootstrapOwner {
            principal: "owner".into(),
            name: None,
            digest: b("bootstrap"),
            now_ms: 2,
        },
        AccessRequest::RotateCredential {
            principal: "owner".into(),
            digest: b("rotate"),
            now_ms: 3,
        },
        AccessRequest::InviteMember {
            principal: "m-digest".into(),
            name: Some("D".into()),
            session_id: "s1".into(),
            role: Role::Operator,
            enrollment: Enrollment::Digest(b("invite-digest")),
            now_ms: 4,
        },
        AccessRequest::InviteMember {
            principal: "m-claim".into(),
            name: None,
            session_id: "s1".into(),
            role: Role::Observer,
            enrollment: Enrollment::Claim {
                claim: k("invite-claim"),
                expires_at_ms: 1_000_000,
            },
            now_ms: 5,
        },
        AccessRequest::Claim {
            claim: k("invite-claim"),
            digest: b("claim-bearer"),
            name: Some("C".into()),
            now_ms: 6,
        },
        AccessRequest::InviteMember {
            principal: "m-login".into(),
            name: None,
            session_id: "s2".into(),
            role: Role::Observer,
            enrollment: Enrollment::Claim {
                claim: k("login-claim"),
                expires_at_ms: 1_000_000,
            },
            now_ms: 7,
        },
    ]
}

/// The login, rotation and revocation paths.
fn login_paths(t: &dyn Fn(&str) -> String) -> Vec<AccessRequest> {
    let b = |n: &str| credential_digest(t(n).as_bytes());
    let w = |n: &str| browser_digest(t(n).as_bytes());
    let k = |n: &str| claim_digest(t(n).as_bytes());
    vec![
        AccessRequest::ClaimLogin {
            claim: k("login-claim"),
            digest: w("claim-login"),
            name: None,
            now_ms: 8,
            expires_at_ms: 2_000_000,
        },
        AccessRequest::IssueLogin {
            principal: "owner".into(),
            digest: w("issue-login"),
            now_ms: 9,
            expires_at_ms: 2_000_000,
            issued_by: None,
        },
        AccessRequest::IssueLogin {
            principal: "owner".into(),
            digest: w("device-link"),
            now_ms: 10,
            expires_at_ms: 2_000_000,
            issued_by: Some(w("issue-login").fingerprint()),
        },
        AccessRequest::Resumed {
            digest: w("issue-login"),
            now_ms: 100_000,
        },
        AccessRequest::RotateMember {
            principal: "m-digest".into(),
            enrollment: Enrollment::Claim {
                claim: k("rotate-member-claim"),
                expires_at_ms: 1_000_000,
            },
            now_ms: 11,
        },
        AccessRequest::RotateMember {
            principal: "m-claim".into(),
            enrollment: Enrollment::Digest(b("rotate-member-digest")),
            now_ms: 12,
        },
        AccessRequest::RevokeLogin {
            principal: "owner".into(),
            fingerprint: w("device-link").fingerprint(),
        },
        AccessRequest::RevokeMember {
            principal: "m-login".into(),
        },
        AccessRequest::RevokeLogins {
            principal: "owner".into(),
        },
        AccessRequest::RevokeAllLogins,
    ]
}

/// Writes a distinctive plaintext token through every access path.
fn write_every_path(c: &SqliteCatalogue, t: &dyn Fn(&str) -> String) {
    reserve(c, "s1");
    reserve(c, "s2");
    let b = |n: &str| credential_digest(t(n).as_bytes());
    for r in enrolment_paths(t).into_iter().chain(login_paths(t)) {
        apply(c, r);
    }
    // Refused requests carrying tokens write nothing either.
    let refused = AccessRequest::BootstrapOwner {
        principal: "other".into(),
        name: None,
        digest: b("refused-bootstrap"),
        now_ms: 13,
    };
    assert!(c.apply_access(&refused).is_err());
}

const TOKEN_NAMES: [&str; 15] = [
    "bootstrap",
    "rotate",
    "invite-digest",
    "invite-claim",
    "claim-bearer",
    "login-claim",
    "claim-login",
    "issue-login",
    "device-link",
    "rotate-member-claim",
    "rotate-member-digest",
    "refused-bootstrap",
    // Names that were never sent, as a control on the search itself.
    "never-sent-1",
    "never-sent-2",
    "never-sent-3",
];

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// Searches the file and its siblings for every token and for one digest.
fn search(path: &Path, tokens: &[String], digest_hex: &str, when: &str) {
    let present: Vec<(PathBuf, Vec<u8>)> = files(path)
        .into_iter()
        .filter_map(|(p, b)| b.map(|b| (p, b)))
        .collect();
    let bytes: usize = present.iter().map(|(_, b)| b.len()).sum();
    let mut found = 0;
    for (p, b) in &present {
        for t in tokens {
            let n = count(b, t.as_bytes());
            assert_eq!(n, 0, "{when}: plaintext {t:?} found in {}", p.display());
            found += n;
        }
    }
    let digest_hits: usize = present
        .iter()
        .map(|(_, b)| count(b, digest_hex.as_bytes()))
        .sum();
    println!(
        "{when}: searched {bytes} bytes in {} files ({}) for {} plaintext tokens: {found} found; \
         the bootstrap digest's hex found {digest_hits} times",
        present.len(),
        present
            .iter()
            .map(|(p, b)| format!("{} {}", p.file_name().unwrap().to_string_lossy(), b.len()))
            .collect::<Vec<_>>()
            .join(", "),
        tokens.len()
    );
    assert!(
        digest_hits > 0,
        "{when}: the search cannot fail: no digest found"
    );
}

#[test]
fn no_plaintext_token_reaches_any_byte_of_the_catalogue() {
    let d = dir();
    let p = d.path().join("cat.db");
    let t = |n: &str| format!("PLAINTEXT-TOKEN-{n}-q7Zx9");
    let tokens: Vec<String> = TOKEN_NAMES.iter().map(|n| t(n)).collect();
    let digest_hex = credential_digest(t("bootstrap").as_bytes()).sha().hex();
    let c = SqliteCatalogue::open(&p).unwrap();
    write_every_path(&c, &t);
    // Every path answered: the owner's login was stamped, then revoked.
    assert_eq!(c.owner().unwrap(), Some(("owner".into(), Some("O".into()))));
    search(&p, &tokens, &digest_hex, "open (WAL live)");
    drop(c);
    search(&p, &tokens, &digest_hex, "closed");
}

// ------------------------------------------------------------------ versions

/// A version-4 catalogue built with the old steps, holding two sessions.
fn v4(p: &Path) {
    let conn = Connection::open(p).unwrap();
    for step in &STEPS[..4] {
        conn.execute_batch(step).unwrap();
    }
    conn.execute_batch(&format!(
        "PRAGMA application_id = {CATALOGUE_APPLICATION_ID}; PRAGMA user_version = 4;"
    ))
    .unwrap();
    for (id, name) in [("old-a", "Old A"), ("old-b", "Old B")] {
        conn.execute(
            "INSERT INTO catalogue_sessions (session_id, creation_key, name, workspace, created_at_ms, state)
             VALUES (?1, ?2, ?3, '/home/w', 42, 'saved')",
            rusqlite::params![id, format!("k-{id}"), name],
        )
        .unwrap();
    }
    conn.execute(
        "INSERT INTO catalogue_session_names (session_id, name) VALUES ('old-b', 'Renamed B')",
        [],
    )
    .unwrap();
    conn.execute("UPDATE catalogue_meta SET revision = 7", [])
        .unwrap();
}

fn tables(p: &Path) -> Vec<String> {
    let conn = Connection::open(p).unwrap();
    let mut st = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap();
    st.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn a_version_4_catalogue_migrates_on_open_with_its_sessions_intact() {
    assert_eq!(CATALOGUE_VERSION, 6);
    let d = dir();
    let p = d.path().join("v4.db");
    v4(&p);
    assert_eq!(identity(&p).unwrap(), (4, CATALOGUE_APPLICATION_ID));
    assert!(!tables(&p).iter().any(|t| t.starts_with("access_")));
    let c = SqliteCatalogue::open(&p).unwrap();
    assert_eq!(
        identity(&p).unwrap(),
        (CATALOGUE_VERSION, CATALOGUE_APPLICATION_ID)
    );
    let a = c.get("old-a").unwrap().unwrap();
    assert_eq!(a.creation, Creation::local("k-old-a", "Old A", "/home/w"));
    assert_eq!(a.created_at_ms, 42);
    assert_eq!(c.get("old-b").unwrap().unwrap().creation.name, "Renamed B");
    assert_eq!(c.revision().unwrap(), 7);
    // Access works on the migrated file, against the old sessions.
    assert_eq!(c.owner().unwrap(), None);
    bootstrap(&c, "owner-token");
    invite(&c, "m1", "old-b", "member-token");
    let m = credential_digest(b"member-token");
    assert_eq!(
        c.authorization(&m, "old-b", 5).unwrap(),
        Some(Authorization::Member(Role::Operator))
    );
    assert_eq!(c.authorization(&m, "old-a", 5).unwrap(), None);
    let page = c.memberships_page("m1", None, 10).unwrap();
    assert_eq!(page.rows.len(), 1);
    assert_eq!(page.rows[0].name, "Renamed B");
    assert_eq!(
        c.revision().unwrap(),
        8,
        "the invitation moved the revision"
    );
    drop(c);
    let mut t = tables(&p);
    t.retain(|t| t.starts_with("access_"));
    println!("migrated 4 -> 5; access tables: {}", t.join(", "));
    assert_eq!(t.len(), 4);
    // Reopening a current file migrates nothing and keeps everything.
    let c = SqliteCatalogue::open(&p).unwrap();
    assert_eq!(
        c.authenticate(&m, 5).unwrap().map(|a| a.principal),
        Some("m1".into())
    );
}

#[test]
fn a_read_only_open_creates_and_migrates_nothing() {
    let d = dir();
    let p = d.path().join("v4.db");
    v4(&p);
    let before = files(&p);
    let e = SqliteCatalogue::open_read_only(&p).unwrap_err();
    assert!(matches!(e, OpenError::NotReadable { .. }), "{e}");
    assert_eq!(files(&p), before, "a refused read-only open wrote");
    assert_eq!(identity(&p).unwrap().0, 4);
    // A current catalogue reads through a read-only handle, which refuses
    // writes and writes nothing.
    let q = d.path().join("v5.db");
    let w = SqliteCatalogue::open(&q).unwrap();
    reserve(&w, "s1");
    bootstrap(&w, "owner-token");
    drop(w);
    let before = files(&q);
    let r = SqliteCatalogue::open_read_only(&q).unwrap();
    assert_eq!(
        r.authenticate(&credential_digest(b"owner-token"), 5)
            .unwrap()
            .map(|a| a.kind),
        Some(PrincipalKind::Owner)
    );
    let e = r.apply_access(&AccessRequest::RevokeAllLogins).unwrap_err();
    assert_eq!(e.reason(), "BackendFault", "{e}");
    assert!(r.principals_page(None, 10, 5).unwrap().rows.len() == 1);
    drop(r);
    assert_eq!(files(&q), before, "a read-only handle wrote");
}

#[test]
fn a_newer_catalogue_is_refused_byte_untouched() {
    let d = dir();
    let p = d.path().join("cat.db");
    let c = SqliteCatalogue::open(&p).unwrap();
    reserve(&c, "s1");
    bootstrap(&c, "owner-token");
    drop(c);
    {
        let conn = Connection::open(&p).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA user_version = {}; PRAGMA journal_mode = DELETE;",
            CATALOGUE_VERSION + 1
        ))
        .unwrap();
    }
    let before = files(&p);
    assert!(
        before[1..].iter().all(|(_, b)| b.is_none()),
        "siblings left behind"
    );
    let e = SqliteCatalogue::open(&p).unwrap_err();
    assert!(
        matches!(e, OpenError::UnsupportedVersion { found, supported }
            if found == CATALOGUE_VERSION + 1 && supported == CATALOGUE_VERSION),
        "{e}"
    );
    assert_eq!(files(&p), before, "a refused open wrote");
    let e = SqliteCatalogue::open_read_only(&p).unwrap_err();
    assert!(matches!(e, OpenError::NotReadable { .. }), "{e}");
    assert_eq!(files(&p), before, "a refused read-only open wrote");
    println!(
        "version {} refused; {} bytes identical, -wal/-shm/-journal absent before and after",
        CATALOGUE_VERSION + 1,
        before[0].1.as_ref().unwrap().len()
    );
}

// ------------------------------------------------------------------ corruption

fn corrupt_case(
    setup: impl Fn(&SqliteCatalogue),
    sql: &str,
    read: impl Fn(&SqliteCatalogue) -> Result<String, AccessError>,
) {
    let d = dir();
    let p = d.path().join("cat.db");
    let c = SqliteCatalogue::open(&p).unwrap();
    setup(&c);
    assert!(read(&c).is_ok(), "{sql}: the read failed before corruption");
    let n = raw(&p).execute(sql, []).unwrap();
    assert_eq!(n, 1, "{sql}");
    match read(&c) {
        Err(AccessError::Corrupt { what, detail }) => {
            println!("{sql}\n  -> Corrupt: {what}: {detail}");
        }
        other => panic!("{sql}: {other:?}, not Corrupt"),
    }
}

fn owner_and_member(c: &SqliteCatalogue) {
    reserve(c, "s1");
    bootstrap(c, "owner-token");
    invite(c, "m1", "s1", "member-token");
}

#[test]
fn stored_values_that_break_their_grammar_read_as_corrupt() {
    let m = credential_digest(b"member-token");
    let auth = |c: &SqliteCatalogue| c.authenticate(&m, 5).map(|a| format!("{a:?}"));
    let authz = |c: &SqliteCatalogue| c.authorization(&m, "s1", 5).map(|a| format!("{a:?}"));
    let list = |c: &SqliteCatalogue| c.principals_page(None, 10, 5).map(|a| format!("{a:?}"));
    let hex = m.sha().hex();
    for sql in [
        format!("UPDATE access_credentials SET kind = 'bearr' WHERE digest = '{hex}'"),
        format!("UPDATE access_credentials SET state = 'actve' WHERE digest = '{hex}'"),
        "UPDATE access_principals SET kind = 'admin' WHERE principal_id = 'm1'".to_owned(),
        "UPDATE access_principals SET name = ' padded ' WHERE principal_id = 'm1'".to_owned(),
    ] {
        corrupt_case(owner_and_member, &sql, auth);
    }
    corrupt_case(
        owner_and_member,
        "UPDATE access_memberships SET role = 'admin' WHERE principal_id = 'm1'",
        authz,
    );
    corrupt_case(
        owner_and_member,
        "UPDATE access_memberships SET role = 'admin' WHERE principal_id = 'm1'",
        |c| c.memberships_page("m1", None, 10).map(|a| format!("{a:?}")),
    );
    corrupt_case(
        owner_and_member,
        &format!("UPDATE access_credentials SET digest = upper('{hex}') WHERE digest = '{hex}'"),
        list,
    );
    corrupt_case(
        owner_and_member,
        &format!("UPDATE access_credentials SET issued_by = 'not-hex!' WHERE digest = '{hex}'"),
        list,
    );
    let claim = claim_digest(b"claim-token");
    let with_claim = |c: &SqliteCatalogue| {
        reserve(c, "s1");
        apply(
            c,
            AccessRequest::InviteMember {
                principal: "m2".into(),
                name: None,
                session_id: "s1".into(),
                role: Role::Observer,
                enrollment: Enrollment::Claim {
                    claim,
                    expires_at_ms: 1000,
                },
                now_ms: 1,
            },
        );
    };
    let known = |c: &SqliteCatalogue| c.claim_known(&claim).map(|k| format!("{k}"));
    corrupt_case(
        with_claim,
        "UPDATE access_claims SET state = 'opened'",
        known,
    );
    corrupt_case(
        with_claim,
        "UPDATE access_claims SET state = 'claimed'",
        known,
    );
    corrupt_case(
        with_claim,
        "UPDATE access_claims SET bound_digest = 'zz'",
        known,
    );
    let claimed = |c: &SqliteCatalogue| {
        with_claim(c);
        apply(
            c,
            AccessRequest::Claim {
                claim,
                digest: credential_digest(b"claimed-token"),
                name: None,
                now_ms: 2,
            },
        );
    };
    for sql in [
        "UPDATE access_claims SET bound_digest = 'zz'",
        "UPDATE access_claims SET bound_kind = 'bear'",
        "UPDATE access_claims SET claimed_at_ms = NULL",
    ] {
        corrupt_case(claimed, sql, known);
    }
}

#[test]
fn a_corrupt_row_refuses_a_write_with_nothing_written() {
    let d = dir();
    let p = d.path().join("cat.db");
    let c = SqliteCatalogue::open(&p).unwrap();
    owner_and_member(&c);
    let hex = credential_digest(b"member-token").sha().hex();
    raw(&p)
        .execute(
            &format!("UPDATE access_credentials SET kind = 'bearr' WHERE digest = '{hex}'"),
            [],
        )
        .unwrap();
    let rev = c.revision().unwrap();
    let e = c
        .apply_access(&AccessRequest::Ungrant {
            principal: "m1".into(),
            session_id: "s1".into(),
        })
        .unwrap_err();
    assert_eq!(e.reason(), "Corrupt", "{e}");
    assert_eq!(c.revision().unwrap(), rev);
    let n: i64 = raw(&p)
        .query_row("SELECT count(*) FROM access_memberships", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1, "the refused ungrant removed the membership");
}

// ------------------------------------------------------------------ rules in SQL

#[test]
fn a_catalogue_delete_cascades_to_the_sessions_memberships() {
    let d = dir();
    let p = d.path().join("cat.db");
    let c = SqliteCatalogue::open(&p).unwrap();
    reserve(&c, "s1");
    reserve(&c, "s2");
    bootstrap(&c, "owner-token");
    invite(&c, "m1", "s1", "member-token");
    apply(
        &c,
        AccessRequest::Grant {
            principal: "m1".into(),
            session_id: "s2".into(),
            role: Role::Observer,
        },
    );
    assert_eq!(c.memberships_page("m1", None, 10).unwrap().rows.len(), 2);
    let rev = c.revision().unwrap();
    c.apply(&Request::Delete {
        session_id: "s1".into(),
    })
    .unwrap();
    assert_eq!(c.revision().unwrap(), rev + 1);
    let page = c.memberships_page("m1", None, 10).unwrap();
    assert_eq!(
        page.rows
            .iter()
            .map(|r| r.session_id.as_str())
            .collect::<Vec<_>>(),
        ["s2"]
    );
    assert_eq!(
        c.session_members_page("s1", None, 10).unwrap_err().reason(),
        "UnknownSession"
    );
    let left: i64 = raw(&p)
        .query_row(
            "SELECT count(*) FROM access_memberships WHERE session_id = 's1'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0);
    // A session reserved again under the same id starts with no members.
    reserve(&c, "s1");
    assert!(c
        .session_members_page("s1", None, 10)
        .unwrap()
        .rows
        .is_empty());
    let m = credential_digest(b"member-token");
    assert_eq!(c.authorization(&m, "s1", 5).unwrap(), None);
    // The foreign key is enforced: no membership of a missing session.
    let e = raw(&p)
        .execute(
            "INSERT INTO access_memberships (principal_id, session_id, role) VALUES ('m1', 'gone', 'observer')",
            [],
        )
        .unwrap_err();
    assert!(e.to_string().contains("FOREIGN KEY"), "{e}");
}

#[test]
fn one_owner_and_one_open_claim_hold_against_direct_sql() {
    let d = dir();
    let p = d.path().join("cat.db");
    let c = SqliteCatalogue::open(&p).unwrap();
    reserve(&c, "s1");
    bootstrap(&c, "owner-token");
    let conn = Connection::open(&p).unwrap();
    let e = conn
        .execute(
            "INSERT INTO access_principals (principal_id, kind, name, created_at_ms) VALUES ('second', 'owner', NULL, 1)",
            [],
        )
        .unwrap_err();
    assert!(e.to_string().contains("UNIQUE"), "{e}");
    conn.execute(
        "INSERT INTO access_principals (principal_id, kind, name, created_at_ms) VALUES ('second', 'member', NULL, 1)",
        [],
    )
    .unwrap();
    let e = conn
        .execute(
            "UPDATE access_principals SET kind = 'owner' WHERE principal_id = 'second'",
            [],
        )
        .unwrap_err();
    assert!(e.to_string().contains("UNIQUE"), "{e}");
    let open = |claim: &str| {
        conn.execute(
            "INSERT INTO access_claims (claim, principal_id, expires_at_ms, state) VALUES (?1, 'second', 9, 'open')",
            [claim],
        )
    };
    open(&"a".repeat(64)).unwrap();
    let e = open(&"b".repeat(64)).unwrap_err();
    assert!(e.to_string().contains("UNIQUE"), "{e}");
    // The CHECK constraints hold too (a test that corrupts rows must ask
    // for `ignore_check_constraints`).
    let e = conn
        .execute("UPDATE access_principals SET kind = 'admin'", [])
        .unwrap_err();
    assert!(e.to_string().contains("CHECK"), "{e}");
    assert_eq!(c.owner().unwrap().map(|o| o.0), Some("owner".into()));
}

#[test]
fn authenticate_is_a_primary_key_search() {
    let c = SqliteCatalogue::open_temp().unwrap();
    let plan = c.explain_authenticate().unwrap();
    println!("{}", plan.join("\n"));
    assert!(
        plan.iter()
            .any(|l| l.contains("SEARCH c USING PRIMARY KEY (digest=?)")),
        "{plan:?}"
    );
    assert!(
        plan.iter()
            .any(|l| l.contains("SEARCH p USING PRIMARY KEY (principal_id=?)")),
        "{plan:?}"
    );
    assert!(!plan.iter().any(|l| l.contains("SCAN")), "{plan:?}");
}
