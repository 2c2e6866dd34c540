//! Model of the writer lease (`custos_core::lease`).
//!
//! Three owner processes share one lease slot and a clock. Each process
//! remembers the fence it believes it holds. The adversary may:
//!
//! - advance the clock past a lease's lifetime (`Tick`);
//! - pause a process for any length of time (it simply does not act, and keeps
//!   its belief — the garbage-collection-pause case);
//! - crash a process (`Crash`: the belief is lost; the stored lease stays until
//!   it expires, and the restarted process may acquire again);
//! - put a commit, renewal or release on the wire (`Send`) and deliver it any
//!   time later (`Deliver`), after steals, restarts and expiry, with the
//!   reply lost (one message in flight at a time keeps the space small);
//! - release by an owner's name alone (`ReleaseByOwner`, the SQLite shell's
//!   `release_export`) at any moment, whatever that owner's processes
//!   believe — after its crash, or while a newer incarnation holds the slot.
//!
//! Every request goes through [`custos_core::lease::decide`]; a mutant wraps
//! that call. A monitor records what the store admitted, and the properties
//! read the record.

use custos_core::lease::{self, Fence, Lease, LeaseError, LeaseState, Outcome, Owner};
use custos_core::Millis;
use stateright::{Model, Property};

use crate::Bound;

/// Number of owner processes.
pub const OWNERS: usize = 3;

crate::mutants! {
    /// A defect the model can be made to exhibit, each a wrapped decision.
    pub enum Mutant {
        /// The commit check compares only the owner, not the fence.
        CommitComparesOnlyOwner => "commit-compares-only-owner",
        /// Stealing an expired lease keeps the old fence instead of bumping it.
        StealKeepsFence => "steal-keeps-fence",
        /// Release deletes the lease of the owner regardless of the fence: the
        /// fenced release decided as [`lease::Request::ReleaseByOwner`].
        ReleaseByOwnerOnly => "release-by-owner-regardless-of-fence",
        /// Renew extends a lease that has already expired.
        RenewExpired => "renew-of-expired-lease",
        /// Release forgets the fence high-water mark, so a free slot restarts at 1.
        ReleaseForgetsHighWater => "release-forgets-fence-high-water",
        /// A release by owner deletes whichever lease holds the slot (the
        /// owner check left out, as an unconditional `DELETE` of the row).
        ReleaseByOwnerAnyHolder => "release-by-owner-of-any-holder",
    }
}

/// The model: its bound and, optionally, the defect it exhibits.
#[derive(Clone, Debug)]
pub struct LeaseModel {
    /// Owner names, index = process.
    pub owners: Vec<Owner>,
    /// Lease lifetime, in ticks.
    pub ttl: Millis,
    /// The clock never passes this.
    pub max_time: Millis,
    /// No fence above this is explored.
    pub max_fence: Fence,
    /// At most this many crashes.
    pub max_crashes: u8,
    /// The defect applied, if any.
    pub mutant: Option<Mutant>,
}

/// A message on the wire: sent by a process under a fence, delivered later.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// A commit.
    Commit,
    /// A renewal.
    Renew,
    /// A release.
    Release,
}

/// An action of the environment or of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Process `p` opens: acquire the lease.
    Acquire(u8),
    /// Process `p` calls `m` under the fence it believes it holds, and reads
    /// the reply.
    Call(u8, Msg),
    /// Process `p` sends `m` under its believed fence; the reply will be lost.
    Send(u8, Msg),
    /// The wire delivers `p`'s pending message.
    Deliver(u8),
    /// The clock advances one tick.
    Tick,
    /// Process `p` crashes and restarts with no belief.
    Crash(u8),
    /// Someone releases by `p`'s owner name alone ([`lease::Request::ReleaseByOwner`]),
    /// whatever `p` believes; `p`'s belief is untouched (if it still
    /// believes, its next call is refused).
    ReleaseByOwner(u8),
}

/// Bits of [`SysState::broken`]: which rule the store was seen to break.
mod rule {
    pub const FENCE_INCREASE: u8 = 1 << 0;
    pub const LIVE_STOLEN: u8 = 1 << 1;
    pub const STALE_COMMIT: u8 = 1 << 2;
    pub const COMMIT_ORDER: u8 = 1 << 3;
    pub const STALE_RENEW: u8 = 1 << 4;
    pub const RELEASE_OTHER: u8 = 1 << 5;
    pub const RELEASE_OWNER_OTHER: u8 = 1 << 6;
}

/// Bits of [`SysState::seen`]: outcomes reached.
mod seen {
    pub const STEAL: u8 = 1 << 0;
    pub const RENEWAL: u8 = 1 << 1;
    pub const STALE_COMMIT_REFUSED: u8 = 1 << 2;
    pub const COMMIT_AFTER_RESTART: u8 = 1 << 3;
    pub const STALE_RELEASE_IGNORED: u8 = 1 << 4;
    pub const RELEASED_WITHOUT_FENCE: u8 = 1 << 5;
}

/// The global state: the store, the clock, the processes and the monitor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SysState {
    /// The stored lease slot — what a shell persists.
    pub store: LeaseState,
    /// The clock.
    pub now: Millis,
    /// The fence each process believes it holds.
    pub believed: [Option<Fence>; OWNERS],
    /// The one message on the wire: its sender, kind and the fence it carries.
    pub wire: Option<(u8, Msg, Fence)>,
    /// Crashes so far.
    pub crashes: u8,
    /// Monitor: pairs displaced by an acquisition (sorted).
    pub displaced: Vec<(u8, Fence)>,
    /// Monitor: pairs whose lease lapsed while they held it (sorted).
    pub lapsed: Vec<(u8, Fence)>,
    /// Monitor: the pair of the last admitted commit.
    pub last_commit: Option<(u8, Fence)>,
    /// Monitor: the highest fence ever issued.
    pub max_issued: Fence,
    /// Monitor: rules seen broken (bits of `rule`).
    pub broken: u8,
    /// Monitor: outcomes reached (bits of `seen`).
    pub seen: u8,
}

impl LeaseModel {
    fn index_of(&self, owner: &Owner) -> u8 {
        self.owners
            .iter()
            .position(|o| o == owner)
            .and_then(|i| u8::try_from(i).ok())
            .unwrap_or(u8::MAX)
    }

    /// The real decision, wrapped by the mutant if one is set.
    fn decide(
        &self,
        state: &LeaseState,
        req: lease::Request,
    ) -> Result<lease::Decision, LeaseError> {
        let holder = state.holder.clone();
        match (self.mutant, req) {
            (
                Some(Mutant::CommitComparesOnlyOwner),
                lease::Request::Commit {
                    owner,
                    fence,
                    now,
                    ttl,
                },
            ) => {
                let fence = holder
                    .filter(|h| h.owner == owner)
                    .map_or(fence, |h| h.fence);
                lease::decide(
                    state,
                    &lease::Request::Commit {
                        owner,
                        fence,
                        now,
                        ttl,
                    },
                )
            }
            (Some(Mutant::ReleaseByOwnerOnly), lease::Request::Release { owner, .. }) => {
                lease::decide(state, &lease::Request::ReleaseByOwner { owner })
            }
            (Some(Mutant::ReleaseByOwnerAnyHolder), lease::Request::ReleaseByOwner { owner }) => {
                let owner = holder.map_or(owner, |h| h.owner);
                lease::decide(state, &lease::Request::ReleaseByOwner { owner })
            }
            (
                Some(Mutant::RenewExpired),
                lease::Request::Renew {
                    owner,
                    fence,
                    now,
                    ttl,
                },
            ) => {
                // Checks expiry against a clock that never passes the lease.
                let now = holder
                    .filter(|h| h.is_pair(&owner, fence))
                    .map_or(now, |h| now.min(h.expires_at.saturating_sub(1)));
                lease::decide(
                    state,
                    &lease::Request::Renew {
                        owner,
                        fence,
                        now,
                        ttl,
                    },
                )
            }
            (Some(Mutant::StealKeepsFence), req @ lease::Request::Acquire { .. }) => {
                steal_keeping_fence(state, &req)
            }
            (Some(Mutant::ReleaseForgetsHighWater), req @ lease::Request::Release { .. }) => {
                release_forgetting_high_water(state, &req)
            }
            (_, req) => lease::decide(state, &req),
        }
    }

    fn request(&self, p: u8, msg: Msg, fence: Fence, now: Millis) -> lease::Request {
        let owner = self.owners[usize::from(p)].clone();
        match msg {
            Msg::Commit => lease::Request::Commit {
                owner,
                fence,
                now,
                ttl: self.ttl,
            },
            Msg::Renew => lease::Request::Renew {
                owner,
                fence,
                now,
                ttl: self.ttl,
            },
            Msg::Release => lease::Request::Release { owner, fence },
        }
    }

    /// Runs one request through the store and the monitor. Returns whether
    /// the request succeeded (for the caller's belief).
    fn run(&self, s: &mut SysState, p: u8, req: lease::Request) -> bool {
        let before = s.store.clone();
        let Ok(d) = self.decide(&before, req.clone()) else {
            if let lease::Request::Commit { fence, .. } = req {
                if s.is_stale(p, fence) {
                    s.seen |= seen::STALE_COMMIT_REFUSED;
                }
            }
            return false;
        };
        match (&req, &d.outcome) {
            (lease::Request::Acquire { .. }, Outcome::Acquired { lease, replaced }) => {
                self.note_acquired(s, p, lease, replaced.as_ref());
            }
            (lease::Request::Commit { fence, .. }, Outcome::Admitted { .. }) => {
                self.note_committed(s, p, &before, *fence);
            }
            (lease::Request::Renew { fence, .. }, Outcome::Renewed { .. }) => {
                if s.is_stale(p, *fence) {
                    s.broken |= rule::STALE_RENEW;
                }
                s.seen |= seen::RENEWAL;
            }
            (lease::Request::Release { fence, .. }, outcome) => {
                let own = before
                    .holder
                    .as_ref()
                    .is_some_and(|h| h.is_pair(&self.owners[usize::from(p)], *fence));
                if before.holder.is_some() && d.next.holder.is_none() && !own {
                    s.broken |= rule::RELEASE_OTHER;
                }
                if matches!(outcome, Outcome::NotHeld { held_by: Some(_) }) {
                    s.seen |= seen::STALE_RELEASE_IGNORED;
                }
            }
            (lease::Request::ReleaseByOwner { owner }, _) => {
                let own = before.holder.as_ref().filter(|h| h.owner == *owner);
                if before.holder.is_some() && d.next.holder.is_none() {
                    match own {
                        None => s.broken |= rule::RELEASE_OWNER_OTHER,
                        Some(h) if s.believed[usize::from(p)] != Some(h.fence) => {
                            s.seen |= seen::RELEASED_WITHOUT_FENCE;
                        }
                        Some(_) => {}
                    }
                }
            }
            _ => {}
        }
        s.store = d.next;
        true
    }

    /// Monitors an acquisition by `p` of `lease`, displacing `replaced`.
    fn note_acquired(&self, s: &mut SysState, p: u8, lease: &Lease, replaced: Option<&Lease>) {
        if lease.fence <= s.max_issued {
            s.broken |= rule::FENCE_INCREASE;
        }
        s.max_issued = s.max_issued.max(lease.fence);
        if let Some(old) = replaced {
            let q = self.index_of(&old.owner);
            if old.is_live(s.now) && q != p {
                s.broken |= rule::LIVE_STOLEN;
            }
            if !old.is_live(s.now) && q != p {
                s.seen |= seen::STEAL;
            }
            insert_sorted(&mut s.displaced, (q, old.fence));
        }
    }

    /// Monitors a commit admitted for `p` under `fence`, `before` being the
    /// store it was decided on.
    fn note_committed(&self, s: &mut SysState, p: u8, before: &LeaseState, fence: Fence) {
        if s.is_stale(p, fence) || !held_live(before, &self.owners[usize::from(p)], fence, s.now) {
            s.broken |= rule::STALE_COMMIT;
        }
        if let Some((q, f)) = s.last_commit {
            if fence < f || (fence == f && q != p) {
                s.broken |= rule::COMMIT_ORDER;
            }
        }
        s.last_commit = Some((p, fence));
        if s.crashes > 0 {
            s.seen |= seen::COMMIT_AFTER_RESTART;
        }
    }
}

/// The `StealKeepsFence` mutant's decision: an acquisition that displaces
/// a lease keeps that lease's fence instead of a new one.
fn steal_keeping_fence(
    state: &LeaseState,
    req: &lease::Request,
) -> Result<lease::Decision, LeaseError> {
    let mut d = lease::decide(state, req)?;
    if let Outcome::Acquired {
        lease,
        replaced: Some(old),
    } = &mut d.outcome
    {
        lease.fence = old.fence;
        d.next.holder = Some(lease.clone());
        d.next.fence_high_water = old.fence;
    }
    Ok(d)
}

/// The `ReleaseForgetsHighWater` mutant's decision: a release that frees
/// the slot also resets its fence high-water mark to 0.
fn release_forgetting_high_water(
    state: &LeaseState,
    req: &lease::Request,
) -> Result<lease::Decision, LeaseError> {
    let mut d = lease::decide(state, req)?;
    if d.outcome == Outcome::Released {
        d.next.fence_high_water = 0;
    }
    Ok(d)
}

fn held_live(state: &LeaseState, owner: &Owner, fence: Fence, now: Millis) -> bool {
    state
        .holder
        .as_ref()
        .is_some_and(|h| h.is_pair(owner, fence) && h.is_live(now))
}

fn insert_sorted(v: &mut Vec<(u8, Fence)>, x: (u8, Fence)) {
    if let Err(i) = v.binary_search(&x) {
        v.insert(i, x);
    }
}

impl SysState {
    fn is_stale(&self, p: u8, fence: Fence) -> bool {
        self.displaced.binary_search(&(p, fence)).is_ok()
            || self.lapsed.binary_search(&(p, fence)).is_ok()
    }
}

impl Model for LeaseModel {
    type State = SysState;
    type Action = Action;

    fn init_states(&self) -> Vec<SysState> {
        vec![SysState {
            store: LeaseState::default(),
            now: 0,
            believed: [None; OWNERS],
            wire: None,
            crashes: 0,
            displaced: Vec::new(),
            lapsed: Vec::new(),
            last_commit: None,
            max_issued: 0,
            broken: 0,
            seen: 0,
        }]
    }

    fn actions(&self, s: &SysState, actions: &mut Vec<Action>) {
        if s.broken != 0 {
            return; // a counterexample ends where a rule first breaks
        }
        if s.now < self.max_time {
            actions.push(Action::Tick);
        }
        for p in 0..OWNERS {
            let pi = p as u8;
            match s.believed[p] {
                None => actions.push(Action::Acquire(pi)),
                Some(_) => {
                    for m in [Msg::Commit, Msg::Renew, Msg::Release] {
                        actions.push(Action::Call(pi, m));
                        if s.wire.is_none() {
                            actions.push(Action::Send(pi, m));
                        }
                    }
                    if s.crashes < self.max_crashes {
                        actions.push(Action::Crash(pi));
                    }
                }
            }
            if s.wire.is_some_and(|(q, _, _)| q == pi) {
                actions.push(Action::Deliver(pi));
            }
            actions.push(Action::ReleaseByOwner(pi));
        }
    }

    fn next_state(&self, s: &SysState, action: Action) -> Option<SysState> {
        let mut s = s.clone();
        match action {
            Action::Tick => {
                s.now += 1;
                if let Some(h) = &s.store.holder {
                    if !h.is_live(s.now) {
                        let q = self.index_of(&h.owner);
                        insert_sorted(&mut s.lapsed, (q, h.fence));
                    }
                }
            }
            Action::Acquire(p) => {
                let req = lease::Request::Acquire {
                    owner: self.owners[usize::from(p)].clone(),
                    now: s.now,
                    ttl: self.ttl,
                };
                if !self.run(&mut s, p, req) {
                    return None;
                }
                s.believed[usize::from(p)] = s.store.holder.as_ref().map(|h| h.fence);
            }
            Action::Call(p, m) => {
                let fence = s.believed[usize::from(p)]?;
                let req = self.request(p, m, fence, s.now);
                let ok = self.run(&mut s, p, req);
                if !ok || m == Msg::Release {
                    // Lost: the process must reopen. Released: it let go.
                    s.believed[usize::from(p)] = None;
                }
            }
            Action::Send(p, m) => {
                let fence = s.believed[usize::from(p)]?;
                s.wire = Some((p, m, fence));
            }
            Action::Deliver(p) => {
                let (q, m, fence) = s.wire.take()?;
                if q != p {
                    return None;
                }
                let req = self.request(p, m, fence, s.now);
                self.run(&mut s, p, req);
            }
            Action::Crash(p) => {
                s.believed[usize::from(p)] = None;
                s.crashes += 1;
            }
            Action::ReleaseByOwner(p) => {
                let owner = self.owners[usize::from(p)].clone();
                self.run(&mut s, p, lease::Request::ReleaseByOwner { owner });
            }
        }
        Some(s)
    }

    fn within_boundary(&self, s: &SysState) -> bool {
        s.store.fence_high_water <= self.max_fence && s.max_issued <= self.max_fence
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always("fences strictly increase", |_, s| {
                s.broken & rule::FENCE_INCREASE == 0
            }),
            Property::<Self>::always(
                "an unexpired lease is never taken by another owner",
                |_, s| s.broken & rule::LIVE_STOLEN == 0,
            ),
            Property::<Self>::always(
                "single writer: no commit admitted outside its pair's unexpired, undisplaced lease",
                |_, s| s.broken & rule::STALE_COMMIT == 0,
            ),
            Property::<Self>::always(
                "admitted commits never go back in fence, one owner per fence",
                |_, s| s.broken & rule::COMMIT_ORDER == 0,
            ),
            Property::<Self>::always("a displaced or lapsed lease is never renewed", |_, s| {
                s.broken & rule::STALE_RENEW == 0
            }),
            Property::<Self>::always("a release deletes only its own pair", |_, s| {
                s.broken & rule::RELEASE_OTHER == 0
            }),
            Property::<Self>::always(
                "a release by owner deletes only that owner's lease",
                |_, s| s.broken & rule::RELEASE_OWNER_OTHER == 0,
            ),
            Property::<Self>::sometimes("an expired lease is stolen", |_, s| {
                s.seen & seen::STEAL != 0
            }),
            Property::<Self>::sometimes("a lease is renewed", |_, s| s.seen & seen::RENEWAL != 0),
            Property::<Self>::sometimes("a stale commit is refused", |_, s| {
                s.seen & seen::STALE_COMMIT_REFUSED != 0
            }),
            Property::<Self>::sometimes("a commit is admitted after a crash", |_, s| {
                s.seen & seen::COMMIT_AFTER_RESTART != 0
            }),
            Property::<Self>::sometimes("a stale release leaves the new holder alone", |_, s| {
                s.seen & seen::STALE_RELEASE_IGNORED != 0
            }),
            Property::<Self>::sometimes(
                "a lease is released by owner once its process lost the fence",
                |_, s| s.seen & seen::RELEASED_WITHOUT_FENCE != 0,
            ),
        ]
    }
}

impl crate::family::MutantModel for LeaseModel {
    type Mutant = Mutant;
    const NAME: &'static str = "lease";
    const SUMMARY: &'static str = "expiring fenced writer lease: single writer under steals, pauses, crashes and late messages";

    fn at(bound: Bound) -> Result<Self, String> {
        let owners = ["a", "b", "c"]
            .iter()
            .filter_map(|n| Owner::new(*n).ok())
            .collect();
        Ok(match bound {
            Bound::Ci => LeaseModel {
                owners,
                ttl: 2,
                max_time: 4,
                max_fence: 3,
                max_crashes: 1,
                mutant: None,
            },
            Bound::Deep => LeaseModel {
                owners,
                ttl: 2,
                max_time: 5,
                max_fence: 4,
                max_crashes: 1,
                mutant: None,
            },
        })
    }

    fn mutant_slot(&mut self) -> &mut Option<Mutant> {
        &mut self.mutant
    }

    fn describe_bound(&self) -> String {
        format!(
            "{} owners, ttl {}, clock <= {}, fence <= {}, crashes <= {}",
            self.owners.len(),
            self.ttl,
            self.max_time,
            self.max_fence,
            self.max_crashes
        )
    }
}
