//! The access plane's decision: claims and their replays, members holding
//! credentials, digests' Debug, and random streams (from the testkit's
//! strategies) through the whole state and through a footprint's partial
//! state, whose effects applied to the loaded rows give the same next state.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use custos_core::catalogue::access::*;
use custos_core::catalogue::{self, CatalogueState, Creation};
use custos_testkit::access::{arb_request, arb_stream};

fn with_sessions(ids: &[&str]) -> CatalogueState {
    let mut s = CatalogueState::default();
    for (i, id) in ids.iter().enumerate() {
        let req = catalogue::Request::Reserve {
            session_id: (*id).into(),
            creation: Creation::local(&format!("k{i}"), "name", "/w"),
            now: 1,
        };
        s = catalogue::decide(&s, &req).unwrap().next;
    }
    s
}

fn run(s: &mut CatalogueState, req: AccessRequest) -> Result<AccessOutcome, AccessError> {
    let d = decide(s, &req)?;
    *s = d.next;
    Ok(d.outcome)
}

/// Session `s1` with observer `m1` invited at 1 by claim `c1`, open until 100.
fn invited_by_claim() -> CatalogueState {
    let mut s = with_sessions(&["s1"]);
    let invite = AccessRequest::InviteMember {
        principal: "m1".into(),
        name: None,
        session_id: "s1".into(),
        role: Role::Observer,
        enrollment: Enrollment::Claim {
            claim: claim_digest(b"c1"),
            expires_at_ms: 100,
        },
        now_ms: 1,
    };
    run(&mut s, invite).unwrap();
    s
}

fn bearer(t: &str) -> Digest {
    credential_digest(t.as_bytes())
}

#[test]
fn a_refused_claim_name_leaves_the_claim_open_and_a_replay_never_renames() {
    let mut s = invited_by_claim();
    let claim = |name: &str| AccessRequest::Claim {
        claim: claim_digest(b"c1"),
        digest: bearer("t1"),
        name: Some(name.into()),
        now_ms: 5,
    };
    let e = run(&mut s, claim("  \u{200B} ")).unwrap_err();
    assert_eq!(e.reason(), "InvalidClaimName");
    assert!(s.access.claim_known(&claim_digest(b"c1")));
    let ok = run(&mut s, claim(" Ann ")).unwrap();
    assert!(matches!(ok, AccessOutcome::Claimed { bound: true, .. }));
    assert_eq!(s.access.principals["m1"].name.as_deref(), Some("Ann"));
    let again = run(&mut s, claim("Bob")).unwrap();
    assert!(matches!(again, AccessOutcome::Claimed { bound: false, .. }));
    assert_eq!(s.access.principals["m1"].name.as_deref(), Some("Ann"));
}

#[test]
fn a_member_holding_a_credential_binds_no_claim() {
    // Unreachable through requests (a login is `ClaimPending` while a claim
    // is open), so the state is built by hand: the claim's rule 6 still
    // refuses, before any write.
    let mut s = invited_by_claim();
    let e = run(
        &mut s,
        AccessRequest::IssueLogin {
            principal: "m1".into(),
            digest: browser_digest(b"w"),
            now_ms: 2,
            expires_at_ms: 50,
            issued_by: None,
        },
    )
    .unwrap_err();
    assert_eq!(e.reason(), "ClaimPending");
    s.access.credentials.insert(
        *browser_digest(b"w").sha(),
        CredentialRow {
            principal: "m1".into(),
            kind: CredentialKind::Browser,
            state: CredentialState::Active,
            issued_at_ms: 2,
            claimed_at_ms: None,
            last_resumed_ms: None,
            expires_at_ms: None,
            issued_by: None,
        },
    );
    let before = s.clone();
    let e = run(
        &mut s,
        AccessRequest::Claim {
            claim: claim_digest(b"c1"),
            digest: bearer("t1"),
            name: None,
            now_ms: 5,
        },
    )
    .unwrap_err();
    assert_eq!(
        e,
        AccessError::Claim(ClaimRefusal::ConflictingClaim {
            rule: "member-holds-credential"
        })
    );
    assert_eq!(s, before);
}

#[test]
fn digest_debug_shows_only_a_fingerprint() {
    let d = bearer("secret-token");
    let shown = format!("{d:?} {:?}", claim_digest(b"secret-token"));
    assert!(!shown.contains(&d.sha().hex()));
    assert!(shown.contains(&d.fingerprint()));
    assert_eq!(Sha256::parse_hex(&d.sha().hex()), Some(*d.sha()));
    assert_eq!(Sha256::parse_hex("zz"), None);
    assert_eq!(Sha256::parse_hex(&"A".repeat(64)), None);
}

// ---- footprint: a partial state decides as the whole state does ----

#[test]
fn the_streams_bind_claims_and_answer_replays() {
    // A coverage guard: the generator must reach the claim rows, or the
    // properties below would hold vacuously for them.
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut bound, mut replays) = (0, 0);
    for _ in 0..256 {
        let reqs = arb_stream().new_tree(&mut runner).unwrap().current();
        let mut s = with_sessions(&["s0", "s1"]);
        for r in reqs {
            match run(&mut s, r) {
                Ok(AccessOutcome::Claimed { bound: true, .. }) => bound += 1,
                Ok(AccessOutcome::Claimed { bound: false, .. }) => replays += 1,
                _ => {}
            }
        }
    }
    println!("256 streams: {bound} claims bound, {replays} replays answered");
    assert!(
        bound >= 50 && replays >= 50,
        "{bound} bound, {replays} replays"
    );
}

/// Writes back the rows that differ between `before` and `after` (a
/// partial state) onto `full`, as a shell does.
fn merge<K: Ord + Clone, V: Clone + PartialEq>(
    full: &mut BTreeMap<K, V>,
    before: &BTreeMap<K, V>,
    after: &BTreeMap<K, V>,
) {
    for k in before.keys() {
        if !after.contains_key(k) {
            full.remove(k);
        }
    }
    for (k, v) in after {
        if before.get(k) != Some(v) {
            full.insert(k.clone(), v.clone());
        }
    }
}

/// The deadlines a request carries, in order.
fn deadlines(r: &AccessRequest) -> Vec<u64> {
    match r {
        AccessRequest::InviteMember {
            enrollment: Enrollment::Claim { expires_at_ms, .. },
            ..
        }
        | AccessRequest::RotateMember {
            enrollment: Enrollment::Claim { expires_at_ms, .. },
            ..
        }
        | AccessRequest::ClaimLogin { expires_at_ms, .. }
        | AccessRequest::IssueLogin { expires_at_ms, .. } => vec![*expires_at_ms],
        _ => Vec::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_rebased_request_keeps_every_deadline_at_its_distance(
        req in arb_request(),
        now in 0u64..(1 << 50),
    ) {
        // Judged at its own time, a request is itself.
        if let Some(own) = req.now_ms() {
            prop_assert_eq!(&req.rebased(own), &req);
        }
        let moved = req.rebased(now);
        prop_assert_eq!(moved.now_ms(), req.now_ms().map(|_| now));
        match req.now_ms() {
            None => prop_assert_eq!(&moved, &req),
            Some(own) => {
                let before = deadlines(&req);
                let after = deadlines(&moved);
                prop_assert_eq!(before.len(), after.len());
                for (b, a) in before.iter().zip(&after) {
                    let want = i128::from(now) + i128::from(*b) - i128::from(own);
                    let want = u64::try_from(want.max(0)).unwrap_or(u64::MAX);
                    prop_assert_eq!(*a, want);
                }
                // Nothing but the times moved.
                prop_assert_eq!(&moved.rebased(own).now_ms(), &Some(own));
            }
        }
    }

    #[test]
    fn a_partial_state_decides_as_the_whole_state(reqs in arb_stream()) {
        let mut full = with_sessions(&["s0", "s1"]);
        for req in &reqs {
            let fp = footprint(req);
            let part = fp.partial(&full);
            let whole = decide(&full, req);
            let partly = decide(&part, req);
            match (&whole, &partly) {
                (Ok(w), Ok(p)) => {
                    prop_assert_eq!(&w.outcome, &p.outcome, "{:?}", req);
                    let mut merged = full.clone();
                    let (b, a) = (&part.access, &p.next.access);
                    merge(&mut merged.access.principals, &b.principals, &a.principals);
                    merge(&mut merged.access.credentials, &b.credentials, &a.credentials);
                    merge(&mut merged.access.claims, &b.claims, &a.claims);
                    merge(&mut merged.access.memberships, &b.memberships, &a.memberships);
                    merged.revision = p.next.revision;
                    prop_assert_eq!(&merged, &w.next, "{:?}", req);
                    // The partial decision's effects, applied to the whole
                    // stored state (as a SQL backend applies them to its
                    // tables), reach the whole decision's state; and they
                    // turn the loaded rows into the partial `next`.
                    let mut applied = full.clone();
                    let mut own = part.clone();
                    for e in &p.effects {
                        effect::apply(&mut applied, e);
                        effect::apply(&mut own, e);
                    }
                    prop_assert_eq!(&applied, &w.next, "{:?}", req);
                    prop_assert_eq!(&own, &p.next, "{:?}", req);
                    full = w.next.clone();
                    // The state (credentials, claims, memberships: maps
                    // keyed by digests and pairs) has a written form.
                    let text = serde_json::to_string(&full).unwrap();
                    prop_assert_eq!(&serde_json::from_str::<CatalogueState>(&text).unwrap(), &full);
                    let bytes = postcard::to_allocvec(&full).unwrap();
                    prop_assert_eq!(&postcard::from_bytes::<CatalogueState>(&bytes).unwrap(), &full);
                }
                (Err(w), Err(p)) => prop_assert_eq!(w, p, "{:?}", req),
                _ => prop_assert!(false, "{:?}: whole {:?} vs partial {:?}", req, whole, partly),
            }
            // The invariants hold after every request.
            let owners = full.access.principals.values().filter(|p| p.kind == PrincipalKind::Owner).count();
            prop_assert!(owners <= 1);
            for p in full.access.principals.keys() {
                let open = full.access.claims.values().filter(|c| c.principal == *p && c.state == ClaimState::Open).count();
                prop_assert!(open <= 1, "{} open claims for {}", open, p);
                let active = full.access.credentials.values().any(|c| c.principal == *p && c.state == CredentialState::Active);
                prop_assert!(open == 0 || !active, "{} has an open claim and a credential", p);
            }
            for (_, s) in full.access.memberships.keys() {
                prop_assert!(full.sessions.contains_key(s));
            }
        }
    }

    #[test]
    fn a_tombstone_is_never_reactivated(reqs in arb_stream()) {
        let mut s = with_sessions(&["s0", "s1"]);
        let mut revoked: BTreeSet<Sha256> = BTreeSet::new();
        for req in &reqs {
            let _ = run(&mut s, req.clone());
            for (sha, c) in &s.access.credentials {
                if revoked.contains(sha) {
                    prop_assert_eq!(c.state, CredentialState::Revoked);
                }
                if c.state == CredentialState::Revoked {
                    revoked.insert(*sha);
                }
            }
            for sha in &revoked {
                prop_assert!(s.access.credentials.contains_key(sha), "tombstone removed");
            }
        }
    }
}
