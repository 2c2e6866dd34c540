//! The access plane over a backend's rows: what each read and each write
//! loads, written once.
//!
//! A backend that keeps the access plane in rows implements
//! [`AccessRows`]: the catalogue revision and the row sets an
//! [`AccessLoad`] names, put into a partial [`CatalogueState`]. Which row
//! sets a write's footprint needs, in which order
//! ([`AccessFootprint::loads`], then [`whole`] for every principal
//! [`AccessFootprint::named`] finds), and which a read needs ([`reads`]),
//! are here; the answer is the state's, which the partial state gives
//! exactly as the whole one would. A backend writes one statement per
//! load (and may send a batch together: [`AccessRows::load_all`]).
//!
//! The authentication probe is not here: it is one statement each backend
//! writes for speed, and [`AccessState::authenticate`](crate::catalogue::access::AccessState::authenticate) answers it.

use std::collections::BTreeSet;

use super::{
    is_principal_id, named_principals, owner_row, Access, AccessError, AccessFootprint,
    AccessOutcome, AccessRequest, Authority, Authorization, ClaimDigest, Digest, ListingPage,
    MembershipPage, SessionMemberPage, SigninPage,
};
use crate::catalogue::{is_session_id, CatalogueState};
use crate::digest::Sha256;

use super::read::page_window;

/// Which principal rows a load reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Principals<'a> {
    /// The owner's row (kind `owner`).
    Owner,
    /// The principal with this id.
    Id(&'a str),
    /// The principals with these ids.
    Ids(&'a [String]),
    /// One page of the listing: ids after `after` in id order, at most
    /// `fetch` rows.
    Page {
        /// Only ids greater than this one.
        after: Option<&'a str>,
        /// The most rows to read.
        fetch: u64,
    },
}

/// Which credential rows a load reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Credentials<'a> {
    /// The credential with this hash (either kind).
    Hash(&'a Sha256),
    /// The credential with this hash and kind (a row whose stored kind is
    /// outside the grammar is read too, so it decodes as corrupt). A
    /// backend may put the principal it names in beside it (one joined
    /// statement, as its authentication probe reads); the reads then do
    /// not load that principal again.
    Digest(&'a Digest),
    /// Every browser login.
    Logins,
    /// Every credential of this principal.
    Of(&'a str),
    /// The credentials of these principals that are neither revoked nor
    /// expired at `now_ms` (a row whose state or expiry breaks the grammar
    /// is read too).
    Listed {
        /// The principals.
        ids: &'a [String],
        /// The time they are judged at.
        now_ms: u64,
    },
    /// One page of a principal's sign-ins: its credentials other than
    /// bearer tokens, neither revoked nor expired at `now_ms`, whose
    /// fingerprint is after `after`, in digest order, at most `fetch`.
    Signins {
        /// The principal.
        principal: &'a str,
        /// The time they are judged at.
        now_ms: u64,
        /// Only fingerprints greater than this one.
        after: Option<&'a str>,
        /// The most rows to read.
        fetch: u64,
    },
}

/// Which claim rows a load reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Claims<'a> {
    /// The claim with this digest.
    Claim(&'a ClaimDigest),
    /// Every claim of this principal.
    Of(&'a str),
    /// The claims of these principals that are neither claimed nor void.
    Open(&'a [String]),
}

/// Which membership rows a load reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Memberships<'a> {
    /// Every membership of this principal.
    Of(&'a str),
    /// The membership of a principal in a session.
    In {
        /// The principal.
        principal: &'a str,
        /// The session.
        session: &'a str,
    },
    /// One page of a principal's memberships, in session order.
    OfPage {
        /// The principal.
        principal: &'a str,
        /// Only sessions greater than this one.
        after: Option<&'a str>,
        /// The most rows to read.
        fetch: u64,
    },
    /// One page of a session's members, in principal order.
    InPage {
        /// The session.
        session: &'a str,
        /// Only principals greater than this one.
        after: Option<&'a str>,
        /// The most rows to read.
        fetch: u64,
    },
}

/// One set of rows a backend loads into a partial state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessLoad<'a> {
    /// Principal rows.
    Principals(Principals<'a>),
    /// Credential rows.
    Credentials(Credentials<'a>),
    /// Claim rows.
    Claims(Claims<'a>),
    /// Membership rows.
    Memberships(Memberships<'a>),
    /// The catalogue's session rows with these ids.
    Sessions(&'a [String]),
}

/// A backend's access rows, read inside one transaction.
pub trait AccessRows {
    /// The backend's error; a refusal of core's is one of them.
    type Error: From<AccessError>;

    /// Puts the catalogue revision into `s`.
    fn revision(&mut self, s: &mut CatalogueState) -> Result<(), Self::Error>;

    /// Puts the rows `load` names into `s`.
    fn load(&mut self, load: AccessLoad<'_>, s: &mut CatalogueState) -> Result<(), Self::Error>;

    /// Puts the rows of every load into `s`, in order (a backend may send
    /// them together; by default, one after another).
    fn load_all(
        &mut self,
        loads: &[AccessLoad<'_>],
        s: &mut CatalogueState,
    ) -> Result<(), Self::Error> {
        loads.iter().try_for_each(|l| self.load(*l, s))
    }

    /// The time a read judges expiries at, read first in the read's
    /// snapshot: the caller's `now_ms` by default; a backend that judges
    /// by its server's clock answers that clock instead.
    fn now(&mut self, now_ms: u64) -> Result<u64, Self::Error> {
        Ok(now_ms)
    }
}

/// A read over the access rows of one transaction
/// ([`RowsAccess::read_access_rows`]).
pub type AccessRead<'f, T, E> = dyn FnMut(&mut dyn AccessRows<Error = E>) -> Result<T, E> + 'f;

/// An access plane kept in a backend's rows. Implement this, and
/// [`Access`] follows: every read but `authenticate` is the [`reads`]
/// function of the same name over the rows of one read transaction (a
/// malformed id answered by [`reads::early`] before a read is opened),
/// and a write is the backend's own transaction (its head lock,
/// [`load_footprint`], [`decide`](super::decide), its effects applied in
/// order).
pub trait RowsAccess {
    /// The error of the backend's access rows; the read's end maps it to
    /// an [`AccessError`].
    type AccessRowsError: From<AccessError>;

    /// Decides and persists one access request atomically
    /// ([`Access::apply_access`]).
    fn write_access(&self, req: &AccessRequest) -> Result<AccessOutcome, AccessError>;

    /// Who a digest authenticates ([`Access::authenticate`]): the one
    /// probe each backend writes for speed, answered by
    /// [`AccessState::authenticate`](crate::catalogue::access::AccessState::authenticate).
    fn authenticate_probe(
        &self,
        digest: &Digest,
        now_ms: u64,
    ) -> Result<Option<Authority>, AccessError>;

    /// Runs `f` over the access rows of one read transaction. A backend
    /// that retries a busy read may call `f` again; `f` writes nothing.
    fn read_access_rows<T>(
        &self,
        f: &mut AccessRead<'_, T, Self::AccessRowsError>,
    ) -> Result<T, AccessError>;
}

impl<B: RowsAccess> Access for B {
    fn apply_access(&self, req: &AccessRequest) -> Result<AccessOutcome, AccessError> {
        self.write_access(req)
    }

    fn owner(&self) -> Result<Option<(String, Option<String>)>, AccessError> {
        self.read_access_rows(&mut |r| reads::owner(r))
    }

    fn authenticate(&self, digest: &Digest, now_ms: u64) -> Result<Option<Authority>, AccessError> {
        self.authenticate_probe(digest, now_ms)
    }

    fn authorization(
        &self,
        digest: &Digest,
        session_id: &str,
        now_ms: u64,
    ) -> Result<Option<Authorization>, AccessError> {
        self.read_access_rows(&mut |r| reads::authorization(r, digest, session_id, now_ms))
    }

    fn claim_known(&self, claim: &ClaimDigest) -> Result<bool, AccessError> {
        self.read_access_rows(&mut |r| reads::claim_known(r, claim))
    }

    fn principals_page(
        &self,
        after: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Result<ListingPage, AccessError> {
        self.read_access_rows(&mut |r| reads::principals_page(r, after, limit, now_ms))
    }

    fn memberships_page(
        &self,
        principal: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<MembershipPage, AccessError> {
        if let Some(answer) = reads::early::memberships_page(principal, after, limit) {
            return answer;
        }
        self.read_access_rows(&mut |r| reads::memberships_page(r, principal, after, limit))
    }

    fn session_members_page(
        &self,
        session_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<SessionMemberPage, AccessError> {
        if let Some(answer) = reads::early::session_members_page(session_id, after, limit) {
            return answer;
        }
        self.read_access_rows(&mut |r| reads::session_members_page(r, session_id, after, limit))
    }

    fn signins_page(
        &self,
        principal: &str,
        after: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Result<SigninPage, AccessError> {
        if let Some(answer) = reads::early::signins_page(principal, after, limit, now_ms) {
            return answer;
        }
        self.read_access_rows(&mut |r| reads::signins_page(r, principal, after, limit, now_ms))
    }
}

impl AccessFootprint {
    /// The row sets a write reads first (after the head): the owner's row,
    /// the credentials and claims the request names, every login when
    /// asked, and the catalogue sessions it checks.
    pub fn loads(&self) -> Vec<AccessLoad<'_>> {
        let mut out = Vec::new();
        if self.owner {
            out.push(AccessLoad::Principals(Principals::Owner));
        }
        out.extend(
            self.digests
                .iter()
                .map(|d| AccessLoad::Credentials(Credentials::Hash(d))),
        );
        out.extend(
            self.claims
                .iter()
                .map(|c| AccessLoad::Claims(Claims::Claim(c))),
        );
        if self.all_logins {
            out.push(AccessLoad::Credentials(Credentials::Logins));
        }
        if !self.sessions.is_empty() {
            out.push(AccessLoad::Sessions(&self.sessions));
        }
        out
    }

    /// Every principal a write reads whole, once [`AccessFootprint::loads`]
    /// are in `s`: those the request names, the owner, and those the
    /// loaded credentials and claims name.
    pub fn named(&self, s: &CatalogueState) -> BTreeSet<String> {
        let mut named: BTreeSet<String> = self.principals.iter().cloned().collect();
        if self.owner {
            named.extend(owner_row(&s.access).map(|(id, _)| id.clone()));
        }
        named.extend(named_principals(&s.access));
        named
    }
}

/// The row sets of each principal of `ids`, whole: its row, credentials,
/// claims and memberships.
pub fn whole(ids: &BTreeSet<String>) -> Vec<AccessLoad<'_>> {
    ids.iter()
        .flat_map(|id| {
            [
                AccessLoad::Principals(Principals::Id(id)),
                AccessLoad::Credentials(Credentials::Of(id)),
                AccessLoad::Claims(Claims::Of(id)),
                AccessLoad::Memberships(Memberships::Of(id)),
            ]
        })
        .collect()
}

/// The partial state a write decides on: the revision, the footprint's
/// row sets, then every principal they name, whole. Equal to
/// [`AccessFootprint::partial`] of the whole state.
pub fn load_footprint<R: AccessRows + ?Sized>(
    rows: &mut R,
    fp: &AccessFootprint,
) -> Result<CatalogueState, R::Error> {
    let mut s = CatalogueState::default();
    rows.revision(&mut s)?;
    rows.load_all(&fp.loads(), &mut s)?;
    let named = fp.named(&s);
    rows.load_all(&whole(&named), &mut s)?;
    Ok(s)
}

fn window(limit: usize) -> u64 {
    u64::try_from(page_window(limit)).unwrap_or(u64::MAX)
}

/// The access plane's reads over a backend's rows: each loads the row
/// sets it needs into an empty state and answers as [`AccessState`](crate::catalogue::access::AccessState)'s or
/// [`CatalogueState`]'s method of the same name. A malformed id is
/// answered before anything is read. A read judged by time judges at
/// [`AccessRows::now`], read first in the same snapshot.
pub mod reads {
    use super::*;

    /// [`AccessState::owner`](crate::catalogue::access::AccessState::owner).
    pub fn owner<R: AccessRows + ?Sized>(
        rows: &mut R,
    ) -> Result<Option<(String, Option<String>)>, R::Error> {
        let mut s = CatalogueState::default();
        rows.load(AccessLoad::Principals(Principals::Owner), &mut s)?;
        Ok(s.access.owner())
    }

    /// [`CatalogueState::authorization`]: the credential and its
    /// principal; nothing more when it authenticates no one; else the
    /// session and the principal's membership in it.
    pub fn authorization<R: AccessRows + ?Sized>(
        rows: &mut R,
        digest: &Digest,
        session_id: &str,
        now_ms: u64,
    ) -> Result<Option<Authorization>, R::Error> {
        let now_ms = rows.now(now_ms)?;
        let mut s = CatalogueState::default();
        rows.load(AccessLoad::Credentials(Credentials::Digest(digest)), &mut s)?;
        let named: Vec<String> = named_principals(&s.access)
            .into_iter()
            .filter(|id| !s.access.principals.contains_key(id))
            .collect();
        if !named.is_empty() {
            rows.load(AccessLoad::Principals(Principals::Ids(&named)), &mut s)?;
        }
        let Some(who) = s.access.authenticate(digest, now_ms) else {
            return Ok(None);
        };
        let session = [session_id.to_owned()];
        rows.load_all(
            &[
                AccessLoad::Sessions(&session),
                AccessLoad::Memberships(Memberships::In {
                    principal: &who.principal,
                    session: session_id,
                }),
            ],
            &mut s,
        )?;
        Ok(s.authorization(digest, session_id, now_ms))
    }

    /// [`AccessState::claim_known`](crate::catalogue::access::AccessState::claim_known).
    pub fn claim_known<R: AccessRows + ?Sized>(
        rows: &mut R,
        claim: &ClaimDigest,
    ) -> Result<bool, R::Error> {
        let mut s = CatalogueState::default();
        rows.load(AccessLoad::Claims(Claims::Claim(claim)), &mut s)?;
        Ok(s.access.claim_known(claim))
    }

    /// [`AccessState::principals_page`](crate::catalogue::access::AccessState::principals_page): a window of principals, then the
    /// live credentials and open claims of those.
    pub fn principals_page<R: AccessRows + ?Sized>(
        rows: &mut R,
        after: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Result<ListingPage, R::Error> {
        let now_ms = rows.now(now_ms)?;
        let mut s = CatalogueState::default();
        let fetch = window(limit);
        rows.load(
            AccessLoad::Principals(Principals::Page { after, fetch }),
            &mut s,
        )?;
        let ids: Vec<String> = s.access.principals.keys().cloned().collect();
        if !ids.is_empty() {
            rows.load_all(
                &[
                    AccessLoad::Credentials(Credentials::Listed { ids: &ids, now_ms }),
                    AccessLoad::Claims(Claims::Open(&ids)),
                ],
                &mut s,
            )?;
        }
        Ok(s.access.principals_page(after, limit, now_ms))
    }

    /// [`CatalogueState::memberships_page`]: the principal, a window of its
    /// memberships, then the sessions those name.
    pub fn memberships_page<R: AccessRows + ?Sized>(
        rows: &mut R,
        principal: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<MembershipPage, R::Error> {
        if let Some(answer) = early::memberships_page(principal, after, limit) {
            return Ok(answer?);
        }
        let mut s = CatalogueState::default();
        let page = Memberships::OfPage {
            principal,
            after,
            fetch: window(limit),
        };
        rows.load_all(
            &[
                AccessLoad::Principals(Principals::Id(principal)),
                AccessLoad::Memberships(page),
            ],
            &mut s,
        )?;
        let ids: Vec<String> = s
            .access
            .memberships
            .keys()
            .map(|(_, id)| id.clone())
            .collect();
        if !ids.is_empty() {
            rows.load(AccessLoad::Sessions(&ids), &mut s)?;
        }
        Ok(s.memberships_page(principal, after, limit)?)
    }

    /// [`CatalogueState::session_members_page`]: the session, a window of
    /// its members, then the principals those name.
    pub fn session_members_page<R: AccessRows + ?Sized>(
        rows: &mut R,
        session_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<SessionMemberPage, R::Error> {
        if let Some(answer) = early::session_members_page(session_id, after, limit) {
            return Ok(answer?);
        }
        let mut s = CatalogueState::default();
        let session = [session_id.to_owned()];
        let page = Memberships::InPage {
            session: session_id,
            after,
            fetch: window(limit),
        };
        rows.load_all(
            &[
                AccessLoad::Sessions(&session),
                AccessLoad::Memberships(page),
            ],
            &mut s,
        )?;
        let ids: Vec<String> = s
            .access
            .memberships
            .keys()
            .map(|(p, _)| p.clone())
            .collect();
        if !ids.is_empty() {
            rows.load(AccessLoad::Principals(Principals::Ids(&ids)), &mut s)?;
        }
        Ok(s.session_members_page(session_id, after, limit)?)
    }

    /// [`AccessState::signins_page`](crate::catalogue::access::AccessState::signins_page): the principal and a window of its
    /// live sign-ins.
    pub fn signins_page<R: AccessRows + ?Sized>(
        rows: &mut R,
        principal: &str,
        after: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Result<SigninPage, R::Error> {
        if let Some(answer) = early::signins_page(principal, after, limit, now_ms) {
            return Ok(answer?);
        }
        let now_ms = rows.now(now_ms)?;
        let mut s = CatalogueState::default();
        let page = Credentials::Signins {
            principal,
            now_ms,
            after,
            fetch: window(limit),
        };
        rows.load_all(
            &[
                AccessLoad::Principals(Principals::Id(principal)),
                AccessLoad::Credentials(page),
            ],
            &mut s,
        )?;
        Ok(s.access.signins_page(principal, after, limit, now_ms)?)
    }

    /// The answers that need no row: a read naming an id no row can have
    /// answers from nothing (`Some`), and a backend may give it before it
    /// opens a read or takes a connection; `None` when rows are needed.
    /// The reads above call these first.
    pub mod early {
        use super::*;

        /// [`super::memberships_page`] of a malformed principal id.
        pub fn memberships_page(
            principal: &str,
            after: Option<&str>,
            limit: usize,
        ) -> Option<Result<MembershipPage, AccessError>> {
            (!is_principal_id(principal))
                .then(|| CatalogueState::default().memberships_page(principal, after, limit))
        }

        /// [`super::session_members_page`] of a malformed session id.
        pub fn session_members_page(
            session_id: &str,
            after: Option<&str>,
            limit: usize,
        ) -> Option<Result<SessionMemberPage, AccessError>> {
            (!is_session_id(session_id))
                .then(|| CatalogueState::default().session_members_page(session_id, after, limit))
        }

        /// [`super::signins_page`] of a malformed principal id.
        pub fn signins_page(
            principal: &str,
            after: Option<&str>,
            limit: usize,
            now_ms: u64,
        ) -> Option<Result<SigninPage, AccessError>> {
            (!is_principal_id(principal)).then(|| {
                crate::catalogue::access::AccessState::default()
                    .signins_page(principal, after, limit, now_ms)
            })
        }
    }
}
