//! Model of writer-fence epochs (`custos_core::fence`).
//!
//! Two worlds; three holders — two ordinary writers and a migration. Each
//! holder remembers, per world, the epoch it last acquired. The adversary may
//! interleave acquisitions, writes under remembered (possibly stale) epochs,
//! crashes that forget an epoch, and control imports that raise a world's
//! floor to any of a few values, in any order.
//!
//! Every request goes through [`custos_core::fence::decide`]; a mutant wraps
//! that call. A monitor records what was admitted; properties read it.

use custos_core::fence::{self, Epoch, FenceError, Holder, WorldFence};
use stateright::{Model, Property};

use crate::Bound;

/// Room for this many worlds; a bound uses [`FenceModel::worlds`] of them.
pub const WORLDS: usize = 2;
/// Number of holders; the last one is the migration.
pub const HOLDERS: usize = 3;
/// Index of the migration holder.
pub const MIGRATION: u8 = 2;

crate::mutants! {
    /// A defect the model can be made to exhibit, each a wrapped decision.
    pub enum Mutant {
        /// Importing a floor overwrites it, so a lower import lowers it.
        FloorImportLowers => "floor-import-lowers-epoch",
        /// Acquisition bumps the last issued epoch and ignores the floor.
        AcquireIgnoresFloor => "acquire-ignores-floor",
        /// A write is admitted at any epoch up to the current one.
        AdmitsOlderEpochs => "write-admitted-at-older-epoch",
    }
}

/// The model: its bound and, optionally, the defect it exhibits.
#[derive(Clone, Debug)]
pub struct FenceModel {
    /// Worlds in play (1 or 2). Each world is its own stored row and the
    /// machine decides over one row, so the bounds use one world; two (the
    /// product of two independent worlds) is available for exploration.
    pub worlds: u8,
    /// Holder names, index = holder.
    pub holders: Vec<Holder>,
    /// Floors the adversary may import.
    pub floors: Vec<Epoch>,
    /// No epoch above this is explored.
    pub max_epoch: Epoch,
    /// At most this many imports per world.
    pub max_imports: u8,
    /// The defect applied, if any.
    pub mutant: Option<Mutant>,
}

/// An action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Holder `h` acquires a fence on world `w`.
    Acquire {
        /// World index.
        w: u8,
        /// Holder index.
        h: u8,
    },
    /// Holder `h` writes to world `w` under its remembered epoch.
    Write {
        /// World index.
        w: u8,
        /// Holder index.
        h: u8,
    },
    /// A control import raises world `w`'s floor to `floor`.
    Import {
        /// World index.
        w: u8,
        /// The imported floor.
        floor: Epoch,
    },
    /// Holder `h` crashes and forgets its epochs.
    Crash {
        /// Holder index.
        h: u8,
    },
}

mod rule {
    pub const EPOCH_INCREASE: u8 = 1 << 0;
    pub const STALE_WRITE: u8 = 1 << 1;
    pub const FLOOR_LOWERED: u8 = 1 << 2;
    pub const WRITE_AT_FLOOR: u8 = 1 << 3;
}

mod seen {
    pub const STALE_REFUSED: u8 = 1 << 0;
    pub const MIGRATION_STALED_WRITER: u8 = 1 << 1;
    pub const ACQUIRED_ABOVE_FLOOR: u8 = 1 << 2;
    pub const WRITE_ADMITTED: u8 = 1 << 3;
}

/// The global state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SysState {
    /// The stored fence state of each world.
    pub worlds: [WorldFence; WORLDS],
    /// The epoch each holder remembers per world (0 = none).
    pub remembered: [[Epoch; WORLDS]; HOLDERS],
    /// Imports so far per world.
    pub imports: [u8; WORLDS],
    /// Monitor: highest epoch issued per world.
    pub max_issued: [Epoch; WORLDS],
    /// Monitor: highest floor imported per world.
    pub max_floor: [Epoch; WORLDS],
    /// Monitor: per world, the epoch a migration acquisition staled (0 none).
    pub staled_by_migration: [Epoch; WORLDS],
    /// Monitor: rules seen broken.
    pub broken: u8,
    /// Monitor: outcomes reached.
    pub seen: u8,
}

impl FenceModel {
    fn decide(
        &self,
        state: &WorldFence,
        req: &fence::Request,
    ) -> Result<fence::Decision, FenceError> {
        match (self.mutant, req) {
            (Some(Mutant::FloorImportLowers), fence::Request::ImportFloor { floor }) => {
                let mut d = fence::decide(state, req)?;
                d.next.floor = *floor;
                Ok(d)
            }
            (Some(Mutant::AcquireIgnoresFloor), fence::Request::Acquire { .. }) => {
                let blind = WorldFence {
                    floor: 0,
                    ..state.clone()
                };
                let mut d = fence::decide(&blind, req)?;
                d.next.floor = state.floor;
                Ok(d)
            }
            (Some(Mutant::AdmitsOlderEpochs), fence::Request::AdmitWrite { epoch }) => {
                match state.current() {
                    Some(c) if *epoch > 0 && *epoch <= c => {
                        fence::decide(state, &fence::Request::AdmitWrite { epoch: c })
                    }
                    _ => fence::decide(state, req),
                }
            }
            _ => fence::decide(state, req),
        }
    }
}

impl Model for FenceModel {
    type State = SysState;
    type Action = Action;

    fn init_states(&self) -> Vec<SysState> {
        vec![SysState {
            worlds: [WorldFence::default(), WorldFence::default()],
            remembered: [[0; WORLDS]; HOLDERS],
            imports: [0; WORLDS],
            max_issued: [0; WORLDS],
            max_floor: [0; WORLDS],
            staled_by_migration: [0; WORLDS],
            broken: 0,
            seen: 0,
        }]
    }

    fn actions(&self, s: &SysState, actions: &mut Vec<Action>) {
        if s.broken != 0 {
            return; // a counterexample ends where a rule first breaks
        }
        for w in 0..self.worlds.min(WORLDS as u8) {
            for h in 0..HOLDERS as u8 {
                actions.push(Action::Acquire { w, h });
                if s.remembered[usize::from(h)][usize::from(w)] > 0 {
                    actions.push(Action::Write { w, h });
                }
            }
            if s.imports[usize::from(w)] < self.max_imports {
                for &floor in &self.floors {
                    actions.push(Action::Import { w, floor });
                }
            }
        }
        for h in 0..HOLDERS as u8 {
            if s.remembered[usize::from(h)].iter().any(|e| *e > 0) {
                actions.push(Action::Crash { h });
            }
        }
    }

    fn next_state(&self, s: &SysState, action: Action) -> Option<SysState> {
        let mut s = s.clone();
        match action {
            Action::Acquire { w, h } => {
                let wi = usize::from(w);
                let holder = self.holders.get(usize::from(h))?.clone();
                let d = self
                    .decide(&s.worlds[wi], &fence::Request::Acquire { holder })
                    .ok()?;
                if let fence::Outcome::Acquired { epoch, staled } = d.outcome {
                    if epoch <= s.max_issued[wi] || epoch <= s.max_floor[wi] {
                        s.broken |= rule::EPOCH_INCREASE;
                    }
                    if s.max_floor[wi] > 0 && epoch > s.max_floor[wi] {
                        s.seen |= seen::ACQUIRED_ABOVE_FLOOR;
                    }
                    if h == MIGRATION {
                        if let Some(old) = staled {
                            s.staled_by_migration[wi] = s.staled_by_migration[wi].max(old);
                        }
                    }
                    s.max_issued[wi] = s.max_issued[wi].max(epoch);
                    s.remembered[usize::from(h)][wi] = epoch;
                }
                s.worlds[wi] = d.next;
            }
            Action::Write { w, h } => {
                let wi = usize::from(w);
                let epoch = s.remembered[usize::from(h)][wi];
                match self.decide(&s.worlds[wi], &fence::Request::AdmitWrite { epoch }) {
                    Ok(d) => {
                        if epoch != s.max_issued[wi] {
                            s.broken |= rule::STALE_WRITE;
                        }
                        if epoch <= s.max_floor[wi] {
                            s.broken |= rule::WRITE_AT_FLOOR;
                        }
                        s.seen |= seen::WRITE_ADMITTED;
                        s.worlds[wi] = d.next;
                    }
                    Err(_) => {
                        s.seen |= seen::STALE_REFUSED;
                        if h != MIGRATION && epoch <= s.staled_by_migration[wi] {
                            s.seen |= seen::MIGRATION_STALED_WRITER;
                        }
                        // The writer learns it is stale and forgets the epoch.
                        s.remembered[usize::from(h)][wi] = 0;
                    }
                }
            }
            Action::Import { w, floor } => {
                let wi = usize::from(w);
                let d = self
                    .decide(&s.worlds[wi], &fence::Request::ImportFloor { floor })
                    .ok()?;
                if d.next.floor < s.worlds[wi].floor {
                    s.broken |= rule::FLOOR_LOWERED;
                }
                s.max_floor[wi] = s.max_floor[wi].max(floor);
                s.imports[wi] += 1;
                s.worlds[wi] = d.next;
            }
            Action::Crash { h } => {
                s.remembered[usize::from(h)] = [0; WORLDS];
            }
        }
        Some(s)
    }

    fn within_boundary(&self, s: &SysState) -> bool {
        s.max_issued.iter().all(|e| *e <= self.max_epoch)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always(
                "epochs strictly increase per world, above every imported floor",
                |_, s| s.broken & rule::EPOCH_INCREASE == 0,
            ),
            Property::<Self>::always("a write is admitted only at the latest epoch", |_, s| {
                s.broken & rule::STALE_WRITE == 0
            }),
            Property::<Self>::always("importing a floor never lowers it", |_, s| {
                s.broken & rule::FLOOR_LOWERED == 0
            }),
            Property::<Self>::always(
                "no write is admitted at or below an imported floor",
                |_, s| s.broken & rule::WRITE_AT_FLOOR == 0,
            ),
            Property::<Self>::sometimes("a stale write is refused", |_, s| {
                s.seen & seen::STALE_REFUSED != 0
            }),
            Property::<Self>::sometimes("a migration's fences stale a writer", |_, s| {
                s.seen & seen::MIGRATION_STALED_WRITER != 0
            }),
            Property::<Self>::sometimes("an acquisition lands above an imported floor", |_, s| {
                s.seen & seen::ACQUIRED_ABOVE_FLOOR != 0
            }),
            Property::<Self>::sometimes("a write is admitted", |_, s| {
                s.seen & seen::WRITE_ADMITTED != 0
            }),
        ]
    }
}

impl crate::family::MutantModel for FenceModel {
    type Mutant = Mutant;
    const NAME: &'static str = "fence";
    const SUMMARY: &'static str = "writer-fence epochs per world: strictly increasing, floors never lowered, stale writers refused";

    fn at(bound: Bound) -> Result<Self, String> {
        let holders = ["writer-1", "writer-2", "migration"]
            .iter()
            .filter_map(|n| Holder::new(*n).ok())
            .collect();
        Ok(match bound {
            Bound::Ci => FenceModel {
                worlds: 1,
                holders,
                floors: vec![1, 3],
                max_epoch: 4,
                max_imports: 2,
                mutant: None,
            },
            Bound::Deep => FenceModel {
                worlds: 1,
                holders,
                floors: vec![1, 2, 4],
                max_epoch: 7,
                max_imports: 3,
                mutant: None,
            },
        })
    }

    fn mutant_slot(&mut self) -> &mut Option<Mutant> {
        &mut self.mutant
    }

    fn describe_bound(&self) -> String {
        format!(
            "{} world(s), {HOLDERS} holders (one migration), floors {:?}, epoch <= {}, imports <= {} per world",
            self.worlds, self.floors, self.max_epoch, self.max_imports
        )
    }
}
