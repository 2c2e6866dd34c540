//! The access conformance suite: one public generic function per behaviour
//! of the [`Access`] port (principals, credentials, claims, logins,
//! memberships and the owner's bounded listings). A backend implements
//! [`Access`] beside [`Catalogue`] (access lives in the catalogue's
//! database: a membership names a catalogue session), so each case takes a
//! factory of a type implementing both.
//!
//! Cases panic (via `assert!`) on a violation: they are test bodies. Every
//! refusal is checked to have written nothing ([`refused`] compares the
//! whole observable access state before and after).

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use custos_core::catalogue::access::{
    browser_digest, claim_digest, credential_digest, Access, AccessError, AccessOutcome,
    AccessRequest, Authorization, ClaimDigest, CredentialKind, CredentialSummary, Digest,
    Enrollment, PrincipalKind, Role, LISTING_LIMIT, RESUME_STAMP_WINDOW_MS,
};
use custos_core::catalogue::{Catalogue, Creation, Outcome, Request};

use crate::Place;

// ------------------------------------------------------------------ helpers

/// A bearer digest of `token`.
pub fn bearer(token: &str) -> Digest {
    credential_digest(token.as_bytes())
}

/// A browser digest of `token`.
pub fn browser(token: &str) -> Digest {
    browser_digest(token.as_bytes())
}

/// A claim digest of `token`.
pub fn claim(token: &str) -> ClaimDigest {
    claim_digest(token.as_bytes())
}

/// Every digest the request generators of `custos_testkit::access` can
/// name (bearer and browser digests of its six tokens), and its four
/// claims' own hashes as bearers (a claim authenticates nothing): what a
/// differential compares `authenticate` over.
pub fn generated_digests() -> Vec<Digest> {
    let mut out = Vec::new();
    for t in 0..6 {
        let tok = format!("tok{t}");
        out.push(bearer(&tok));
        out.push(browser(&tok));
    }
    for c in 0..4 {
        out.push(bearer(&format!("claim{c}")));
    }
    out
}

/// Everything a caller can observe of the access plane at `now_ms` for the
/// given principals, sessions and tokens: used to prove a refusal wrote
/// nothing.
#[track_caller]
pub fn observe<C: Access + Catalogue>(
    c: &C,
    principals: &[&str],
    sessions: &[&str],
    tokens: &[&str],
    now_ms: u64,
) -> String {
    let mut out = format!(
        "owner {:?}\nrevision {:?}\n",
        c.owner().unwrap(),
        c.revision().unwrap()
    );
    let mut after: Option<String> = None;
    loop {
        let p = c.principals_page(after.as_deref(), 100, now_ms).unwrap();
        out += &format!("{:?}\n", p.rows);
        if !p.more {
            break;
        }
        after = p.rows.last().map(|r| r.principal.clone());
    }
    for p in principals {
        out += &format!(
            "{p}: {:?} {:?}\n",
            c.memberships_page(p, None, 100),
            c.signins_page(p, None, 100, now_ms)
        );
    }
    for s in sessions {
        out += &format!("{s}: {:?}\n", c.session_members_page(s, None, 100));
    }
    for t in tokens {
        out += &format!(
            "{t}: {:?} {:?} {:?}\n",
            c.authenticate(&bearer(t), now_ms).unwrap(),
            c.authenticate(&browser(t), now_ms).unwrap(),
            c.claim_known(&claim(t)).unwrap()
        );
    }
    out
}

/// Applies an access request, requiring success.
#[track_caller]
pub fn ok<C: Access>(c: &C, req: AccessRequest) -> AccessOutcome {
    match c.apply_access(&req) {
        Ok(o) => o,
        Err(e) => panic!("{req:?} refused: {e}"),
    }
}

/// Applies an access request, requiring a refusal with `reason` that
/// changed nothing observable (principals, memberships, logins and the
/// authentication of `tokens`, the revision).
#[track_caller]
pub fn refused<C: Access + Catalogue>(
    c: &C,
    req: AccessRequest,
    reason: &str,
    tokens: &[&str],
) -> AccessError {
    let principals = ["owner", "m1", "m2", "m3"];
    let sessions = ["s1", "s2", "s3"];
    let before = observe(c, &principals, &sessions, tokens, 50);
    match c.apply_access(&req) {
        Ok(o) => panic!("{req:?} accepted ({o:?}); expected {reason}"),
        Err(e) => {
            assert_eq!(e.reason(), reason, "{req:?}: {e}");
            let after = observe(c, &principals, &sessions, tokens, 50);
            assert_eq!(before, after, "the refusal of {req:?} changed state");
            e
        }
    }
}

/// Registers sessions `ids` in the catalogue.
#[track_caller]
pub fn sessions<C: Catalogue>(c: &C, ids: &[&str]) {
    for id in ids {
        match c.apply(&Request::Reserve {
            session_id: (*id).into(),
            creation: Creation::local(&format!("key-{id}"), &format!("Session {id}"), "/w"),
            now: 1,
        }) {
            Ok(Outcome::Reserved { .. }) => {}
            other => panic!("reserve {id}: {other:?}"),
        }
    }
}

/// Bootstraps owner `owner` with bearer token `token` at t = 1.
#[track_caller]
pub fn bootstrap<C: Access>(c: &C, token: &str) -> AccessOutcome {
    ok(
        c,
        AccessRequest::BootstrapOwner {
            principal: "owner".into(),
            name: Some("Olive".into()),
            digest: bearer(token),
            now_ms: 1,
        },
    )
}

/// Invites `id` to `session` as `role` with its own bearer `token`.
#[track_caller]
pub fn invite_digest<C: Access>(c: &C, id: &str, session: &str, role: Role, token: &str) {
    ok(
        c,
        AccessRequest::InviteMember {
            principal: id.into(),
            name: Some(format!("Member {id}")),
            session_id: session.into(),
            role,
            enrollment: Enrollment::Digest(bearer(token)),
            now_ms: 2,
        },
    );
}

/// Invites `id` to `session` as an operator with an open claim
/// `claim_token` expiring at 100.
#[track_caller]
pub fn invite_claim<C: Access>(c: &C, id: &str, session: &str, claim_token: &str) {
    ok(
        c,
        AccessRequest::InviteMember {
            principal: id.into(),
            name: None,
            session_id: session.into(),
            role: Role::Operator,
            enrollment: Enrollment::Claim {
                claim: claim(claim_token),
                expires_at_ms: 100,
            },
            now_ms: 2,
        },
    );
}

/// The claim request for `claim_token` with bearer `token` at `now_ms`.
pub fn claim_req(claim_token: &str, token: &str, now_ms: u64) -> AccessRequest {
    AccessRequest::Claim {
        claim: claim(claim_token),
        digest: bearer(token),
        name: None,
        now_ms,
    }
}

/// Who `d` authenticates at t = 50, as `(principal, kind)`.
#[track_caller]
pub fn who<C: Access>(c: &C, d: &Digest) -> Option<(String, PrincipalKind)> {
    c.authenticate(d, 50)
        .unwrap()
        .map(|a| (a.principal, a.kind))
}

fn member(id: &str) -> Option<(String, PrincipalKind)> {
    Some((id.into(), PrincipalKind::Member))
}

#[track_caller]
fn listing<C: Access>(c: &C, id: &str, now_ms: u64) -> custos_core::catalogue::access::Listing {
    c.principals_page(None, 100, now_ms)
        .unwrap()
        .rows
        .into_iter()
        .find(|r| r.principal == id)
        .unwrap_or_else(|| panic!("{id} not listed"))
}

// ------------------------------------------------------------------ cases

/// A fresh catalogue has no owner, no principals, and authenticates nothing.
pub fn fresh_access_is_empty<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    assert_eq!(c.owner().unwrap(), None);
    let p = c.principals_page(None, 100, 0).unwrap();
    assert!(p.rows.is_empty() && !p.more);
    assert_eq!(c.authenticate(&bearer("t"), 0).unwrap(), None);
    assert!(!c.claim_known(&claim("t")).unwrap());
}

/// Bootstrap creates the one owner with an active bearer credential.
pub fn bootstrap_creates_the_owner<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    assert_eq!(
        bootstrap(&c, "root-1"),
        AccessOutcome::Owner {
            principal: "owner".into(),
            created: true
        }
    );
    assert_eq!(
        c.owner().unwrap(),
        Some(("owner".into(), Some("Olive".into())))
    );
    assert_eq!(
        who(&c, &bearer("root-1")),
        Some(("owner".into(), PrincipalKind::Owner))
    );
    match listing(&c, "owner", 5).credential {
        CredentialSummary::Active {
            fingerprint,
            claimed_at_ms,
        } => {
            assert_eq!(fingerprint, bearer("root-1").fingerprint());
            assert_eq!(claimed_at_ms, None);
        }
        other => panic!("{other:?}"),
    }
}

/// A bootstrap retry answers the owner only with the owner's active
/// credential; a missing, unrelated or revoked one cannot reset ownership.
pub fn bootstrap_retry_needs_the_owners_active_credential<C: Access + Catalogue, F: Fn() -> C>(
    factory: F,
) {
    let c = factory();
    bootstrap(&c, "root-1");
    assert_eq!(
        bootstrap(&c, "root-1"),
        AccessOutcome::Owner {
            principal: "owner".into(),
            created: false
        }
    );
    let other_id = AccessRequest::BootstrapOwner {
        principal: "usurper".into(),
        name: None,
        digest: bearer("root-1"),
        now_ms: 3,
    };
    assert_eq!(
        ok(&c, other_id),
        AccessOutcome::Owner {
            principal: "owner".into(),
            created: false
        },
        "a retry under another id answers the existing owner"
    );
    let unrelated = AccessRequest::BootstrapOwner {
        principal: "usurper".into(),
        name: None,
        digest: bearer("guess"),
        now_ms: 3,
    };
    refused(&c, unrelated, "OwnerExists", &["root-1", "guess"]);
    ok(
        &c,
        AccessRequest::RotateCredential {
            principal: "owner".into(),
            digest: bearer("root-2"),
            now_ms: 4,
        },
    );
    let revoked = AccessRequest::BootstrapOwner {
        principal: "owner".into(),
        name: None,
        digest: bearer("root-1"),
        now_ms: 5,
    };
    refused(&c, revoked, "OwnerExists", &["root-1", "root-2"]);
}

/// Every path that enrolls a member's or the owner's own credential refuses
/// a browser digest, and the login paths refuse a bearer one.
pub fn enrolling_paths_refuse_the_wrong_kind<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    sessions(&c, &["s1"]);
    let t = &["b1", "root-1"];
    refused(
        &c,
        AccessRequest::BootstrapOwner {
            principal: "owner".into(),
            name: None,
            digest: browser("b1"),
            now_ms: 1,
        },
        "WrongKind",
        t,
    );
    bootstrap(&c, "root-1");
    let own = [
        AccessRequest::RotateCredential {
            principal: "owner".into(),
            digest: browser("b1"),
            now_ms: 2,
        },
        AccessRequest::InviteMember {
            principal: "m1".into(),
            name: None,
            session_id: "s1".into(),
            role: Role::Observer,
            enrollment: Enrollment::Digest(browser("b1")),
            now_ms: 2,
        },
        AccessRequest::IssueLogin {
            principal: "owner".into(),
            digest: bearer("b1"),
            now_ms: 2,
            expires_at_ms: 90,
            issued_by: None,
        },
    ];
    for req in own {
        refused(&c, req, "WrongKind", t);
    }
    invite_claim(&c, "m1", "s1", "c1");
    let claims = [
        AccessRequest::Claim {
            claim: claim("c1"),
            digest: browser("b1"),
            name: None,
            now_ms: 3,
        },
        AccessRequest::ClaimLogin {
            claim: claim("c1"),
            digest: bearer("b1"),
            name: None,
            now_ms: 3,
            expires_at_ms: 90,
        },
    ];
    for req in claims {
        refused(&c, req, "WrongKind", &["b1", "root-1", "c1"]);
    }
}

/// Rotation changes the credential, not the identity: the old digest
/// authenticates nothing, the new one the same principal; a repeat is a
/// no-op; a tombstone cannot be rotated back in.
pub fn rotation_keeps_identity_and_tombstones_the_old<C: Access + Catalogue, F: Fn() -> C>(
    factory: F,
) {
    let c = factory();
    bootstrap(&c, "root-1");
    let rotate = |t: &str| AccessRequest::RotateCredential {
        principal: "owner".into(),
        digest: bearer(t),
        now_ms: 4,
    };
    assert_eq!(
        ok(&c, rotate("root-2")),
        AccessOutcome::Done { changed: true }
    );
    assert_eq!(who(&c, &bearer("root-1")), None);
    assert_eq!(
        who(&c, &bearer("root-2")),
        Some(("owner".into(), PrincipalKind::Owner))
    );
    assert_eq!(
        ok(&c, rotate("root-2")),
        AccessOutcome::Done { changed: false }
    );
    refused(&c, rotate("root-1"), "DigestInUse", &["root-1", "root-2"]);
    assert_eq!(c.owner().unwrap().map(|o| o.0), Some("owner".into()));
}

/// A revoked digest is a tombstone in every path: no invitation, login or
/// claim can take it, in either kind (the hash is one primary key).
pub fn a_tombstone_is_never_reassigned<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    sessions(&c, &["s1"]);
    bootstrap(&c, "old");
    ok(
        &c,
        AccessRequest::RotateCredential {
            principal: "owner".into(),
            digest: bearer("new"),
            now_ms: 4,
        },
    );
    let t = &["old", "new"];
    refused(
        &c,
        AccessRequest::InviteMember {
            principal: "m1".into(),
            name: None,
            session_id: "s1".into(),
            role: Role::Observer,
            enrollment: Enrollment::Digest(bearer("old")),
            now_ms: 5,
        },
        "DigestInUse",
        t,
    );
    refused(
        &c,
        AccessRequest::IssueLogin {
            principal: "owner".into(),
            digest: browser("old"),
            now_ms: 5,
            expires_at_ms: 90,
            issued_by: None,
        },
        "DigestInUse",
        t,
    );
    invite_claim(&c, "m1", "s1", "c1");
    refused(
        &c,
        claim_req("c1", "old", 6),
        "ConflictingClaim",
        &["old", "new", "c1"],
    );
}

/// An invitation creates the member, its enrollment and its first
/// membership in one transaction, and moves the revision.
pub fn invite_creates_member_enrollment_and_membership<C: Access + Catalogue, F: Fn() -> C>(
    factory: F,
) {
    let c = factory();
    sessions(&c, &["s1"]);
    let rev = c.revision().unwrap();
    invite_digest(&c, "m1", "s1", Role::Observer, "m1-token");
    assert_eq!(c.revision().unwrap(), rev + 1);
    assert_eq!(who(&c, &bearer("m1-token")), member("m1"));
    let m = c.memberships_page("m1", None, 100).unwrap();
    assert_eq!(m.rows.len(), 1);
    assert_eq!(m.rows[0].session_id, "s1");
    assert_eq!(m.rows[0].name, "Session s1");
    assert_eq!(m.rows[0].role, Role::Observer);
    let s = c.session_members_page("s1", None, 100).unwrap();
    assert_eq!(s.rows.len(), 1);
    assert_eq!(s.rows[0].principal, "m1");
    assert_eq!(s.rows[0].name.as_deref(), Some("Member m1"));
    assert_eq!(
        c.authorization(&bearer("m1-token"), "s1", 50).unwrap(),
        Some(Authorization::Member(Role::Observer))
    );
}

/// An existing principal id always conflicts — the owner's, a live
/// member's and a revoked member's.
pub fn invite_with_an_existing_id_conflicts<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    sessions(&c, &["s1"]);
    bootstrap(&c, "root-1");
    invite_digest(&c, "m1", "s1", Role::Observer, "m1-token");
    ok(
        &c,
        AccessRequest::RevokeMember {
            principal: "m1".into(),
        },
    );
    for id in ["owner", "m1"] {
        refused(
            &c,
            AccessRequest::InviteMember {
                principal: id.into(),
                name: None,
                session_id: "s1".into(),
                role: Role::Operator,
                enrollment: Enrollment::Digest(bearer("fresh")),
                now_ms: 5,
            },
            "PrincipalExists",
            &["fresh", "m1-token"],
        );
    }
}

/// A lost reply to an invitation: the same invitation again — its member,
/// name, session, role and enrollment under the inviter's own secret —
/// succeeds as the first attempt did, `Done` with `changed: false` (it
/// writes nothing); any other invitation under the id (another token, another
/// role), or the same one after the member was revoked, is
/// `PrincipalExists`.
pub fn a_retried_invitation_is_answered_as_the_first<C: Access + Catalogue, F: Fn() -> C>(
    factory: F,
) {
    let c = factory();
    sessions(&c, &["s1"]);
    bootstrap(&c, "root-1");
    let by_digest = AccessRequest::InviteMember {
        principal: "m1".into(),
        name: Some("Member m1".into()),
        session_id: "s1".into(),
        role: Role::Observer,
        enrollment: Enrollment::Digest(bearer("m1-token")),
        now_ms: 2,
    };
    let by_claim = AccessRequest::InviteMember {
        principal: "m2".into(),
        name: None,
        session_id: "s1".into(),
        role: Role::Operator,
        enrollment: Enrollment::Claim {
            claim: claim("m2-claim"),
            expires_at_ms: 100,
        },
        now_ms: 2,
    };
    let tokens = ["m1-token", "m2-claim", "other"];
    for req in [&by_digest, &by_claim] {
        assert_eq!(ok(&c, req.clone()), AccessOutcome::Done { changed: true });
        let before = observe(&c, &["m1", "m2"], &["s1"], &tokens, 50);
        assert_eq!(
            c.apply_access(req),
            Ok(AccessOutcome::Done { changed: false }),
            "the retry of {req:?} did not succeed as the first attempt"
        );
        assert_eq!(
            observe(&c, &["m1", "m2"], &["s1"], &tokens, 50),
            before,
            "a recognised retry wrote"
        );
    }
    // Another token or another role under the id is another invitation.
    let mut other_token = by_digest.clone();
    if let AccessRequest::InviteMember { enrollment, .. } = &mut other_token {
        *enrollment = Enrollment::Digest(bearer("other"));
    }
    refused(&c, other_token, "PrincipalExists", &tokens);
    let mut other_role = by_digest.clone();
    if let AccessRequest::InviteMember { role, .. } = &mut other_role {
        *role = Role::Operator;
    }
    refused(&c, other_role, "PrincipalExists", &tokens);
    // Once the member is revoked, the old invitation is not standing.
    ok(
        &c,
        AccessRequest::RevokeMember {
            principal: "m1".into(),
        },
    );
    refused(&c, by_digest, "PrincipalExists", &tokens);
}

/// An invitation naming a session the catalogue lacks, or whose enrollment
/// is taken, writes nothing at all (no principal is left behind).
pub fn a_refused_invitation_writes_nothing<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    sessions(&c, &["s1"]);
    bootstrap(&c, "root-1");
    let inv = |session: &str, e: Enrollment| AccessRequest::InviteMember {
        principal: "m2".into(),
        name: None,
        session_id: session.into(),
        role: Role::Operator,
        enrollment: e,
        now_ms: 5,
    };
    let t = &["fresh", "root-1", "c9"];
    refused(
        &c,
        inv("s9", Enrollment::Digest(bearer("fresh"))),
        "UnknownSession",
        t,
    );
    refused(
        &c,
        inv("s1", Enrollment::Digest(bearer("root-1"))),
        "DigestInUse",
        t,
    );
    invite_claim(&c, "m1", "s1", "c9");
    refused(
        &c,
        inv(
            "s1",
            Enrollment::Claim {
                claim: claim("c9"),
                expires_at_ms: 100,
            },
        ),
        "ClaimInUse",
        t,
    );
    refused(
        &c,
        inv(
            "s1",
            Enrollment::Claim {
                claim: claim("c8"),
                expires_at_ms: 5,
            },
        ),
        "Invalid",
        t,
    );
    let bad_id = AccessRequest::InviteMember {
        principal: "has space".into(),
        name: None,
        session_id: "s1".into(),
        role: Role::Operator,
        enrollment: Enrollment::Digest(bearer("fresh")),
        now_ms: 5,
    };
    refused(&c, bad_id, "Invalid", t);
}

/// Member operations refuse the owner.
pub fn member_operations_refuse_the_owner<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    sessions(&c, &["s1"]);
    bootstrap(&c, "root-1");
    let t = &["root-1", "x"];
    for req in [
        AccessRequest::RotateMember {
            principal: "owner".into(),
            enrollment: Enrollment::Digest(bearer("x")),
            now_ms: 3,
        },
        AccessRequest::RevokeMember {
            principal: "owner".into(),
        },
        AccessRequest::Grant {
            principal: "owner".into(),
            session_id: "s1".into(),
            role: Role::Operator,
        },
    ] {
        refused(&c, req, "OwnerRefused", t);
    }
    assert_eq!(
        who(&c, &bearer("root-1")),
        Some(("owner".into(), PrincipalKind::Owner))
    );
}

/// Member rotation voids the open claim before touching credentials,
/// revokes every active credential (logins included) and inserts one
/// replacement enrollment.
pub fn rotate_member_voids_the_claim_and_revokes_everything<C: Access + Catalogue, F: Fn() -> C>(
    factory: F,
) {
    let c = factory();
    sessions(&c, &["s1"]);
    invite_claim(&c, "m1", "s1", "c1");
    assert!(c.claim_known(&claim("c1")).unwrap());
    ok(
        &c,
        AccessRequest::RotateMember {
            principal: "m1".into(),
            enrollment: Enrollment::Digest(bearer("m1-a")),
            now_ms: 3,
        },
    );
    assert!(!c.claim_known(&claim("c1")).unwrap(), "the claim is void");
    refused(
        &c,
        claim_req("c1", "m1-b", 4),
        "UnknownClaim",
        &["m1-a", "m1-b", "c1"],
    );
    ok(
        &c,
        AccessRequest::IssueLogin {
            principal: "m1".into(),
            digest: browser("m1-login"),
            now_ms: 4,
            expires_at_ms: 90,
            issued_by: None,
        },
    );
    ok(
        &c,
        AccessRequest::RotateMember {
            principal: "m1".into(),
            enrollment: Enrollment::Claim {
                claim: claim("c2"),
                expires_at_ms: 100,
            },
            now_ms: 5,
        },
    );
    assert_eq!(who(&c, &bearer("m1-a")), None);
    assert_eq!(
        who(&c, &browser("m1-login")),
        None,
        "logins are revoked too"
    );
    assert!(c.claim_known(&claim("c2")).unwrap());
    ok(&c, claim_req("c2", "m1-c", 6));
    assert_eq!(who(&c, &bearer("m1-c")), member("m1"));
}

/// Revocation voids the open claim and revokes credentials, and keeps the
/// identity and its memberships.
pub fn revoke_member_keeps_identity_and_grants<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    sessions(&c, &["s1"]);
    invite_digest(&c, "m1", "s1", Role::Operator, "m1-token");
    invite_claim(&c, "m2", "s1", "c2");
    for id in ["m1", "m2"] {
        ok(
            &c,
            AccessRequest::RevokeMember {
                principal: id.into(),
            },
        );
    }
    assert_eq!(who(&c, &bearer("m1-token")), None);
    assert!(!c.claim_known(&claim("c2")).unwrap());
    assert_eq!(listing(&c, "m1", 5).credential, CredentialSummary::Nothing);
    assert_eq!(listing(&c, "m2", 5).credential, CredentialSummary::Nothing);
    assert_eq!(c.memberships_page("m1", None, 100).unwrap().rows.len(), 1);
    refused(
        &c,
        AccessRequest::RevokeMember {
            principal: "nobody".into(),
        },
        "UnknownPrincipal",
        &["m1-token"],
    );
}

/// A missing membership grants nothing; the owner is authorized only where
/// the catalogue holds the session; a session the catalogue lacks grants
/// nothing to anyone.
pub fn a_missing_membership_grants_nothing<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    sessions(&c, &["s1", "s2"]);
    bootstrap(&c, "root-1");
    invite_digest(&c, "m1", "s1", Role::Operator, "m1-token");
    let auth = |t: Digest, s: &str| c.authorization(&t, s, 50).unwrap();
    assert_eq!(
        auth(bearer("m1-token"), "s1"),
        Some(Authorization::Member(Role::Operator))
    );
    assert_eq!(auth(bearer("m1-token"), "s2"), None);
    assert_eq!(auth(bearer("root-1"), "s2"), Some(Authorization::Owner));
    assert_eq!(auth(bearer("root-1"), "s9"), None);
    assert_eq!(auth(bearer("nobody"), "s1"), None);
}

/// Roles are explicit: a grant sets one, a change replaces it, an ungrant
/// removes it; the revision moves only when a row changes.
pub fn roles_are_explicit_and_changes_move_the_revision<C: Access + Catalogue, F: Fn() -> C>(
    factory: F,
) {
    let c = factory();
    sessions(&c, &["s1", "s2"]);
    invite_digest(&c, "m1", "s1", Role::Observer, "m1-token");
    let grant = |s: &str, role: Role| AccessRequest::Grant {
        principal: "m1".into(),
        session_id: s.into(),
        role,
    };
    let rev = c.revision().unwrap();
    assert_eq!(
        ok(&c, grant("s2", Role::Observer)),
        AccessOutcome::Done { changed: true }
    );
    assert_eq!(
        ok(&c, grant("s2", Role::Observer)),
        AccessOutcome::Done { changed: false }
    );
    assert_eq!(c.revision().unwrap(), rev + 1);
    ok(&c, grant("s2", Role::Operator));
    assert_eq!(c.revision().unwrap(), rev + 2);
    assert_eq!(
        c.authorization(&bearer("m1-token"), "s2", 50).unwrap(),
        Some(Authorization::Member(Role::Operator))
    );
    ok(
        &c,
        AccessRequest::Ungrant {
            principal: "m1".into(),
            session_id: "s2".into(),
        },
    );
    assert_eq!(c.revision().unwrap(), rev + 3);
    assert_eq!(
        c.authorization(&bearer("m1-token"), "s2", 50).unwrap(),
        None
    );
    let t = &["m1-token"];
    refused(&c, grant("s9", Role::Operator), "UnknownSession", t);
    refused(
        &c,
        AccessRequest::Grant {
            principal: "ghost".into(),
            session_id: "s1".into(),
            role: Role::Operator,
        },
        "UnknownPrincipal",
        t,
    );
}

/// A browser login's row is absent to every bearer lookup of the same
/// token, and the reverse.
pub fn a_login_is_absent_to_bearer_lookups<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    bootstrap(&c, "root-1");
    ok(
        &c,
        AccessRequest::IssueLogin {
            principal: "owner".into(),
            digest: browser("web-1"),
            now_ms: 2,
            expires_at_ms: 90,
            issued_by: None,
        },
    );
    assert_eq!(who(&c, &bearer("web-1")), None);
    let a = c.authenticate(&browser("web-1"), 50).unwrap().unwrap();
    assert_eq!(a.principal, "owner");
    assert_eq!(a.credential, CredentialKind::Browser);
    assert_eq!(who(&c, &browser("root-1")), None);
    assert_eq!(
        c.authenticate(&browser("web-1"), 90).unwrap(),
        None,
        "expired"
    );
}

/// A claim binds a bearer once and answers the memberships; the same
/// digest again is a replay (nothing written), another digest conflicts.
pub fn a_claim_binds_once<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    sessions(&c, &["s1", "s2"]);
    invite_claim(&c, "m1", "s2", "c1");
    ok(
        &c,
        AccessRequest::Grant {
            principal: "m1".into(),
            session_id: "s1".into(),
            role: Role::Observer,
        },
    );
    let want = vec![
        ("s1".to_owned(), Role::Observer),
        ("s2".to_owned(), Role::Operator),
    ];
    assert_eq!(
        who(&c, &bearer("m1-token")),
        None,
        "a claim authenticates nothing"
    );
    assert_eq!(
        ok(&c, claim_req("c1", "m1-token", 10)),
        AccessOutcome::Claimed {
            principal: "m1".into(),
            memberships: want.clone(),
            bound: true
        }
    );
    assert_eq!(who(&c, &bearer("m1-token")), member("m1"));
    let t = &["m1-token", "other", "c1"];
    let before = observe(&c, &["m1"], &["s1"], t, 50);
    assert_eq!(
        ok(&c, claim_req("c1", "m1-token", 20)),
        AccessOutcome::Claimed {
            principal: "m1".into(),
            memberships: want,
            bound: false
        }
    );
    assert_eq!(
        before,
        observe(&c, &["m1"], &["s1"], t, 50),
        "a replay wrote"
    );
    refused(&c, claim_req("c1", "other", 20), "ConflictingClaim", t);
    assert!(
        c.claim_known(&claim("c1")).unwrap(),
        "a claimed row stays (never deleted)"
    );
    assert_eq!(who(&c, &bearer("c1")), None, "the claim is no credential");
    match listing(&c, "m1", 50).credential {
        CredentialSummary::Active { claimed_at_ms, .. } => assert_eq!(claimed_at_ms, Some(10)),
        other => panic!("{other:?}"),
    }
}

/// A claim answers at most 16 memberships, in session order.
pub fn a_claim_answers_at_most_sixteen_memberships<C: Access + Catalogue, F: Fn() -> C>(
    factory: F,
) {
    let c = factory();
    let ids: Vec<String> = (0..20).map(|i| format!("s{i:02}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    sessions(&c, &refs);
    invite_claim(&c, "m1", "s19", "c1");
    for s in &ids[..19] {
        ok(
            &c,
            AccessRequest::Grant {
                principal: "m1".into(),
                session_id: s.clone(),
                role: Role::Observer,
            },
        );
    }
    match ok(&c, claim_req("c1", "m1-token", 10)) {
        AccessOutcome::Claimed { memberships, .. } => {
            let got: Vec<&str> = memberships.iter().map(|(s, _)| s.as_str()).collect();
            assert_eq!(got, refs[..16].to_vec());
        }
        other => panic!("{other:?}"),
    }
}

/// Every claim refusal, each made before any write, in its fixed order:
/// unknown or void, then a claimed row, then expiry, the claim's own
/// digest, a digest present in any state, and the name (a member with an
/// open claim cannot hold a credential: a login is `ClaimPending`).
pub fn claim_refusals_in_order_write_nothing<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    sessions(&c, &["s1"]);
    bootstrap(&c, "root-1");
    invite_claim(&c, "m1", "s1", "c1");
    let t = &["c1", "root-1", "fresh", "web"];
    refused(&c, claim_req("nope", "fresh", 10), "UnknownClaim", t);
    // Expiry is judged before the digest conflicts.
    refused(&c, claim_req("c1", "root-1", 100), "ExpiredClaim", t);
    let e = refused(&c, claim_req("c1", "c1", 10), "ConflictingClaim", t);
    assert!(e.to_string().contains("claim-digest-as-credential"), "{e}");
    let e = refused(&c, claim_req("c1", "root-1", 10), "ConflictingClaim", t);
    assert!(e.to_string().contains("digest-in-use"), "{e}");
    let named = AccessRequest::Claim {
        claim: claim("c1"),
        digest: bearer("fresh"),
        name: Some("\u{202E}evil".into()),
        now_ms: 10,
    };
    refused(&c, named, "InvalidClaimName", t);
    // A member with an open claim holds no credential: no login either.
    refused(
        &c,
        AccessRequest::IssueLogin {
            principal: "m1".into(),
            digest: browser("web"),
            now_ms: 10,
            expires_at_ms: 90,
            issued_by: None,
        },
        "ClaimPending",
        t,
    );
    assert!(c.claim_known(&claim("c1")).unwrap(), "still open");
}

/// A claim bound as a login is recognised on replay only for the kind it
/// bound; the login has the claim's expiry and counts as the credential.
pub fn a_login_claim_replays_only_for_its_kind<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    sessions(&c, &["s1"]);
    invite_claim(&c, "m1", "s1", "c1");
    let login = AccessRequest::ClaimLogin {
        claim: claim("c1"),
        digest: browser("tok"),
        name: Some("  Mia ".into()),
        now_ms: 10,
        expires_at_ms: 80,
    };
    assert!(matches!(
        ok(&c, login.clone()),
        AccessOutcome::Claimed { bound: true, .. }
    ));
    assert!(matches!(
        ok(&c, login),
        AccessOutcome::Claimed { bound: false, .. }
    ));
    refused(
        &c,
        claim_req("c1", "tok", 12),
        "ConflictingClaim",
        &["tok", "c1"],
    );
    let l = listing(&c, "m1", 50);
    assert_eq!(l.name.as_deref(), Some("Mia"));
    assert_eq!(l.logins, 1);
    assert!(matches!(
        l.credential,
        CredentialSummary::Active {
            claimed_at_ms: Some(10),
            ..
        }
    ));
    let s = c.signins_page("m1", None, 100, 50).unwrap();
    assert_eq!(s.rows.len(), 1);
    assert_eq!(s.rows[0].expires_at_ms, Some(80));
    assert_eq!(s.rows[0].fingerprint, browser("tok").fingerprint());
}

/// After revocation a replay of the lost reply is refused: the bound
/// credential is no longer active, and the claim cannot be re-bound.
pub fn a_replay_after_revocation_is_refused<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    sessions(&c, &["s1"]);
    invite_claim(&c, "m1", "s1", "c1");
    ok(&c, claim_req("c1", "tok", 10));
    ok(
        &c,
        AccessRequest::RevokeMember {
            principal: "m1".into(),
        },
    );
    let t = &["tok", "tok2", "c1"];
    refused(&c, claim_req("c1", "tok", 11), "ConflictingClaim", t);
    refused(&c, claim_req("c1", "tok2", 11), "ConflictingClaim", t);
}

/// Logins: issued with an expiry, listed in fingerprint order while live,
/// revoked one by fingerprint (browser rows only), per principal, or all.
pub fn logins_sign_in_and_out<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    sessions(&c, &["s1"]);
    bootstrap(&c, "root-1");
    invite_digest(&c, "m1", "s1", Role::Operator, "m1-token");
    let issue = |p: &str, t: &str, exp: u64| {
        ok(
            &c,
            AccessRequest::IssueLogin {
                principal: p.into(),
                digest: browser(t),
                now_ms: 5,
                expires_at_ms: exp,
                issued_by: None,
            },
        )
    };
    for t in ["w1", "w2", "w3"] {
        issue("owner", t, 90);
    }
    issue("owner", "short", 20);
    issue("m1", "mw", 90);
    let page = c.signins_page("owner", None, 100, 50).unwrap();
    let mut want: Vec<String> = ["w1", "w2", "w3"]
        .iter()
        .map(|t| browser(t).fingerprint())
        .collect();
    want.sort();
    let got: Vec<String> = page.rows.iter().map(|r| r.fingerprint.clone()).collect();
    assert_eq!(
        got, want,
        "live logins in fingerprint order (the expired one left out)"
    );
    let two = c.signins_page("owner", None, 2, 50).unwrap();
    assert!(two.more && two.rows.len() == 2);
    let rest = c.signins_page("owner", Some(&want[1]), 2, 50).unwrap();
    assert_eq!(rest.rows.len(), 1);
    assert!(!rest.more);
    revocations_sign_out(&c);
}

/// The revocations of [`logins_sign_in_and_out`]: by fingerprint (a
/// bearer's revokes nothing), per principal, then all; bearers stay.
fn revocations_sign_out<C: Access + Catalogue>(c: &C) {
    // A bearer's fingerprint revokes nothing.
    let revoke = |fp: String| AccessRequest::RevokeLogin {
        principal: "owner".into(),
        fingerprint: fp,
    };
    assert_eq!(
        ok(c, revoke(bearer("root-1").fingerprint())),
        AccessOutcome::Revoked { count: 0 }
    );
    assert_eq!(
        who(c, &bearer("root-1")),
        Some(("owner".into(), PrincipalKind::Owner))
    );
    assert_eq!(
        ok(c, revoke(browser("w1").fingerprint())),
        AccessOutcome::Revoked { count: 1 }
    );
    assert_eq!(who(c, &browser("w1")), None);
    refused(c, revoke("not-hex".into()), "Invalid", &["w2"]);
    ok(
        c,
        AccessRequest::RevokeLogins {
            principal: "owner".into(),
        },
    );
    assert_eq!(who(c, &browser("w2")), None);
    assert_eq!(who(c, &browser("mw")), member("m1"));
    ok(c, AccessRequest::RevokeAllLogins);
    assert_eq!(who(c, &browser("mw")), None);
    assert_eq!(who(c, &bearer("m1-token")), member("m1"), "bearers stay");
    assert!(c
        .signins_page("owner", None, 100, 50)
        .unwrap()
        .rows
        .is_empty());
}

/// A login's `issued_by` must be a fingerprint and its expiry after now.
pub fn a_login_is_judged_before_it_is_written<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    bootstrap(&c, "root-1");
    let t = &["w1"];
    let bad = |exp: u64, by: Option<&str>| AccessRequest::IssueLogin {
        principal: "owner".into(),
        digest: browser("w1"),
        now_ms: 5,
        expires_at_ms: exp,
        issued_by: by.map(str::to_owned),
    };
    refused(&c, bad(5, None), "Invalid", t);
    refused(&c, bad(90, Some("ZZZ")), "Invalid", t);
    refused(
        &c,
        AccessRequest::IssueLogin {
            principal: "ghost".into(),
            digest: browser("w1"),
            now_ms: 5,
            expires_at_ms: 90,
            issued_by: None,
        },
        "UnknownPrincipal",
        t,
    );
    let by = browser("w0").fingerprint();
    ok(&c, bad(90, Some(&by)));
    let page = c.signins_page("owner", None, 100, 50).unwrap();
    assert_eq!(page.rows[0].issued_by.as_deref(), Some(by.as_str()));
}

/// `resumed` stamps a live login at most once per window, and never a
/// bearer or an expired login.
pub fn resumed_stamps_at_most_once_per_window<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    bootstrap(&c, "root-1");
    let w = RESUME_STAMP_WINDOW_MS;
    ok(
        &c,
        AccessRequest::IssueLogin {
            principal: "owner".into(),
            digest: browser("w1"),
            now_ms: 5,
            expires_at_ms: 10 * w,
            issued_by: None,
        },
    );
    let resume = |t: u64| {
        ok(
            &c,
            AccessRequest::Resumed {
                digest: browser("w1"),
                now_ms: t,
            },
        )
    };
    assert_eq!(resume(10), AccessOutcome::Done { changed: true });
    assert_eq!(resume(10 + w - 1), AccessOutcome::Done { changed: false });
    let stamp = |now: u64| c.signins_page("owner", None, 100, now).unwrap().rows[0].last_resumed_ms;
    assert_eq!(stamp(11), Some(10));
    assert_eq!(resume(10 + w), AccessOutcome::Done { changed: true });
    assert_eq!(stamp(11 + w), Some(10 + w));
    assert_eq!(
        resume(10 * w),
        AccessOutcome::Done { changed: false },
        "expired"
    );
    refused(
        &c,
        AccessRequest::Resumed {
            digest: bearer("root-1"),
            now_ms: 20,
        },
        "WrongKind",
        &["root-1", "w1"],
    );
}

/// The owner's listing shows one credential state per principal — an
/// active fingerprint, an open claim's remaining lifetime, an expired
/// claim, or nothing — and never a digest, claim or token.
pub fn the_listing_shows_credential_states_and_no_secret<C: Access + Catalogue, F: Fn() -> C>(
    factory: F,
) {
    let c = factory();
    sessions(&c, &["s1"]);
    bootstrap(&c, "root-1");
    invite_claim(&c, "m1", "s1", "c1");
    invite_digest(&c, "m2", "s1", Role::Observer, "m2-token");
    ok(
        &c,
        AccessRequest::RevokeMember {
            principal: "m2".into(),
        },
    );
    assert_eq!(
        listing(&c, "m1", 40).credential,
        CredentialSummary::OpenClaim { remaining_ms: 60 }
    );
    assert_eq!(
        listing(&c, "m1", 100).credential,
        CredentialSummary::ExpiredClaim
    );
    assert_eq!(listing(&c, "m2", 40).credential, CredentialSummary::Nothing);
    let shown = format!("{:?}", c.principals_page(None, 100, 40).unwrap());
    for secret in [
        bearer("root-1").sha().hex(),
        claim("c1").sha().hex(),
        bearer("m2-token").sha().hex(),
        "root-1".to_owned(),
        "m2-token".to_owned(),
    ] {
        assert!(!shown.contains(&secret), "the listing shows {secret}");
    }
}

/// Pages hold at most 100 rows, continue after an exclusive cursor and say
/// only whether another page exists.
pub fn pages_are_bounded_and_continue<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    sessions(&c, &["s1"]);
    let n = LISTING_LIMIT * 2 + 5;
    for i in 0..n {
        invite_digest(
            &c,
            &format!("m{i:03}"),
            "s1",
            Role::Observer,
            &format!("t{i}"),
        );
    }
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let p = c.principals_page(after.as_deref(), 1_000, 50).unwrap();
        assert!(p.rows.len() <= LISTING_LIMIT);
        pages += 1;
        seen.extend(p.rows.iter().map(|r| r.principal.clone()));
        if !p.more {
            break;
        }
        after = p.rows.last().map(|r| r.principal.clone());
    }
    assert_eq!(pages, 3);
    let want: Vec<String> = (0..n).map(|i| format!("m{i:03}")).collect();
    assert_eq!(seen, want);
    let s = c.session_members_page("s1", None, 1_000).unwrap();
    assert_eq!(s.rows.len(), LISTING_LIMIT);
    assert!(s.more);
    let s2 = c.session_members_page("s1", Some("m199"), 10).unwrap();
    let got: Vec<&str> = s2.rows.iter().map(|r| r.principal.as_str()).collect();
    assert_eq!(got, ["m200", "m201", "m202", "m203", "m204"]);
    assert!(!s2.more);
    let exact = c.principals_page(Some("m194"), 10, 50).unwrap();
    assert_eq!(exact.rows.len(), 10);
    assert!(!exact.more, "exactly the last ten: no further page");
}

/// Every access listing is in byte order of its key, across
/// continuations (not insertion order, its reverse, a collation or a
/// numeric-aware order: [`crate::ORDER_PROBE`]'s ASCII keys): principals,
/// a session's members, and a principal's memberships.
pub fn listings_are_in_byte_order_not_collation_or_insertion<
    C: Access + Catalogue,
    F: Fn() -> C,
>(
    factory: F,
) {
    fn paged<R>(
        mut next: impl FnMut(Option<&str>) -> (Vec<R>, bool),
        key: impl Fn(&R) -> String,
    ) -> Vec<String> {
        let mut seen: Vec<String> = Vec::new();
        loop {
            let (rows, more) = next(seen.last().map(String::as_str));
            seen.extend(rows.iter().map(&key));
            if !more {
                return seen;
            }
        }
    }
    let c = factory();
    // Ids are ASCII: the probe without its last, non-ASCII key.
    let probe = &crate::ORDER_PROBE[..6];
    let bytes = &crate::ORDER_PROBE_BYTES[..6];
    let ids: Vec<String> = probe.iter().map(|k| format!("s{k}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    sessions(&c, &refs);
    for k in probe {
        invite_digest(&c, &format!("m{k}"), "sb", Role::Observer, &format!("t{k}"));
    }
    for s in ids.iter().filter(|s| *s != "sb") {
        ok(
            &c,
            AccessRequest::Grant {
                principal: "mb".into(),
                session_id: s.clone(),
                role: Role::Operator,
            },
        );
    }
    let principals: Vec<String> = bytes.iter().map(|k| format!("m{k}")).collect();
    let sessions_in_order: Vec<String> = bytes.iter().map(|k| format!("s{k}")).collect();
    let listed = paged(
        |after| {
            let p = c.principals_page(after, 2, 50).unwrap();
            (p.rows, p.more)
        },
        |r| r.principal.clone(),
    );
    assert_eq!(listed, principals, "principals");
    let members = paged(
        |after| {
            let p = c.session_members_page("sb", after, 2).unwrap();
            (p.rows, p.more)
        },
        |r| r.principal.clone(),
    );
    assert_eq!(members, principals, "members of sb");
    let memberships = paged(
        |after| {
            let p = c.memberships_page("mb", after, 2).unwrap();
            (p.rows, p.more)
        },
        |r| r.session_id.clone(),
    );
    assert_eq!(memberships, sessions_in_order, "memberships of mb");
}

/// A membership page is one principal's sessions in order, bounded, with
/// current display names; an unknown principal or session is typed.
pub fn membership_pages_are_bounded_and_typed<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    let ids: Vec<String> = (0..105).map(|i| format!("s{i:03}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    sessions(&c, &refs);
    invite_digest(&c, "m1", "s000", Role::Observer, "m1-token");
    for s in &ids[1..] {
        ok(
            &c,
            AccessRequest::Grant {
                principal: "m1".into(),
                session_id: s.clone(),
                role: Role::Operator,
            },
        );
    }
    c.apply(&Request::Rename {
        session_id: "s001".into(),
        name: "Renamed".into(),
    })
    .unwrap();
    let p = c.memberships_page("m1", None, 500).unwrap();
    assert_eq!(p.rows.len(), LISTING_LIMIT);
    assert!(p.more);
    assert_eq!(p.rows[1].name, "Renamed");
    let rest = c.memberships_page("m1", Some("s099"), 500).unwrap();
    assert_eq!(rest.rows.len(), 5);
    assert!(!rest.more);
    assert_eq!(
        c.memberships_page("ghost", None, 10).unwrap_err().reason(),
        "UnknownPrincipal"
    );
    assert_eq!(
        c.signins_page("ghost", None, 10, 0).unwrap_err().reason(),
        "UnknownPrincipal"
    );
    assert_eq!(
        c.session_members_page("s999", None, 10)
            .unwrap_err()
            .reason(),
        "UnknownSession"
    );
}

/// Deleting a session from the catalogue removes its memberships.
pub fn deleting_a_session_removes_its_memberships<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    sessions(&c, &["s1", "s2"]);
    invite_digest(&c, "m1", "s1", Role::Operator, "m1-token");
    ok(
        &c,
        AccessRequest::Grant {
            principal: "m1".into(),
            session_id: "s2".into(),
            role: Role::Observer,
        },
    );
    c.apply(&Request::Delete {
        session_id: "s1".into(),
    })
    .unwrap();
    let p = c.memberships_page("m1", None, 100).unwrap();
    let got: Vec<&str> = p.rows.iter().map(|r| r.session_id.as_str()).collect();
    assert_eq!(got, ["s2"]);
    assert_eq!(
        c.authorization(&bearer("m1-token"), "s1", 50).unwrap(),
        None
    );
    // A session registered again under the old id starts with no members.
    sessions(&c, &["s1"]);
    assert!(c
        .session_members_page("s1", None, 100)
        .unwrap()
        .rows
        .is_empty());
}

/// Display names are trimmed and judged; a rename keeps the identity and
/// does not move the catalogue revision.
pub fn names_are_judged_and_renames_keep_identity<C: Access + Catalogue, F: Fn() -> C>(factory: F) {
    let c = factory();
    sessions(&c, &["s1"]);
    bootstrap(&c, "root-1");
    let t = &["root-1", "x"];
    refused(
        &c,
        AccessRequest::InviteMember {
            principal: "m1".into(),
            name: Some("a\u{200B}b".into()),
            session_id: "s1".into(),
            role: Role::Observer,
            enrollment: Enrollment::Digest(bearer("x")),
            now_ms: 2,
        },
        "Invalid",
        t,
    );
    for bad in ["   ", "a\nb", &"n".repeat(300)] {
        refused(
            &c,
            AccessRequest::Rename {
                principal: "owner".into(),
                name: Some(bad.to_owned()),
            },
            "Invalid",
            t,
        );
    }
    let rev = c.revision().unwrap();
    ok(
        &c,
        AccessRequest::Rename {
            principal: "owner".into(),
            name: Some("  Otto  ".into()),
        },
    );
    assert_eq!(
        c.owner().unwrap(),
        Some(("owner".into(), Some("Otto".into())))
    );
    ok(
        &c,
        AccessRequest::Rename {
            principal: "owner".into(),
            name: None,
        },
    );
    assert_eq!(c.owner().unwrap(), Some(("owner".into(), None)));
    assert_eq!(c.revision().unwrap(), rev);
    assert_eq!(
        who(&c, &bearer("root-1")),
        Some(("owner".into(), PrincipalKind::Owner))
    );
}

// ------------------------------------------------------------ reopen cases

const REOPEN_PRINCIPALS: [&str; 5] = ["owner", "m1", "m2", "m3", "m4"];
const REOPEN_SESSIONS: [&str; 3] = ["s1", "s2", "s3"];
const REOPEN_TOKENS: [&str; 9] = [
    "root", "root-2", "m1-token", "m2-claim", "m2-token", "m3-token", "m4-claim", "login",
    "login-2",
];

fn seen_access<C: Access + Catalogue>(c: &C) -> String {
    observe(c, &REOPEN_PRINCIPALS, &REOPEN_SESSIONS, &REOPEN_TOKENS, 50)
}

/// A history of acknowledged changes touching every table the access plane
/// keeps: an owner whose credential was rotated, a member by digest, one
/// by a claim that was bound, one revoked, one with an open claim, grants
/// and an ungrant, a rename, logins (one revoked), and last of all a grant
/// (the write a store that loses its tail would lose).
fn access_history<C: Access + Catalogue>(c: &C) {
    sessions(c, &REOPEN_SESSIONS);
    bootstrap(c, "root");
    ok(
        c,
        AccessRequest::RotateCredential {
            principal: "owner".into(),
            digest: bearer("root-2"),
            now_ms: 3,
        },
    );
    invite_digest(c, "m1", "s1", Role::Operator, "m1-token");
    invite_claim(c, "m2", "s2", "m2-claim");
    ok(c, claim_req("m2-claim", "m2-token", 10));
    invite_digest(c, "m3", "s1", Role::Observer, "m3-token");
    ok(
        c,
        AccessRequest::RevokeMember {
            principal: "m3".into(),
        },
    );
    invite_claim(c, "m4", "s3", "m4-claim");
    ok(
        c,
        AccessRequest::Rename {
            principal: "m1".into(),
            name: Some("Renamed".into()),
        },
    );
    ok(
        c,
        AccessRequest::Ungrant {
            principal: "m2".into(),
            session_id: "s2".into(),
        },
    );
    for (token, expires) in [("login", 90), ("login-2", 95)] {
        ok(
            c,
            AccessRequest::IssueLogin {
                principal: "m1".into(),
                digest: browser(token),
                now_ms: 11,
                expires_at_ms: expires,
                issued_by: None,
            },
        );
    }
    let fingerprint = c.signins_page("m1", None, 10, 12).unwrap().rows[0]
        .fingerprint
        .clone();
    ok(
        c,
        AccessRequest::RevokeLogin {
            principal: "m1".into(),
            fingerprint,
        },
    );
    ok(
        c,
        AccessRequest::Grant {
            principal: "m1".into(),
            session_id: "s3".into(),
            role: Role::Observer,
        },
    );
}

/// Everything acknowledged survives a drop and a reopen: principals,
/// credentials (a rotated one stays dead), claims bound and open, logins
/// (a revoked one stays revoked), memberships, the revision, the last
/// grant included.
pub fn acknowledged_access_survives_a_reopen<P: Place>(f: impl Fn() -> P)
where
    P::Store: Access + Catalogue,
{
    let place = f();
    let (c, _, before) = crate::open_with_history(&place, access_history, seen_access);
    assert_eq!(
        c.authorization(&bearer("m1-token"), "s3", 50).unwrap(),
        Some(Authorization::Member(Role::Observer))
    );
    drop(c);
    let c = place.open();
    assert_eq!(seen_access(&c), before, "the reopened access plane differs");
    assert_eq!(
        who(&c, &bearer("root")),
        None,
        "a rotated credential came back"
    );
    assert_eq!(
        c.authorization(&bearer("m1-token"), "s3", 50).unwrap(),
        Some(Authorization::Member(Role::Observer)),
        "the last grant was lost"
    );
    // The reopened store goes on: the open claim binds once.
    ok(&c, claim_req("m4-claim", "m4-new", 20));
    assert_eq!(who(&c, &bearer("m4-new")), member("m4"));
}

/// A refused request leaves the stored state unchanged across a reopen: a
/// second bootstrap, an invitation under a taken id, a claim of a void
/// claim, and a grant in an unknown session change nothing a later handle
/// sees.
pub fn a_refused_access_request_leaves_the_store_unchanged_across_a_reopen<P: Place>(
    f: impl Fn() -> P,
) where
    P::Store: Access + Catalogue,
{
    let place = f();
    let (c, _, before) = crate::open_with_history(&place, access_history, seen_access);
    assert!(c
        .apply_access(&AccessRequest::BootstrapOwner {
            principal: "owner-2".into(),
            name: None,
            digest: bearer("another-root"),
            now_ms: 20,
        })
        .is_err());
    assert!(c
        .apply_access(&AccessRequest::InviteMember {
            principal: "m1".into(),
            name: None,
            session_id: "s2".into(),
            role: Role::Operator,
            enrollment: Enrollment::Digest(bearer("fresh")),
            now_ms: 20,
        })
        .is_err());
    assert!(c.apply_access(&claim_req("m2-claim", "again", 20)).is_err());
    assert!(c
        .apply_access(&AccessRequest::Grant {
            principal: "m1".into(),
            session_id: "s9".into(),
            role: Role::Operator,
        })
        .is_err());
    drop(c);
    let c = place.open();
    assert_eq!(
        seen_access(&c),
        before,
        "a refusal changed the stored state"
    );
}

// ------------------------------------------------------------- the table

/// Emits `mod $name { #[test] fn <case>() … }`: one test per access
/// conformance case, each calling the case with `$factory` (evaluated once
/// per test; it must give a fresh, empty catalogue per call, of a type that
/// implements both `Catalogue` and `Access`), and one per reopen case,
/// each calling it with `$places` (`Fn() -> P`, `P: `[`crate::Place`]
/// opening such a catalogue: a fresh store per call, reopened by each
/// `open`).
#[macro_export]
macro_rules! access_suite {
    ($name:ident, $factory:expr, reopen: $places:expr $(,)?) => {
        $crate::__suite!(
            __with_access_cases,
            __with_access_reopen_cases,
            access,
            $name,
            $factory,
            $places
        );
    };
}

/// Invokes `$crate::$callback! { ($args) case, … }` with every access
/// reopen case.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_access_reopen_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            acknowledged_access_survives_a_reopen,
            a_refused_access_request_leaves_the_store_unchanged_across_a_reopen,
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __with_access_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            fresh_access_is_empty,
            bootstrap_creates_the_owner,
            bootstrap_retry_needs_the_owners_active_credential,
            enrolling_paths_refuse_the_wrong_kind,
            rotation_keeps_identity_and_tombstones_the_old,
            a_tombstone_is_never_reassigned,
            invite_creates_member_enrollment_and_membership,
            invite_with_an_existing_id_conflicts,
            a_retried_invitation_is_answered_as_the_first,
            a_refused_invitation_writes_nothing,
            member_operations_refuse_the_owner,
            rotate_member_voids_the_claim_and_revokes_everything,
            revoke_member_keeps_identity_and_grants,
            a_missing_membership_grants_nothing,
            roles_are_explicit_and_changes_move_the_revision,
            a_login_is_absent_to_bearer_lookups,
            a_claim_binds_once,
            a_claim_answers_at_most_sixteen_memberships,
            claim_refusals_in_order_write_nothing,
            a_login_claim_replays_only_for_its_kind,
            a_replay_after_revocation_is_refused,
            logins_sign_in_and_out,
            a_login_is_judged_before_it_is_written,
            resumed_stamps_at_most_once_per_window,
            the_listing_shows_credential_states_and_no_secret,
            pages_are_bounded_and_continue,
            membership_pages_are_bounded_and_typed,
            listings_are_in_byte_order_not_collation_or_insertion,
            deleting_a_session_removes_its_memberships,
            names_are_judged_and_renames_keep_identity,
        }
    };
}

/// The access case names.
pub const ACCESS_CASES: &[&str] = &crate::__with_access_cases!(__emit_names!());

/// One access case as a plain function of a factory.
pub type AccessCase<C> = fn(&dyn Fn() -> C);

/// Every case as `(name, function)`, for runners that print pass/fail per
/// case (run each under `std::panic::catch_unwind`).
pub fn access_cases<C: Access + Catalogue>() -> Vec<(&'static str, AccessCase<C>)> {
    crate::__with_access_cases!(__emit_table!(access, C))
}

/// Every reopen case, by name, in suite order.
pub const ACCESS_REOPEN_CASES: &[&str] = &crate::__with_access_reopen_cases!(__emit_names!());

/// Every reopen case as `(name, case)`; each takes a factory of places.
pub fn access_reopen_cases<P: Place>() -> Vec<(&'static str, AccessCase<P>)>
where
    P::Store: Access + Catalogue,
{
    crate::__with_access_reopen_cases!(__emit_table!(access, P))
}
