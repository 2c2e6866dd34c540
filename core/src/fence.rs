//! Writer-fence epochs per world.
//!
//! Every mutable writer of a world holds an **epoch**. Acquiring a fence issues
//! an epoch strictly above every epoch the world ever issued *and* above any
//! imported floor, and makes it the current one; a write is admitted only at
//! the current epoch. So a holder acquiring fences — a new writer, or a
//! migration planning a move — stales every earlier writer at once.
//!
//! A **floor** is imported when a world's control state moves to a new home:
//! it records that epochs up to the floor may have been issued elsewhere (the
//! source's current fence epoch and every imported manifest writer epoch).
//! Importing never lowers the floor, and a write at or below the floor is never
//! admitted: the first writer at the new home must acquire strictly above it.
//!
//! Pure: a shell loads [`WorldFence`] for one world inside its write
//! transaction, calls [`decide`], persists [`Decision::next`].

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A writer-fence epoch. 0 means "none issued".
pub type Epoch = u64;

/// The longest holder name accepted, in bytes.
pub const MAX_HOLDER_LEN: usize = 128;

/// Who acquired the current epoch (a writer, a migration). Informational:
/// admission is by epoch alone.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Holder(String);

impl Holder {
    /// Validates and wraps a holder name: 1..=[`MAX_HOLDER_LEN`] bytes, no
    /// control characters.
    pub fn new(name: impl Into<String>) -> Result<Self, FenceError> {
        let name = name.into();
        if name.is_empty() || name.len() > MAX_HOLDER_LEN || name.chars().any(char::is_control) {
            return Err(FenceError::InvalidHolder { len: name.len() });
        }
        Ok(Holder(name))
    }

    /// The holder name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Holder {
    type Error = FenceError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Holder::new(value)
    }
}

impl From<Holder> for String {
    fn from(value: Holder) -> Self {
        value.0
    }
}

/// The stored fence state of one world.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorldFence {
    /// The highest epoch issued here; 0 before the first acquire.
    pub issued: Epoch,
    /// The highest imported floor; 0 when nothing was imported.
    pub floor: Epoch,
    /// Who acquired `issued`. Never imported from another home.
    pub holder: Option<Holder>,
}

impl WorldFence {
    /// The epoch at which writes are admitted, if any: the last issued epoch,
    /// provided it lies above the floor (so never 0: the floor is at least 0).
    pub fn current(&self) -> Option<Epoch> {
        (self.issued > self.floor).then_some(self.issued)
    }
}

/// A request to the fence machine of one world.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Request {
    /// Issue a new epoch to `holder`, staling every earlier one.
    Acquire {
        /// Who takes the fence.
        holder: Holder,
    },
    /// Admit a write carrying `epoch`.
    AdmitWrite {
        /// The writer's epoch.
        epoch: Epoch,
    },
    /// Raise the floor to at least `floor` (control import).
    ImportFloor {
        /// The imported floor.
        floor: Epoch,
    },
}

/// What a successful request did.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// A new epoch was issued.
    Acquired {
        /// The new current epoch.
        epoch: Epoch,
        /// The epoch it staled, if a writer was current.
        staled: Option<Epoch>,
    },
    /// The write is admitted.
    Admitted,
    /// The floor now stands at `floor` (unchanged if the import was lower).
    FloorImported {
        /// The floor after the import.
        floor: Epoch,
    },
}

/// A decision: the outcome and the state to persist.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Decision {
    /// What happened.
    pub outcome: Outcome,
    /// The state to write back.
    pub next: WorldFence,
}

/// Why a fence request was refused. Nothing changes on a refusal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum FenceError {
    /// The writer's epoch is not the current one.
    #[error("StaleFence: epoch {epoch} is not the current writer epoch (current {current:?}, floor {floor})")]
    StaleFence {
        /// The epoch the writer carried.
        epoch: Epoch,
        /// The current epoch, if any.
        current: Option<Epoch>,
        /// The imported floor.
        floor: Epoch,
    },
    /// Every epoch value has been issued.
    #[error("FenceExhausted: no epoch above {0} can be issued")]
    FenceExhausted(Epoch),
    /// A holder name that is empty, too long or has control characters.
    #[error("InvalidHolder: a holder name must be 1..={max} bytes without control characters (got {len} bytes)", max = MAX_HOLDER_LEN)]
    InvalidHolder {
        /// The rejected name's length in bytes.
        len: usize,
    },
}

impl FenceError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (a stale epoch is `FailedPrecondition`).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            FenceError::StaleFence { .. } => Class::FailedPrecondition,
            FenceError::FenceExhausted(..) => Class::ResourceExhausted,
            FenceError::InvalidHolder { .. } => Class::InvalidArgument,
        }
    }
}

/// Decides one request against one world's stored fence state.
pub fn decide(state: &WorldFence, req: &Request) -> Result<Decision, FenceError> {
    match req {
        Request::Acquire { holder } => {
            let base = state.issued.max(state.floor);
            let epoch = base
                .checked_add(1)
                .ok_or(FenceError::FenceExhausted(base))?;
            Ok(Decision {
                outcome: Outcome::Acquired {
                    epoch,
                    staled: state.current(),
                },
                next: WorldFence {
                    issued: epoch,
                    floor: state.floor,
                    holder: Some(holder.clone()),
                },
            })
        }
        Request::AdmitWrite { epoch } => {
            if *epoch != 0 && state.current() == Some(*epoch) {
                Ok(Decision {
                    outcome: Outcome::Admitted,
                    next: state.clone(),
                })
            } else {
                Err(FenceError::StaleFence {
                    epoch: *epoch,
                    current: state.current(),
                    floor: state.floor,
                })
            }
        }
        Request::ImportFloor { floor } => {
            let floor = state.floor.max(*floor);
            let mut next = state.clone();
            next.floor = floor;
            Ok(Decision {
                outcome: Outcome::FloorImported { floor },
                next,
            })
        }
    }
}

/// The floor a world must import when its control state moves: the maximum of
/// the source's current fence epoch and every imported manifest writer epoch.
pub fn import_floor_for(source_epoch: Epoch, manifest_writer_epochs: &[Epoch]) -> Epoch {
    manifest_writer_epochs
        .iter()
        .copied()
        .fold(source_epoch, Epoch::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> Holder {
        Holder::new(s).unwrap()
    }

    #[test]
    fn a_holder_reads_back_as_its_own_string() {
        // The stored form a shell writes is the string the holder was made of.
        assert_eq!(h("migrator-1").as_str(), "migrator-1");
        assert_eq!(String::from(h("migrator-1")), "migrator-1");
        assert_eq!(String::from(Holder::try_from("m".to_owned()).unwrap()), "m");
        assert!(Holder::try_from(String::new()).is_err());
    }

    #[test]
    fn no_epoch_is_current_before_the_first_acquire_or_at_the_floor() {
        assert_eq!(WorldFence::default().current(), None);
        let at_floor = WorldFence {
            issued: 3,
            floor: 3,
            holder: None,
        };
        assert_eq!(at_floor.current(), None);
        let above = WorldFence {
            issued: 4,
            floor: 3,
            holder: None,
        };
        assert_eq!(above.current(), Some(4));
    }

    #[test]
    fn acquire_stales_the_previous_writer() {
        let s = WorldFence::default();
        let d1 = decide(&s, &Request::Acquire { holder: h("w1") }).unwrap();
        assert_eq!(
            d1.outcome,
            Outcome::Acquired {
                epoch: 1,
                staled: None
            }
        );
        let d2 = decide(
            &d1.next,
            &Request::Acquire {
                holder: h("migration"),
            },
        )
        .unwrap();
        assert_eq!(
            d2.outcome,
            Outcome::Acquired {
                epoch: 2,
                staled: Some(1)
            }
        );
        assert!(decide(&d2.next, &Request::AdmitWrite { epoch: 1 }).is_err());
        assert_eq!(
            decide(&d2.next, &Request::AdmitWrite { epoch: 2 })
                .unwrap()
                .outcome,
            Outcome::Admitted
        );
    }

    #[test]
    fn floor_is_monotonic_and_acquire_goes_above_it() {
        let s = WorldFence::default();
        let s = decide(&s, &Request::ImportFloor { floor: 7 }).unwrap().next;
        let s = decide(&s, &Request::ImportFloor { floor: 3 }).unwrap().next;
        assert_eq!(s.floor, 7);
        // Nothing is current after an import: the source's writer at 7 is refused.
        assert!(decide(&s, &Request::AdmitWrite { epoch: 7 }).is_err());
        let d = decide(&s, &Request::Acquire { holder: h("w") }).unwrap();
        assert_eq!(
            d.outcome,
            Outcome::Acquired {
                epoch: 8,
                staled: None
            }
        );
    }

    #[test]
    fn importing_a_floor_above_the_current_epoch_stales_it() {
        let s = decide(&WorldFence::default(), &Request::Acquire { holder: h("w") })
            .unwrap()
            .next;
        let s = decide(&s, &Request::ImportFloor { floor: 1 }).unwrap().next;
        assert_eq!(s.current(), None);
        assert!(decide(&s, &Request::AdmitWrite { epoch: 1 }).is_err());
    }

    #[test]
    fn epoch_zero_is_never_admitted_and_exhaustion_is_typed() {
        assert!(decide(&WorldFence::default(), &Request::AdmitWrite { epoch: 0 }).is_err());
        let s = WorldFence {
            issued: u64::MAX,
            floor: 0,
            holder: None,
        };
        assert_eq!(
            decide(&s, &Request::Acquire { holder: h("w") }),
            Err(FenceError::FenceExhausted(u64::MAX))
        );
        assert!(Holder::new("").is_err());
    }

    #[test]
    fn import_floor_takes_the_maximum_of_source_and_manifests() {
        assert_eq!(import_floor_for(3, &[]), 3);
        assert_eq!(import_floor_for(3, &[5, 2]), 5);
        assert_eq!(import_floor_for(9, &[5, 2]), 9);
    }
}
