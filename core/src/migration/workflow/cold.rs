//! A cold verifier over the destination's ports: what a host that keeps
//! its destination in one process (the memory ports, an embedder's own)
//! uses instead of writing one. It reads only the destination's control
//! catalog, table store and object store, each object's full bytes
//! included; in [`VerifyMode::ResumeAndTick`] it resumes the resumable
//! World above its imported floor and commits the tick after its head.
//!
//! A host that can (the command line) verifies from a fresh process
//! instead, opening the destination's stores anew, so that nothing cached
//! by the run is taken for evidence.

use super::ColdVerifier;
use crate::fence::Holder;
use crate::migration::artifacts::{content_address, measure, Measured, ObjectError, ObjectStore};
use crate::migration::tables::TableStore;
use crate::migration::verify::VerifyMode;
use crate::migration::{
    ColdEvidence, Name, NormalizedUri, ObjectFound, ObjectMismatch, Plan, Resume,
};
use crate::world::{ControlCatalog, FencePurpose, WorldError};

/// The fence holder a cold verifier resumes a World under.
pub const COLD_HOLDER: &str = "custos-cold-verifier";

/// A cold verifier over a destination's ports.
pub struct PortsColdVerifier<'a, C, T, O> {
    /// The destination's control catalog.
    pub control: &'a C,
    /// The destination's table store.
    pub tables: &'a T,
    /// The destination's object store.
    pub objects: &'a O,
    /// The Artifact root the object store serves.
    pub artifact_root: NormalizedUri,
}

/// How many of `plan`'s objects verify in full in `objects` (beneath
/// `root`), and each one that does not with what its address holds. An
/// I/O error is a failure naming the address: it is not evidence of the
/// object.
pub fn verify_objects<O: ObjectStore + ?Sized>(
    objects: &O,
    root: &NormalizedUri,
    plan: &Plan,
) -> Result<(u64, Vec<ObjectMismatch>), String> {
    let mut verified = 0;
    let mut failed = Vec::new();
    for o in &plan.artifacts.objects {
        let at = content_address(root, &o.sha256).map_err(|e| e.to_string())?;
        let found = match objects.read(&at, o.size) {
            Ok(read) => match measure(read, o.size).map_err(|e| format!("{at}: {e}"))? {
                Measured::Facts(f) if f == *o => {
                    verified += 1;
                    continue;
                }
                Measured::Facts(f) => ObjectFound::Facts(f),
                Measured::Longer => ObjectFound::Longer,
            },
            Err(ObjectError::Missing) => ObjectFound::Missing,
            Err(ObjectError::NotRegularFile(entry)) => ObjectFound::NotRegularFile(entry),
            Err(ObjectError::TooLong { .. }) => ObjectFound::Longer,
            Err(e) => return Err(format!("{at}: {e}")),
        };
        failed.push(ObjectMismatch {
            sha256: o.sha256,
            uri: at,
            found,
        });
    }
    Ok((verified, failed))
}

/// What a cold verification in `mode` says of resuming: a read-only
/// verification does not exercise a resumable World (and has none to
/// exercise when the plan lists none); a resuming one resumes it
/// ([`resume_world`]).
pub fn resume_for<C: ControlCatalog + ?Sized>(
    control: &C,
    plan: &Plan,
    mode: VerifyMode,
) -> Result<Resume, String> {
    match mode {
        VerifyMode::ReadOnly if plan.worlds.iter().any(|w| w.resumable) => Ok(Resume::NotExercised),
        VerifyMode::ReadOnly => Ok(Resume::NotApplicable),
        VerifyMode::ResumeAndTick => resume_world(control, plan),
    }
}

/// Resumes `plan`'s resumable World in `control` under [`COLD_HOLDER`]: a
/// strictly higher epoch, the tick after the durable head. Another
/// verifier fencing the World in between (one left running by a killed
/// run) makes the commit stale; the resume then takes a still-higher
/// epoch, at most eight times.
pub fn resume_world<C: ControlCatalog + ?Sized>(
    control: &C,
    plan: &Plan,
) -> Result<Resume, String> {
    let Some(w) = plan.worlds.iter().find(|w| w.resumable) else {
        return Ok(Resume::NotApplicable);
    };
    let id = w.world.as_str();
    let holder = Holder::new(COLD_HOLDER).map_err(|e| e.to_string())?;
    let mut last = String::new();
    for _ in 0..8 {
        let (epoch, _) = control
            .acquire_fence(id, &holder, FencePurpose::Resume)
            .map_err(|e| e.to_string())?;
        let head = control.open_world_readonly(id).map_err(|e| e.to_string())?;
        let tick = head.record.tick_head + 1;
        match control.commit_tick(id, epoch, tick) {
            Ok(_) => {
                return Ok(Resume::Resumed {
                    world: w.world.clone(),
                    epoch,
                    tick,
                })
            }
            Err(e @ WorldError::StaleFence { .. }) => last = e.to_string(),
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!("the resume of {id} was fenced out 8 times: {last}"))
}

impl<C, T, O> ColdVerifier for PortsColdVerifier<'_, C, T, O>
where
    C: ControlCatalog,
    T: TableStore,
    O: ObjectStore,
{
    fn verify(&self, plan: &Plan, mode: VerifyMode) -> Result<ColdEvidence, String> {
        let worlds_missing: Vec<Name> = plan
            .worlds
            .iter()
            .filter(|w| self.control.open_world_readonly(w.world.as_str()).is_err())
            .map(|w| w.world.clone())
            .collect();
        let mut tables = Vec::new();
        for t in &plan.tables {
            let f = match self.tables.inspect(&t.name).map_err(|e| e.to_string())? {
                Some(f) => f,
                None => self
                    .tables
                    .evidence_at(&t.name, 0)
                    .map_err(|e| e.to_string())?,
            };
            tables.push((t.name.clone(), f));
        }
        let objects = verify_objects(self.objects, &self.artifact_root, plan)?;
        let resume = resume_for(self.control, plan, mode)?;
        Ok(ColdEvidence::of(
            plan,
            worlds_missing,
            tables,
            objects,
            resume,
        ))
    }
}
