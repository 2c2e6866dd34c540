//! Model of the catalogue's access plane (`custos_core::catalogue::access`).
//!
//! Two sessions; the owner and one or two members; three tokens usable as a
//! bearer or a browser login; two claim tokens; a clock that reaches the
//! claims' and logins' expiry. The adversary may, in any order, bootstrap an
//! owner under any id with any token, rotate the owner's credential, invite,
//! rotate and revoke members with a claim or a digest, grant and ungrant
//! memberships, redeem claims with any token of either kind (replays of a
//! lost reply included), issue and revoke logins, delete a session and let
//! time pass. Every write goes through [`custos_core::catalogue::access::decide`] (a
//! session deletion through the catalogue's `decide`); a mutant wraps that
//! call. Only a write that changes the stored state counts as a step.

use std::collections::{BTreeMap, BTreeSet};

use custos_core::catalogue::access::{
    self, browser_digest, claim_digest, credential_digest, AccessError, AccessOutcome,
    AccessRequest, ClaimDigest, ClaimRefusal, ClaimState, CredentialKind, CredentialState, Digest,
    Enrollment, PrincipalKind, Role, Sha256,
};
use custos_core::catalogue::{self, CatalogueState, Creation};
use stateright::{Model, Property};

use crate::Bound;

crate::mutants! {
    /// A defect the model can be made to exhibit, each a wrapped decision.
    pub enum Mutant {
        /// A bootstrap under a new id while an owner exists creates a second owner.
        SecondOwner => "bootstrap-creates-second-owner",
        /// A login is issued to a member whose claim is still open.
        LoginBesideOpenClaim => "login-issued-beside-open-claim",
        /// Member rotation by claim leaves the old claim open.
        RotateMemberKeepsClaim => "rotate-member-keeps-open-claim",
        /// Rotating to a revoked digest of the same owner reactivates it.
        RotationRevivesTombstone => "rotation-revives-tombstone",
        /// A claimed claim binds another digest.
        ClaimRebinds => "claim-rebinds-another-digest",
        /// A replay after revocation reactivates the bound credential.
        ReplayRevives => "replay-after-revocation-reactivates",
        /// Deleting a session leaves its memberships behind.
        DeleteKeepsMemberships => "delete-keeps-memberships",
        /// Revoking a member deletes its spent and voided claim rows.
        RevokeDeletesClaimRows => "revoke-member-deletes-claim-rows",
        /// The owner's rotation to a digest another principal holds moves
        /// that credential to the owner.
        RotationTakesAnothersDigest => "rotation-takes-anothers-digest",
        /// A lookup matches the stored hash and ignores the credential kind.
        LookupIgnoresKind => "lookup-ignores-kind",
        /// An invitation's retry finds its member and is refused
        /// `PrincipalExists`, as another inviter's would be.
        InviteRetryRefused => "invite-retry-refused",
    }
}

/// Tokens in play (each usable as a bearer or a browser digest).
pub const TOKENS: u8 = 3;
/// Claim tokens in play.
pub const CLAIMS: u8 = 2;
/// Sessions registered at the start.
pub const SESSIONS: u8 = 2;
/// The time at which claims and logins expire.
pub const EXPIRY: u64 = 2;

/// The model: its bound and, optionally, the defect it exhibits.
#[derive(Clone, Debug)]
pub struct AccessModel {
    /// Members in play (`m1`, `m2`).
    pub members: u8,
    /// At most this many state-changing writes.
    pub max_steps: u8,
    /// The defect applied, if any.
    pub mutant: Option<Mutant>,
}

/// How an invitation or a rotation enrolls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Enroll {
    /// An open claim of claim token `c`.
    Claim(u8),
    /// A bearer digest of token `t`.
    Digest(u8),
}

/// An action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Bootstrap an owner under principal `p` (0 = `owner`, else a member id)
    /// with bearer token `t`.
    Bootstrap {
        /// Principal index.
        p: u8,
        /// Token.
        t: u8,
    },
    /// Rotate the owner's credential to bearer token `t`.
    Rotate {
        /// Token.
        t: u8,
    },
    /// Invite member `m` to session `s`.
    Invite {
        /// Member (1-based).
        m: u8,
        /// Session.
        s: u8,
        /// Enrollment.
        e: Enroll,
    },
    /// Rotate member `m` to a new enrollment.
    RotateMember {
        /// Member.
        m: u8,
        /// Enrollment.
        e: Enroll,
    },
    /// Revoke member `m`.
    RevokeMember {
        /// Member.
        m: u8,
    },
    /// Grant member `m` session `s` (as an observer).
    Grant {
        /// Member.
        m: u8,
        /// Session.
        s: u8,
    },
    /// Redeem claim `c` with token `t` as a bearer, or as a login.
    Claim {
        /// Claim token.
        c: u8,
        /// Token.
        t: u8,
        /// As a browser login.
        login: bool,
    },
    /// Issue principal `p` a login with token `t`.
    IssueLogin {
        /// Principal index.
        p: u8,
        /// Token.
        t: u8,
    },
    /// Sign principal `p` out everywhere.
    RevokeLogins {
        /// Principal index.
        p: u8,
    },
    /// Delete session `s` from the catalogue.
    Delete {
        /// Session.
        s: u8,
    },
    /// Time passes (up to [`EXPIRY`]).
    Tick,
}

mod rule {
    pub const CLAIM_BOUND_AGAIN: u8 = 1 << 0;
    pub const TOMBSTONE_REVIVED: u8 = 1 << 1;
    pub const CREDENTIAL_CHANGED_HANDS: u8 = 1 << 2;
    pub const CLAIM_ROW_CHANGED: u8 = 1 << 3;
    pub const INVITE_RETRY: u8 = 1 << 4;
}

mod seen {
    pub const CLAIM_BOUND: u8 = 1 << 0;
    pub const REPLAY_ANSWERED: u8 = 1 << 1;
    pub const LOGIN_ISSUED: u8 = 1 << 2;
    pub const OWNER_ROTATED: u8 = 1 << 3;
    pub const MEMBERSHIP_DELETED: u8 = 1 << 4;
    pub const LOGIN_CLAIM_BOUND: u8 = 1 << 5;
}

/// The global state: the stored catalogue and the monitor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SysState {
    /// The stored catalogue (access included).
    pub stored: CatalogueState,
    /// The clock.
    pub now: u64,
    /// State-changing writes so far.
    pub steps: u8,
    /// Monitor: every digest ever revoked.
    pub tombstones: BTreeSet<Sha256>,
    /// Monitor: each credential's first `(principal, kind)`.
    pub owners_of: BTreeMap<Sha256, (String, CredentialKind)>,
    /// Monitor: the digest each claim first bound.
    pub bound: BTreeMap<ClaimDigest, Digest>,
    /// Monitor: rules seen broken.
    pub broken: u8,
    /// Monitor: outcomes reached.
    pub seen: u8,
}

fn principal(p: u8) -> String {
    if p == 0 {
        "owner".into()
    } else {
        format!("m{p}")
    }
}

fn session(s: u8) -> String {
    format!("s{s}")
}

fn bearer(t: u8) -> Digest {
    credential_digest(format!("token-{t}").as_bytes())
}

fn browser(t: u8) -> Digest {
    browser_digest(format!("token-{t}").as_bytes())
}

fn claim(c: u8) -> ClaimDigest {
    claim_digest(format!("claim-{c}").as_bytes())
}

fn enrollment(e: Enroll) -> Enrollment {
    match e {
        Enroll::Claim(c) => Enrollment::Claim {
            claim: claim(c),
            expires_at_ms: EXPIRY,
        },
        Enroll::Digest(t) => Enrollment::Digest(bearer(t)),
    }
}

fn open_claims_of(s: &CatalogueState, p: &str) -> usize {
    s.access
        .claims
        .values()
        .filter(|c| c.principal == p && c.state == ClaimState::Open)
        .count()
}

fn active_of(s: &CatalogueState, p: &str) -> bool {
    s.access
        .credentials
        .values()
        .any(|c| c.principal == p && c.state == CredentialState::Active)
}

impl AccessModel {
    fn request(&self, s: &SysState, a: Action) -> Option<AccessRequest> {
        let now_ms = s.now;
        Some(match a {
            Action::Bootstrap { p, t } => AccessRequest::BootstrapOwner {
                principal: principal(p),
                name: None,
                digest: bearer(t),
                now_ms,
            },
            Action::Rotate { t } => AccessRequest::RotateCredential {
                principal: principal(0),
                digest: bearer(t),
                now_ms,
            },
            Action::Invite { m, s: sess, e } => AccessRequest::InviteMember {
                principal: principal(m),
                name: None,
                session_id: session(sess),
                role: Role::Operator,
                enrollment: enrollment(e),
                now_ms,
            },
            Action::RotateMember { m, e } => AccessRequest::RotateMember {
                principal: principal(m),
                enrollment: enrollment(e),
                now_ms,
            },
            Action::RevokeMember { m } => AccessRequest::RevokeMember {
                principal: principal(m),
            },
            Action::Grant { m, s: sess } => AccessRequest::Grant {
                principal: principal(m),
                session_id: session(sess),
                role: Role::Observer,
            },
            Action::Claim { c, t, login: false } => AccessRequest::Claim {
                claim: claim(c),
                digest: bearer(t),
                name: None,
                now_ms,
            },
            Action::Claim { c, t, login: true } => AccessRequest::ClaimLogin {
                claim: claim(c),
                digest: browser(t),
                name: None,
                now_ms,
                expires_at_ms: EXPIRY,
            },
            Action::IssueLogin { p, t } => AccessRequest::IssueLogin {
                principal: principal(p),
                digest: browser(t),
                now_ms,
                expires_at_ms: EXPIRY,
                issued_by: None,
            },
            Action::RevokeLogins { p } => AccessRequest::RevokeLogins {
                principal: principal(p),
            },
            Action::Delete { .. } | Action::Tick => return None,
        })
    }

    /// The `InviteRetryRefused` mutant: an invitation under a stored
    /// member id is refused, its own retry included.
    fn invite_retry_refused(
        &self,
        st: &CatalogueState,
        req: &AccessRequest,
    ) -> Option<Result<access::AccessDecision, AccessError>> {
        match (self.mutant, req) {
            (Some(Mutant::InviteRetryRefused), AccessRequest::InviteMember { principal, .. })
                if st.access.principals.contains_key(principal) =>
            {
                Some(Err(AccessError::PrincipalExists {
                    principal: principal.clone(),
                }))
            }
            _ => None,
        }
    }

    /// The real decision, or the mutant's variation of it.
    fn decide(
        &self,
        st: &CatalogueState,
        req: &AccessRequest,
    ) -> Result<access::AccessDecision, AccessError> {
        if let Some(refused) = self.invite_retry_refused(st, req) {
            return refused;
        }
        let real = access::decide(st, req);
        match (self.mutant, req, real) {
            (
                Some(Mutant::SecondOwner),
                AccessRequest::BootstrapOwner {
                    principal,
                    digest,
                    now_ms,
                    ..
                },
                Err(AccessError::OwnerExists { .. }),
            ) if !st.access.principals.contains_key(principal) => {
                second_owner(st, principal, *digest, *now_ms)
            }
            (
                Some(Mutant::LoginBesideOpenClaim),
                AccessRequest::IssueLogin { principal, .. },
                Err(AccessError::ClaimPending { .. }),
            ) => login_beside_claim(st, req, principal),
            (
                Some(Mutant::RotateMemberKeepsClaim),
                AccessRequest::RotateMember { .. },
                Ok(mut d),
            ) => {
                for (k, c) in &st.access.claims {
                    if c.state == ClaimState::Open {
                        d.next.access.claims.insert(*k, c.clone());
                    }
                }
                Ok(d)
            }
            // The rotation mutants: the digest in use is taken for the
            // owner anyway, a tombstone of its own (`RotationRevivesTombstone`)
            // or another principal's row (`RotationTakesAnothersDigest`).
            (
                Some(m @ (Mutant::RotationRevivesTombstone | Mutant::RotationTakesAnothersDigest)),
                AccessRequest::RotateCredential {
                    principal, digest, ..
                },
                Err(AccessError::DigestInUse { .. }),
            ) if st.access.credentials.get(digest.sha()).is_some_and(|c| {
                (c.principal == *principal) == (m == Mutant::RotationRevivesTombstone)
            }) =>
            {
                Ok(take_for(st, principal, digest))
            }
            (
                Some(Mutant::RevokeDeletesClaimRows),
                AccessRequest::RevokeMember { principal },
                Ok(mut d),
            ) => {
                d.next
                    .access
                    .claims
                    .retain(|_, c| c.principal != *principal || c.state == ClaimState::Open);
                Ok(d)
            }
            (
                Some(m @ (Mutant::ClaimRebinds | Mutant::ReplayRevives)),
                AccessRequest::Claim { claim, digest, .. }
                | AccessRequest::ClaimLogin { claim, digest, .. },
                Err(AccessError::Claim(ClaimRefusal::ConflictingClaim {
                    rule: "claimed-by-another",
                })),
            ) => claim_mutant(m, st, req, claim, digest),
            (_, _, real) => real,
        }
    }

    /// The credential kind a lookup of `d` answers: core's `authenticate`,
    /// or the mutant's hash-only match.
    fn lookup(&self, s: &SysState, d: &Digest) -> Option<CredentialKind> {
        if self.mutant == Some(Mutant::LookupIgnoresKind) {
            return s
                .stored
                .access
                .credentials
                .get(d.sha())
                .filter(|c| c.live(s.now))
                .map(|c| c.kind);
        }
        s.stored.access.authenticate(d, s.now).map(|a| a.credential)
    }

    fn delete(&self, st: &CatalogueState, s: u8) -> Option<CatalogueState> {
        let id = session(s);
        let d = catalogue::decide(
            st,
            &catalogue::Request::Delete {
                session_id: id.clone(),
            },
        )
        .ok()?;
        let mut next = d.next;
        if self.mutant == Some(Mutant::DeleteKeepsMemberships) {
            for (k, r) in &st.access.memberships {
                if k.1 == id {
                    next.access.memberships.insert(k.clone(), *r);
                }
            }
        }
        Some(next)
    }

    /// Updates the history monitors for the step `before → after`.
    fn monitor(s: &mut SysState, before: &CatalogueState) {
        let after = &s.stored.access;
        for sha in &s.tombstones {
            if after
                .credentials
                .get(sha)
                .is_none_or(|c| c.state != CredentialState::Revoked)
            {
                s.broken |= rule::TOMBSTONE_REVIVED;
            }
        }
        for (sha, c) in &after.credentials {
            if c.state == CredentialState::Revoked {
                s.tombstones.insert(*sha);
            }
            let first = s
                .owners_of
                .entry(*sha)
                .or_insert_with(|| (c.principal.clone(), c.kind));
            if *first != (c.principal.clone(), c.kind) {
                s.broken |= rule::CREDENTIAL_CHANGED_HANDS;
            }
        }
        for (k, c) in &before.access.claims {
            match after.claims.get(k) {
                None => s.broken |= rule::CLAIM_ROW_CHANGED,
                Some(now) if c.state != ClaimState::Open && now.state != c.state => {
                    s.broken |= rule::CLAIM_ROW_CHANGED;
                }
                Some(_) => {}
            }
        }
        for (k, c) in &after.claims {
            if let ClaimState::Claimed { digest, .. } = c.state {
                let first = *s.bound.entry(*k).or_insert(digest);
                if first != digest {
                    s.broken |= rule::CLAIM_BOUND_AGAIN;
                }
            }
        }
    }
}

/// The `SecondOwner` mutant's decision: a bootstrap of `principal` decided
/// as if no owner existed, with every principal already stored kept as it was.
fn second_owner(
    st: &CatalogueState,
    principal: &str,
    digest: Digest,
    now_ms: u64,
) -> Result<access::AccessDecision, AccessError> {
    // Decide as if no owner existed, keeping the first.
    let mut blind = st.clone();
    for p in blind.access.principals.values_mut() {
        p.kind = PrincipalKind::Member;
    }
    let mut d = access::decide(
        &blind,
        &AccessRequest::BootstrapOwner {
            principal: principal.to_owned(),
            name: None,
            digest,
            now_ms,
        },
    )?;
    for (id, p) in &st.access.principals {
        d.next.access.principals.insert(id.clone(), p.clone());
    }
    Ok(d)
}

/// The `LoginBesideOpenClaim` mutant's decision: `req` decided as if
/// `principal` had no claim, with every stored claim kept as it was.
fn login_beside_claim(
    st: &CatalogueState,
    req: &AccessRequest,
    principal: &str,
) -> Result<access::AccessDecision, AccessError> {
    let mut blind = st.clone();
    blind.access.claims.retain(|_, c| c.principal != principal);
    let mut d = access::decide(&blind, req)?;
    for (k, c) in &st.access.claims {
        d.next.access.claims.insert(*k, c.clone());
    }
    Ok(d)
}

/// The rotation mutants' decision: `digest`'s row is `principal`'s active
/// credential now, and its others are revoked.
fn take_for(st: &CatalogueState, principal: &str, digest: &Digest) -> access::AccessDecision {
    let mut next = st.clone();
    for (sha, c) in &mut next.access.credentials {
        if sha == digest.sha() {
            principal.clone_into(&mut c.principal);
            c.kind = digest.kind();
            c.state = CredentialState::Active;
        } else if c.principal == principal {
            c.state = CredentialState::Revoked;
        }
    }
    access::AccessDecision {
        outcome: AccessOutcome::Done { changed: true },
        effects: access::effect::effects(st, &next),
        next,
    }
}

/// The claim mutants: a claimed row answered as if open (`ClaimRebinds`)
/// or a replay of a revoked credential reactivating it (`ReplayRevives`).
fn claim_mutant(
    m: Mutant,
    st: &CatalogueState,
    req: &AccessRequest,
    claim: &ClaimDigest,
    digest: &Digest,
) -> Result<access::AccessDecision, AccessError> {
    let row = st.access.claims.get(claim).cloned();
    let Some(row) = row else {
        return Err(AccessError::Claim(ClaimRefusal::UnknownClaim));
    };
    let ClaimState::Claimed { digest: was, .. } = row.state else {
        return Err(AccessError::Claim(ClaimRefusal::UnknownClaim));
    };
    let mut next = st.clone();
    if m == Mutant::ReplayRevives && was == *digest {
        if let Some(c) = next.access.credentials.get_mut(digest.sha()) {
            c.state = CredentialState::Active;
        }
        return Ok(access::AccessDecision {
            outcome: AccessOutcome::Claimed {
                principal: row.principal,
                memberships: Vec::new(),
                bound: false,
            },
            effects: access::effect::effects(st, &next),
            next,
        });
    }
    if m == Mutant::ClaimRebinds && was != *digest {
        for c in next.access.credentials.values_mut() {
            if c.principal == row.principal {
                c.state = CredentialState::Revoked;
            }
        }
        if let Some(r) = next.access.claims.get_mut(claim) {
            r.state = ClaimState::Open;
            r.expires_at_ms = u64::MAX;
        }
        let mut d = access::decide(&next, req)?;
        if let Some(r) = d.next.access.claims.get_mut(claim) {
            r.expires_at_ms = row.expires_at_ms;
        }
        return Ok(d);
    }
    Err(AccessError::Claim(ClaimRefusal::ConflictingClaim {
        rule: "claimed-by-another",
    }))
}

impl Model for AccessModel {
    type State = SysState;
    type Action = Action;

    fn init_states(&self) -> Vec<SysState> {
        let mut stored = CatalogueState::default();
        for i in 0..SESSIONS {
            let req = catalogue::Request::Reserve {
                session_id: session(i),
                creation: Creation::local(&format!("key-{i}"), "name", "/w"),
                now: 0,
            };
            if let Ok(d) = catalogue::decide(&stored, &req) {
                stored = d.next;
            }
        }
        vec![SysState {
            stored,
            now: 0,
            steps: 0,
            tombstones: BTreeSet::new(),
            owners_of: BTreeMap::new(),
            bound: BTreeMap::new(),
            broken: 0,
            seen: 0,
        }]
    }

    fn actions(&self, s: &SysState, out: &mut Vec<Action>) {
        if s.broken != 0 || s.steps >= self.max_steps {
            return;
        }
        let members = 1..=self.members;
        for t in 0..TOKENS {
            out.push(Action::Bootstrap { p: 0, t });
            out.push(Action::Bootstrap { p: 1, t });
            out.push(Action::Rotate { t });
            for p in 0..=self.members {
                out.push(Action::IssueLogin { p, t });
            }
            for c in 0..CLAIMS {
                out.push(Action::Claim { c, t, login: false });
                out.push(Action::Claim { c, t, login: true });
            }
        }
        let enrolls: Vec<Enroll> = (0..CLAIMS)
            .map(Enroll::Claim)
            .chain((0..TOKENS).map(Enroll::Digest))
            .collect();
        for m in members {
            for &e in &enrolls {
                out.push(Action::Invite { m, s: 0, e });
                out.push(Action::RotateMember { m, e });
            }
            out.push(Action::RevokeMember { m });
            out.push(Action::Grant { m, s: 1 });
        }
        for p in 0..=self.members {
            out.push(Action::RevokeLogins { p });
        }
        out.push(Action::Delete { s: 0 });
        if s.now < EXPIRY {
            out.push(Action::Tick);
        }
    }

    fn next_state(&self, s: &SysState, action: Action) -> Option<SysState> {
        let mut next = s.clone();
        match action {
            Action::Tick => {
                next.now += 1;
                return Some(next);
            }
            Action::Delete { s: sess } => {
                let id = session(sess);
                let had = s.stored.access.memberships.keys().any(|k| k.1 == id);
                next.stored = self.delete(&s.stored, sess)?;
                if had {
                    next.seen |= seen::MEMBERSHIP_DELETED;
                }
            }
            _ => {
                let req = self.request(s, action)?;
                let d = self.decide(&s.stored, &req).ok()?;
                match (&d.outcome, action) {
                    (AccessOutcome::Claimed { bound: true, .. }, Action::Claim { login, .. }) => {
                        next.seen |= seen::CLAIM_BOUND;
                        if login {
                            next.seen |= seen::LOGIN_CLAIM_BOUND;
                        }
                    }
                    (AccessOutcome::Claimed { bound: false, .. }, _) => {
                        next.seen |= seen::REPLAY_ANSWERED;
                    }
                    (AccessOutcome::Done { changed: true }, Action::Rotate { .. }) => {
                        next.seen |= seen::OWNER_ROTATED;
                    }
                    (AccessOutcome::Done { changed: true }, Action::IssueLogin { .. }) => {
                        next.seen |= seen::LOGIN_ISSUED;
                    }
                    _ => {}
                }
                // The reply to an invitation may be lost: its retry, asked
                // at once, must succeed (`Done`, nothing changed) and write
                // nothing.
                if matches!(action, Action::Invite { .. }) && d.next != s.stored {
                    let retry = self.decide(&d.next, &req);
                    if !retry.as_ref().is_ok_and(|r| {
                        r.outcome == AccessOutcome::Done { changed: false }
                            && r.next == d.next
                            && r.effects.is_empty()
                    }) {
                        next.broken |= rule::INVITE_RETRY;
                    }
                }
                next.stored = d.next;
            }
        }
        if next.stored != s.stored {
            next.steps += 1;
            Self::monitor(&mut next, &s.stored);
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![Property::<Self>::always(
            "a retried invitation succeeds and writes nothing",
            |_, s| s.broken & rule::INVITE_RETRY == 0,
        )];
        properties.extend(rules_and_answers());
        properties
    }
}

/// Every property but the retry's, in report order.
fn rules_and_answers() -> Vec<Property<AccessModel>> {
    type P = Property<AccessModel>;
    {
        vec![
            P::always("there is at most one owner", |_, s| {
                s.stored
                    .access
                    .principals
                    .values()
                    .filter(|p| p.kind == PrincipalKind::Owner)
                    .count()
                    <= 1
            }),
            P::always(
                "a member has one open claim and no active credential, or no open claim",
                |_, s| {
                    s.stored.access.principals.keys().all(|p| {
                        let open = open_claims_of(&s.stored, p);
                        open == 0 || (open == 1 && !active_of(&s.stored, p))
                    })
                },
            ),
            P::always("a revoked digest stays a tombstone", |_, s| {
                s.broken & rule::TOMBSTONE_REVIVED == 0
            }),
            P::always("a claim binds one digest, once", |_, s| {
                s.broken & rule::CLAIM_BOUND_AGAIN == 0
            }),
            P::always(
                "a spent or voided claim row is never deleted or reopened",
                |_, s| s.broken & rule::CLAIM_ROW_CHANGED == 0,
            ),
            P::always("a credential keeps its principal and its kind", |_, s| {
                s.broken & rule::CREDENTIAL_CHANGED_HANDS == 0
            }),
            P::always(
                "every membership names a session the catalogue holds",
                |_, s| {
                    s.stored
                        .access
                        .memberships
                        .keys()
                        .all(|(_, sess)| s.stored.sessions.contains_key(sess))
                },
            ),
            P::always(
                "a lookup finds only a row of the digest's own kind",
                |m, s| {
                    (0..TOKENS).all(|t| {
                        [bearer(t), browser(t)]
                            .iter()
                            .all(|d| m.lookup(s, d).is_none_or(|k| k == d.kind()))
                    })
                },
            ),
            P::sometimes("a claim is bound", |_, s| s.seen & seen::CLAIM_BOUND != 0),
            P::sometimes("a claim is bound as a login", |_, s| {
                s.seen & seen::LOGIN_CLAIM_BOUND != 0
            }),
            P::sometimes("a replay of a lost reply is answered", |_, s| {
                s.seen & seen::REPLAY_ANSWERED != 0
            }),
            P::sometimes("the owner's credential is rotated", |_, s| {
                s.seen & seen::OWNER_ROTATED != 0
            }),
            P::sometimes("a login is issued", |_, s| s.seen & seen::LOGIN_ISSUED != 0),
            P::sometimes("a session deletion takes its memberships", |_, s| {
                s.seen & seen::MEMBERSHIP_DELETED != 0
            }),
        ]
    }
}

impl crate::family::MutantModel for AccessModel {
    type Mutant = Mutant;
    const NAME: &'static str = "access";
    const SUMMARY: &'static str = "principals, credentials and claims: one owner, tombstones stay, a claim binds once, a member holds a claim or a credential, memberships name held sessions";

    fn at(bound: Bound) -> Result<Self, String> {
        Ok(match bound {
            Bound::Ci => AccessModel {
                members: 1,
                max_steps: 4,
                mutant: None,
            },
            Bound::Deep => AccessModel {
                members: 2,
                max_steps: 6,
                mutant: None,
            },
        })
    }

    fn mutant_slot(&mut self) -> &mut Option<Mutant> {
        &mut self.mutant
    }

    fn describe_bound(&self) -> String {
        format!(
            "owner + {} member(s), {SESSIONS} sessions, {TOKENS} tokens (bearer or browser), {CLAIMS} claims, clock 0..={EXPIRY}, <= {} state-changing writes",
            self.members, self.max_steps
        )
    }
}
