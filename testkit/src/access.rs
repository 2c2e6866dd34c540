//! Strategies over the access plane's requests, over a small universe
//! (four principals, three sessions, six tokens of each kind, four claims,
//! clocks below 40) so that streams collide on the same rows: what core's
//! property tests and the SQL shells' differentials generate.

use custos_core::catalogue::access::{
    browser_digest, claim_digest, credential_digest, AccessRequest, ClaimDigest, CredentialKind,
    Digest, Enrollment, Role,
};
use proptest::prelude::*;

/// A bearer or browser digest of one of six tokens.
pub fn arb_digest() -> impl Strategy<Value = Digest> {
    (0u8..6, any::<bool>()).prop_map(|(t, browser)| {
        let tok = format!("tok{t}");
        if browser {
            browser_digest(tok.as_bytes())
        } else {
            credential_digest(tok.as_bytes())
        }
    })
}

/// The digest of one of four claims.
pub fn arb_claim() -> impl Strategy<Value = ClaimDigest> {
    (0u8..4).prop_map(|c| claim_digest(format!("claim{c}").as_bytes()))
}

/// An enrollment: a claim expiring before 40, or a digest.
pub fn arb_enrollment() -> impl Strategy<Value = Enrollment> {
    prop_oneof![
        (arb_claim(), 0u64..40).prop_map(|(claim, expires_at_ms)| Enrollment::Claim {
            claim,
            expires_at_ms
        }),
        arb_digest().prop_map(Enrollment::Digest),
    ]
}

/// One of four principal ids (`p0`..`p3`).
pub fn arb_principal() -> impl Strategy<Value = String> {
    (0u8..4).prop_map(|p| format!("p{p}"))
}

/// One of three session ids (`s0`..`s2`).
pub fn arb_session() -> impl Strategy<Value = String> {
    (0u8..3).prop_map(|s| format!("s{s}"))
}

/// Operator or observer.
pub fn arb_role() -> impl Strategy<Value = Role> {
    prop_oneof![Just(Role::Operator), Just(Role::Observer)]
}

/// A display name: none, plain, padded, or one that trims to nothing.
pub fn arb_name() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some("Ann".to_owned())),
        Just(Some(" Bob ".to_owned())),
        Just(Some(" \u{200B}".to_owned())),
    ]
}

/// Any access request. Each of the fifteen kinds is equally likely.
pub fn arb_request() -> impl Strategy<Value = AccessRequest> {
    prop_oneof![8 => arb_member_request(), 7 => arb_login_request()]
}

/// The owner's, principals' and memberships' requests (eight kinds).
pub fn arb_member_request() -> impl Strategy<Value = AccessRequest> {
    let now = 0u64..40;
    prop_oneof![
        (arb_principal(), arb_name(), arb_digest(), now.clone()).prop_map(
            |(principal, name, digest, now_ms)| AccessRequest::BootstrapOwner {
                principal,
                name,
                digest,
                now_ms,
            }
        ),
        (arb_principal(), arb_digest(), now.clone()).prop_map(|(principal, digest, now_ms)| {
            AccessRequest::RotateCredential {
                principal,
                digest,
                now_ms,
            }
        }),
        (arb_principal(), arb_name())
            .prop_map(|(principal, name)| AccessRequest::Rename { principal, name }),
        (
            arb_principal(),
            arb_session(),
            arb_role(),
            arb_enrollment(),
            now.clone()
        )
            .prop_map(|(principal, session_id, role, enrollment, now_ms)| {
                AccessRequest::InviteMember {
                    principal,
                    name: Some("M".into()),
                    session_id,
                    role,
                    enrollment,
                    now_ms,
                }
            }),
        (arb_principal(), arb_enrollment(), now).prop_map(|(principal, enrollment, now_ms)| {
            AccessRequest::RotateMember {
                principal,
                enrollment,
                now_ms,
            }
        }),
        arb_principal().prop_map(|principal| AccessRequest::RevokeMember { principal }),
        (arb_principal(), arb_session(), arb_role()).prop_map(|(principal, session_id, role)| {
            AccessRequest::Grant {
                principal,
                session_id,
                role,
            }
        }),
        (arb_principal(), arb_session()).prop_map(|(principal, session_id)| {
            AccessRequest::Ungrant {
                principal,
                session_id,
            }
        }),
    ]
}

/// The claim and login requests (seven kinds); a login is issued by a
/// device link or not.
pub fn arb_login_request() -> impl Strategy<Value = AccessRequest> {
    let now = 0u64..40;
    prop_oneof![
        (arb_claim(), arb_digest(), arb_name(), now.clone()).prop_map(
            |(claim, digest, name, now_ms)| AccessRequest::Claim {
                claim,
                digest,
                name,
                now_ms,
            }
        ),
        (arb_claim(), arb_digest(), now.clone(), 0u64..60).prop_map(
            |(claim, digest, now_ms, expires_at_ms)| AccessRequest::ClaimLogin {
                claim,
                digest,
                name: Some("L".into()),
                now_ms,
                expires_at_ms,
            }
        ),
        (
            arb_principal(),
            arb_digest(),
            now,
            0u64..60,
            proptest::option::of(arb_digest())
        )
            .prop_map(|(principal, digest, now_ms, expires_at_ms, by)| {
                AccessRequest::IssueLogin {
                    principal,
                    digest,
                    now_ms,
                    expires_at_ms,
                    issued_by: by.map(|d| d.fingerprint()),
                }
            }),
        (arb_principal(), arb_digest()).prop_map(|(principal, d)| AccessRequest::RevokeLogin {
            principal,
            fingerprint: d.fingerprint(),
        }),
        arb_principal().prop_map(|principal| AccessRequest::RevokeLogins { principal }),
        Just(AccessRequest::RevokeAllLogins),
        (arb_digest(), 0u64..200_000)
            .prop_map(|(digest, now_ms)| AccessRequest::Resumed { digest, now_ms }),
    ]
}

/// An invitation by claim followed by its redemption twice (as a bearer or
/// a login; the second is a replay), so streams bind claims often enough
/// to exercise the claim rows.
pub fn arb_claim_flow() -> impl Strategy<Value = Vec<AccessRequest>> {
    (
        arb_principal(),
        arb_session(),
        arb_claim(),
        arb_digest(),
        0u64..10,
    )
        .prop_map(|(principal, session_id, claim, digest, now_ms)| {
            let redeem = match digest.kind() {
                CredentialKind::Bearer => AccessRequest::Claim {
                    claim,
                    digest,
                    name: None,
                    now_ms: now_ms + 1,
                },
                CredentialKind::Browser => AccessRequest::ClaimLogin {
                    claim,
                    digest,
                    name: None,
                    now_ms: now_ms + 1,
                    expires_at_ms: now_ms + 30,
                },
            };
            vec![
                AccessRequest::InviteMember {
                    principal,
                    name: None,
                    session_id,
                    role: Role::Operator,
                    enrollment: Enrollment::Claim {
                        claim,
                        expires_at_ms: now_ms + 20,
                    },
                    now_ms,
                },
                redeem.clone(),
                redeem,
            ]
        })
}

/// Streams of up to 29 steps, each a random request or (one in four) a
/// claim flow.
pub fn arb_stream() -> impl Strategy<Value = Vec<AccessRequest>> {
    proptest::collection::vec(
        prop_oneof![
            3 => arb_request().prop_map(|r| vec![r]),
            1 => arb_claim_flow(),
        ],
        1..30,
    )
    .prop_map(|v| v.into_iter().flatten().collect())
}
