//! The access plane's row writes: what [`super::decide`] hands a backend to
//! apply, in order, inside the deciding transaction.
//!
//! [`effects`] names every row a decision changes, one [`Effect`] per row,
//! in the order a backend with foreign keys and partial unique indexes can
//! apply them one statement at a time: the catalogue revision; removals,
//! children before parents (memberships, claims, credentials, principals);
//! then writes, parents before children (principals, credentials, claims,
//! memberships), and within each table the rows that existed are rewritten
//! before new rows are inserted, so a voided claim leaves the
//! one-open-claim index before its replacement arrives. A backend keeps no
//! diff and no ordering rule of its own; the memory backend applies the
//! effects with [`apply`], and a property test holds that they turn the
//! loaded rows into the decided state.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ClaimDigest, ClaimRow, CredentialRow, PrincipalRow, Role, Sha256};
use crate::catalogue::CatalogueState;

/// One row write of the access plane.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Effect {
    /// Set the catalogue revision (the access plane shares it).
    SetRevision(u64),
    /// Remove a membership row.
    DeleteMembership {
        /// The principal.
        principal: String,
        /// The session.
        session: String,
    },
    /// Remove a claim row.
    DeleteClaim(ClaimDigest),
    /// Remove a credential row.
    DeleteCredential(Sha256),
    /// Remove a principal row.
    DeletePrincipal(String),
    /// Insert or replace a principal row.
    PutPrincipal(String, PrincipalRow),
    /// Insert or replace a credential row.
    PutCredential(Sha256, CredentialRow),
    /// Insert or replace a claim row.
    PutClaim(ClaimDigest, ClaimRow),
    /// Insert or replace a membership row.
    PutMembership {
        /// The principal.
        principal: String,
        /// The session.
        session: String,
        /// The role.
        role: Role,
    },
}

/// The effects that turn `before` (the rows an access request loaded) into
/// `next` (the state it decided), in order (see the module docs).
pub fn effects(before: &CatalogueState, next: &CatalogueState) -> Vec<Effect> {
    let mut out = Vec::new();
    if before.revision != next.revision {
        out.push(Effect::SetRevision(next.revision));
    }
    removals(before, next, &mut out);
    writes(before, next, &mut out);
    out
}

/// The access rows `next` no longer holds, children before parents.
pub fn removals(before: &CatalogueState, next: &CatalogueState, out: &mut Vec<Effect>) {
    let (b, n) = (&before.access, &next.access);
    for (p, s) in b.memberships.keys() {
        if !n.memberships.contains_key(&(p.clone(), s.clone())) {
            out.push(Effect::DeleteMembership {
                principal: p.clone(),
                session: s.clone(),
            });
        }
    }
    for k in b.claims.keys().filter(|k| !n.claims.contains_key(*k)) {
        out.push(Effect::DeleteClaim(*k));
    }
    for k in b.credentials.keys() {
        if !n.credentials.contains_key(k) {
            out.push(Effect::DeleteCredential(*k));
        }
    }
    for k in b.principals.keys() {
        if !n.principals.contains_key(k) {
            out.push(Effect::DeletePrincipal(k.clone()));
        }
    }
}

/// Rows that existed first, then new ones (see the module docs).
fn changed_first<'a, K: Ord, V: PartialEq>(
    before: &'a BTreeMap<K, V>,
    next: &'a BTreeMap<K, V>,
) -> impl Iterator<Item = (&'a K, &'a V)> {
    [true, false].into_iter().flat_map(move |existed| {
        next.iter().filter(move |(k, v)| {
            let prev = before.get(*k);
            prev.is_some() == existed && prev != Some(*v)
        })
    })
}

/// The access rows `next` writes, parents before children.
pub fn writes(before: &CatalogueState, next: &CatalogueState, out: &mut Vec<Effect>) {
    let (b, n) = (&before.access, &next.access);
    for (id, p) in changed_first(&b.principals, &n.principals) {
        out.push(Effect::PutPrincipal(id.clone(), p.clone()));
    }
    for (sha, c) in changed_first(&b.credentials, &n.credentials) {
        out.push(Effect::PutCredential(*sha, c.clone()));
    }
    for (k, c) in changed_first(&b.claims, &n.claims) {
        out.push(Effect::PutClaim(*k, c.clone()));
    }
    for ((p, s), r) in &n.memberships {
        if b.memberships.get(&(p.clone(), s.clone())) != Some(r) {
            out.push(Effect::PutMembership {
                principal: p.clone(),
                session: s.clone(),
                role: *r,
            });
        }
    }
}

/// Applies one effect to a state, as a backend applies it to its rows (the
/// memory backend's writer and the SQL backends' oracle).
pub fn apply(s: &mut CatalogueState, e: &Effect) {
    let a = &mut s.access;
    match e {
        Effect::SetRevision(r) => s.revision = *r,
        Effect::DeleteMembership { principal, session } => {
            a.memberships.remove(&(principal.clone(), session.clone()));
        }
        Effect::DeleteClaim(k) => {
            a.claims.remove(k);
        }
        Effect::DeleteCredential(k) => {
            a.credentials.remove(k);
        }
        Effect::DeletePrincipal(k) => {
            a.principals.remove(k);
        }
        Effect::PutPrincipal(k, p) => {
            a.principals.insert(k.clone(), p.clone());
        }
        Effect::PutCredential(k, c) => {
            a.credentials.insert(*k, c.clone());
        }
        Effect::PutClaim(k, c) => {
            a.claims.insert(*k, c.clone());
        }
        Effect::PutMembership {
            principal,
            session,
            role,
        } => {
            a.memberships
                .insert((principal.clone(), session.clone()), *role);
        }
    }
}
