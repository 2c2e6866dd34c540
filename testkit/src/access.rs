//! Strategies over the access plane's requests.

use custos_core::catalogue::access::{
    browser_digest, claim_digest, credential_digest, AccessRequest, ClaimDigest, Digest,
    Enrollment, Role,
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

/// Any access request over a small universe (four principals, three
/// sessions, six tokens, four claims, clocks below 40), so that streams
/// collide on the same rows. Each of the fifteen kinds is equally likely.
pub fn arb_request() -> impl Strategy<Value = AccessRequest> {
    prop_oneof![8 => arb_member_request(), 7 => arb_login_request()]
}

/// The owner's, principals' and memberships' requests (eight kinds).
pub fn arb_member_request() -> impl Strategy<Value = AccessRequest> {
    let now = 0u64..40;
    prop_oneof![
        (arb_principal(), arb_digest(), now.clone()).prop_map(|(principal, digest, now_ms)| {
            AccessRequest::BootstrapOwner {
                principal,
                name: Some("Owner".into()),
                digest,
                now_ms,
            }
        }),
        (arb_principal(), arb_digest(), now.clone()).prop_map(|(principal, digest, now_ms)| {
            AccessRequest::RotateCredential {
                principal,
                digest,
                now_ms,
            }
        }),
        (arb_principal(), prop::option::of("[A-Z][a-z]{0,3}"))
            .prop_map(|(principal, name)| { AccessRequest::Rename { principal, name } }),
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
        (arb_principal(), arb_enrollment(), now.clone()).prop_map(
            |(principal, enrollment, now_ms)| AccessRequest::RotateMember {
                principal,
                enrollment,
                now_ms
            }
        ),
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

/// The claim and login requests (seven kinds).
pub fn arb_login_request() -> impl Strategy<Value = AccessRequest> {
    let now = 0u64..40;
    prop_oneof![
        (arb_claim(), arb_digest(), now.clone()).prop_map(|(claim, digest, now_ms)| {
            AccessRequest::Claim {
                claim,
                digest,
                name: None,
                now_ms,
            }
        }),
        (arb_claim(), arb_digest(), now.clone(), 0u64..60).prop_map(
            |(claim, digest, now_ms, expires_at_ms)| AccessRequest::ClaimLogin {
                claim,
                digest,
                name: Some("L".into()),
                now_ms,
                expires_at_ms,
            }
        ),
        (arb_principal(), arb_digest(), now.clone(), 0u64..60).prop_map(
            |(principal, digest, now_ms, expires_at_ms)| AccessRequest::IssueLogin {
                principal,
                digest,
                now_ms,
                expires_at_ms,
                issued_by: None,
            }
        ),
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
