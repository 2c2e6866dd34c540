//! The access suite has teeth: realistic broken backends (wrappers over the
//! memory backend, each with one bug a backend author might write) must
//! each fail at least one case, and the honest wrapper must pass them all;
//! the table of which cases caught which backend is printed.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test-only mutant backends

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use custos_core::catalogue::access::{
    self, Access, AccessError, AccessOutcome, AccessRequest, Authority, Authorization, ClaimDigest,
    ClaimRefusal, Digest, Enrollment, ListingPage, MembershipPage, PrincipalKind,
    SessionMemberPage, SigninPage, LISTING_LIMIT,
};
use custos_core::catalogue::{Catalogue, CatalogueError, MemoryCatalogue, Outcome, Request};
use custos_teeth::{
    assert_reopen_caught, failing_cases, reopen_failing_cases, Disk, Verdicts,
    HONEST_WITHOUT_RECOVERY, LOSSES,
};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Defect {
    None,
    /// `authenticate` looks the hash up without the kind.
    LookupIgnoresKind,
    /// `authenticate` forgets a login's expiry.
    ExpiredLoginsAuthenticate,
    /// A page returns up to the caller's limit (two pages glued together).
    LimitNotCapped,
    /// An invitation writes the principal before checking the enrollment.
    InvitationHalfApplies,
    /// Revoking a member also drops its memberships ("cleanup").
    RevokeDropsGrants,
    /// The owner is authorized in any session id, held or not.
    OwnerAuthorizedEverywhere,
    /// A claim checks digest reuse before expiry.
    ClaimChecksExpiryLast,
    /// Rotation inserts the new credential and leaves the old one active.
    RotationKeepsTheOld,
    /// `claim_known` answers true for a void claim.
    VoidClaimIsKnown,
    /// A bootstrap retry with any token answers the owner.
    BootstrapTrustsAnyRetry,
    /// `authenticate` answers from a cache of earlier successes that a
    /// revocation, rotation or sign-out never invalidates.
    AuthenticationCacheNeverInvalidated,
    /// A membership page continues at `session_id >= after` (an inclusive
    /// cursor): the cursor row is repeated.
    MembershipCursorInclusive,
    /// The principals listing is ordered (and continued) in a
    /// case-insensitive collation, not byte order.
    PrincipalsInCollationOrder,
    /// An invitation under an existing member id is taken for a retry
    /// whatever it carries: a second inviter's token is answered `Done`.
    InviteRetryByIdAlone,
}

/// An acknowledged write, as the durable wrapper's disk keeps it.
#[derive(Clone)]
enum Mutation {
    Catalogue(Request),
    Access(AccessRequest),
}

struct Broken {
    defect: Defect,
    inner: MemoryCatalogue,
    /// The disk of the durable wrapper (the reopen cases' teeth).
    disk: Option<Arc<Disk<Mutation>>>,
    owner_digests: Mutex<Vec<Digest>>,
    claims_seen: Mutex<Vec<ClaimDigest>>,
    authenticated: Mutex<HashMap<Digest, Authority>>,
}

impl Broken {
    fn new(defect: Defect) -> Self {
        Broken {
            defect,
            inner: MemoryCatalogue::new(),
            disk: None,
            owner_digests: Mutex::new(Vec::new()),
            claims_seen: Mutex::new(Vec::new()),
            authenticated: Mutex::new(HashMap::new()),
        }
    }

    /// The honest wrapper over a [`Disk`]: an open replays it, as its mode
    /// allows, into a fresh memory catalogue.
    fn open(disk: &Arc<Disk<Mutation>>) -> Self {
        let mut b = Broken::new(Defect::None);
        for m in disk.replay() {
            let _ = match m {
                Mutation::Catalogue(r) => b.inner.apply(&r).map(drop).map_err(drop),
                Mutation::Access(r) => b.inner.apply_access(&r).map(drop).map_err(drop),
            };
        }
        b.disk = Some(Arc::clone(disk));
        b
    }

    /// The session id ordered just before `after` in `principal`'s
    /// memberships (`None` when `after` is first).
    fn before(&self, principal: &str, after: &str) -> Result<Option<String>, AccessError> {
        let mut prev = None;
        let mut cursor: Option<String> = None;
        loop {
            let p = self
                .inner
                .memberships_page(principal, cursor.as_deref(), LISTING_LIMIT)?;
            for r in &p.rows {
                if r.session_id.as_str() >= after {
                    return Ok(prev);
                }
                prev = Some(r.session_id.clone());
            }
            if !p.more {
                return Ok(prev);
            }
            cursor = p.rows.last().map(|r| r.session_id.clone());
        }
    }

    fn remember(&self, req: &AccessRequest) {
        match req {
            AccessRequest::BootstrapOwner { digest, .. }
            | AccessRequest::RotateCredential { digest, .. } => {
                self.owner_digests.lock().unwrap().push(*digest);
            }
            AccessRequest::InviteMember {
                enrollment: Enrollment::Claim { claim, .. },
                ..
            }
            | AccessRequest::RotateMember {
                enrollment: Enrollment::Claim { claim, .. },
                ..
            } => self.claims_seen.lock().unwrap().push(*claim),
            _ => {}
        }
    }
}

impl Broken {
    fn decide_access(&self, req: &AccessRequest) -> Result<AccessOutcome, AccessError> {
        match (self.defect, req) {
            (Defect::ClaimChecksExpiryLast, AccessRequest::Claim { digest, now_ms, .. })
                if self.inner.authenticate(digest, *now_ms)?.is_some() =>
            {
                return Err(AccessError::Claim(ClaimRefusal::ConflictingClaim {
                    rule: "digest-in-use",
                }));
            }
            (Defect::BootstrapTrustsAnyRetry, AccessRequest::BootstrapOwner { .. }) => {
                if let Some((owner, _)) = self.inner.owner()? {
                    return Ok(AccessOutcome::Owner {
                        principal: owner,
                        created: false,
                    });
                }
            }
            (Defect::InviteRetryByIdAlone, AccessRequest::InviteMember { principal, .. }) => {
                let exists = self
                    .inner
                    .principals_page(None, 100, 0)?
                    .rows
                    .iter()
                    .any(|r| r.principal == *principal);
                if exists {
                    return Ok(AccessOutcome::Done { changed: false });
                }
            }
            (Defect::RevokeDropsGrants, AccessRequest::RevokeMember { principal }) => {
                let page = self.inner.memberships_page(principal, None, 100);
                let out = self.inner.apply_access(req)?;
                for m in page.map(|p| p.rows).unwrap_or_default() {
                    self.inner.apply_access(&AccessRequest::Ungrant {
                        principal: principal.clone(),
                        session_id: m.session_id,
                    })?;
                }
                return Ok(out);
            }
            _ => {}
        }
        let out = self.inner.apply_access(req);
        if out.is_ok() {
            self.remember(req);
        }
        if let (
            Defect::InvitationHalfApplies,
            Err(_),
            AccessRequest::InviteMember {
                principal,
                session_id,
                role,
                now_ms,
                ..
            },
        ) = (self.defect, &out, req)
        {
            // The principal and membership rows were written first.
            let _ = self.inner.apply_access(&AccessRequest::InviteMember {
                principal: principal.clone(),
                name: None,
                session_id: session_id.clone(),
                role: *role,
                enrollment: Enrollment::Claim {
                    claim: access::claim_digest(b"half-applied"),
                    expires_at_ms: now_ms + 1_000,
                },
                now_ms: *now_ms,
            });
        }
        out
    }
}

impl Access for Broken {
    fn apply_access(&self, req: &AccessRequest) -> Result<AccessOutcome, AccessError> {
        let o = self.decide_access(req)?;
        if let Some(disk) = &self.disk {
            disk.record(Mutation::Access(req.clone()));
        }
        Ok(o)
    }
    fn owner(&self) -> Result<Option<(String, Option<String>)>, AccessError> {
        self.inner.owner()
    }
    fn authenticate(&self, d: &Digest, now_ms: u64) -> Result<Option<Authority>, AccessError> {
        match self.defect {
            Defect::LookupIgnoresKind => {
                let other = match d.kind() {
                    access::CredentialKind::Bearer => Digest::browser_from_sha256(*d.sha().bytes()),
                    access::CredentialKind::Browser => Digest::bearer_from_sha256(*d.sha().bytes()),
                };
                Ok(self
                    .inner
                    .authenticate(d, now_ms)?
                    .or(self.inner.authenticate(&other, now_ms)?))
            }
            Defect::ExpiredLoginsAuthenticate => self.inner.authenticate(d, 0),
            Defect::AuthenticationCacheNeverInvalidated => {
                let mut cache = self.authenticated.lock().unwrap();
                if let Some(a) = cache.get(d) {
                    return Ok(Some(a.clone()));
                }
                let found = self.inner.authenticate(d, now_ms)?;
                if let Some(a) = &found {
                    cache.insert(*d, a.clone());
                }
                Ok(found)
            }
            Defect::RotationKeepsTheOld => {
                let found = self.inner.authenticate(d, now_ms)?;
                if found.is_none() && self.owner_digests.lock().unwrap().contains(d) {
                    if let Some((principal, _)) = self.inner.owner()? {
                        return Ok(Some(Authority {
                            principal,
                            kind: PrincipalKind::Owner,
                            credential: d.kind(),
                        }));
                    }
                }
                Ok(found)
            }
            _ => self.inner.authenticate(d, now_ms),
        }
    }
    fn authorization(
        &self,
        d: &Digest,
        session_id: &str,
        now_ms: u64,
    ) -> Result<Option<Authorization>, AccessError> {
        if self.defect == Defect::OwnerAuthorizedEverywhere {
            if let Some(a) = self.inner.authenticate(d, now_ms)? {
                if a.kind == PrincipalKind::Owner {
                    return Ok(Some(Authorization::Owner));
                }
            }
        }
        self.inner.authorization(d, session_id, now_ms)
    }
    fn claim_known(&self, claim: &ClaimDigest) -> Result<bool, AccessError> {
        if self.defect == Defect::VoidClaimIsKnown
            && self.claims_seen.lock().unwrap().contains(claim)
        {
            return Ok(true);
        }
        self.inner.claim_known(claim)
    }
    fn principals_page(
        &self,
        after: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Result<ListingPage, AccessError> {
        if self.defect == Defect::PrincipalsInCollationOrder {
            let mut all = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let p = self
                    .inner
                    .principals_page(cursor.as_deref(), LISTING_LIMIT, now_ms)?;
                cursor = p.rows.last().map(|r| r.principal.clone());
                all.extend(p.rows);
                if !p.more {
                    break;
                }
            }
            all.sort_by_key(|r| r.principal.to_lowercase());
            let start = after
                .and_then(|a| all.iter().position(|r| r.principal == a))
                .map_or(0, |i| i + 1);
            let rest = &all[start..];
            let take = limit.min(LISTING_LIMIT);
            return Ok(ListingPage {
                rows: rest.iter().take(take).cloned().collect(),
                more: rest.len() > take,
            });
        }
        let mut p = self.inner.principals_page(after, limit, now_ms)?;
        if self.defect == Defect::LimitNotCapped && p.more && limit > p.rows.len() {
            let last = p.rows.last().map(|r| r.principal.clone());
            let q = self.inner.principals_page(last.as_deref(), limit, now_ms)?;
            p.rows.extend(q.rows);
            p.more = q.more;
        }
        Ok(p)
    }
    fn memberships_page(
        &self,
        principal: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<MembershipPage, AccessError> {
        match (self.defect, after) {
            (Defect::MembershipCursorInclusive, Some(a)) => {
                let prev = self.before(principal, a)?;
                self.inner
                    .memberships_page(principal, prev.as_deref(), limit)
            }
            _ => self.inner.memberships_page(principal, after, limit),
        }
    }
    fn session_members_page(
        &self,
        session_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<SessionMemberPage, AccessError> {
        self.inner.session_members_page(session_id, after, limit)
    }
    fn signins_page(
        &self,
        principal: &str,
        after: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Result<SigninPage, AccessError> {
        self.inner.signins_page(principal, after, limit, now_ms)
    }
}

impl Catalogue for Broken {
    fn apply(&self, req: &Request) -> Result<Outcome, CatalogueError> {
        let o = self.inner.apply(req)?;
        if let Some(disk) = &self.disk {
            disk.record(Mutation::Catalogue(req.clone()));
        }
        Ok(o)
    }
    custos_teeth::forward_catalogue_reads!(inner);
}

#[test]
fn every_broken_access_backend_fails_a_case() {
    let cases = custos_conformance::access::access_cases::<Broken>();
    let honest = failing_cases(&cases, &|| Broken::new(Defect::None));
    assert!(honest.is_empty(), "the honest wrapper fails {honest:?}");
    let defects = [
        Defect::LookupIgnoresKind,
        Defect::ExpiredLoginsAuthenticate,
        Defect::LimitNotCapped,
        Defect::InvitationHalfApplies,
        Defect::RevokeDropsGrants,
        Defect::OwnerAuthorizedEverywhere,
        Defect::ClaimChecksExpiryLast,
        Defect::RotationKeepsTheOld,
        Defect::VoidClaimIsKnown,
        Defect::BootstrapTrustsAnyRetry,
        Defect::AuthenticationCacheNeverInvalidated,
        Defect::MembershipCursorInclusive,
        Defect::PrincipalsInCollationOrder,
        Defect::InviteRetryByIdAlone,
    ];
    let failures = |d| failing_cases(&cases, &move || Broken::new(d));
    Verdicts::of("access", defects, failures).assert_all_caught(8);
}

#[test]
fn every_access_plane_that_loses_durability_fails_a_reopen_case() {
    // The access plane has no open-time recovery to skip.
    let cases = custos_conformance::access::access_reopen_cases();
    assert_reopen_caught("access reopen", HONEST_WITHOUT_RECOVERY, LOSSES, |mode| {
        reopen_failing_cases(&cases, mode, Broken::open)
    });
}
