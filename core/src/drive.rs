//! Request-stream drivers that check each machine's invariants.
//!
//! Each driver takes a sequence of small, closed operations (derivable with
//! `arbitrary` behind the `arbitrary` feature), turns them into real requests,
//! runs them through the machine's decision function, and checks invariants
//! that are stated independently of how the machine decides. The fuzz targets
//! (`fuzz/`), the property tests and the checked-in corpus replay all call the
//! same drivers, so a failure found by one is reproducible by all.

use std::collections::BTreeSet;

use crate::fence::{self, Epoch, Holder, WorldFence};
use crate::lease::{self, Fence, LeaseState, Outcome, Owner};
use crate::Millis;

/// An invariant a driver found broken, with the step at which it broke.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invariant `{invariant}` broken at step {step}: {detail}")]
pub struct Violation {
    /// The invariant's name.
    pub invariant: &'static str,
    /// The index of the operation that broke it.
    pub step: usize,
    /// What was observed.
    pub detail: String,
}

fn violation(invariant: &'static str, step: usize, detail: String) -> Violation {
    Violation {
        invariant,
        step,
        detail,
    }
}

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
/// - a release deletes only the releaser's own pair;
/// - an unexpired lease of another owner is never displaced.
pub fn lease_stream(ops: &[LeaseOp]) -> Result<(), Violation> {
    lease_stream_with(lease::decide, ops)
}

/// The decision function of the lease machine, as a driver takes it.
pub type LeaseDecide =
    fn(&LeaseState, &lease::Request) -> Result<lease::Decision, lease::LeaseError>;

/// [`lease_stream`] over any decision function with the lease machine's
/// signature — how the tests show the driver catches a broken machine.
pub fn lease_stream_with(decide: LeaseDecide, ops: &[LeaseOp]) -> Result<(), Violation> {
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
        })
    }

    /// Checks one accepted decision against every rule of [`lease_stream`].
    fn check(
        &mut self,
        step: usize,
        req: &lease::Request,
        before: &LeaseState,
        decision: &lease::Decision,
    ) -> Result<(), Violation> {
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
                check_release(step, o, *f, before, outcome, &decision.next)
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

/// A release deletes only the releaser's own pair, and a `NotHeld` release
/// changes nothing.
fn check_release(
    step: usize,
    o: &Owner,
    f: Fence,
    before: &LeaseState,
    outcome: &Outcome,
    next: &LeaseState,
) -> Result<(), Violation> {
    let removed = before.holder.is_some() && next.holder.is_none();
    let own = before.holder.as_ref().is_some_and(|h| h.is_pair(o, f));
    if removed && !own {
        return Err(violation(
            "release-deletes-only-its-own-pair",
            step,
            format!("({o}, {f}) released {:?}", before.holder),
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

/// One step of a fence request stream over two worlds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum FenceOp {
    /// Writer `writer` (mod 3) acquires a fence on `world` (mod 2).
    Acquire {
        /// World index.
        world: u8,
        /// Writer index.
        writer: u8,
    },
    /// Writer `writer` writes to `world` with the epoch it last acquired there.
    Write {
        /// World index.
        world: u8,
        /// Writer index.
        writer: u8,
    },
    /// A write carrying an arbitrary epoch.
    RawWrite {
        /// World index.
        world: u8,
        /// The epoch carried.
        epoch: u8,
    },
    /// Import a floor into `world`.
    ImportFloor {
        /// World index.
        world: u8,
        /// The floor.
        floor: u8,
    },
}

/// Runs a fence request stream and checks, after every step:
///
/// - epochs strictly increase per world, above every floor ever imported;
/// - the floor never decreases;
/// - a write is admitted only at the most recently issued epoch of its world,
///   never at an epoch a later acquisition staled, never at or below a floor.
pub fn fence_stream(ops: &[FenceOp]) -> Result<(), Violation> {
    fence_stream_with(fence::decide, ops)
}

/// The decision function of the fence machine, as a driver takes it.
pub type FenceDecide =
    fn(&WorldFence, &fence::Request) -> Result<fence::Decision, fence::FenceError>;

/// [`fence_stream`] over any decision function with the fence machine's
/// signature.
pub fn fence_stream_with(decide: FenceDecide, ops: &[FenceOp]) -> Result<(), Violation> {
    let mut worlds = [WorldFence::default(), WorldFence::default()];
    let mut believed = [[0 as Epoch; 3]; 2];
    let mut max_issued = [0 as Epoch; 2];
    let mut max_floor = [0 as Epoch; 2];
    for (step, op) in ops.iter().enumerate() {
        let (w, req, writer) = match *op {
            FenceOp::Acquire { world, writer } => {
                let holder = Holder::new(format!("writer-{}", writer % 3))
                    .map_err(|e| violation("holder-valid", step, e.to_string()))?;
                (
                    usize::from(world % 2),
                    fence::Request::Acquire { holder },
                    Some(usize::from(writer % 3)),
                )
            }
            FenceOp::Write { world, writer } => {
                let w = usize::from(world % 2);
                let epoch = believed[w][usize::from(writer % 3)];
                (w, fence::Request::AdmitWrite { epoch }, None)
            }
            FenceOp::RawWrite { world, epoch } => (
                usize::from(world % 2),
                fence::Request::AdmitWrite {
                    epoch: Epoch::from(epoch),
                },
                None,
            ),
            FenceOp::ImportFloor { world, floor } => (
                usize::from(world % 2),
                fence::Request::ImportFloor {
                    floor: Epoch::from(floor),
                },
                None,
            ),
        };
        let before = worlds[w].clone();
        let Ok(decision) = decide(&before, &req) else {
            continue;
        };
        if decision.next.floor < before.floor || decision.next.issued < before.issued {
            return Err(violation(
                "fence-state-monotonic",
                step,
                format!("{before:?} -> {:?}", decision.next),
            ));
        }
        match (&req, &decision.outcome) {
            (fence::Request::Acquire { .. }, fence::Outcome::Acquired { epoch, .. }) => {
                if *epoch <= max_issued[w] || *epoch <= max_floor[w] {
                    return Err(violation(
                        "epochs-strictly-increase-above-floors",
                        step,
                        format!(
                            "issued {epoch}, earlier max {}, floor {}",
                            max_issued[w], max_floor[w]
                        ),
                    ));
                }
                max_issued[w] = *epoch;
                if let Some(i) = writer {
                    believed[w][i] = *epoch;
                }
            }
            (fence::Request::AdmitWrite { epoch }, fence::Outcome::Admitted) => {
                if *epoch != max_issued[w] || *epoch <= max_floor[w] {
                    return Err(violation(
                        "write-only-at-current-epoch",
                        step,
                        format!(
                            "epoch {epoch} admitted; latest {}, floor {}",
                            max_issued[w], max_floor[w]
                        ),
                    ));
                }
            }
            (fence::Request::ImportFloor { floor }, fence::Outcome::FloorImported { .. }) => {
                max_floor[w] = max_floor[w].max(*floor);
                if decision.next.floor != max_floor[w] {
                    return Err(violation(
                        "floor-is-max-of-imports",
                        step,
                        format!(
                            "floor {} after imports up to {}",
                            decision.next.floor, max_floor[w]
                        ),
                    ));
                }
            }
            (req, outcome) => {
                return Err(violation(
                    "outcome-matches-request",
                    step,
                    format!("{req:?} answered {outcome:?}"),
                ))
            }
        }
        worlds[w] = decision.next;
    }
    Ok(())
}

/// Decodes `data` as an operation stream (with `arbitrary`) and runs
/// [`lease_stream`]. Undecodable tails are ignored: every input is a stream.
#[cfg(feature = "arbitrary")]
pub fn lease_bytes(data: &[u8]) -> Result<(), Violation> {
    let ops = decode_ops::<LeaseOp>(data);
    lease_stream(&ops)
}

/// Decodes `data` as an operation stream (with `arbitrary`) and runs
/// [`fence_stream`].
#[cfg(feature = "arbitrary")]
pub fn fence_bytes(data: &[u8]) -> Result<(), Violation> {
    let ops = decode_ops::<FenceOp>(data);
    fence_stream(&ops)
}

#[cfg(feature = "arbitrary")]
fn decode_ops<T: for<'a> arbitrary::Arbitrary<'a>>(data: &[u8]) -> Vec<T> {
    /// Streams longer than this are truncated: bounded work per input.
    const MAX_OPS: usize = 4096;
    let mut u = arbitrary::Unstructured::new(data);
    let mut ops = Vec::new();
    while !u.is_empty() && ops.len() < MAX_OPS {
        match T::arbitrary(&mut u) {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
    ops
}
