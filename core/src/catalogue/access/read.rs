//! The access plane's reads: authentication, authorization and the owner's
//! bounded listings. Each is a pure function of the (possibly partial)
//! catalogue state; none returns a digest, a claim or a token — only
//! fingerprints.
//!
//! A shell answering a page loads at most [`page_window`] rows after the
//! cursor (the limit plus one, so the page knows whether another exists)
//! and the rows those name, then calls the function here.

use serde::{Deserialize, Serialize};

use super::{
    AccessError, AccessState, ClaimDigest, ClaimState, CredentialKind, CredentialRow, Digest,
    PrincipalKind, Role, LISTING_LIMIT,
};
use crate::catalogue::CatalogueState;

/// How many rows a shell fetches for a page of `limit`: the capped limit
/// plus one.
pub fn page_window(limit: usize) -> usize {
    limit.min(LISTING_LIMIT) + 1
}

/// Who a credential authenticates.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Authority {
    /// The principal.
    pub principal: String,
    /// Owner or member.
    pub kind: PrincipalKind,
    /// The kind of the credential that authenticated.
    pub credential: CredentialKind,
}

/// The authentication rule over the only two rows it reads: the credential
/// stored under `digest`'s hash (if any) and the principal it names (if
/// any). A backend's probe that loads just those rows calls this instead of
/// building an [`AccessState`]; [`AccessState::authenticate`] calls it too.
/// The credential must be stored under this very hash (compared in
/// constant time) and of this kind, active and (a login) unexpired; the
/// principal must be the one it names.
pub fn authenticate_rows(
    digest: &Digest,
    credential: Option<(&super::Sha256, &CredentialRow)>,
    principal: Option<(&str, &super::PrincipalRow)>,
    now_ms: u64,
) -> Option<Authority> {
    let (sha, c) = credential?;
    if !sha.ct_eq(digest.sha()) || c.kind != digest.kind() || !c.live(now_ms) {
        return None;
    }
    let (id, p) = principal?;
    if id != c.principal {
        return None;
    }
    Some(Authority {
        principal: c.principal.clone(),
        kind: p.kind,
        credential: c.kind,
    })
}

/// What a principal may do in one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Authorization {
    /// The owner (of a session the catalogue holds).
    Owner,
    /// A member with this role there.
    Member(Role),
}

/// A principal's credential state, as the owner's listing shows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CredentialSummary {
    /// An active credential: its fingerprint and, when a claim bound it,
    /// when.
    Active {
        /// The first 16 hex digits of its digest.
        fingerprint: String,
        /// When a claim bound it.
        claimed_at_ms: Option<u64>,
    },
    /// An open claim, with its remaining lifetime.
    OpenClaim {
        /// Milliseconds until it expires.
        remaining_ms: u64,
    },
    /// A claim that expired unredeemed.
    ExpiredClaim,
    /// Nothing (revoked, or never enrolled).
    Nothing,
}

/// One principal in the owner's listing.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Listing {
    /// The id.
    pub principal: String,
    /// Owner or member.
    pub kind: PrincipalKind,
    /// The current display name.
    pub name: Option<String>,
    /// Its credential state.
    pub credential: CredentialSummary,
    /// How many live browser logins it holds.
    pub logins: u32,
}

/// A page of principals in id order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ListingPage {
    /// The rows.
    pub rows: Vec<Listing>,
    /// Whether another page exists.
    pub more: bool,
}

/// One membership of a principal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MembershipRow {
    /// The session.
    pub session_id: String,
    /// The session's current display name.
    pub name: String,
    /// The role there.
    pub role: Role,
}

/// A page of one principal's memberships in session order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MembershipPage {
    /// The rows.
    pub rows: Vec<MembershipRow>,
    /// Whether another page exists.
    pub more: bool,
}

/// One member of a session.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SessionMember {
    /// The member.
    pub principal: String,
    /// Its display name.
    pub name: Option<String>,
    /// Its role in the session.
    pub role: Role,
}

/// A page of one session's members in principal order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SessionMemberPage {
    /// The rows.
    pub rows: Vec<SessionMember>,
    /// Whether another page exists.
    pub more: bool,
}

/// One live browser login.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Signin {
    /// Its fingerprint.
    pub fingerprint: String,
    /// When it was minted.
    pub issued_at_ms: u64,
    /// When it expires.
    pub expires_at_ms: Option<u64>,
    /// Its last resume stamp.
    pub last_resumed_ms: Option<u64>,
    /// A device link's login: the issuing login's fingerprint.
    pub issued_by: Option<String>,
}

/// A page of a principal's live logins in fingerprint order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SigninPage {
    /// The rows.
    pub rows: Vec<Signin>,
    /// Whether another page exists.
    pub more: bool,
}

fn page<T>(mut it: impl Iterator<Item = T>, limit: usize) -> (Vec<T>, bool) {
    let rows: Vec<T> = it.by_ref().take(limit.min(LISTING_LIMIT)).collect();
    let more = it.next().is_some();
    (rows, more)
}

impl AccessState {
    /// The owner's id and display name.
    pub fn owner(&self) -> Option<(String, Option<String>)> {
        self.principals
            .iter()
            .find(|(_, p)| p.kind == PrincipalKind::Owner)
            .map(|(id, p)| (id.clone(), p.name.clone()))
    }

    /// Who `digest` authenticates at `now_ms`: the row with this hash **and
    /// this kind**, active and (a login) unexpired. Never reads claims.
    pub fn authenticate(&self, digest: &Digest, now_ms: u64) -> Option<Authority> {
        let credential = self.credentials.get_key_value(digest.sha());
        let principal = credential
            .and_then(|(_, c)| self.principals.get_key_value(&c.principal))
            .map(|(id, p)| (id.as_str(), p));
        authenticate_rows(digest, credential, principal, now_ms)
    }

    /// Whether a claim exists and is not void (the claim upgrade's filter).
    pub fn claim_known(&self, claim: &ClaimDigest) -> bool {
        self.claims
            .get(claim)
            .is_some_and(|c| c.state != ClaimState::Void)
    }

    /// The principal's active credential as listed: its active bearer, or a
    /// live login a claim bound (both fingerprints; the bearer first).
    fn active_credential(&self, principal: &str, now_ms: u64) -> Option<(String, &CredentialRow)> {
        let mine = || {
            self.credentials
                .iter()
                .filter(move |(_, c)| c.principal == principal && c.live(now_ms))
        };
        mine()
            .find(|(_, c)| c.kind == CredentialKind::Bearer)
            .or_else(|| {
                mine().find(|(_, c)| c.kind == CredentialKind::Browser && c.claimed_at_ms.is_some())
            })
            .map(|(sha, c)| (sha.fingerprint(), c))
    }

    fn summary(&self, principal: &str, now_ms: u64) -> CredentialSummary {
        if let Some((fingerprint, c)) = self.active_credential(principal, now_ms) {
            return CredentialSummary::Active {
                fingerprint,
                claimed_at_ms: c.claimed_at_ms,
            };
        }
        let open = self
            .claims
            .values()
            .find(|c| c.principal == principal && c.state == ClaimState::Open);
        match open {
            Some(c) if now_ms < c.expires_at_ms => CredentialSummary::OpenClaim {
                remaining_ms: c.expires_at_ms - now_ms,
            },
            Some(_) => CredentialSummary::ExpiredClaim,
            None => CredentialSummary::Nothing,
        }
    }

    fn logins(&self, principal: &str, now_ms: u64) -> u32 {
        let n = self
            .credentials
            .values()
            .filter(|c| {
                c.principal == principal && c.kind == CredentialKind::Browser && c.live(now_ms)
            })
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Principals after `after`, in id order, at most `limit` (capped at
    /// [`LISTING_LIMIT`]), each with one credential state and its login
    /// count.
    pub fn principals_page(&self, after: Option<&str>, limit: usize, now_ms: u64) -> ListingPage {
        let it = self
            .principals
            .iter()
            .filter(|(id, _)| after.is_none_or(|a| id.as_str() > a))
            .map(|(id, p)| Listing {
                principal: id.clone(),
                kind: p.kind,
                name: p.name.clone(),
                credential: self.summary(id, now_ms),
                logins: self.logins(id, now_ms),
            });
        let (rows, more) = page(it, limit);
        ListingPage { rows, more }
    }

    /// A principal's live browser logins after the fingerprint `after`, in
    /// fingerprint order, at most `limit`.
    pub fn signins_page(
        &self,
        principal: &str,
        after: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Result<SigninPage, AccessError> {
        super::known(self, principal)?;
        let mut all: Vec<Signin> = self
            .credentials
            .iter()
            .filter(|(_, c)| {
                c.principal == principal && c.kind == CredentialKind::Browser && c.live(now_ms)
            })
            .map(|(sha, c)| Signin {
                fingerprint: sha.fingerprint(),
                issued_at_ms: c.issued_at_ms,
                expires_at_ms: c.expires_at_ms,
                last_resumed_ms: c.last_resumed_ms,
                issued_by: c.issued_by.clone(),
            })
            .filter(|s| after.is_none_or(|a| s.fingerprint.as_str() > a))
            .collect();
        all.sort_by(|a, b| a.fingerprint.cmp(&b.fingerprint));
        let (rows, more) = page(all.into_iter(), limit);
        Ok(SigninPage { rows, more })
    }
}

impl CatalogueState {
    /// What `digest` may do in `session_id` at `now_ms`: the owner anywhere
    /// the catalogue holds the session; a member only where a membership row
    /// names it. A session the catalogue lacks grants nothing, even to the
    /// owner.
    pub fn authorization(
        &self,
        digest: &Digest,
        session_id: &str,
        now_ms: u64,
    ) -> Option<Authorization> {
        let who = self.access.authenticate(digest, now_ms)?;
        if !self.sessions.contains_key(session_id) {
            return None;
        }
        match who.kind {
            PrincipalKind::Owner => Some(Authorization::Owner),
            PrincipalKind::Member => self
                .access
                .memberships
                .get(&(who.principal, session_id.to_owned()))
                .map(|r| Authorization::Member(*r)),
        }
    }

    /// One principal's sessions after `after`, in session order, with their
    /// current display names, at most `limit`.
    pub fn memberships_page(
        &self,
        principal: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<MembershipPage, AccessError> {
        super::known(&self.access, principal)?;
        let it = self
            .access
            .memberships
            .iter()
            .filter(|((p, s), _)| p == principal && after.is_none_or(|a| s.as_str() > a))
            .map(|((_, s), role)| MembershipRow {
                session_id: s.clone(),
                name: self.get(s).map(|r| r.creation.name).unwrap_or_default(),
                role: *role,
            });
        let (rows, more) = page(it, limit);
        Ok(MembershipPage { rows, more })
    }

    /// One session's members after `after`, in principal order, with the
    /// name and role each holds there; `UnknownSession` for a session the
    /// catalogue does not hold.
    pub fn session_members_page(
        &self,
        session_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<SessionMemberPage, AccessError> {
        if !self.sessions.contains_key(session_id) {
            return Err(AccessError::UnknownSession {
                session_id: session_id.to_owned(),
            });
        }
        let it = self
            .access
            .memberships
            .iter()
            .filter(|((p, s), _)| s == session_id && after.is_none_or(|a| p.as_str() > a))
            .map(|((p, _), role)| SessionMember {
                principal: p.clone(),
                name: self.access.principals.get(p).and_then(|r| r.name.clone()),
                role: *role,
            });
        let (rows, more) = page(it, limit);
        Ok(SessionMemberPage { rows, more })
    }
}
