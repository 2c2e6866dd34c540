//! The lease stream checker: three owners acquiring, renewing, committing,
//! releasing and releasing by owner under a monotonic clock, each carrying
//! the fence it believes it holds or a raw one, through
//! [`custos_core::lease::decide`].

use std::collections::BTreeSet;

use super::{violation, Violation};
use custos_core::lease::{self, Fence, LeaseState, Outcome, Owner};
use custos_core::Millis;

/// Which fence a lease operation carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum FenceChoice {
    /// The fence this owner last acquired (what a real client would send).
    Believed,
    /// An arbitrary small fence (a confused or malicious client).
    Raw(u8),
}

/// One step of a lease request stream. Owners are indices into three names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum LeaseOp {
    /// Acquire for `owner` with `ttl` (0 is legal input and must be refused).
    Acquire {
        /// Owner index (mod 3).
        owner: u8,
        /// Lease lifetime.
        ttl: u8,
    },
    /// Renew.
    Renew {
        /// Owner index (mod 3).
        owner: u8,
        /// Which fence to carry.
        fence: FenceChoice,
        /// New lifetime.
        ttl: u8,
    },
    /// Commit.
    Commit {
        /// Owner index (mod 3).
        owner: u8,
        /// Which fence to carry.
        fence: FenceChoice,
        /// Renewed lifetime.
        ttl: u8,
    },
    /// Release.
    Release {
        /// Owner index (mod 3).
        owner: u8,
        /// Which fence to carry.
        fence: FenceChoice,
    },
    /// Release by owner, under whichever fence (what the SQLite shell's
    /// `release_export` sends).
    ReleaseByOwner {
        /// Owner index (mod 3).
        owner: u8,
    },
    /// Advance the (monotonic) clock.
    Advance(u8),
}

const OWNER_NAMES: [&str; 3] = ["owner-a", "owner-b", "owner-c"];

/// Runs a lease request stream and checks, after every step:
///
/// - fences strictly increase: every acquisition issues a fence above every
///   fence issued before, and the stored high-water mark never decreases;
/// - a refusal changes nothing (the caller persists nothing);
/// - an admitted commit or renewal is for the exact pair that held the slot
///   and was unexpired at `now`;
/// - a pair that was displaced, or whose lease lapsed, never has a commit or
///   renewal admitted again (the clock is monotonic here);
/// - a release deletes only the releaser's own pair, a release by owner
///   only that owner's lease (under any fence), and a `NotHeld` release of
///   either kind changes nothing;
/// - an unexpired lease of another owner is never displaced.
pub fn check_lease_stream(ops: &[LeaseOp]) -> Result<(), Violation> {
    check_lease_stream_with(lease::decide, ops)
}

/// The decision function of the lease machine, as the checker takes it.
pub type LeaseDecide =
    fn(&LeaseState, &lease::Request) -> Result<lease::Decision, lease::LeaseError>;

/// [`check_lease_stream`] over any decision function with the lease machine's
/// signature — how the tests show the checker catches a broken machine.
pub fn check_lease_stream_with(decide: LeaseDecide, ops: &[LeaseOp]) -> Result<(), Violation> {
    let owners = OWNER_NAMES
        .iter()
        .map(|n| Owner::new(*n))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| violation("owner-names-valid", 0, e.to_string()))?;
    let mut watch = LeaseWatch {
        owners,
        state: LeaseState::default(),
        now: 0,
        believed: [None; 3],
        dead: BTreeSet::new(),
        max_issued: 0,
    };
    for (step, op) in ops.iter().enumerate() {
        let Some(req) = watch.request(*op) else {
            continue; // the clock advanced
        };
        let before = watch.state.clone();
        let Ok(decision) = decide(&before, &req) else {
            continue; // a refusal persists nothing
        };
        watch.check(step, &req, &before, &decision)?;
        watch.state = decision.next;
    }
    Ok(())
}

/// What the lease stream has seen so far, stated without the machine: the
/// clock, the fence each owner believes it holds, every pair that was
/// displaced or lapsed, and the highest fence issued.
struct LeaseWatch {
    owners: Vec<Owner>,
    state: LeaseState,
    now: Millis,
    believed: [Option<Fence>; 3],
    dead: BTreeSet<(Owner, Fence)>,
    max_issued: Fence,
}

impl LeaseWatch {
    fn owner(&self, i: u8) -> Owner {
        self.owners[usize::from(i) % self.owners.len()].clone()
    }

    fn fence_of(&self, i: u8, c: FenceChoice) -> Fence {
        match c {
            FenceChoice::Believed => self.believed[usize::from(i) % 3].unwrap_or(0),
            FenceChoice::Raw(f) => Fence::from(f),
        }
    }

    /// The request `op` stands for; `None` for a clock advance, which
    /// marks a lapsed holder dead.
    fn request(&mut self, op: LeaseOp) -> Option<lease::Request> {
        let now = self.now;
        Some(match op {
            LeaseOp::Advance(d) => {
                self.now += Millis::from(d);
                if let Some(h) = &self.state.holder {
                    if !h.is_live(self.now) {
                        self.dead.insert((h.owner.clone(), h.fence));
                    }
                }
                return None;
            }
            LeaseOp::Acquire { owner: i, ttl } => lease::Request::Acquire {
                owner: self.owner(i),
                now,
                ttl: Millis::from(ttl),
            },
            LeaseOp::Renew {
                owner: i,
                fence,
                ttl,
            } => lease::Request::Renew {
                owner: self.owner(i),
                fence: self.fence_of(i, fence),
                now,
                ttl: Millis::from(ttl),
            },
            LeaseOp::Commit {
                owner: i,
                fence,
                ttl,
            } => lease::Request::Commit {
                owner: self.owner(i),
                fence: self.fence_of(i, fence),
                now,
                ttl: Millis::from(ttl),
            },
            LeaseOp::Release { owner: i, fence } => lease::Request::Release {
                owner: self.owner(i),
                fence: self.fence_of(i, fence),
            },
            LeaseOp::ReleaseByOwner { owner: i } => lease::Request::ReleaseByOwner {
                owner: self.owner(i),
            },
        })
    }

    /// Checks one accepted decision against every rule of [`check_lease_stream`].
    fn check(
        &mut self,
        step: usize,
        req: &lease::Request,
        before: &LeaseState,
        decision: &lease::Decision,
    ) -> Result<(), Violation> {
        check_state(step, req, before, decision)?;
        match (req, &decision.outcome) {
            (lease::Request::Acquire { owner: o, .. }, Outcome::Acquired { lease, replaced }) => {
                self.check_acquired(step, o, lease.fence, replaced.as_ref())
            }
            (
                lease::Request::Renew {
                    owner: o, fence: f, ..
                }
                | lease::Request::Commit {
                    owner: o, fence: f, ..
                },
                Outcome::Renewed { .. } | Outcome::Admitted { .. },
            ) => {
                let held = before
                    .holder
                    .as_ref()
                    .is_some_and(|h| h.is_pair(o, *f) && h.is_live(self.now));
                if !held || self.dead.contains(&(o.clone(), *f)) {
                    return Err(violation(
                        "admitted-only-for-the-live-exact-pair",
                        step,
                        format!(
                            "({o}, {f}) admitted over {:?} at {}",
                            before.holder, self.now
                        ),
                    ));
                }
                Ok(())
            }
            (lease::Request::Release { owner: o, fence: f }, outcome) => {
                let own = before.holder.as_ref().is_some_and(|h| h.is_pair(o, *f));
                check_release(
                    step,
                    Released::Pair(o, *f),
                    own,
                    before,
                    outcome,
                    &decision.next,
                )
            }
            (lease::Request::ReleaseByOwner { owner: o }, outcome) => {
                let own = before.holder.as_ref().is_some_and(|h| h.owner == *o);
                check_release(
                    step,
                    Released::Owner(o),
                    own,
                    before,
                    outcome,
                    &decision.next,
                )
            }
            (req, outcome) => Err(violation(
                "outcome-matches-request",
                step,
                format!("{req:?} answered {outcome:?}"),
            )),
        }
    }

    /// An acquisition: its fence is above every fence issued before, it
    /// displaced no live lease of another owner, and the displaced pair is
    /// dead from now on.
    fn check_acquired(
        &mut self,
        step: usize,
        o: &Owner,
        fence: Fence,
        replaced: Option<&lease::Lease>,
    ) -> Result<(), Violation> {
        if fence <= self.max_issued {
            return Err(violation(
                "fences-strictly-increase",
                step,
                format!("issued {} after {}", fence, self.max_issued),
            ));
        }
        self.max_issued = fence;
        if let Some(r) = replaced {
            if r.is_live(self.now) && r.owner != *o {
                return Err(violation(
                    "live-lease-never-displaced",
                    step,
                    format!("{o} displaced live {r:?}"),
                ));
            }
            self.dead.insert((r.owner.clone(), r.fence));
        }
        if let Some(i) = OWNER_NAMES.iter().position(|n| *n == o.as_str()) {
            self.believed[i] = Some(fence);
        }
        Ok(())
    }
}

/// What a release names: an exact pair, or (by owner) an owner's lease
/// under any fence.
#[derive(Clone, Copy)]
enum Released<'a> {
    Pair(&'a Owner, Fence),
    Owner(&'a Owner),
}

/// A release deletes only what it names (`own`: the holder before is the
/// releaser's pair, or for a release by owner the owner's lease), and a
/// `NotHeld` release changes nothing.
fn check_release(
    step: usize,
    released: Released<'_>,
    own: bool,
    before: &LeaseState,
    outcome: &Outcome,
    next: &LeaseState,
) -> Result<(), Violation> {
    let removed = before.holder.is_some() && next.holder.is_none();
    if removed && !own {
        let (rule, who) = match released {
            Released::Pair(o, f) => ("release-deletes-only-its-own-pair", format!("({o}, {f})")),
            Released::Owner(o) => (
                "release-by-owner-deletes-only-that-owners-lease",
                format!("{o} by owner"),
            ),
        };
        return Err(violation(
            rule,
            step,
            format!("{who} released {:?}", before.holder),
        ));
    }
    if matches!(outcome, Outcome::NotHeld { .. }) && next != before {
        return Err(violation(
            "not-held-release-changes-nothing",
            step,
            format!("{before:?} -> {next:?}"),
        ));
    }
    Ok(())
}

/// The rules on the decided state alone: the effects write it, and the
/// fence high-water mark never falls.
fn check_state(
    step: usize,
    req: &lease::Request,
    before: &LeaseState,
    decision: &lease::Decision,
) -> Result<(), Violation> {
    let mut written = before.clone();
    for e in &decision.effects {
        lease::apply_effect(&mut written, e);
    }
    if written != decision.next {
        return Err(violation(
            "effects-write-the-decided-state",
            step,
            format!("{req:?}: effects {:?}", decision.effects),
        ));
    }
    if decision.next.fence_high_water < before.fence_high_water {
        return Err(violation(
            "fence-high-water-monotonic",
            step,
            format!(
                "{} -> {}",
                before.fence_high_water, decision.next.fence_high_water
            ),
        ));
    }
    Ok(())
}

/// Decodes `data` as an operation stream (with `arbitrary`) and runs
/// [`check_lease_stream`]. Undecodable tails are ignored: every input is a
/// stream.
#[cfg(feature = "arbitrary")]
pub fn check_lease_bytes(data: &[u8]) -> Result<(), Violation> {
    /// Streams longer than this are truncated: bounded work per input.
    const MAX_OPS: usize = 4096;
    check_lease_stream(&super::decode_ops::<LeaseOp>(data, MAX_OPS))
}
