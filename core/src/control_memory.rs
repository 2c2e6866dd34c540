//! The memory backend of the control catalog ([`ControlCatalog`]) and of
//! a migration destination's administration ([`ControlAdmin`]) over the
//! same worlds: the reference every other backend of the two ports is held
//! to by the conformance suites, and the stand-in the command line uses for
//! an endpoint that holds nothing yet.
//!
//! It lives beside both machines rather than in either: the catalog of
//! worlds knows nothing of migrations, and the administration reads the
//! worlds through the catalog's port and rules.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::migration::control::{
    check_departures, check_reservation, check_transition, decide_activation, decide_stage,
    AdminEffect, AdminError, ControlAdmin, ControlSnapshot, MemoryAdmin, StagedBundle,
};
use crate::migration::departure::Departures;
use crate::migration::{Destination, Status, StoredReceipt};
use crate::world::{
    apply_effect, decide, ControlCatalog, Outcome, Request, SignatureRecord, WorldError, WorldInfo,
    WorldRecord, WorldSlot,
};

/// What a [`MemoryControlCatalog`] holds, as a plain value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ControlImage {
    /// Each world's stored slot, by world id.
    pub worlds: BTreeMap<String, WorldSlot>,
    /// The migration administration of this identity as a destination.
    pub destination: Destination,
    /// This identity's departures as a source.
    pub departures: Departures,
    /// The staged control bundle, until activation imports it.
    pub staged: Option<StagedBundle>,
}

/// The control catalog over the pure state, behind a mutex; its migration
/// administration ([`ControlAdmin`]) behind
/// another (locked after the first, always in that order).
#[derive(Debug, Default)]
pub struct MemoryControlCatalog {
    worlds: std::sync::Arc<Mutex<BTreeMap<String, WorldSlot>>>,
    pub(crate) admin: std::sync::Arc<Mutex<MemoryAdmin>>,
}

impl MemoryControlCatalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    /// A second handle over this catalog's worlds and administration: the
    /// memory backend's stand-in for reopening a file. It keeps the state
    /// across the "reopen" and survives no process exit.
    #[must_use]
    pub fn reopen(&self) -> Self {
        MemoryControlCatalog {
            worlds: std::sync::Arc::clone(&self.worlds),
            admin: std::sync::Arc::clone(&self.admin),
        }
    }

    /// Everything it holds — the worlds and the migration administration —
    /// as a plain value (a model checker keeps it in its state and builds
    /// the catalog again with [`MemoryControlCatalog::from_image`]).
    pub fn image(&self) -> Result<ControlImage, AdminError> {
        let worlds = self.lock().map_err(|_| poisoned("worlds"))?.clone();
        let admin = self.admin.lock().map_err(|_| poisoned("admin"))?;
        Ok(ControlImage {
            worlds,
            destination: admin.destination.clone(),
            departures: admin.departures.clone(),
            staged: admin.staged.clone(),
        })
    }

    /// A catalog holding `image` ([`MemoryControlCatalog::image`]), as
    /// given: nothing is checked (a fixture's or a model's state; a
    /// reservation in it is checked when it is loaded).
    pub fn from_image(image: ControlImage) -> Self {
        MemoryControlCatalog {
            worlds: std::sync::Arc::new(Mutex::new(image.worlds)),
            admin: std::sync::Arc::new(Mutex::new(MemoryAdmin {
                destination: image.destination,
                departures: image.departures,
                staged: image.staged,
            })),
        }
    }

    pub(crate) fn lock(
        &self,
    ) -> Result<std::sync::MutexGuard<'_, BTreeMap<String, WorldSlot>>, WorldError> {
        self.worlds.lock().map_err(|_| WorldError::BackendFault {
            reason: "memory control catalog mutex poisoned".into(),
        })
    }
}

impl ControlCatalog for MemoryControlCatalog {
    fn apply(&self, req: &Request) -> Result<Outcome, WorldError> {
        let mut worlds = self.lock()?;
        let slot = worlds.get(req.world_id()).cloned().unwrap_or_default();
        let d = decide(&slot, req)?;
        if !d.effects.is_empty() {
            let slot = worlds.entry(req.world_id().to_owned()).or_default();
            for e in &d.effects {
                apply_effect(slot, e);
            }
        }
        Ok(d.outcome)
    }

    fn discover_worlds(&self) -> Result<Vec<WorldRecord>, WorldError> {
        Ok(self
            .lock()?
            .values()
            .filter_map(|s| s.record.clone())
            .collect())
    }

    fn open_world_readonly(&self, world_id: &str) -> Result<WorldInfo, WorldError> {
        let slot = self.lock()?.get(world_id).cloned().unwrap_or_default();
        slot.into_info(world_id)
    }

    fn list_signatures(&self) -> Result<Vec<SignatureRecord>, WorldError> {
        Ok(self
            .lock()?
            .iter()
            .flat_map(|(w, s)| {
                s.signatures.iter().map(move |sig| SignatureRecord {
                    world_id: w.clone(),
                    signature: sig.clone(),
                })
            })
            .collect())
    }
}

fn poisoned(what: &str) -> AdminError {
    AdminError::Backend {
        reason: format!("memory control catalog {what} mutex poisoned"),
    }
}

impl ControlAdmin for MemoryControlCatalog {
    fn export_snapshot(&self) -> Result<ControlSnapshot, AdminError> {
        let worlds = self.lock().map_err(|_| poisoned("worlds"))?;
        Ok(ControlSnapshot::from_slots(worlds.values()))
    }

    fn load_destination(&self) -> Result<Destination, AdminError> {
        let admin = self.admin.lock().map_err(|_| poisoned("admin"))?;
        if let Some(r) = &admin.destination.reservation {
            check_reservation(r)?;
        }
        Ok(admin.destination.clone())
    }

    fn commit_destination(
        &self,
        expected: &Destination,
        next: &Destination,
        effect: AdminEffect<'_>,
    ) -> Result<(), AdminError> {
        let mut worlds = self.lock().map_err(|_| poisoned("worlds"))?;
        let mut admin = self.admin.lock().map_err(|_| poisoned("admin"))?;
        if admin.destination != *expected {
            return Err(AdminError::Moved {
                detail: "the stored administration is not the expected one".into(),
            });
        }
        check_transition(&admin.destination, next)?;
        match effect {
            AdminEffect::None => {}
            AdminEffect::Stage { snapshot, floors } => {
                if let Some(b) = decide_stage(next, admin.staged.as_ref(), snapshot, floors)? {
                    admin.staged = Some(b);
                }
            }
            AdminEffect::Activate => {
                let live = ControlSnapshot::from_slots(worlds.values()).records();
                for slot in decide_activation(next, admin.staged.as_ref(), live)? {
                    if let Some(r) = &slot.record {
                        worlds.insert(r.identity.world_id.clone(), slot);
                    }
                }
            }
        }
        if next
            .reservation
            .as_ref()
            .is_some_and(|r| r.status == Status::Abandoned)
        {
            admin.staged = None;
        }
        admin.destination = next.clone();
        Ok(())
    }

    fn stored_receipt(&self) -> Result<Option<Vec<u8>>, AdminError> {
        let admin = self.admin.lock().map_err(|_| poisoned("admin"))?;
        Ok(admin
            .destination
            .reservation
            .as_ref()
            .and_then(|r| r.receipt.as_ref())
            .map(StoredReceipt::encode))
    }

    fn load_departures(&self) -> Result<Departures, AdminError> {
        let admin = self.admin.lock().map_err(|_| poisoned("admin"))?;
        Ok(admin.departures.clone())
    }

    fn commit_departures(
        &self,
        expected: &Departures,
        next: &Departures,
    ) -> Result<(), AdminError> {
        let mut admin = self.admin.lock().map_err(|_| poisoned("admin"))?;
        if admin.departures != *expected {
            return Err(AdminError::Moved {
                detail: "the stored departure record is not the expected one".into(),
            });
        }
        check_departures(next)?;
        admin.departures = next.clone();
        Ok(())
    }
}
