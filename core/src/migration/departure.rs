//! One home per World: what a source endpoint records of the migrations
//! that take it as their source, and the rule that keeps a source from
//! being moved into two live homes.
//!
//! A migration copies a World; after activation its destination resumes
//! the World with its own fence. Two activated destinations of one source
//! would each resume the same World at the same tick — two live homes, a
//! split brain. So the source keeps, beside its control records and never
//! in its control snapshot (it is endpoint-local administrative evidence,
//! like a destination's reservation), a [`Departures`] record: one
//! [`Departure`] per migration that planned to move it — the migration id,
//! the destination identity, a [`Leg`] status and whether the operator
//! acknowledged a second copy.
//!
//! The rule, [`depart`]:
//!
//! - the same migration to the same destination resumes (a retry);
//! - a migration that was abandoned ([`Leg::Abandoned`]) is never resumed:
//!   plan again under a new id;
//! - any other live departure ([`Leg::Planned`] or [`Leg::Moved`]) refuses
//!   the new one with [`MigrationError::SourceMigrated`], naming the first
//!   destination and its migration — unless the operator acknowledged a
//!   second copy, which is then recorded in the new departure (and in its
//!   plan and receipt);
//! - a departure is recorded before any source fence is taken, by a
//!   compare-and-swap on the stored record: two racing planners cannot
//!   both record theirs (the loser re-reads and is refused).
//!
//! [`abandon`] marks a departure abandoned (a reservation that never
//! reached activation is being removed at its destination);
//! [`arrived`] marks it moved once the destination completed.

use serde::{Deserialize, Serialize};

use super::{MigrationError, Name, StorageIdentity};

/// The most departures one source records (a bound on stored input).
pub const MAX_DEPARTURES: usize = 1024;

/// Where a departure stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Leg {
    /// Planned (the source is fenced for it); the destination may be
    /// anywhere before completion.
    Planned,
    /// The destination completed the migration: the World lives there.
    Moved,
    /// Abandoned before activation: its destination was returned to empty.
    Abandoned,
}

impl Leg {
    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Leg::Planned => "planned",
            Leg::Moved => "moved",
            Leg::Abandoned => "abandoned",
        }
    }

    /// Whether the departure still counts as a home (planned or moved).
    pub fn live(self) -> bool {
        self != Leg::Abandoned
    }
}

/// One migration that takes this endpoint as its source.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Departure {
    /// The migration.
    pub migration_id: Name,
    /// Where it moves the source's Worlds.
    pub destination: StorageIdentity,
    /// Where it stands.
    pub leg: Leg,
    /// The operator acknowledged that this makes a second copy beside
    /// another live departure.
    pub second_copy: bool,
}

impl Departure {
    fn is(&self, migration_id: &Name, destination: &StorageIdentity) -> bool {
        self.migration_id == *migration_id && self.destination == *destination
    }
}

/// Every departure a source records, sorted by (migration id, destination).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Departures {
    /// The departures.
    pub records: Vec<Departure>,
}

impl Departures {
    /// The departure of `migration_id` to `destination`, if recorded.
    pub fn find(&self, migration_id: &Name, destination: &StorageIdentity) -> Option<&Departure> {
        self.records
            .iter()
            .find(|d| d.is(migration_id, destination))
    }

    /// The live departures (planned or moved).
    pub fn live(&self) -> impl Iterator<Item = &Departure> {
        self.records.iter().filter(|d| d.leg.live())
    }

    /// Checks the stored shape: sorted, unique, bounded.
    pub fn check(&self) -> Result<(), String> {
        if self.records.len() > MAX_DEPARTURES {
            return Err(format!(
                "{} departures exceed {MAX_DEPARTURES}",
                self.records.len()
            ));
        }
        let sorted = self.records.windows(2).all(|w| {
            (&w[0].migration_id, &w[0].destination) < (&w[1].migration_id, &w[1].destination)
        });
        if !sorted {
            return Err("departures not sorted and unique".into());
        }
        Ok(())
    }

    /// The canonical bytes a backend stores.
    pub fn encode(&self) -> Vec<u8> {
        super::data::canonical_bytes(self)
    }

    /// Decodes stored bytes: canonical, bounded and checked.
    pub fn decode(bytes: &[u8]) -> Result<Departures, String> {
        let d: Departures = super::data::decode_canonical(bytes).map_err(|e| e.to_string())?;
        d.check()?;
        Ok(d)
    }

    fn with(&self, d: Departure) -> Departures {
        let mut records: Vec<Departure> = self
            .records
            .iter()
            .filter(|r| !r.is(&d.migration_id, &d.destination))
            .cloned()
            .collect();
        records.push(d);
        records.sort_by(|a, b| {
            (&a.migration_id, &a.destination).cmp(&(&b.migration_id, &b.destination))
        });
        Departures { records }
    }
}

/// Whether migration `migration_id` may move the source to `destination`,
/// given the source's stored departures: `Ok(None)` resumes its own
/// departure, `Ok(Some(next))` is the record to store (by compare-and-swap
/// on `stored`) before any source fence is taken, an error refuses and
/// changes nothing. `second_copy` is the operator's explicit
/// acknowledgement that a second live home is made.
pub fn depart(
    stored: &Departures,
    migration_id: &Name,
    destination: &StorageIdentity,
    second_copy: bool,
) -> Result<Option<Departures>, MigrationError> {
    if let Some(own) = stored.find(migration_id, destination) {
        return match own.leg {
            Leg::Abandoned => Err(MigrationError::MigrationAbandoned(migration_id.clone())),
            Leg::Planned | Leg::Moved => Ok(None),
        };
    }
    if stored.records.len() >= MAX_DEPARTURES {
        return Err(MigrationError::UnknownItem(format!(
            "the source records {MAX_DEPARTURES} departures already"
        )));
    }
    if !second_copy {
        if let Some(first) = stored.live().next() {
            return Err(MigrationError::SourceMigrated {
                migration_id: first.migration_id.clone(),
                destination: first.destination.uri().to_string(),
                leg: first.leg.as_str().into(),
            });
        }
    }
    Ok(Some(stored.with(Departure {
        migration_id: migration_id.clone(),
        destination: destination.clone(),
        leg: Leg::Planned,
        second_copy,
    })))
}

/// Marks the departure of `migration_id` to `destination` abandoned (its
/// destination reservation never reached activation and is being
/// removed). `Ok(None)`: nothing to store (absent, or already abandoned).
/// A moved departure is never abandoned.
pub fn abandon(
    stored: &Departures,
    migration_id: &Name,
    destination: &StorageIdentity,
) -> Result<Option<Departures>, MigrationError> {
    match stored.find(migration_id, destination) {
        None => Ok(None),
        Some(d) if d.leg == Leg::Abandoned => Ok(None),
        Some(d) if d.leg == Leg::Moved => {
            Err(MigrationError::AbandonAfterActivation(migration_id.clone()))
        }
        Some(d) => Ok(Some(stored.with(Departure {
            leg: Leg::Abandoned,
            ..d.clone()
        }))),
    }
}

/// Marks the departure of `migration_id` to `destination` moved (its
/// destination completed). `None`: nothing to store.
pub fn arrived(
    stored: &Departures,
    migration_id: &Name,
    destination: &StorageIdentity,
) -> Option<Departures> {
    match stored.find(migration_id, destination) {
        Some(d) if d.leg == Leg::Planned => Some(stored.with(Departure {
            leg: Leg::Moved,
            ..d.clone()
        })),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(uri: &str) -> StorageIdentity {
        StorageIdentity::new(uri, "default", "iceberg").unwrap()
    }

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    #[test]
    fn a_source_has_one_live_home_unless_a_second_copy_is_acknowledged() {
        let (d1, d2) = (id("file:///d1"), id("file:///d2"));
        let empty = Departures::default();
        let first = depart(&empty, &n("move-1"), &d1, false).unwrap().unwrap();
        assert_eq!(first.records.len(), 1);
        assert_eq!(first.records[0].leg, Leg::Planned);
        // A retry of the same migration to the same destination resumes.
        assert_eq!(depart(&first, &n("move-1"), &d1, false), Ok(None));
        // The same id to another destination, and another id anywhere, are
        // refused naming the first destination.
        for (m, d) in [("move-1", &d2), ("move-2", &d2), ("move-2", &d1)] {
            let e = depart(&first, &n(m), d, false).unwrap_err();
            assert_eq!(
                e,
                MigrationError::SourceMigrated {
                    migration_id: n("move-1"),
                    destination: "file:///d1".into(),
                    leg: "planned".into(),
                }
            );
            assert!(e.to_string().starts_with("source-migrated:"), "{e}");
            assert!(e.to_string().contains("file:///d1"), "{e}");
        }
        let moved = arrived(&first, &n("move-1"), &d1).unwrap();
        assert!(depart(&moved, &n("move-2"), &d2, false).is_err());
        // Acknowledged: recorded as a second copy.
        let both = depart(&moved, &n("move-2"), &d2, true).unwrap().unwrap();
        assert_eq!(both.records.len(), 2);
        assert!(both.find(&n("move-2"), &d2).unwrap().second_copy);
        assert!(both.check().is_ok());
        assert_eq!(Departures::decode(&both.encode()).unwrap(), both);
    }

    #[test]
    fn an_abandoned_departure_frees_the_source_and_is_never_resumed() {
        let d1 = id("file:///d1");
        let d2 = id("file:///d2");
        let first = depart(&Departures::default(), &n("move-1"), &d1, false)
            .unwrap()
            .unwrap();
        let gone = abandon(&first, &n("move-1"), &d1).unwrap().unwrap();
        assert_eq!(abandon(&gone, &n("move-1"), &d1), Ok(None));
        assert_eq!(
            depart(&gone, &n("move-1"), &d1, false),
            Err(MigrationError::MigrationAbandoned(n("move-1")))
        );
        assert!(depart(&gone, &n("move-2"), &d2, false).unwrap().is_some());
        let moved = arrived(&first, &n("move-1"), &d1).unwrap();
        assert_eq!(
            abandon(&moved, &n("move-1"), &d1),
            Err(MigrationError::AbandonAfterActivation(n("move-1")))
        );
        assert_eq!(arrived(&moved, &n("move-1"), &d1), None);
    }

    #[test]
    fn stored_departures_decode_canonically_and_sorted() {
        let d = Departures {
            records: vec![
                Departure {
                    migration_id: n("b"),
                    destination: id("file:///d"),
                    leg: Leg::Planned,
                    second_copy: false,
                },
                Departure {
                    migration_id: n("a"),
                    destination: id("file:///d"),
                    leg: Leg::Planned,
                    second_copy: false,
                },
            ],
        };
        assert!(Departures::decode(&d.encode()).is_err());
        assert!(Departures::decode(b" {}").is_err());
        assert!(Departures::decode(b"{\"records\":[],\"x\":1}").is_err());
    }
}
