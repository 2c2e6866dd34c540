//! The cold verifier in a fresh child process.
//!
//! The parent ([`Child::run`]) closes its own handle on the destination's
//! Artifact root (whose lock would exclude the child's), starts this binary
//! as `custos migrate cold-verify` with the destination's paths only — no
//! source argument, working directory `/` — writes the plan's canonical
//! bytes to its stdin and reads its evidence as JSON from its stdout.
//!
//! The child ([`child`]) opens fresh destination resources, each for
//! reading: the control catalog, the Iceberg catalog and the Artifact root.
//! It gathers evidence of discovery (every planned World, the missing ones
//! named), every table's evidence as a fresh read reproduces it (an absent
//! table is left out of the evidence), a query of every signature's table,
//! and every object's full bytes against its size, SHA-256 and XXH3-64 (an
//! object that does not verify is named with what its address holds).
//! Differences are evidence: the parent's check names them; the child fails
//! only when it cannot look.
//!
//! Only with `--resume-and-tick` (a migration's own cold verification, or
//! `custos migrate verify --resume-and-tick`) does it write: the control
//! catalog is then opened for writing and, when the plan has a resumable
//! World, the World is resumed — a fence strictly above every earlier epoch
//! (so a retry after an earlier verification tick acquires a still-higher
//! one), and the tick after the durable head. Without it nothing is
//! written, no fence is taken and no tick is committed.

use std::io::Write;
use std::process::ExitCode;

use custos_core::migration::tables::TableStore;
use custos_core::migration::workflow::{resume_for, verify_objects};
use custos_core::migration::{ColdEvidence, Name, ObjectMismatch, Plan, TableFacts, VerifyMode};
use custos_core::world::{ControlCatalog, WorldStatus};
use custos_fs::artifacts::ArtifactStore;
use custos_fs::RealFs;
use custos_iceberg::IcebergStore;
use custos_sqlite::control::SqliteControlCatalog;

use super::{spawn_cold, DestinationArgs, Local, MAX_DOCUMENT};
use crate::fail::read_bounded_from;
use crate::out::{self, Out};

/// The child's flag that makes it resume (and write).
pub const RESUME_AND_TICK: &str = "--resume-and-tick";

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

    /// Runs the child on `plan` in `mode` and answers its evidence.
    pub fn run(&self, plan: &Plan, mode: VerifyMode) -> Result<ColdEvidence, String> {
        self.destination.objects.release();
        let mut args = super::destination_args(self.destination);
        if mode == VerifyMode::ResumeAndTick {
            args.push(RESUME_AND_TICK.into());
        }
        let mut child =
            spawn_cold(&args).map_err(|e| format!("cannot start the cold verifier: {e}"))?;
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

/// The child: reads the plan on stdin, verifies in `mode`, prints the
/// evidence.
pub fn child(out: &mut Out, dest: &DestinationArgs, mode: VerifyMode) -> std::io::Result<ExitCode> {
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
    let d = match super::destination(dest) {
        Ok(d) => d,
        Err(f) => return fail(f.message()),
    };
    match evidence(&d, &plan, mode) {
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

/// Everything the cold verifier proves, from fresh destination resources;
/// only [`VerifyMode::ResumeAndTick`] opens anything for writing.
fn evidence(d: &Local, plan: &Plan, mode: VerifyMode) -> Result<ColdEvidence, String> {
    let path = custos_core::identity::catalog_location(&d.id, "");
    if !std::path::Path::new(&path).is_file() {
        return Err(format!("no control catalog at {path}"));
    }
    let control = match mode {
        VerifyMode::ReadOnly => SqliteControlCatalog::open_read_only(&path),
        VerifyMode::ResumeAndTick => SqliteControlCatalog::open(&path),
    }
    .map_err(|e| format!("the control catalog {path}: {e}"))?;
    let discovered = control.discover_worlds().map_err(text)?;
    let worlds_missing: Vec<Name> = plan
        .worlds
        .iter()
        .filter(|w| {
            !discovered
                .iter()
                .any(|r| r.identity.world_id == w.world.as_str() && r.status == WorldStatus::Active)
        })
        .map(|w| w.world.clone())
        .collect();
    let mut tables = Vec::new();
    if !plan.tables.is_empty() {
        let store = IcebergStore::open_readonly(&d.id).map_err(text)?;
        let present = store.list_tables().map_err(text)?;
        for t in &plan.tables {
            if let Some(facts) = table(&store, &present, &t.name)? {
                tables.push((t.name.clone(), facts));
            }
        }
        query(&store, &control)?;
    }
    let objects = objects(d, plan)?;
    let resume = resume_for(&control, plan, mode)?;
    Ok(ColdEvidence::of(
        plan,
        worlds_missing,
        tables,
        objects,
        resume,
    ))
}

/// A fresh read of table `name`'s evidence (`None`: the catalog does not
/// list it; a listed table without a snapshot has empty evidence).
fn table(
    store: &IcebergStore,
    present: &[String],
    name: &Name,
) -> Result<Option<TableFacts>, String> {
    let fail = |e: &dyn std::fmt::Display| format!("table {name}: {e}");
    if !present.iter().any(|p| p == name.as_str()) {
        return Ok(None);
    }
    match store.inspect(name).map_err(|e| fail(&e))? {
        Some(f) => Ok(Some(f)),
        None => store.evidence_at(name, 0).map(Some).map_err(|e| fail(&e)),
    }
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

/// How many planned objects' full bytes verify, and each one that does
/// not with what its address holds. An I/O error is a failure naming the
/// address: it is not evidence of the object.
fn objects(d: &Local, plan: &Plan) -> Result<(u64, Vec<ObjectMismatch>), String> {
    if plan.artifacts.objects.is_empty() {
        return Ok((0, Vec::new()));
    }
    let store = ArtifactStore::open_read_only(RealFs, d.objects.root()).map_err(text)?;
    verify_objects(&store, store.root_uri(), plan)
}
