//! Abandoning a migration that never reached activation: the order of its
//! steps, each safe to repeat after a crash at any point.
//!
//! 1. **The destination** stores its reservation [`Status::Abandoned`]
//!    (core's [`super::super::abandon`] decides, by compare-and-swap). This
//!    is the authority and comes first: from then on no driver of this id
//!    reserves, copies or activates there, whatever it held in memory. An
//!    activated or completed reservation is refused — the destination is a
//!    live home — and so is one of another migration.
//! 2. **The source** marks its departure to this destination abandoned
//!    ([`departure::abandon`], by compare-and-swap), so the source may be
//!    planned again. A source whose control catalog is gone (or was never
//!    written) has nothing to mark; that is reported, never an error.
//! 3. **The copies** go: each table the plan names is discarded at the
//!    destination ([`Discard`]). Before activation none of them was
//!    discoverable, so nothing is lost. Content-addressed Artifact objects
//!    already copied are kept: no record refers to them, a later
//!    migration reuses the identical ones, and an object store has no
//!    removal in this version.
//!
//! A run killed after step 1 leaves an abandoned reservation; the retry
//! finds it abandoned already and finishes steps 2 and 3.
//!
//! [`Status::Abandoned`]: super::super::Status::Abandoned

use serde::Serialize;

use super::super::control::ControlAdmin;
use super::super::tables::TableError;
use super::super::{departure, MigrationError, Name, Status, StorageIdentity};
use super::{Res, WorkflowError};

/// Removes a destination's copies of the tables a plan names.
pub trait Discard {
    /// Removes `table` (its catalog entry and its files) from the
    /// destination namespace; answers whether anything was there. Safe to
    /// repeat after a crash at any point.
    fn discard(&self, table: &Name) -> Result<bool, TableError>;
}

/// What [`abandon`] did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Abandoned {
    /// The migration.
    pub migration_id: Name,
    /// Its source (from the reserved plan).
    pub source: StorageIdentity,
    /// Its destination.
    pub destination: StorageIdentity,
    /// Whether the destination's reservation was abandoned already (a
    /// retry).
    pub already: bool,
    /// Whether the source's departure record was marked (false: the source
    /// has no control catalog or records no such departure).
    pub source_marked: bool,
    /// The tables removed at the destination.
    pub tables_removed: Vec<Name>,
}

/// Abandons migration `migration_id` at `destination` in the order of the
/// module documentation. `source` opens the source's administration named
/// by the reserved plan (`Ok(None)`: it has no control catalog); it is
/// called only after the destination is marked. Nothing is removed before
/// both marks are stored.
pub fn abandon<'s, D: ControlAdmin + ?Sized>(
    destination: &D,
    tables: &dyn Discard,
    source: impl FnOnce(&StorageIdentity) -> Res<Option<Box<dyn ControlAdmin + 's>>>,
    migration_id: &Name,
) -> Res<Abandoned> {
    // 1. The destination: the authority, stored first.
    let stored = destination
        .load_destination()
        .map_err(WorkflowError::Admin)?;
    let next = super::super::abandon(&stored, migration_id).map_err(WorkflowError::Refused)?;
    let plan = stored
        .reservation
        .as_ref()
        .map(|r| r.plan.clone())
        .ok_or_else(|| {
            WorkflowError::Refused(MigrationError::NothingToAbandon(migration_id.clone()))
        })?;
    let already = next.is_none();
    if let Some(next) = &next {
        destination
            .commit_destination(&stored, next, super::super::control::AdminEffect::None)
            .map_err(WorkflowError::Admin)?;
    }
    // Re-read: what is stored now is abandoned, whoever stored it.
    let now = destination
        .load_destination()
        .map_err(WorkflowError::Admin)?;
    if now.reservation.as_ref().map(|r| r.status) != Some(Status::Abandoned) {
        return Err(WorkflowError::Refused(MigrationError::NothingToAbandon(
            migration_id.clone(),
        )));
    }
    // 2. The source's departure.
    let mut source_marked = false;
    if let Some(admin) = source(&plan.source)? {
        let departures = admin.load_departures().map_err(WorkflowError::Admin)?;
        if let Some(next) = departure::abandon(&departures, migration_id, &plan.destination)
            .map_err(WorkflowError::Refused)?
        {
            admin
                .commit_departures(&departures, &next)
                .map_err(WorkflowError::Admin)?;
        }
        source_marked = admin
            .load_departures()
            .map_err(WorkflowError::Admin)?
            .find(migration_id, &plan.destination)
            .is_some_and(|d| d.leg == departure::Leg::Abandoned);
    }
    // 3. The copies.
    let mut tables_removed = Vec::new();
    for t in &plan.tables {
        if tables.discard(&t.name).map_err(WorkflowError::Tables)? {
            tables_removed.push(t.name.clone());
        }
    }
    Ok(Abandoned {
        migration_id: migration_id.clone(),
        source: plan.source,
        destination: plan.destination,
        already,
        source_marked,
        tables_removed,
    })
}

impl Discard for super::super::tables::MemoryTableStore {
    fn discard(&self, table: &Name) -> Result<bool, TableError> {
        self.remove(table)
    }
}
