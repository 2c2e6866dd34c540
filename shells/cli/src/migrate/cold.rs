//! The cold verifier (spec 001 §8) in a fresh child process.
//!
//! The parent ([`Child::run`]) closes its own handle on the destination's
//! Artifact root (whose lock would exclude the child's), starts this binary
//! as `custos migrate cold-verify` with the destination's paths only — no
//! source argument, working directory `/` — writes the plan's canonical
//! bytes to its stdin and reads its evidence as JSON from its stdout.
//!
//! The child ([`child`]) opens fresh destination resources: the control
//! catalog, the Iceberg catalog read-only and the Artifact root read-only.
//! It proves discovery (every planned World), every table's evidence as a
//! fresh read reproduces it, a query of every signature's table, every
//! object's full bytes against its size, SHA-256 and XXH3-64, and — when
//! the plan has a resumable World — resumes it: a fence strictly above
//! every earlier epoch (so a retry after an earlier verification tick
//! acquires a still-higher one), and the tick after the durable head.

use std::io::Write;
use std::process::ExitCode;

use custos_core::fence::Holder;
use custos_core::migration::artifacts::{content_address, measure, Measured, ObjectStore};
use custos_core::migration::tables::TableStore;
use custos_core::migration::{ColdEvidence, Plan, Resume};
use custos_core::world::{ControlCatalog, FencePurpose, WorldStatus};
use custos_fs::artifacts::ArtifactStore;
use custos_fs::RealFs;
use custos_iceberg::IcebergStore;
use custos_sqlite::control::SqliteControlCatalog;

use super::{read_bounded_from, spawn_cold, DestinationArgs, Local, MAX_DOCUMENT};
use crate::out::{self, Out};

/// The most bytes of evidence or diagnostics read from the child.
const MAX_CHILD_OUTPUT: usize = 64 << 20;

/// The parent's handle on the cold verifier of one destination.
pub struct Child<'a> {
    destination: &'a Local,
}

impl<'a> Child<'a> {
    /// The verifier of `destination`.
    pub fn new(destination: &'a Local) -> Self {
        Child { destination }
    }

    /// Runs the child on `plan` and answers its evidence.
    pub fn run(&self, plan: &Plan) -> Result<ColdEvidence, String> {
        self.destination.objects.release();
        let mut child = spawn_cold(&self.destination.destination_args())
            .map_err(|e| format!("cannot start the cold verifier: {e}"))?;
        let fed = child
            .stdin
            .take()
            .ok_or_else(|| "the cold verifier has no stdin".to_string())
            .and_then(|mut i| {
                i.write_all(&plan.canonical())
                    .map_err(|e| format!("cannot send the plan to the cold verifier: {e}"))
            });
        let output = child
            .wait_with_output()
            .map_err(|e| format!("the cold verifier failed: {e}"))?;
        fed?;
        if output.stdout.len() > MAX_CHILD_OUTPUT || output.stderr.len() > MAX_CHILD_OUTPUT {
            return Err("the cold verifier answered more than it may".into());
        }
        if !output.status.success() {
            let why = String::from_utf8_lossy(&output.stderr);
            return Err(format!(
                "the cold verifier exited with {}: {}",
                output.status,
                why.trim()
            ));
        }
        serde_json::from_slice(&output.stdout)
            .map_err(|e| format!("the cold verifier's evidence does not decode: {e}"))
    }
}

/// The child: reads the plan on stdin, verifies, prints the evidence.
pub fn child(out: &mut Out, dest: &DestinationArgs) -> std::io::Result<ExitCode> {
    let fail = |msg: String| {
        out::err(format_args!("custos migrate cold-verify: {msg}"));
        Ok(crate::exit::Exit::Corrupt.into())
    };
    let bytes = match read_bounded_from(&mut std::io::stdin().lock(), MAX_DOCUMENT) {
        Ok(b) => b,
        Err(e) => return fail(format!("the plan: {e}")),
    };
    let plan = match Plan::decode(&bytes) {
        Ok(p) => p,
        Err(e) => return fail(format!("the plan does not decode: {e}")),
    };
    let d = match Local::destination(dest) {
        Ok(d) => d,
        Err(f) => return fail(f.message),
    };
    match evidence(&d, &plan) {
        Ok(e) => match serde_json::to_string(&e) {
            Ok(s) => {
                out.line(s)?;
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => fail(format!("cannot encode the evidence: {e}")),
        },
        Err(e) => fail(e),
    }
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Everything the cold verifier proves, from fresh destination resources.
fn evidence(d: &Local, plan: &Plan) -> Result<ColdEvidence, String> {
    let path = custos_core::identity::catalog_location(&d.id, "");
    if !std::path::Path::new(&path).is_file() {
        return Err(format!("no control catalog at {path}"));
    }
    let control = SqliteControlCatalog::open(&path).map_err(text)?;
    let discovered = control.discover_worlds().map_err(text)?;
    let worlds_discovered = plan
        .worlds
        .iter()
        .filter(|w| {
            discovered
                .iter()
                .any(|r| r.identity.world_id == w.world.as_str() && r.status == WorldStatus::Active)
        })
        .count() as u64;
    let mut tables = Vec::new();
    if !plan.tables.is_empty() {
        let store = IcebergStore::open_readonly(&d.id).map_err(text)?;
        for t in &plan.tables {
            let facts = match store.inspect(&t.name).map_err(text)? {
                Some(f) => f,
                None => store.evidence_at(&t.name, 0).map_err(text)?,
            };
            tables.push((t.name.clone(), facts));
        }
        query(&store, &control)?;
    }
    let objects_verified = objects(d, plan)?;
    let resume = resume(&control, plan)?;
    Ok(ColdEvidence {
        plan_digest: plan.digest(),
        worlds_discovered,
        tables,
        objects_verified,
        resume,
    })
}

/// A destination-visible query: a bounded read of every live signature's
/// table (each must answer).
fn query(store: &IcebergStore, control: &SqliteControlCatalog) -> Result<(), String> {
    let present = store.list_tables().map_err(text)?;
    for s in control.list_signatures().map_err(text)? {
        if !present.contains(&s.signature.table_id) {
            continue;
        }
        store
            .existing_table_batches(&s.signature, &s.signature.components, 16)
            .map_err(|e| format!("query of {}: {e}", s.signature.table_id))?;
    }
    Ok(())
}

/// Objects whose full bytes verify against the plan.
fn objects(d: &Local, plan: &Plan) -> Result<u64, String> {
    if plan.artifacts.objects.is_empty() {
        return Ok(0);
    }
    let store = ArtifactStore::open_read_only(RealFs, d.objects.root()).map_err(text)?;
    let mut verified = 0;
    for o in &plan.artifacts.objects {
        let at = content_address(store.root_uri(), &o.sha256).map_err(text)?;
        let read = store.read(&at, o.size).map_err(|e| format!("{at}: {e}"))?;
        if measure(read, o.size).map_err(text)? == Measured::Facts(*o) {
            verified += 1;
        }
    }
    Ok(verified)
}

/// Resumes the plan's resumable World: a strictly higher epoch, the tick
/// after the durable head. Another verifier fencing the World in between
/// (a verifier left running by a killed run) makes the commit stale; the
/// resume then takes a still-higher epoch, a bounded number of times.
fn resume(control: &SqliteControlCatalog, plan: &Plan) -> Result<Resume, String> {
    let Some(w) = plan.worlds.iter().find(|w| w.resumable) else {
        return Ok(Resume::NotApplicable);
    };
    let id = w.world.as_str();
    let holder = Holder::new("custos-cold-verifier").map_err(text)?;
    let mut last = String::new();
    for _ in 0..8 {
        let (epoch, _) = control
            .acquire_fence(id, &holder, FencePurpose::Resume)
            .map_err(text)?;
        let head = control.open_world_readonly(id).map_err(text)?;
        let tick = head.record.tick_head + 1;
        match control.commit_tick(id, epoch, tick) {
            Ok(_) => {
                return Ok(Resume::Resumed {
                    world: w.world.clone(),
                    epoch,
                    tick,
                })
            }
            Err(e) if e.reason() == "StaleFence" => last = e.to_string(),
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!("the resume of {id} was fenced out 8 times: {last}"))
}
