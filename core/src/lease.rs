//! The expiring, fenced writer lease: the single-writer rule of a session file.
//!
//! One slot per store. An owner *acquires* the slot and receives a **fence**
//! (a number strictly above every fence the slot ever issued) and an expiry.
//! Every commit carries the committer's `(owner, fence)`; it is admitted only
//! while that exact pair holds the slot and the lease has not expired, and an
//! admitted commit renews the lease. Anyone may *steal* an expired lease; the
//! steal bumps the fence, so the previous holder — perhaps a process paused in
//! a garbage collection that still believes it owns the store — is refused
//! with [`LeaseError::LeaseLost`] on its next commit, renew or release.
//!
//! The machine is pure: `now` is an input of every request and nothing here
//! reads a clock. A shell opens its write transaction, loads [`LeaseState`],
//! calls [`decide`], writes [`Decision::next`] back in the same transaction and
//! commits.
//!
//! ## Time
//!
//! A lease acquired or renewed at `now` with `ttl` is valid for
//! `now <= t < now + ttl`: at `t = expires_at` it has expired. A lease is
//! therefore a half-open interval, and the intervals of two different
//! `(owner, fence)` pairs never overlap (proved in `custos-models`).
//!
//! ## The fence high-water mark
//!
//! The stored state keeps the highest fence ever issued even when the slot is
//! free ([`LeaseState::fence_high_water`]). Without it, a released slot would
//! hand fence 1 out again, and a paused process that still holds `(a, 1)` would
//! be admitted again the moment a new process with the same owner name
//! acquired the free slot.
//!
//! ## Releasing without the fence
//!
//! [`Request::Release`] deletes only the caller's exact `(owner, fence)`.
//! [`Request::ReleaseByOwner`] deletes the owner's lease under whichever
//! fence: for an owner name that names one operation and a caller that
//! lost the fence (an export's claim, released by the operation after a
//! restart). Both keep the high-water mark, so neither lets a fence be
//! issued twice, and neither touches another owner's lease.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::Millis;

/// A fence: the generation number of a lease. Strictly increasing per slot.
pub type Fence = u64;

/// The longest owner name accepted, in bytes.
pub const MAX_OWNER_LEN: usize = 128;

/// The name of a lease owner: non-empty, at most [`MAX_OWNER_LEN`] bytes, no
/// control characters. Two processes with the same owner name are the same
/// owner as far as the lease is concerned; fences tell their incarnations apart.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Owner(String);

impl Owner {
    /// Validates and wraps an owner name.
    pub fn new(name: impl Into<String>) -> Result<Self, LeaseError> {
        let name = name.into();
        if name.is_empty() || name.len() > MAX_OWNER_LEN || name.chars().any(char::is_control) {
            return Err(LeaseError::InvalidOwner { len: name.len() });
        }
        Ok(Owner(name))
    }

    /// The owner name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Owner {
    type Error = LeaseError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Owner::new(value)
    }
}

impl From<Owner> for String {
    fn from(value: Owner) -> Self {
        value.0
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A held lease: who holds the slot, under which fence, until when.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Lease {
    /// The holder.
    pub owner: Owner,
    /// The holder's fence.
    pub fence: Fence,
    /// First instant at which the lease is expired.
    pub expires_at: Millis,
}

impl Lease {
    /// Whether the lease is still valid at `now`.
    pub fn is_live(&self, now: Millis) -> bool {
        now < self.expires_at
    }

    /// Whether this lease is exactly the pair `(owner, fence)`.
    pub fn is_pair(&self, owner: &Owner, fence: Fence) -> bool {
        self.owner == *owner && self.fence == fence
    }
}

/// The stored state of one lease slot: exactly what a shell persists.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LeaseState {
    /// The current holder, if any (it may have expired).
    pub holder: Option<Lease>,
    /// The highest fence this slot ever issued; 0 before the first acquire.
    pub fence_high_water: Fence,
}

/// A request to the lease machine. Every input from outside is here,
/// including the caller's clock reading.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Request {
    /// Take the slot: free, expired, or (same owner) a restart of the holder.
    Acquire {
        /// Who asks.
        owner: Owner,
        /// The caller's clock.
        now: Millis,
        /// How long the lease lasts; must be positive.
        ttl: Millis,
    },
    /// Extend the lease of the exact current pair while it is unexpired.
    Renew {
        /// Who asks.
        owner: Owner,
        /// The fence the caller believes it holds.
        fence: Fence,
        /// The caller's clock.
        now: Millis,
        /// The new lifetime from `now`; must be positive.
        ttl: Millis,
    },
    /// Admit a commit for the exact current pair while unexpired; renews.
    Commit {
        /// Who asks.
        owner: Owner,
        /// The fence the caller believes it holds.
        fence: Fence,
        /// The caller's clock.
        now: Millis,
        /// The renewed lifetime from `now`; must be positive.
        ttl: Millis,
    },
    /// Give the slot up — only if the caller's exact pair holds it.
    Release {
        /// Who asks.
        owner: Owner,
        /// The fence the caller holds.
        fence: Fence,
    },
    /// Give the slot up if `owner` holds it, under **whichever fence** (any
    /// incarnation of the owner, its lease expired or not); another owner's
    /// lease, expired or not, is left alone.
    ///
    /// For a caller that no longer knows its fence: an owner name that
    /// names one operation (an export's `move:<op>`), whose every
    /// incarnation is the same claimant, released after a restart. It is
    /// [`Request::Release`] without the fence check, so it also deletes
    /// the lease of the owner's *newest* incarnation — never use it for an
    /// owner name that independent processes share (the model's
    /// `release-by-owner-regardless-of-fence` mutant shows what that costs
    /// a fenced release; `release-by-owner-of-any-holder` shows why the
    /// owner check stays).
    ReleaseByOwner {
        /// The owner whose lease is released.
        owner: Owner,
    },
}

/// What a successful request did.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// The slot was taken. `replaced` is the lease it displaced: an expired
    /// lease of any owner (a steal), or the caller's own earlier incarnation.
    Acquired {
        /// The new lease.
        lease: Lease,
        /// The lease this acquisition displaced, if any.
        replaced: Option<Lease>,
    },
    /// The lease was renewed.
    Renewed {
        /// The renewed lease.
        lease: Lease,
    },
    /// The commit is admitted and the lease renewed.
    Admitted {
        /// The renewed lease.
        lease: Lease,
    },
    /// The caller's own lease was deleted (its pair for
    /// [`Request::Release`], its owner's for [`Request::ReleaseByOwner`]).
    Released,
    /// The caller's pair (or, for [`Request::ReleaseByOwner`], its owner)
    /// no longer holds the slot; nothing was deleted. Release is
    /// idempotent, and a stale owner cannot release its replacement.
    NotHeld {
        /// Who holds the slot now, if anyone.
        held_by: Option<Owner>,
    },
}

/// A decision: the outcome and the row writes to apply in the same
/// transaction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Decision {
    /// What happened.
    pub outcome: Outcome,
    /// The rows to write, in order; empty when nothing changed.
    pub effects: Vec<Effect>,
    /// The decided state: the loaded state with `effects` applied. Equal to
    /// the input state when nothing changed.
    pub next: LeaseState,
}

/// One row write of the lease, as a decision hands it to a backend. A
/// backend that keeps the holder and the high-water mark in rows of their
/// own maps each to one statement; one that keeps them in a single head row
/// may fold them into its one update of that row (the effects name what
/// changed; [`apply_effect`] is the fold).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Effect {
    /// Insert or replace the holder.
    PutHolder(Lease),
    /// Delete the holder, only if it is still this pair (a cleared holder
    /// never deletes a successor).
    DeleteHolder {
        /// The owner that held it.
        owner: Owner,
        /// Its fence.
        fence: Fence,
    },
    /// Set the fence high-water mark.
    SetHighWater(Fence),
}

/// The effects that turn `before` into `next`: the holder, then the
/// high-water mark.
pub fn effects(before: &LeaseState, next: &LeaseState) -> Vec<Effect> {
    let mut out = Vec::new();
    if before.holder != next.holder {
        match (&before.holder, &next.holder) {
            (_, Some(l)) => out.push(Effect::PutHolder(l.clone())),
            (Some(p), None) => out.push(Effect::DeleteHolder {
                owner: p.owner.clone(),
                fence: p.fence,
            }),
            (None, None) => {}
        }
    }
    if before.fence_high_water != next.fence_high_water {
        out.push(Effect::SetHighWater(next.fence_high_water));
    }
    out
}

/// Applies one effect to a state, as a backend applies it to its rows.
pub fn apply_effect(s: &mut LeaseState, e: &Effect) {
    match e {
        Effect::PutHolder(l) => s.holder = Some(l.clone()),
        Effect::DeleteHolder { owner, fence } => {
            if s.holder.as_ref().is_some_and(|h| h.is_pair(owner, *fence)) {
                s.holder = None;
            }
        }
        Effect::SetHighWater(f) => s.fence_high_water = *f,
    }
}

/// Why a lease request was refused. Nothing changes on a refusal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum LeaseError {
    /// Another owner holds an unexpired lease.
    #[error(
        "LeaseHeld: the writer lease is held by {holder} (fence {fence}) until {expires_at} ms"
    )]
    LeaseHeld {
        /// The holder.
        holder: Owner,
        /// The holder's fence.
        fence: Fence,
        /// When the holder's lease expires.
        expires_at: Millis,
    },
    /// The caller's `(owner, fence)` no longer holds an unexpired lease.
    /// The remedy is to reopen, never to retry.
    #[error("LeaseLost: the writer lease is lost{}", match .held_by { Some(o) => format!(" to {o}"), None => String::new() })]
    LeaseLost {
        /// Who holds the slot now (possibly expired), `None` when it is free.
        held_by: Option<Owner>,
    },
    /// A ttl of zero would issue a lease that is already expired.
    #[error("InvalidTtl: a lease ttl must be positive")]
    InvalidTtl,
    /// `now + ttl` does not fit in the clock's range.
    #[error("ClockOverflow: now {now} + ttl {ttl} overflows")]
    ClockOverflow {
        /// The caller's clock.
        now: Millis,
        /// The requested ttl.
        ttl: Millis,
    },
    /// Every fence value has been issued.
    #[error("FenceExhausted: the lease fence cannot be bumped past {0}")]
    FenceExhausted(Fence),
    /// An owner name that is empty, too long or has control characters.
    #[error("InvalidOwner: an owner name must be 1..={max} bytes without control characters (got {len} bytes)", max = MAX_OWNER_LEN)]
    InvalidOwner {
        /// The rejected name's length in bytes.
        len: usize,
    },
}

impl LeaseError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (a lease another owner holds is `Unavailable` (retry after it expires); a lost lease is `FailedPrecondition`).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            LeaseError::LeaseHeld { .. } => Class::Unavailable,
            LeaseError::LeaseLost { .. } => Class::FailedPrecondition,
            LeaseError::InvalidTtl => Class::InvalidArgument,
            LeaseError::ClockOverflow { .. } => Class::InvalidArgument,
            LeaseError::FenceExhausted(..) => Class::ResourceExhausted,
            LeaseError::InvalidOwner { .. } => Class::InvalidArgument,
        }
    }
}

crate::reasons! {
    /// The stable reason string (the variant name), which the message also
    /// starts with.
    LeaseError {
        LeaseHeld,
        LeaseLost,
        InvalidTtl,
        ClockOverflow,
        FenceExhausted,
        InvalidOwner,
    }
}

fn expiry(now: Millis, ttl: Millis) -> Result<Millis, LeaseError> {
    if ttl == 0 {
        return Err(LeaseError::InvalidTtl);
    }
    now.checked_add(ttl)
        .ok_or(LeaseError::ClockOverflow { now, ttl })
}

/// Decides one request against the stored state. Total and deterministic.
pub fn decide(state: &LeaseState, req: &Request) -> Result<Decision, LeaseError> {
    let (outcome, next) = decide_next(state, req)?;
    Ok(Decision {
        outcome,
        effects: effects(state, &next),
        next,
    })
}

fn decide_next(state: &LeaseState, req: &Request) -> Result<(Outcome, LeaseState), LeaseError> {
    match req {
        Request::Acquire { owner, now, ttl } => {
            let expires_at = expiry(*now, *ttl)?;
            if let Some(h) = &state.holder {
                if h.is_live(*now) && h.owner != *owner {
                    return Err(LeaseError::LeaseHeld {
                        holder: h.owner.clone(),
                        fence: h.fence,
                        expires_at: h.expires_at,
                    });
                }
            }
            let issued = state.holder.as_ref().map_or(state.fence_high_water, |h| {
                h.fence.max(state.fence_high_water)
            });
            let fence = issued
                .checked_add(1)
                .ok_or(LeaseError::FenceExhausted(issued))?;
            let lease = Lease {
                owner: owner.clone(),
                fence,
                expires_at,
            };
            Ok((
                Outcome::Acquired {
                    lease: lease.clone(),
                    replaced: state.holder.clone(),
                },
                LeaseState {
                    holder: Some(lease),
                    fence_high_water: fence,
                },
            ))
        }
        Request::Renew {
            owner,
            fence,
            now,
            ttl,
        }
        | Request::Commit {
            owner,
            fence,
            now,
            ttl,
        } => renew(state, req, owner, *fence, *now, *ttl),
        Request::Release { owner, fence } => Ok(release_if(state, |h| h.is_pair(owner, *fence))),
        Request::ReleaseByOwner { owner } => Ok(release_if(state, |h| h.owner == *owner)),
    }
}

/// `Renew` and `Commit`: only the live exact pair is renewed (never
/// shortened); a commit is admitted under the same rule.
fn renew(
    state: &LeaseState,
    req: &Request,
    owner: &Owner,
    fence: Fence,
    now: Millis,
    ttl: Millis,
) -> Result<(Outcome, LeaseState), LeaseError> {
    let expires_at = expiry(now, ttl)?;
    let lease = match &state.holder {
        Some(h) if h.is_pair(owner, fence) && h.is_live(now) => Lease {
            owner: owner.clone(),
            fence,
            // Renewal never shortens a lease.
            expires_at: expires_at.max(h.expires_at),
        },
        other => {
            return Err(LeaseError::LeaseLost {
                held_by: other.as_ref().map(|h| h.owner.clone()),
            })
        }
    };
    let next = LeaseState {
        holder: Some(lease.clone()),
        fence_high_water: state.fence_high_water,
    };
    let outcome = match req {
        Request::Commit { .. } => Outcome::Admitted { lease },
        _ => Outcome::Renewed { lease },
    };
    Ok((outcome, next))
}

/// A release: deletes the holder if `own` says it is the caller's (keeping
/// the fence high-water mark), else answers who holds the slot and changes
/// nothing.
fn release_if(state: &LeaseState, own: impl FnOnce(&Lease) -> bool) -> (Outcome, LeaseState) {
    match &state.holder {
        Some(h) if own(h) => (
            Outcome::Released,
            LeaseState {
                holder: None,
                fence_high_water: state.fence_high_water.max(h.fence),
            },
        ),
        other => (
            Outcome::NotHeld {
                held_by: other.as_ref().map(|h| h.owner.clone()),
            },
            state.clone(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(s: &str) -> Owner {
        Owner::new(s).unwrap()
    }

    #[test]
    fn a_commit_is_admitted_and_a_renewal_renewed() {
        let held = acquire(&LeaseState::default(), "a", 0).unwrap().next;
        let fence = held.holder.as_ref().unwrap().fence;
        let (c, r) = (
            commit(&held, "a", fence, 5).unwrap(),
            renew(&held, "a", fence, 5, 10).unwrap(),
        );
        assert!(
            matches!(&c.outcome, Outcome::Admitted { lease } if lease.expires_at == 15),
            "{:?}",
            c.outcome
        );
        assert!(
            matches!(&r.outcome, Outcome::Renewed { lease } if lease.expires_at == 15),
            "{:?}",
            r.outcome
        );
        assert_eq!(c.next, r.next);
    }

    #[test]
    fn an_owner_converts_back_to_its_own_string() {
        // The stored form a shell writes is the string the owner was made of.
        assert_eq!(String::from(o("worker-7")), "worker-7");
        assert_eq!(o("worker-7").to_string(), "worker-7");
        assert_eq!(String::from(Owner::try_from("w".to_owned()).unwrap()), "w");
        assert!(Owner::try_from(String::new()).is_err());
    }

    fn acquire(s: &LeaseState, who: &str, now: Millis) -> Result<Decision, LeaseError> {
        acquire_ttl(s, who, now, 10)
    }

    fn acquire_ttl(
        s: &LeaseState,
        who: &str,
        now: Millis,
        ttl: Millis,
    ) -> Result<Decision, LeaseError> {
        decide(
            s,
            &Request::Acquire {
                owner: o(who),
                now,
                ttl,
            },
        )
    }

    /// A commit of `who`'s pair at `now`, extending it by 10.
    fn commit(
        s: &LeaseState,
        who: &str,
        fence: Fence,
        now: Millis,
    ) -> Result<Decision, LeaseError> {
        let owner = o(who);
        decide(
            s,
            &Request::Commit {
                owner,
                fence,
                now,
                ttl: 10,
            },
        )
    }

    fn renew(
        s: &LeaseState,
        who: &str,
        fence: Fence,
        now: Millis,
        ttl: Millis,
    ) -> Result<Decision, LeaseError> {
        decide(
            s,
            &Request::Renew {
                owner: o(who),
                fence,
                now,
                ttl,
            },
        )
    }

    fn release(s: &LeaseState, who: &str, fence: Fence) -> Result<Decision, LeaseError> {
        decide(
            s,
            &Request::Release {
                owner: o(who),
                fence,
            },
        )
    }

    #[test]
    fn acquire_free_slot_issues_fence_one() {
        let d = acquire(&LeaseState::default(), "a", 0).unwrap();
        assert_eq!(
            d.outcome,
            Outcome::Acquired {
                lease: Lease {
                    owner: o("a"),
                    fence: 1,
                    expires_at: 10
                },
                replaced: None
            }
        );
        assert_eq!(d.next.fence_high_water, 1);
    }

    #[test]
    fn unexpired_lease_of_another_owner_is_refused_naming_holder() {
        let s = acquire(&LeaseState::default(), "a", 0).unwrap().next;
        let e = acquire(&s, "b", 9).unwrap_err();
        assert_eq!(
            e,
            LeaseError::LeaseHeld {
                holder: o("a"),
                fence: 1,
                expires_at: 10
            }
        );
        assert!(e.to_string().contains("held by a"));
    }

    #[test]
    fn expired_lease_is_stolen_with_a_bumped_fence() {
        let s = acquire(&LeaseState::default(), "a", 0).unwrap().next;
        let d = acquire(&s, "b", 10).unwrap();
        match d.outcome {
            Outcome::Acquired { lease, replaced } => {
                assert_eq!(lease.fence, 2);
                assert_eq!(replaced.unwrap().owner, o("a"));
            }
            other => panic!("unexpected {other:?}"),
        }
        // The old owner can no longer commit, renew or release.
        let s = d.next;
        let lost = Err(LeaseError::LeaseLost {
            held_by: Some(o("b")),
        });
        assert_eq!(commit(&s, "a", 1, 11), lost);
        assert_eq!(renew(&s, "a", 1, 11, 10), lost);
        let r = release(&s, "a", 1).unwrap();
        assert_eq!(
            r.outcome,
            Outcome::NotHeld {
                held_by: Some(o("b"))
            }
        );
        assert_eq!(r.next, s);
    }

    #[test]
    fn commit_needs_exact_pair_and_unexpired() {
        let s = acquire(&LeaseState::default(), "a", 0).unwrap().next;
        let ok = commit(&s, "a", 1, 5).unwrap();
        assert_eq!(ok.next.holder.as_ref().unwrap().expires_at, 15);
        assert!(commit(&s, "a", 2, 5).is_err());
        assert_eq!(
            commit(&s, "a", 1, 10),
            Err(LeaseError::LeaseLost {
                held_by: Some(o("a"))
            })
        );
    }

    #[test]
    fn release_keeps_the_high_water_mark() {
        let s = acquire(&LeaseState::default(), "a", 0).unwrap().next;
        let s = release(&s, "a", 1).unwrap().next;
        assert_eq!(s.holder, None);
        let d = acquire(&s, "a", 1).unwrap();
        assert_eq!(d.next.holder.unwrap().fence, 2);
        // A commit by the released pair on a free slot names no holder.
        assert_eq!(
            commit(&s, "a", 1, 1),
            Err(LeaseError::LeaseLost { held_by: None })
        );
    }

    #[test]
    fn same_owner_reacquire_stales_its_earlier_incarnation() {
        let s = acquire(&LeaseState::default(), "a", 0).unwrap().next;
        let s2 = acquire(&s, "a", 3).unwrap().next;
        assert_eq!(s2.holder.as_ref().unwrap().fence, 2);
        assert!(commit(&s2, "a", 1, 4).is_err());
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        assert_eq!(Owner::new(""), Err(LeaseError::InvalidOwner { len: 0 }));
        assert!(Owner::new("a\nb").is_err());
        assert!(Owner::new("x".repeat(MAX_OWNER_LEN + 1)).is_err());
        assert!(Owner::new("x".repeat(MAX_OWNER_LEN)).is_ok());
        let s = LeaseState::default();
        assert_eq!(acquire_ttl(&s, "a", 0, 0), Err(LeaseError::InvalidTtl));
        assert!(matches!(
            acquire_ttl(&s, "a", u64::MAX, 1),
            Err(LeaseError::ClockOverflow { .. })
        ));
        let full = LeaseState {
            holder: None,
            fence_high_water: u64::MAX,
        };
        assert_eq!(
            acquire_ttl(&full, "a", 0, 1),
            Err(LeaseError::FenceExhausted(u64::MAX))
        );
        let bad: Result<Owner, _> = serde_json::from_str("\"\"");
        assert!(bad.is_err());
    }

    fn by_owner(s: &LeaseState, who: &str) -> Decision {
        decide(s, &Request::ReleaseByOwner { owner: o(who) }).unwrap()
    }

    #[test]
    fn release_by_owner_deletes_the_owners_lease_under_any_fence() {
        // The owner's second incarnation holds fence 2; a caller that knows
        // only the owner name releases it (the request carries no clock:
        // expired or not is the same decision).
        let s = acquire(&LeaseState::default(), "a", 0).unwrap().next;
        let s = acquire(&s, "a", 3).unwrap().next;
        assert_eq!(s.holder.as_ref().map(|h| h.fence), Some(2));
        let d = by_owner(&s, "a");
        assert_eq!(d.outcome, Outcome::Released);
        assert_eq!(d.next.holder, None);
        assert_eq!(d.next.fence_high_water, 2);
        // The next acquisition still issues a fresh fence, and the released
        // pair is lost.
        let free = by_owner(&s, "a").next;
        assert_eq!(
            acquire(&free, "b", 4).unwrap().next.holder.unwrap().fence,
            3
        );
        assert_eq!(
            commit(&free, "a", 2, 4),
            Err(LeaseError::LeaseLost { held_by: None })
        );
    }

    #[test]
    fn release_by_owner_leaves_another_owner_alone() {
        let s = acquire(&LeaseState::default(), "a", 0).unwrap().next;
        // Another owner's lease stays, whichever incarnation holds it.
        for at in [s.clone(), acquire(&s, "a", 50).unwrap().next] {
            let d = by_owner(&at, "b");
            assert_eq!(
                d.outcome,
                Outcome::NotHeld {
                    held_by: Some(o("a"))
                }
            );
            assert_eq!(d.next, at);
        }
        // On a free slot it is idempotent and names no holder.
        let free = by_owner(&s, "a").next;
        let d = by_owner(&free, "a");
        assert_eq!(d.outcome, Outcome::NotHeld { held_by: None });
        assert_eq!(d.next, free);
    }

    #[test]
    fn release_by_owner_is_release_with_the_stored_fence() {
        // What a shell did by hand (read the row, release its pair) is the
        // same decision, for every holder and every asking owner.
        let a1 = acquire(&LeaseState::default(), "a", 0).unwrap().next;
        let b2 = acquire(&a1, "b", 10).unwrap().next;
        let free = by_owner(&b2, "b").next;
        for s in [LeaseState::default(), a1, b2, free] {
            for who in ["a", "b"] {
                let fence = s
                    .holder
                    .as_ref()
                    .filter(|h| h.owner == o(who))
                    .map_or(0, |h| h.fence);
                let by_pair = release(&s, who, fence).unwrap();
                assert_eq!(by_owner(&s, who), by_pair, "{who} over {s:?}");
            }
        }
    }

    #[test]
    fn renewal_never_shortens() {
        let s = acquire_ttl(&LeaseState::default(), "a", 0, 100)
            .unwrap()
            .next;
        let d = renew(&s, "a", 1, 1, 5).unwrap();
        assert_eq!(d.next.holder.unwrap().expires_at, 100);
    }
}
