//! The catalogue's access plane: principals, credentials, claims, browser
//! logins and per-session memberships.
//!
//! Access lives in the catalogue's database, so its stored state is a part of
//! [`CatalogueState`] ([`CatalogueState::access`]) and every write is decided
//! against the whole catalogue state: a membership names a session the
//! catalogue holds, a membership change moves the catalogue revision, and a
//! deleted session takes its memberships with it. A write is one
//! [`AccessRequest`] decided by [`decide`]; every read is a pure function of
//! the state ([`read`]). A shell loads the rows a request reads
//! ([`footprint`]) into a partial state, decides, and applies the
//! decision's [`effect::Effect`]s in order, one statement each — it holds
//! no rule, no diff and no ordering of its own.
//!
//! Rules, in brief (each has a case in `custos_conformance::access`):
//! - **Stable identity is not a credential.** A principal's id and display
//!   name are stored apart from its credentials; a rotation changes the
//!   credential, never the id.
//! - **Plaintext never reaches storage.** A [`Digest`] is the SHA-256 of a
//!   caller's token, made by [`credential_digest`] (a bearer) or
//!   [`browser_digest`] (a browser login); its kind travels with it and no
//!   caller can choose it separately. A revoked digest stays as a tombstone:
//!   it can never be assigned or reactivated.
//! - **Every lookup names the kind.** [`AccessState::authenticate`] finds a
//!   row by digest *and* kind, so a browser row is absent to every bearer
//!   lookup. The enrolling paths refuse a browser digest.
//! - **A claim authenticates nothing and binds once.** A [`ClaimDigest`] is a
//!   separate type; claim rows are never deleted; [`decide`] makes every
//!   claim refusal before any write, in a fixed order ([`ClaimRefusal`]).
//! - **There is one durable owner** ([`AccessRequest::BootstrapOwner`]); its
//!   retry needs the owner's active credential.
//! - **A member has either one open claim and no active credential, or no
//!   open claim**: an invitation or rotation by claim enrolls no credential,
//!   and a login is refused while a claim is open (`ClaimPending`).
//! - **Membership is session-scoped** and explicit: a missing row grants
//!   nothing, and a membership naming a session the catalogue lacks is
//!   refused.
//! - **No unbounded list**: every page returns at most [`LISTING_LIMIT`] rows
//!   and no digest, claim or token.
//!
//! Digest equality that decides something (a bootstrap retry, a claim
//! replay, a lookup's final check) is constant-time through `subtle`; the
//! lookups themselves are index probes keyed by the digest, which leak
//! nothing a caller could use (the key is a hash of a random token).
//!
//! ```
//! use custos_core::catalogue::access::{
//!     claim_digest, credential_digest, Access, AccessOutcome, AccessRequest, Authorization,
//!     Enrollment, Role,
//! };
//! use custos_core::catalogue::{Catalogue, Creation, MemoryCatalogue, Request};
//!
//! let c = MemoryCatalogue::new();
//! c.apply(&Request::Reserve {
//!     session_id: "s1".into(),
//!     creation: Creation::local("key-1", "Planning", "/work"),
//!     now: 1,
//! })?;
//! // The owner, with the digest of a random token only the caller keeps.
//! let root = credential_digest(b"3f9c...random owner token");
//! c.apply_access(&AccessRequest::BootstrapOwner {
//!     principal: "owner".into(),
//!     name: Some("Olive".into()),
//!     digest: root,
//!     now_ms: 1_000,
//! })?;
//! // A member invited with a claim; the invitee redeems it with its own token.
//! c.apply_access(&AccessRequest::InviteMember {
//!     principal: "m-1".into(),
//!     name: None,
//!     session_id: "s1".into(),
//!     role: Role::Observer,
//!     enrollment: Enrollment::Claim {
//!         claim: claim_digest(b"claim token sent by chat"),
//!         expires_at_ms: 60_000,
//!     },
//!     now_ms: 1_000,
//! })?;
//! let mine = credential_digest(b"the invitee's own random token");
//! let claimed = c.apply_access(&AccessRequest::Claim {
//!     claim: claim_digest(b"claim token sent by chat"),
//!     digest: mine,
//!     name: Some("Max".into()),
//!     now_ms: 2_000,
//! })?;
//! assert!(matches!(claimed, AccessOutcome::Claimed { bound: true, .. }));
//! assert_eq!(
//!     c.authorization(&mine, "s1", 3_000)?,
//!     Some(Authorization::Member(Role::Observer))
//! );
//! assert_eq!(c.authorization(&mine, "s2", 3_000)?, None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod effect;
pub mod read;
pub mod rows;
mod stored;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

pub use crate::digest::Sha256;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::catalogue::{display_name, CatalogueState};

pub use read::{
    authenticate_rows, Authority, Authorization, CredentialSummary, Listing, ListingPage,
    MembershipPage, MembershipRow, SessionMember, SessionMemberPage, Signin, SigninPage,
};
pub use stored::{StoredClaim, StoredCredential, StoredMembership, StoredPrincipal};

/// The most rows a page returns.
pub const LISTING_LIMIT: usize = 100;
/// The most memberships a successful claim answers (in session order).
pub const CLAIMED_MEMBERSHIPS_LIMIT: usize = 16;
/// `resumed` writes a login's `last_resumed_ms` at most once in this window.
pub const RESUME_STAMP_WINDOW_MS: u64 = 60_000;
/// The longest principal id, in bytes.
pub const PRINCIPAL_ID_LIMIT: usize = 128;
/// The length of a digest's fingerprint, in hex digits.
pub const FINGERPRINT_LEN: usize = crate::digest::FINGERPRINT_LEN;

/// A principal id: 1 to [`PRINCIPAL_ID_LIMIT`] bytes of ASCII letters,
/// digits, `.`, `_` and `-`. The caller chooses it (its recovery id) before
/// sending.
pub fn is_principal_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= PRINCIPAL_ID_LIMIT
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A fingerprint as written: [`FINGERPRINT_LEN`] lower-case hex digits.
pub fn is_fingerprint(s: &str) -> bool {
    s.len() == FINGERPRINT_LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The rule for an access display name about to be written: trimmed, then
/// judged by the catalogue's [`display_name`] rule.
pub fn valid_name(name: &str) -> Result<String, AccessError> {
    let t = name.trim();
    display_name(t)
        .map(str::to_owned)
        .map_err(|e| AccessError::Invalid {
            what: "display name",
            detail: e.to_string(),
        })
}

/// Which kind of credential a digest is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum CredentialKind {
    /// A bearer token (every wire path).
    Bearer,
    /// A browser login (the login code only).
    Browser,
}

impl CredentialKind {
    /// The stored spelling: `bearer` or `browser`.
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialKind::Bearer => "bearer",
            CredentialKind::Browser => "browser",
        }
    }

    /// Parses the stored spelling (total: anything else is `None`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "bearer" => Some(CredentialKind::Bearer),
            "browser" => Some(CredentialKind::Browser),
            _ => None,
        }
    }
}

impl fmt::Display for CredentialKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A credential digest: the SHA-256 of a caller's token and its kind. The
/// fields are private: a bearer is made only by [`credential_digest`] (or
/// [`Digest::bearer_from_sha256`]), a browser login only by
/// [`browser_digest`] (or [`Digest::browser_from_sha256`]), so the kind
/// travels with the digest. The plaintext is hashed here and never kept.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Digest {
    kind: CredentialKind,
    sha: Sha256,
}

/// The bearer digest of a token (every wire path).
pub fn credential_digest(token: &[u8]) -> Digest {
    Digest {
        kind: CredentialKind::Bearer,
        sha: Sha256::of(token),
    }
}

/// The browser digest of a login's token (the login code only).
pub fn browser_digest(token: &[u8]) -> Digest {
    Digest {
        kind: CredentialKind::Browser,
        sha: Sha256::of(token),
    }
}

/// The claim digest of a claim token.
pub fn claim_digest(token: &[u8]) -> ClaimDigest {
    ClaimDigest(Sha256::of(token))
}

impl Digest {
    /// A bearer digest from a SHA-256 the caller computed.
    pub fn bearer_from_sha256(sha: [u8; 32]) -> Self {
        Digest {
            kind: CredentialKind::Bearer,
            sha: Sha256(sha),
        }
    }

    /// A browser digest from a SHA-256 the caller computed.
    pub fn browser_from_sha256(sha: [u8; 32]) -> Self {
        Digest {
            kind: CredentialKind::Browser,
            sha: Sha256(sha),
        }
    }

    /// The kind.
    pub fn kind(&self) -> CredentialKind {
        self.kind
    }

    /// The hash.
    pub fn sha(&self) -> &Sha256 {
        &self.sha
    }

    /// The first 16 hex digits of the hash.
    pub fn fingerprint(&self) -> String {
        self.sha.fingerprint()
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({} {}…)", self.kind, self.sha.fingerprint())
    }
}

/// A claim token's digest: a distinct type from [`Digest`], so a claim
/// cannot be passed where a credential is looked up.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ClaimDigest(Sha256);

impl ClaimDigest {
    /// A claim digest from a SHA-256 the caller computed.
    pub fn from_sha256(sha: [u8; 32]) -> Self {
        ClaimDigest(Sha256(sha))
    }

    /// The hash.
    pub fn sha(&self) -> &Sha256 {
        &self.0
    }
}

impl fmt::Debug for ClaimDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClaimDigest({}…)", self.0.fingerprint())
    }
}

/// A principal's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PrincipalKind {
    /// The one durable owner.
    Owner,
    /// An invited member.
    Member,
}

impl PrincipalKind {
    /// The stored spelling: `owner` or `member`.
    pub fn as_str(self) -> &'static str {
        match self {
            PrincipalKind::Owner => "owner",
            PrincipalKind::Member => "member",
        }
    }

    /// Parses the stored spelling (total).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "owner" => Some(PrincipalKind::Owner),
            "member" => Some(PrincipalKind::Member),
            _ => None,
        }
    }
}

/// A member's role in one session. Explicit: a missing membership grants
/// nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Role {
    /// May operate the session.
    Operator,
    /// May observe the session.
    Observer,
}

impl Role {
    /// The stored spelling: `operator` or `observer`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Operator => "operator",
            Role::Observer => "observer",
        }
    }

    /// Parses the stored spelling (total).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "operator" => Some(Role::Operator),
            "observer" => Some(Role::Observer),
            _ => None,
        }
    }
}

/// How a new member (or a rotated one) is enrolled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Enrollment {
    /// An open claim the invitee redeems before `expires_at_ms`; no
    /// credential yet.
    Claim {
        /// The claim token's digest.
        claim: ClaimDigest,
        /// The claim's wall-clock expiry.
        expires_at_ms: u64,
    },
    /// The invitee's own bearer credential; no claim.
    Digest(Digest),
}

/// A stored principal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PrincipalRow {
    /// Owner or member.
    pub kind: PrincipalKind,
    /// The current display name, if any.
    pub name: Option<String>,
    /// When the principal was created.
    pub created_at_ms: u64,
}

/// A credential's state. `Revoked` is a tombstone: never reactivated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CredentialState {
    /// Authenticates.
    Active,
    /// Authenticates nothing, forever.
    Revoked,
}

impl CredentialState {
    /// The stored spelling: `active` or `revoked`.
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialState::Active => "active",
            CredentialState::Revoked => "revoked",
        }
    }

    /// Parses the stored spelling (total).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(CredentialState::Active),
            "revoked" => Some(CredentialState::Revoked),
            _ => None,
        }
    }
}

/// A stored credential, keyed by its digest's hash (one primary key for both
/// kinds).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CredentialRow {
    /// Its principal.
    pub principal: String,
    /// Bearer or browser.
    pub kind: CredentialKind,
    /// Active or a tombstone.
    pub state: CredentialState,
    /// When it was minted.
    pub issued_at_ms: u64,
    /// When a claim bound it, if one did.
    pub claimed_at_ms: Option<u64>,
    /// A browser login's last resume stamp.
    pub last_resumed_ms: Option<u64>,
    /// A browser login's expiry.
    pub expires_at_ms: Option<u64>,
    /// A device link's login: the issuing login's fingerprint.
    pub issued_by: Option<String>,
}

impl CredentialRow {
    /// Active and, for a login, not expired at `now_ms`.
    pub fn live(&self, now_ms: u64) -> bool {
        self.state == CredentialState::Active && self.expires_at_ms.is_none_or(|e| now_ms < e)
    }
}

/// A claim's state. Claim rows are never deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ClaimState {
    /// Waiting to be redeemed.
    Open,
    /// Redeemed: bound to this credential.
    Claimed {
        /// The credential it bound.
        digest: Digest,
        /// When.
        at_ms: u64,
    },
    /// Voided by a rotation or revocation.
    Void,
}

/// A stored claim, keyed by its claim digest.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ClaimRow {
    /// The member it enrolls.
    pub principal: String,
    /// Its wall-clock expiry.
    pub expires_at_ms: u64,
    /// Open, claimed or void.
    pub state: ClaimState,
}

/// The access plane's stored state (a part of [`CatalogueState`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AccessState {
    /// Principals by id.
    pub principals: BTreeMap<String, PrincipalRow>,
    /// Credentials by digest hash.
    #[serde(with = "crate::pairs")]
    pub credentials: BTreeMap<Sha256, CredentialRow>,
    /// Claims by claim digest.
    #[serde(with = "crate::pairs")]
    pub claims: BTreeMap<ClaimDigest, ClaimRow>,
    /// Memberships by `(principal, session)`.
    #[serde(with = "crate::pairs")]
    pub memberships: BTreeMap<(String, String), Role>,
}

/// Why a claim was refused (in this order: unknown or void, a claimed row that
/// is not this replay, expiry, then the conflicts, then the name).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum ClaimRefusal {
    /// No such claim, or it was voided.
    #[error("UnknownClaim")]
    UnknownClaim,
    /// The claim expired unredeemed.
    #[error("ExpiredClaim")]
    ExpiredClaim,
    /// The claim cannot bind this digest.
    #[error("ConflictingClaim: {rule}")]
    ConflictingClaim {
        /// Which rule: `claimed-by-another`, `claim-digest-as-credential`,
        /// `digest-in-use` or `member-holds-credential`.
        rule: &'static str,
    },
    /// The invitee's display name breaks the name rule.
    #[error("InvalidClaimName: {detail}")]
    InvalidClaimName {
        /// Why.
        detail: String,
    },
}

crate::reasons! {
    /// The stable reason string (the variant's name).
    ClaimRefusal { UnknownClaim, ExpiredClaim, ConflictingClaim, InvalidClaimName }
}

/// Why an access request or read was refused. Nothing changes on a refusal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum AccessError {
    /// A value outside its grammar, in a request.
    #[error("Invalid: {what}: {detail}")]
    Invalid {
        /// Which value.
        what: &'static str,
        /// Why.
        detail: String,
    },
    /// A digest of the wrong kind for this path (a browser digest where a
    /// bearer enrolls, or the reverse).
    #[error("WrongKind: {path} takes a {expected} digest, not a {got} one")]
    WrongKind {
        /// The operation.
        path: &'static str,
        /// The kind it takes.
        expected: CredentialKind,
        /// The kind it was given.
        got: CredentialKind,
    },
    /// An owner exists and the request did not prove to be it.
    #[error("OwnerExists: the owner is {owner:?}; a retry needs its active credential")]
    OwnerExists {
        /// The owner's id.
        owner: String,
    },
    /// No owner has been bootstrapped.
    #[error("NoOwner")]
    NoOwner,
    /// A member operation named the owner.
    #[error("OwnerRefused: {principal:?} is the owner")]
    OwnerRefused {
        /// The principal named.
        principal: String,
    },
    /// The principal id is taken (revoked principals included).
    #[error("PrincipalExists: {principal:?}")]
    PrincipalExists {
        /// The id.
        principal: String,
    },
    /// No such principal.
    #[error("UnknownPrincipal: {principal:?}")]
    UnknownPrincipal {
        /// The id.
        principal: String,
    },
    /// The catalogue holds no such session.
    #[error("UnknownSession: {session_id:?}")]
    UnknownSession {
        /// The session.
        session_id: String,
    },
    /// The digest is stored already, in any state (tombstones included).
    #[error("DigestInUse: {fingerprint}")]
    DigestInUse {
        /// Its fingerprint.
        fingerprint: String,
    },
    /// The claim digest is stored already.
    #[error("ClaimInUse: {fingerprint}")]
    ClaimInUse {
        /// Its fingerprint.
        fingerprint: String,
    },
    /// The principal has an open claim: it holds no credential until the
    /// claim is redeemed (or voided by a rotation or revocation).
    #[error("ClaimPending: {principal:?} has an open claim")]
    ClaimPending {
        /// The principal.
        principal: String,
    },
    /// A claim refusal.
    #[error("{0}")]
    Claim(ClaimRefusal),
    /// A stored value breaks its grammar; never read as "no credential" or
    /// "no role".
    #[error("Corrupt: {what}: {detail}")]
    Corrupt {
        /// Which value.
        what: &'static str,
        /// Why.
        detail: String,
    },
    /// The backend failed; the request may not have applied.
    #[error("BackendFault: {reason}")]
    BackendFault {
        /// What failed.
        reason: String,
    },
    /// The backend could not be reached; retry the same request.
    #[error("Unavailable: {reason}")]
    Unavailable {
        /// What failed (never a credential).
        reason: String,
    },
}

/// A stored column that breaks its rule is `Corrupt` ("stored row"),
/// naming the table, the row and the column.
impl From<crate::columns::ColumnError> for AccessError {
    fn from(e: crate::columns::ColumnError) -> Self {
        AccessError::Corrupt {
            what: "stored row",
            detail: e.to_string(),
        }
    }
}

impl AccessError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (a refused claim is `PermissionDenied`; a name or digest already held is `AlreadyExists`).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            AccessError::Invalid { .. } => Class::InvalidArgument,
            AccessError::WrongKind { .. } => Class::InvalidArgument,
            AccessError::OwnerExists { .. } => Class::AlreadyExists,
            AccessError::NoOwner => Class::FailedPrecondition,
            AccessError::OwnerRefused { .. } => Class::PermissionDenied,
            AccessError::PrincipalExists { .. } => Class::AlreadyExists,
            AccessError::UnknownPrincipal { .. } => Class::NotFound,
            AccessError::UnknownSession { .. } => Class::NotFound,
            AccessError::DigestInUse { .. } => Class::AlreadyExists,
            AccessError::ClaimInUse { .. } => Class::AlreadyExists,
            AccessError::ClaimPending { .. } => Class::FailedPrecondition,
            AccessError::Claim(..) => Class::PermissionDenied,
            AccessError::Corrupt { .. } => Class::CorruptArtifact,
            AccessError::BackendFault { .. } => Class::Internal,
            AccessError::Unavailable { .. } => Class::Unavailable,
        }
    }
}

crate::reasons! {
    /// The stable reason string: the variant's name, or the claim refusal's.
    AccessError {
        Invalid, WrongKind, OwnerExists, NoOwner, OwnerRefused, PrincipalExists,
        UnknownPrincipal, UnknownSession, DigestInUse, ClaimInUse, ClaimPending,
        Claim(e) => e.reason(), Corrupt, BackendFault, Unavailable
    }
}

/// An access write. Every outside input is here, including `now_ms`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AccessRequest {
    /// Creates the one owner with its bearer credential, or — when an owner
    /// exists — verifies that `digest` is its active credential and answers
    /// it (a retry). Anything else is `OwnerExists`.
    BootstrapOwner {
        /// The owner's id (the caller's recovery id).
        principal: String,
        /// Its display name.
        name: Option<String>,
        /// Its bearer credential.
        digest: Digest,
        /// Now.
        now_ms: u64,
    },
    /// Replaces the owner's bearer credential in one transaction: the old
    /// ones become tombstones, the new one is active. Repeating it with the
    /// same new digest answers unchanged.
    RotateCredential {
        /// The owner's id.
        principal: String,
        /// The new bearer credential.
        digest: Digest,
        /// Now.
        now_ms: u64,
    },
    /// Changes a principal's display name (identity unchanged).
    Rename {
        /// The principal.
        principal: String,
        /// The new name, or none.
        name: Option<String>,
    },
    /// Creates a member, its enrollment and its first membership.
    InviteMember {
        /// The member's id (chosen by the caller; an existing id always
        /// conflicts, revoked ones included).
        principal: String,
        /// Its display name.
        name: Option<String>,
        /// Its first session.
        session_id: String,
        /// Its role there.
        role: Role,
        /// How it is enrolled.
        enrollment: Enrollment,
        /// Now.
        now_ms: u64,
    },
    /// Voids the member's open claim, revokes every active credential of
    /// it (logins included) and inserts one replacement enrollment.
    RotateMember {
        /// The member.
        principal: String,
        /// The replacement.
        enrollment: Enrollment,
        /// Now.
        now_ms: u64,
    },
    /// Voids the member's open claim and revokes every active credential;
    /// the identity and its memberships stay.
    RevokeMember {
        /// The member.
        principal: String,
    },
    /// Grants (or changes) a member's role in a session.
    Grant {
        /// The member.
        principal: String,
        /// The session (the catalogue must hold it).
        session_id: String,
        /// The role.
        role: Role,
    },
    /// Removes a member's membership of a session.
    Ungrant {
        /// The member.
        principal: String,
        /// The session.
        session_id: String,
    },
    /// Binds a bearer digest to an open claim, once.
    Claim {
        /// The claim.
        claim: ClaimDigest,
        /// The invitee's bearer credential.
        digest: Digest,
        /// The invitee's display name (applied only when binding).
        name: Option<String>,
        /// Now.
        now_ms: u64,
    },
    /// Binds a browser digest to an open claim as a login, once.
    ClaimLogin {
        /// The claim.
        claim: ClaimDigest,
        /// The login's browser digest.
        digest: Digest,
        /// The invitee's display name (applied only when binding).
        name: Option<String>,
        /// Now.
        now_ms: u64,
        /// The login's expiry.
        expires_at_ms: u64,
    },
    /// Records a browser login of a principal.
    IssueLogin {
        /// The principal.
        principal: String,
        /// The login's browser digest.
        digest: Digest,
        /// Now (its minting instant).
        now_ms: u64,
        /// Its expiry.
        expires_at_ms: u64,
        /// A device link's login: the issuing login's fingerprint.
        issued_by: Option<String>,
    },
    /// Revokes one of a principal's logins, by fingerprint (browser rows
    /// only).
    RevokeLogin {
        /// The principal.
        principal: String,
        /// The login's fingerprint.
        fingerprint: String,
    },
    /// Signs a principal out everywhere (every browser row).
    RevokeLogins {
        /// The principal.
        principal: String,
    },
    /// Revokes every login of every principal (a new root key).
    RevokeAllLogins,
    /// Stamps a login's `last_resumed_ms`, at most once per
    /// [`RESUME_STAMP_WINDOW_MS`].
    Resumed {
        /// The login's browser digest.
        digest: Digest,
        /// Now.
        now_ms: u64,
    },
}

/// A deadline `at` kept at its distance from `old_now`, re-based onto
/// `new_now` (saturating at the ends of `u64`).
fn rebase(at: u64, old_now: u64, new_now: u64) -> u64 {
    let moved = i128::from(new_now) + i128::from(at) - i128::from(old_now);
    u64::try_from(moved.max(0)).unwrap_or(u64::MAX)
}

impl AccessRequest {
    /// The time this request is judged at, if it carries one.
    pub fn now_ms(&self) -> Option<u64> {
        match self {
            AccessRequest::BootstrapOwner { now_ms, .. }
            | AccessRequest::RotateCredential { now_ms, .. }
            | AccessRequest::InviteMember { now_ms, .. }
            | AccessRequest::RotateMember { now_ms, .. }
            | AccessRequest::Claim { now_ms, .. }
            | AccessRequest::ClaimLogin { now_ms, .. }
            | AccessRequest::IssueLogin { now_ms, .. }
            | AccessRequest::Resumed { now_ms, .. } => Some(*now_ms),
            AccessRequest::Rename { .. }
            | AccessRequest::RevokeMember { .. }
            | AccessRequest::Grant { .. }
            | AccessRequest::Ungrant { .. }
            | AccessRequest::RevokeLogin { .. }
            | AccessRequest::RevokeLogins { .. }
            | AccessRequest::RevokeAllLogins => None,
        }
    }

    /// The same request judged at `now_ms` instead of its own time: every
    /// deadline it carries (a claim's or a login's `expires_at_ms`) keeps
    /// its distance from the request's own time, so what its caller meant
    /// to last `d` ms lasts `d` ms from `now_ms`, and what was already past
    /// its deadline stays past it by as much. A backend shared by hosts
    /// whose clocks disagree judges every access request by one clock — the
    /// database server's, as it judges leases — through this; a request
    /// without a time is returned unchanged.
    #[must_use]
    pub fn rebased(&self, now_ms: u64) -> AccessRequest {
        let Some(old) = self.now_ms() else {
            return self.clone();
        };
        let mut r = self.clone();
        let move_enrollment = |e: &mut Enrollment| {
            if let Enrollment::Claim { expires_at_ms, .. } = e {
                *expires_at_ms = rebase(*expires_at_ms, old, now_ms);
            }
        };
        match &mut r {
            AccessRequest::InviteMember {
                enrollment,
                now_ms: n,
                ..
            }
            | AccessRequest::RotateMember {
                enrollment,
                now_ms: n,
                ..
            } => {
                move_enrollment(enrollment);
                *n = now_ms;
            }
            AccessRequest::ClaimLogin {
                expires_at_ms,
                now_ms: n,
                ..
            }
            | AccessRequest::IssueLogin {
                expires_at_ms,
                now_ms: n,
                ..
            } => {
                *expires_at_ms = rebase(*expires_at_ms, old, now_ms);
                *n = now_ms;
            }
            AccessRequest::BootstrapOwner { now_ms: n, .. }
            | AccessRequest::RotateCredential { now_ms: n, .. }
            | AccessRequest::Claim { now_ms: n, .. }
            | AccessRequest::Resumed { now_ms: n, .. } => *n = now_ms,
            AccessRequest::Rename { .. }
            | AccessRequest::RevokeMember { .. }
            | AccessRequest::Grant { .. }
            | AccessRequest::Ungrant { .. }
            | AccessRequest::RevokeLogin { .. }
            | AccessRequest::RevokeLogins { .. }
            | AccessRequest::RevokeAllLogins => {}
        }
        r
    }
}

/// What a successful access request did.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AccessOutcome {
    /// The owner (created or verified).
    Owner {
        /// Its id.
        principal: String,
        /// Whether this request created it.
        created: bool,
    },
    /// A successful claim: the principal and its memberships (at most
    /// [`CLAIMED_MEMBERSHIPS_LIMIT`], in session order).
    Claimed {
        /// The member.
        principal: String,
        /// `(session, role)` pairs.
        memberships: Vec<(String, Role)>,
        /// `false` for a recognised replay of a lost reply (nothing written).
        bound: bool,
    },
    /// Rows revoked (credentials, logins).
    Revoked {
        /// How many rows this request revoked.
        count: u32,
    },
    /// Any other request. `changed` is whether any row changed.
    Done {
        /// Whether any row changed.
        changed: bool,
    },
}

/// A decision: the outcome and the whole (possibly partial) catalogue state
/// to persist in the same transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessDecision {
    /// What the request did.
    pub outcome: AccessOutcome,
    /// The rows to write, in order ([`effect`]); empty when nothing changed.
    pub effects: Vec<effect::Effect>,
    /// The state after it: the loaded state with `effects` applied.
    pub next: CatalogueState,
}

/// The rows an access request (or read) needs, for a shell that loads a
/// partial state. A shell loads, in order: the owner row (and its
/// credentials) when `owner`; every named principal with its credentials,
/// claims and memberships; the credential rows of `digests` and the claim
/// rows of `claims`, **then** the principal (with its rows) each loaded
/// credential or claim names; the catalogue session rows of `sessions`;
/// every browser credential when `all_logins`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessFootprint {
    /// Load the owner.
    pub owner: bool,
    /// Principals (with their credentials, claims and memberships).
    pub principals: Vec<String>,
    /// Credential rows by hash (either kind).
    pub digests: Vec<Sha256>,
    /// Claim rows by claim digest.
    pub claims: Vec<ClaimDigest>,
    /// Catalogue sessions whose existence a request checks.
    pub sessions: Vec<String>,
    /// Every browser credential.
    pub all_logins: bool,
}

fn enrollment_rows(e: &Enrollment, fp: &mut AccessFootprint) {
    match e {
        Enrollment::Claim { claim, .. } => {
            fp.claims.push(*claim);
            fp.digests.push(*claim.sha());
        }
        Enrollment::Digest(d) => fp.digests.push(d.sha),
    }
}

/// The rows [`decide`] reads for `req`: `decide` on a state holding at least
/// these rows answers as it would on the whole state.
pub fn footprint(req: &AccessRequest) -> AccessFootprint {
    let mut fp = AccessFootprint::default();
    match req {
        AccessRequest::BootstrapOwner {
            principal, digest, ..
        } => {
            fp.owner = true;
            fp.principals.push(principal.clone());
            fp.digests.push(digest.sha);
        }
        AccessRequest::RotateCredential {
            principal, digest, ..
        } => {
            fp.principals.push(principal.clone());
            fp.digests.push(digest.sha);
        }
        AccessRequest::InviteMember {
            principal,
            session_id,
            enrollment,
            ..
        } => {
            fp.principals.push(principal.clone());
            fp.sessions.push(session_id.clone());
            enrollment_rows(enrollment, &mut fp);
        }
        AccessRequest::RotateMember {
            principal,
            enrollment,
            ..
        } => {
            fp.principals.push(principal.clone());
            enrollment_rows(enrollment, &mut fp);
        }
        AccessRequest::Grant {
            principal,
            session_id,
            ..
        }
        | AccessRequest::Ungrant {
            principal,
            session_id,
        } => {
            fp.principals.push(principal.clone());
            fp.sessions.push(session_id.clone());
        }
        AccessRequest::Claim { claim, digest, .. }
        | AccessRequest::ClaimLogin { claim, digest, .. } => {
            fp.claims.push(*claim);
            fp.digests.push(digest.sha);
            fp.digests.push(*claim.sha());
        }
        AccessRequest::IssueLogin {
            principal, digest, ..
        } => {
            fp.principals.push(principal.clone());
            fp.digests.push(digest.sha);
        }
        AccessRequest::Rename { principal, .. }
        | AccessRequest::RevokeMember { principal }
        | AccessRequest::RevokeLogin { principal, .. }
        | AccessRequest::RevokeLogins { principal } => fp.principals.push(principal.clone()),
        AccessRequest::RevokeAllLogins => fp.all_logins = true,
        AccessRequest::Resumed { digest, .. } => fp.digests.push(digest.sha),
    }
    fp
}

/// Decides one access request against the stored (possibly partial)
/// catalogue state. Total and deterministic; a refusal changes nothing.
pub fn decide(state: &CatalogueState, req: &AccessRequest) -> Result<AccessDecision, AccessError> {
    let mut next = state.clone();
    let outcome = apply(&mut next, req)?;
    Ok(AccessDecision {
        outcome,
        effects: effect::effects(state, &next),
        next,
    })
}

fn apply(s: &mut CatalogueState, req: &AccessRequest) -> Result<AccessOutcome, AccessError> {
    match req {
        AccessRequest::BootstrapOwner {
            principal,
            name,
            digest,
            now_ms,
        } => bootstrap_owner(&mut s.access, principal, name.as_deref(), digest, *now_ms),
        AccessRequest::RotateCredential {
            principal,
            digest,
            now_ms,
        } => rotate_credential(&mut s.access, principal, digest, *now_ms),
        AccessRequest::Rename { principal, name } => {
            rename(&mut s.access, principal, name.as_deref())
        }
        AccessRequest::InviteMember {
            principal,
            name,
            session_id,
            role,
            enrollment,
            now_ms,
        } => invite_member(
            s,
            principal,
            name.as_deref(),
            session_id,
            *role,
            enrollment,
            *now_ms,
        ),
        AccessRequest::RotateMember {
            principal,
            enrollment,
            now_ms,
        } => rotate_member(&mut s.access, principal, enrollment, *now_ms),
        AccessRequest::RevokeMember { principal } => revoke_member(&mut s.access, principal),
        AccessRequest::Grant {
            principal,
            session_id,
            role,
        } => grant(s, principal, session_id, Some(*role)),
        AccessRequest::Ungrant {
            principal,
            session_id,
        } => grant(s, principal, session_id, None),
        AccessRequest::Claim { .. }
        | AccessRequest::ClaimLogin { .. }
        | AccessRequest::IssueLogin { .. }
        | AccessRequest::RevokeLogin { .. }
        | AccessRequest::RevokeLogins { .. }
        | AccessRequest::RevokeAllLogins
        | AccessRequest::Resumed { .. } => apply_login(&mut s.access, req),
    }
}

/// The claim and login requests: they touch credentials, claims and
/// principals only.
fn apply_login(a: &mut AccessState, req: &AccessRequest) -> Result<AccessOutcome, AccessError> {
    match req {
        AccessRequest::Claim {
            claim,
            digest,
            name,
            now_ms,
        } => redeem(a, claim, digest, name.as_deref(), *now_ms, None),
        AccessRequest::ClaimLogin {
            claim,
            digest,
            name,
            now_ms,
            expires_at_ms,
        } => redeem(
            a,
            claim,
            digest,
            name.as_deref(),
            *now_ms,
            Some(*expires_at_ms),
        ),
        AccessRequest::IssueLogin {
            principal,
            digest,
            now_ms,
            expires_at_ms,
            issued_by,
        } => issue_login(
            a,
            principal,
            digest,
            *now_ms,
            *expires_at_ms,
            issued_by.as_deref(),
        ),
        AccessRequest::RevokeLogin {
            principal,
            fingerprint,
        } => revoke_login(a, principal, fingerprint),
        AccessRequest::RevokeLogins { principal } => {
            known(a, principal)?;
            let count = revoke_where(a, |c| {
                c.principal == *principal && c.kind == CredentialKind::Browser
            });
            Ok(AccessOutcome::Revoked { count })
        }
        AccessRequest::RevokeAllLogins => Ok(AccessOutcome::Revoked {
            count: revoke_where(a, |c| c.kind == CredentialKind::Browser),
        }),
        AccessRequest::Resumed { digest, now_ms } => resumed(a, digest, *now_ms),
        // The principal and membership requests are `apply`'s.
        _ => Err(AccessError::Invalid {
            what: "request",
            detail: "not a claim or login request".into(),
        }),
    }
}

fn revoke_member(a: &mut AccessState, principal: &str) -> Result<AccessOutcome, AccessError> {
    member(a, principal)?;
    let voided = void_open_claim(a, principal);
    let count = revoke_where(a, |c| c.principal == principal);
    Ok(AccessOutcome::Revoked {
        count: count + u32::from(voided),
    })
}

fn revoke_login(
    a: &mut AccessState,
    principal: &str,
    fingerprint: &str,
) -> Result<AccessOutcome, AccessError> {
    known(a, principal)?;
    if !is_fingerprint(fingerprint) {
        return Err(invalid("fingerprint", fingerprint));
    }
    let mut count = 0u32;
    for (sha, c) in &mut a.credentials {
        if c.principal == principal
            && c.kind == CredentialKind::Browser
            && c.state == CredentialState::Active
            && sha.fingerprint() == fingerprint
        {
            c.state = CredentialState::Revoked;
            count = count.saturating_add(1);
        }
    }
    Ok(AccessOutcome::Revoked { count })
}

fn invalid(what: &'static str, value: &str) -> AccessError {
    AccessError::Invalid {
        what,
        detail: format!("{value:?} breaks the grammar"),
    }
}

fn check_principal_id(id: &str) -> Result<(), AccessError> {
    if is_principal_id(id) {
        Ok(())
    } else {
        Err(invalid("principal id", id))
    }
}

fn known<'a>(a: &'a AccessState, id: &str) -> Result<&'a PrincipalRow, AccessError> {
    check_principal_id(id)?;
    a.principals
        .get(id)
        .ok_or_else(|| AccessError::UnknownPrincipal {
            principal: id.to_owned(),
        })
}

/// A known principal that is not the owner.
fn member<'a>(a: &'a AccessState, id: &str) -> Result<&'a PrincipalRow, AccessError> {
    let p = known(a, id)?;
    if p.kind == PrincipalKind::Owner {
        return Err(AccessError::OwnerRefused {
            principal: id.to_owned(),
        });
    }
    Ok(p)
}

fn want_kind(path: &'static str, expected: CredentialKind, d: &Digest) -> Result<(), AccessError> {
    if d.kind == expected {
        Ok(())
    } else {
        Err(AccessError::WrongKind {
            path,
            expected,
            got: d.kind,
        })
    }
}

fn unused(a: &AccessState, sha: &Sha256) -> Result<(), AccessError> {
    // One primary key for both kinds, and a claim's own hash is never a
    // credential.
    let as_claim = ClaimDigest(*sha);
    if a.credentials.contains_key(sha) || a.claims.contains_key(&as_claim) {
        return Err(AccessError::DigestInUse {
            fingerprint: sha.fingerprint(),
        });
    }
    Ok(())
}

fn opt_name(name: Option<&str>) -> Result<Option<String>, AccessError> {
    name.map(valid_name).transpose()
}

fn new_credential(principal: &str, kind: CredentialKind, now_ms: u64) -> CredentialRow {
    CredentialRow {
        principal: principal.to_owned(),
        kind,
        state: CredentialState::Active,
        issued_at_ms: now_ms,
        claimed_at_ms: None,
        last_resumed_ms: None,
        expires_at_ms: None,
        issued_by: None,
    }
}

fn owner_row(a: &AccessState) -> Option<(&String, &PrincipalRow)> {
    a.principals
        .iter()
        .find(|(_, p)| p.kind == PrincipalKind::Owner)
}

fn bootstrap_owner(
    a: &mut AccessState,
    principal: &str,
    name: Option<&str>,
    digest: &Digest,
    now_ms: u64,
) -> Result<AccessOutcome, AccessError> {
    want_kind("bootstrap_owner", CredentialKind::Bearer, digest)?;
    check_principal_id(principal)?;
    let name = opt_name(name)?;
    if let Some((owner, _)) = owner_row(a) {
        // A retry proves itself with the owner's active credential.
        let proves = a.credentials.iter().any(|(sha, c)| {
            c.principal == *owner
                && c.kind == CredentialKind::Bearer
                && c.state == CredentialState::Active
                && sha.ct_eq(&digest.sha)
        });
        if proves {
            return Ok(AccessOutcome::Owner {
                principal: owner.clone(),
                created: false,
            });
        }
        return Err(AccessError::OwnerExists {
            owner: owner.clone(),
        });
    }
    if a.principals.contains_key(principal) {
        return Err(AccessError::PrincipalExists {
            principal: principal.to_owned(),
        });
    }
    unused(a, &digest.sha)?;
    a.principals.insert(
        principal.to_owned(),
        PrincipalRow {
            kind: PrincipalKind::Owner,
            name,
            created_at_ms: now_ms,
        },
    );
    a.credentials.insert(
        digest.sha,
        new_credential(principal, CredentialKind::Bearer, now_ms),
    );
    Ok(AccessOutcome::Owner {
        principal: principal.to_owned(),
        created: true,
    })
}

fn rotate_credential(
    a: &mut AccessState,
    principal: &str,
    digest: &Digest,
    now_ms: u64,
) -> Result<AccessOutcome, AccessError> {
    want_kind("rotate_credential", CredentialKind::Bearer, digest)?;
    let p = known(a, principal)?;
    if p.kind != PrincipalKind::Owner {
        // Members rotate through `RotateMember`, which also voids claims.
        return Err(AccessError::Invalid {
            what: "principal",
            detail: format!("{principal:?} is a member: rotate it with rotate_member"),
        });
    }
    if let Some(c) = a.credentials.get(&digest.sha) {
        if c.principal == principal
            && c.kind == CredentialKind::Bearer
            && c.state == CredentialState::Active
        {
            return Ok(AccessOutcome::Done { changed: false });
        }
    }
    unused(a, &digest.sha)?;
    revoke_where(a, |c| {
        c.principal == principal && c.kind == CredentialKind::Bearer
    });
    a.credentials.insert(
        digest.sha,
        new_credential(principal, CredentialKind::Bearer, now_ms),
    );
    Ok(AccessOutcome::Done { changed: true })
}

fn rename(
    a: &mut AccessState,
    principal: &str,
    name: Option<&str>,
) -> Result<AccessOutcome, AccessError> {
    known(a, principal)?;
    let name = opt_name(name)?;
    let Some(p) = a.principals.get_mut(principal) else {
        return Err(AccessError::UnknownPrincipal {
            principal: principal.to_owned(),
        });
    };
    let changed = p.name != name;
    p.name = name;
    Ok(AccessOutcome::Done { changed })
}

fn check_enrollment(a: &AccessState, e: &Enrollment, now_ms: u64) -> Result<(), AccessError> {
    match e {
        Enrollment::Claim {
            claim,
            expires_at_ms,
        } => {
            if *expires_at_ms <= now_ms {
                return Err(AccessError::Invalid {
                    what: "claim expiry",
                    detail: format!("{expires_at_ms} is not after now ({now_ms})"),
                });
            }
            if a.claims.contains_key(claim) || a.credentials.contains_key(claim.sha()) {
                return Err(AccessError::ClaimInUse {
                    fingerprint: claim.sha().fingerprint(),
                });
            }
            Ok(())
        }
        Enrollment::Digest(d) => {
            want_kind("enrollment", CredentialKind::Bearer, d)?;
            unused(a, &d.sha)
        }
    }
}

fn enroll(a: &mut AccessState, principal: &str, e: &Enrollment, now_ms: u64) {
    match e {
        Enrollment::Claim {
            claim,
            expires_at_ms,
        } => {
            a.claims.insert(
                *claim,
                ClaimRow {
                    principal: principal.to_owned(),
                    expires_at_ms: *expires_at_ms,
                    state: ClaimState::Open,
                },
            );
        }
        Enrollment::Digest(d) => {
            a.credentials.insert(
                d.sha,
                new_credential(principal, CredentialKind::Bearer, now_ms),
            );
        }
    }
}

fn check_session(s: &CatalogueState, session_id: &str) -> Result<(), AccessError> {
    if s.sessions.contains_key(session_id) {
        Ok(())
    } else {
        Err(AccessError::UnknownSession {
            session_id: session_id.to_owned(),
        })
    }
}

fn invite_member(
    s: &mut CatalogueState,
    principal: &str,
    name: Option<&str>,
    session_id: &str,
    role: Role,
    e: &Enrollment,
    now_ms: u64,
) -> Result<AccessOutcome, AccessError> {
    check_principal_id(principal)?;
    let name = opt_name(name)?;
    let invite = Invite {
        principal,
        name: name.as_deref(),
        session_id,
        role,
        enrollment: e,
        now_ms,
    };
    if is_own_invite(&s.access, &invite) {
        // A retry after a lost reply succeeds as the first attempt did;
        // `changed` says what this call wrote: nothing.
        return Ok(AccessOutcome::Done { changed: false });
    }
    if s.access.principals.contains_key(principal) {
        return Err(AccessError::PrincipalExists {
            principal: principal.to_owned(),
        });
    }
    check_session(s, session_id)?;
    check_enrollment(&s.access, e, now_ms)?;
    let a = &mut s.access;
    a.principals.insert(
        principal.to_owned(),
        PrincipalRow {
            kind: PrincipalKind::Member,
            name,
            created_at_ms: now_ms,
        },
    );
    enroll(a, principal, e, now_ms);
    a.memberships
        .insert((principal.to_owned(), session_id.to_owned()), role);
    s.revision += 1;
    Ok(AccessOutcome::Done { changed: true })
}

/// An invitation, as [`is_own_invite`] compares it.
struct Invite<'a> {
    principal: &'a str,
    name: Option<&'a str>,
    session_id: &'a str,
    role: Role,
    enrollment: &'a Enrollment,
    now_ms: u64,
}

/// Whether the stored rows are exactly what this invitation wrote: the
/// member, its name, its membership with this role and its enrollment row —
/// a claim or credential under the caller's own digest (the hash of a
/// secret only the inviter holds), bound to this principal and not voided
/// or revoked since. Such a request is a retry of the invitation that
/// wrote them, and succeeds as that one did (`Done`, `changed: false`).
/// A claim is
/// compared by its lifetime — its expiry's distance from the invitation's
/// time, the member's `created_at_ms` — not by the expiry itself, so a
/// retry judged at a later time (a backend that judges every request by
/// its own clock re-bases each attempt) is still recognised.
fn is_own_invite(a: &AccessState, invite: &Invite<'_>) -> bool {
    let Invite {
        principal,
        name,
        session_id,
        role,
        enrollment: e,
        now_ms,
    } = *invite;
    let member_row = a.principals.get(principal);
    let member =
        member_row.is_some_and(|p| p.kind == PrincipalKind::Member && p.name.as_deref() == name);
    let lifetime = |at: u64, from: u64| i128::from(at) - i128::from(from);
    let membership = a
        .memberships
        .get(&(principal.to_owned(), session_id.to_owned()))
        == Some(&role);
    let enrolled = match e {
        Enrollment::Claim {
            claim,
            expires_at_ms,
        } => a.claims.get(claim).is_some_and(|c| {
            let standing = match c.state {
                ClaimState::Open => true,
                ClaimState::Void => false,
                // Redeemed: the credential it bound must still be active.
                ClaimState::Claimed { digest, .. } => a
                    .credentials
                    .get(digest.sha())
                    .is_some_and(|cred| cred.state == CredentialState::Active),
            };
            let same_life = member_row.is_some_and(|p| {
                lifetime(c.expires_at_ms, p.created_at_ms) == lifetime(*expires_at_ms, now_ms)
            });
            c.principal == principal && same_life && standing
        }),
        Enrollment::Digest(d) => a.credentials.get(&d.sha).is_some_and(|c| {
            c.principal == principal
                && c.kind == CredentialKind::Bearer
                && c.state == CredentialState::Active
        }),
    };
    member && membership && enrolled
}

fn rotate_member(
    a: &mut AccessState,
    principal: &str,
    e: &Enrollment,
    now_ms: u64,
) -> Result<AccessOutcome, AccessError> {
    member(a, principal)?;
    check_enrollment(a, e, now_ms)?;
    // The open claim is voided before credentials are touched.
    void_open_claim(a, principal);
    revoke_where(a, |c| c.principal == principal);
    enroll(a, principal, e, now_ms);
    Ok(AccessOutcome::Done { changed: true })
}

fn void_open_claim(a: &mut AccessState, principal: &str) -> bool {
    let mut voided = false;
    for c in a.claims.values_mut() {
        if c.principal == principal && c.state == ClaimState::Open {
            c.state = ClaimState::Void;
            voided = true;
        }
    }
    voided
}

fn revoke_where(a: &mut AccessState, pick: impl Fn(&CredentialRow) -> bool) -> u32 {
    let mut n = 0u32;
    for c in a.credentials.values_mut() {
        if c.state == CredentialState::Active && pick(c) {
            c.state = CredentialState::Revoked;
            n = n.saturating_add(1);
        }
    }
    n
}

fn grant(
    s: &mut CatalogueState,
    principal: &str,
    session_id: &str,
    role: Option<Role>,
) -> Result<AccessOutcome, AccessError> {
    member(&s.access, principal)?;
    check_session(s, session_id)?;
    let key = (principal.to_owned(), session_id.to_owned());
    let before = s.access.memberships.get(&key).copied();
    if before == role {
        return Ok(AccessOutcome::Done { changed: false });
    }
    match role {
        Some(r) => s.access.memberships.insert(key, r),
        None => s.access.memberships.remove(&key),
    };
    s.revision += 1;
    Ok(AccessOutcome::Done { changed: true })
}

/// The memberships of a principal, in session order, at most `limit`.
fn memberships_of(a: &AccessState, principal: &str, limit: usize) -> Vec<(String, Role)> {
    a.memberships
        .iter()
        .filter(|((p, _), _)| p == principal)
        .take(limit)
        .map(|((_, sess), r)| (sess.clone(), *r))
        .collect()
}

/// Steps 3 to 6 of a redemption of an open claim, in order: expiry, the
/// claim's own digest, a digest already present, a member that already
/// holds a credential.
fn open_claim_conflicts(
    a: &AccessState,
    claim: &ClaimDigest,
    digest: &Digest,
    row: &ClaimRow,
    now_ms: u64,
) -> Result<(), AccessError> {
    // 3. expiry.
    if now_ms >= row.expires_at_ms {
        return Err(AccessError::Claim(ClaimRefusal::ExpiredClaim));
    }
    // 4. the claim's own digest would make the claim string a bearer.
    if claim.sha().ct_eq(&digest.sha) {
        return Err(AccessError::Claim(ClaimRefusal::ConflictingClaim {
            rule: "claim-digest-as-credential",
        }));
    }
    // 5. a digest already present in any state.
    if a.credentials.contains_key(&digest.sha) || a.claims.contains_key(&ClaimDigest(digest.sha)) {
        return Err(AccessError::Claim(ClaimRefusal::ConflictingClaim {
            rule: "digest-in-use",
        }));
    }
    // 6. a member that already holds a credential (of either kind).
    if a.credentials
        .values()
        .any(|c| c.principal == row.principal && c.state == CredentialState::Active)
    {
        return Err(AccessError::Claim(ClaimRefusal::ConflictingClaim {
            rule: "member-holds-credential",
        }));
    }
    Ok(())
}

/// `Claim` and `ClaimLogin`: every refusal before any write, in order.
fn redeem(
    a: &mut AccessState,
    claim: &ClaimDigest,
    digest: &Digest,
    name: Option<&str>,
    now_ms: u64,
    login_expires_at: Option<u64>,
) -> Result<AccessOutcome, AccessError> {
    let (path, kind) = match login_expires_at {
        None => ("claim", CredentialKind::Bearer),
        Some(_) => ("claim_login", CredentialKind::Browser),
    };
    want_kind(path, kind, digest)?;
    let refuse = |r: ClaimRefusal| Err(AccessError::Claim(r));
    // 1. unknown or void.
    let Some(row) = a.claims.get(claim).cloned() else {
        return refuse(ClaimRefusal::UnknownClaim);
    };
    match row.state {
        ClaimState::Void => return refuse(ClaimRefusal::UnknownClaim),
        // 2. a claimed row: the same success only for the digest (and kind)
        // it bound, while that credential is active.
        ClaimState::Claimed { digest: bound, .. } => {
            let replay = bound.kind == digest.kind
                && bound.sha.ct_eq(&digest.sha)
                && a.credentials
                    .get(&bound.sha)
                    .is_some_and(|c| c.state == CredentialState::Active && c.kind == bound.kind);
            if replay {
                return Ok(AccessOutcome::Claimed {
                    principal: row.principal.clone(),
                    memberships: memberships_of(a, &row.principal, CLAIMED_MEMBERSHIPS_LIMIT),
                    bound: false,
                });
            }
            return refuse(ClaimRefusal::ConflictingClaim {
                rule: "claimed-by-another",
            });
        }
        ClaimState::Open => {}
    }
    open_claim_conflicts(a, claim, digest, &row, now_ms)?;
    // 7. the name (a refused name leaves the claim open).
    let name = match name.map(valid_name).transpose() {
        Ok(n) => n,
        Err(e) => {
            return refuse(ClaimRefusal::InvalidClaimName {
                detail: e.to_string(),
            })
        }
    };
    // Writes.
    let mut cred = new_credential(&row.principal, kind, now_ms);
    cred.claimed_at_ms = Some(now_ms);
    cred.expires_at_ms = login_expires_at;
    a.credentials.insert(digest.sha, cred);
    if let Some(c) = a.claims.get_mut(claim) {
        c.state = ClaimState::Claimed {
            digest: *digest,
            at_ms: now_ms,
        };
    }
    if let (Some(n), Some(p)) = (name, a.principals.get_mut(&row.principal)) {
        p.name = Some(n);
    }
    Ok(AccessOutcome::Claimed {
        principal: row.principal.clone(),
        memberships: memberships_of(a, &row.principal, CLAIMED_MEMBERSHIPS_LIMIT),
        bound: true,
    })
}

fn issue_login(
    a: &mut AccessState,
    principal: &str,
    digest: &Digest,
    now_ms: u64,
    expires_at_ms: u64,
    issued_by: Option<&str>,
) -> Result<AccessOutcome, AccessError> {
    want_kind("issue_login", CredentialKind::Browser, digest)?;
    known(a, principal)?;
    // A member with an open claim holds no credential (the claim's rule 6
    // stays as a second line).
    if a.claims
        .values()
        .any(|c| c.principal == principal && c.state == ClaimState::Open)
    {
        return Err(AccessError::ClaimPending {
            principal: principal.to_owned(),
        });
    }
    if expires_at_ms <= now_ms {
        return Err(AccessError::Invalid {
            what: "login expiry",
            detail: format!("{expires_at_ms} is not after now ({now_ms})"),
        });
    }
    if let Some(f) = issued_by {
        if !is_fingerprint(f) {
            return Err(invalid("issued_by fingerprint", f));
        }
    }
    unused(a, &digest.sha)?;
    let mut row = new_credential(principal, CredentialKind::Browser, now_ms);
    row.expires_at_ms = Some(expires_at_ms);
    row.issued_by = issued_by.map(str::to_owned);
    a.credentials.insert(digest.sha, row);
    Ok(AccessOutcome::Done { changed: true })
}

fn resumed(
    a: &mut AccessState,
    digest: &Digest,
    now_ms: u64,
) -> Result<AccessOutcome, AccessError> {
    want_kind("resumed", CredentialKind::Browser, digest)?;
    let Some(c) = a.credentials.get_mut(&digest.sha) else {
        return Ok(AccessOutcome::Done { changed: false });
    };
    if c.kind != CredentialKind::Browser || !c.live(now_ms) {
        return Ok(AccessOutcome::Done { changed: false });
    }
    let due = c
        .last_resumed_ms
        .is_none_or(|t| now_ms.saturating_sub(t) >= RESUME_STAMP_WINDOW_MS);
    if due {
        c.last_resumed_ms = Some(now_ms);
    }
    Ok(AccessOutcome::Done { changed: due })
}

/// What a catalogue `Delete` of `session_id` does to access: the session's
/// memberships leave with it (a shell's schema may express this as a
/// cascading foreign key).
pub fn forget_session(a: &mut AccessState, session_id: &str) {
    a.memberships.retain(|(_, s), _| s != session_id);
}

/// The principals a credential and claim set names (a footprint's second
/// stage).
pub fn named_principals(a: &AccessState) -> BTreeSet<String> {
    a.credentials
        .values()
        .map(|c| c.principal.clone())
        .chain(a.claims.values().map(|c| c.principal.clone()))
        .collect()
}

/// The access port: what a backend implements and `access_suite!` tests.
/// Implemented by every catalogue backend, since access lives in the
/// catalogue's database.
pub trait Access {
    /// Decides and persists one access request atomically.
    fn apply_access(&self, req: &AccessRequest) -> Result<AccessOutcome, AccessError>;
    /// The owner's id and display name.
    fn owner(&self) -> Result<Option<(String, Option<String>)>, AccessError>;
    /// Who a digest authenticates ([`AccessState::authenticate`]).
    fn authenticate(&self, digest: &Digest, now_ms: u64) -> Result<Option<Authority>, AccessError>;
    /// What a digest may do in a session ([`CatalogueState::authorization`]),
    /// read from one coherent state.
    fn authorization(
        &self,
        digest: &Digest,
        session_id: &str,
        now_ms: u64,
    ) -> Result<Option<Authorization>, AccessError>;
    /// Whether a claim exists and is not void.
    fn claim_known(&self, claim: &ClaimDigest) -> Result<bool, AccessError>;
    /// The owner's listing of principals ([`AccessState::principals_page`]).
    fn principals_page(
        &self,
        after: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Result<ListingPage, AccessError>;
    /// One principal's memberships ([`CatalogueState::memberships_page`]).
    fn memberships_page(
        &self,
        principal: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<MembershipPage, AccessError>;
    /// One session's members ([`CatalogueState::session_members_page`]).
    fn session_members_page(
        &self,
        session_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<SessionMemberPage, AccessError>;
    /// A principal's live logins ([`AccessState::signins_page`]).
    fn signins_page(
        &self,
        principal: &str,
        after: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Result<SigninPage, AccessError>;
}

impl AccessFootprint {
    /// The partial state a shell loading this footprint from `full` holds:
    /// the reference for shells (and the test that `decide` answers alike on
    /// it). The catalogue revision is always loaded.
    pub fn partial(&self, full: &CatalogueState) -> CatalogueState {
        let mut part = CatalogueState {
            revision: full.revision,
            ..CatalogueState::default()
        };
        let src = &full.access;
        let mut principals: BTreeSet<String> = self.principals.iter().cloned().collect();
        if self.owner {
            if let Some((id, _)) = owner_row(src) {
                principals.insert(id.clone());
            }
        }
        let a = &mut part.access;
        for sha in &self.digests {
            if let Some(c) = src.credentials.get(sha) {
                a.credentials.insert(*sha, c.clone());
            }
        }
        for claim in &self.claims {
            if let Some(c) = src.claims.get(claim) {
                a.claims.insert(*claim, c.clone());
            }
        }
        if self.all_logins {
            for (sha, c) in &src.credentials {
                if c.kind == CredentialKind::Browser {
                    a.credentials.insert(*sha, c.clone());
                }
            }
        }
        principals.extend(named_principals(a));
        for id in &principals {
            load_principal(src, a, id);
        }
        for id in &self.sessions {
            if let Some(r) = full.sessions.get(id) {
                part.sessions.insert(id.clone(), r.clone());
            }
        }
        part
    }
}

/// Copies one principal's row, credentials, claims and memberships.
fn load_principal(src: &AccessState, a: &mut AccessState, id: &str) {
    if let Some(p) = src.principals.get(id) {
        a.principals.insert(id.to_owned(), p.clone());
    }
    for (sha, c) in src.credentials.iter().filter(|(_, c)| c.principal == id) {
        a.credentials.insert(*sha, c.clone());
    }
    for (k, c) in src.claims.iter().filter(|(_, c)| c.principal == id) {
        a.claims.insert(*k, c.clone());
    }
    for (k, r) in src.memberships.iter().filter(|((p, _), _)| p == id) {
        a.memberships.insert(k.clone(), *r);
    }
}
