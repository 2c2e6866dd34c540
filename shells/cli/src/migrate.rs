//! `custos migrate plan|run|verify`: whole-identity storage migration
//! between two local storage identities, composed from the
//! concrete shells — the SQLite control catalog and Activity catalog
//! (custos-sqlite), the Iceberg tables (custos-iceberg) and the Artifact
//! root (custos-fs) — and driven by
//! [`custos_core::migration::workflow::Migration`], which walks the core
//! machine's steps. No shell depends on another: they meet here.
//!
//! An endpoint is a storage identity (`--source` / `--dest`, with the
//! shared `--namespace` and `--backend`): its Iceberg warehouse at the uri,
//! its control and Activity catalogs where `custos_core::identity` derives
//! them, and its Artifact root (`--source-artifacts` / `--dest-artifacts`,
//! by default `<uri>/<namespace>/.custos-artifacts`). The audit identity is
//! bound explicitly to the endpoint's own identity, which is what local v1
//! requires. Every port opens lazily ([`ports`]): a refused preflight
//! creates and writes nothing at either endpoint.
//!
//! - `plan` runs preflight, then fences every active source World under
//!   the migration's holder and freezes the plan; it prints the plan (or
//!   writes its canonical bytes with `--out`, never over an existing file).
//!   The fences make the source's writers stale: planning is the start of
//!   the migration, right after preflight and before anything is written
//!   at the destination.
//! - `check` is preflight alone: every refusal `plan` would give, fencing
//!   nothing and writing nothing on either side.
//! - `run` migrates to a cold-verified receipt (planning afresh, following
//!   `--plan FILE`, or resuming this migration's reservation) and prints
//!   it; `--receipt FILE` also writes its canonical bytes. A retry of a
//!   completed migration prints the stored receipt byte-identical and runs
//!   nothing; once the destination is activated a retry never reads the
//!   source.
//! - `abandon` gives up a migration that never reached activation
//!   ([`custos_core::migration::workflow::abandon`]): the destination's
//!   reservation, then the source's departure, are marked abandoned, then
//!   the copied tables are removed. Refused once activated.
//! - `verify` re-verifies a receipt later against the destination alone,
//!   read-only: it proves the destination's administration holds the
//!   receipt (its digest, its plan's digest) on a completed migration,
//!   discovers every planned World, recomputes every table's evidence and
//!   hashes every Artifact object — opening everything for reading, taking
//!   no fence, committing no tick, writing nothing (a read-only copy
//!   verifies). A difference names its table and evidence, or its object
//!   and address. `--resume-and-tick` also resumes the resumable World
//!   under the cold verifier's holder and commits one tick: that fences
//!   out any live writer of the World at the destination.
//!
//! Cold verification runs in a fresh child process of this binary
//! (`custos migrate cold-verify`, hidden) given only the destination's
//! paths and the plan on stdin; it answers its evidence as JSON on stdout.
//! `run`'s own cold verification resumes and ticks (a completed migration
//! proves its World writable); `verify` asks it to only with
//! `--resume-and-tick`.
//!
//! Progress goes to stderr: bars (tables, rows, objects, bytes) on a
//! terminal, one plain line per step otherwise; `--json` prints the plan,
//! receipt or evidence as JSON on stdout.
//!
//! Exit codes (the binary's one table, `crate::exit`): 0 success; 2 usage
//! or an invalid argument; 6 refused — the migration is not admissible as
//! asked (a preflight refusal, another migration's reservation, source
//! drift), with nothing written at the destination before its
//! reservation — or an endpoint's control catalog it had to read holds a
//! hot rollback journal (a killed writer's), which no migrate command rolls
//! back: the message names the file and `custos catalog recover …`, the
//! command that does (see `crate::catalog`); 5 another driver holds an
//! endpoint ([`lock`]) or a run stopped at a step boundary on SIGINT/SIGTERM
//! ([`stop`]): rerun it to resume; 4 an output file that already exists; 7 a verification
//! failed (a copy or read-back that does not reproduce the plan, stored
//! evidence that does not verify, cold verification, a receipt the
//! destination does not hold); 1 an I/O or backend
//! fault (retry with the same migration id); 8 a run whose receipt could
//! not be printed after activation. Output failures end as everywhere in
//! the binary (`crate::out`).

use std::io::{IsTerminal, Write};

use crate::exit::Exit;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use clap::{Args, Subcommand};
use custos_core::identity;
use custos_core::migration::workflow::{
    verify_receipt, ColdVerifier, Migration, Progress, WorkflowError,
};
use custos_core::migration::{
    check_destination_listing, ColdEvidence, Locality, Name, Plan, StorageIdentity, StoredReceipt,
    VerifyMode,
};

use crate::absolute;
use crate::fail::{read_input, Failure};
use crate::out::{self, Out};

mod cold;
mod show;
mod stop;

use custos_migrate::endpoint::{destination_listing, Job, LocalEndpoint};
use custos_migrate::{lock, ports};

use ports::{Control, Objects, Tables};

/// The identity arguments of both endpoints: the source's, then the
/// destination's (whose namespace and backend are the source's too).
#[derive(Args, Debug, Clone)]
pub struct Endpoints {
    /// The source storage uri (a local path or `file://…`).
    #[arg(long)]
    source: String,
    /// The source Artifact root (default `<source>/<namespace>/.custos-artifacts`).
    #[arg(long)]
    source_artifacts: Option<PathBuf>,
    #[command(flatten)]
    to: DestinationArgs,
    /// Acknowledge that this migration makes a SECOND live copy of a
    /// source that already departed to another destination (planned or
    /// moved there): both copies' Worlds can then be resumed, each with
    /// its own fence. Recorded at the source, in the plan and in the
    /// receipt. Without it such a migration is refused (source-migrated).
    #[arg(long)]
    second_copy: bool,
}

/// The destination's identity arguments (alone for `verify` and the cold
/// verifier).
#[derive(Args, Debug, Clone)]
pub struct DestinationArgs {
    /// The destination storage uri.
    #[arg(long)]
    dest: String,
    /// The namespace (of both identities, where a command names two).
    #[arg(long, default_value = "default")]
    namespace: String,
    /// The backend (of both identities, where a command names two).
    #[arg(long, default_value = "iceberg")]
    backend: String,
    /// The destination Artifact root (default `<dest>/<namespace>/.custos-artifacts`).
    #[arg(long)]
    dest_artifacts: Option<PathBuf>,
}

/// `custos migrate …`.
#[derive(Subcommand, Debug)]
pub enum MigrateCommand {
    /// A dry run: preflight only — every refusal `plan` would give, with the
    /// counts it decided on — fencing nothing and writing nothing on either
    /// side.
    Check {
        #[command(flatten)]
        ends: Endpoints,
        /// The migration id (a reservation of this id at the destination is
        /// this migration's own).
        #[arg(long)]
        migration_id: String,
        /// Print the preflight report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Preflight, fence the source's active Worlds, and freeze the plan.
    Plan {
        #[command(flatten)]
        ends: Endpoints,
        /// The migration id.
        #[arg(long)]
        migration_id: String,
        /// Write the canonical plan to this new file.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print the plan as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Migrate to a cold-verified receipt (or print the stored one).
    Run {
        #[command(flatten)]
        ends: Endpoints,
        /// The migration id.
        #[arg(long)]
        migration_id: String,
        /// Follow this plan (written by `custos migrate plan --out`).
        #[arg(long)]
        plan: Option<PathBuf>,
        /// Write the canonical receipt to this new file.
        #[arg(long)]
        receipt: Option<PathBuf>,
        /// Print the receipt as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Abandon a migration that never reached activation: the
    /// destination's reservation is marked abandoned (so no run of this id
    /// goes on there), the source's departure to it is marked abandoned
    /// (so the source may be planned again), and the tables it copied are
    /// removed. Nothing of it was discoverable, so nothing is lost.
    /// Refused once the destination is activated: it is then a live home.
    /// Safe to repeat after an interruption.
    Abandon {
        #[command(flatten)]
        dest: DestinationArgs,
        /// The migration id.
        #[arg(long)]
        migration_id: String,
        /// Print what was done as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Re-verify a receipt against the destination alone, read-only:
    /// nothing written, no fence taken, no tick committed.
    Verify {
        #[command(flatten)]
        dest: DestinationArgs,
        /// The receipt file (`custos migrate run --receipt`).
        #[arg(long)]
        receipt: PathBuf,
        /// WRITES: also resume each resumable World under the cold
        /// verifier's holder (`custos-cold-verifier`) and commit one tick.
        /// The new fence fences out any live writer of that World at the
        /// destination; each run commits one more tick.
        #[arg(long)]
        resume_and_tick: bool,
        /// Print the evidence (or the differences found) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The cold verifier (a child of `run` and `verify`): plan on stdin,
    /// evidence as JSON on stdout.
    #[command(hide = true)]
    ColdVerify {
        #[command(flatten)]
        dest: DestinationArgs,
        /// Resume the resumable World and commit a tick (writes).
        #[arg(long)]
        resume_and_tick: bool,
    },
}

/// Runs a migrate command.
pub fn run(cmd: MigrateCommand) -> ExitCode {
    out::run(|out| match cmd {
        MigrateCommand::Check {
            ends,
            migration_id,
            json,
        } => check(out, &ends, &migration_id, json),
        MigrateCommand::Plan {
            ends,
            migration_id,
            out: file,
            json,
        } => plan(out, &ends, &migration_id, file.as_deref(), json),
        MigrateCommand::Run {
            ends,
            migration_id,
            plan,
            receipt,
            json,
        } => migrate(
            out,
            &ends,
            &migration_id,
            plan.as_deref(),
            receipt.as_deref(),
            json,
        ),
        MigrateCommand::Abandon {
            dest,
            migration_id,
            json,
        } => abandon(out, &dest, &migration_id, json),
        MigrateCommand::Verify {
            dest,
            receipt,
            resume_and_tick,
            json,
        } => verify(out, &dest, &receipt, mode(resume_and_tick), json),
        MigrateCommand::ColdVerify {
            dest,
            resume_and_tick,
        } => cold::child(out, &dest, mode(resume_and_tick)),
    })
}

/// The exit code of a workflow error: its class's (module docs).
fn class(e: &WorkflowError) -> u8 {
    Exit::of(e.class()).code()
}

fn workflow_failure(e: &WorkflowError) -> Failure {
    Failure::new(class(e), format_args!("{} [{}]", e, e.reason()))
}

/// The failure of a workflow error at `ends`: when a read of an endpoint's
/// control catalog met a hot journal, that is the cause, refused (6) with
/// the command that recovers it; otherwise [`workflow_failure`].
fn failure_at(e: &WorkflowError, ends: &[&Local]) -> Failure {
    ends.iter()
        .find_map(|end| {
            end.control.hot_journal().map(|(path, journal)| {
                Failure::new(
                    Exit::Refused.code(),
                    crate::catalog::recovery_needed(&end.id, path, journal),
                )
            })
        })
        .unwrap_or_else(|| workflow_failure(e))
}

/// One endpoint, composed (custos-migrate's; the uri made absolute here).
pub type Local = LocalEndpoint;

/// Composes the endpoint of `uri` (nothing is opened yet); a relative path
/// is taken from the working directory.
fn compose(
    uri: &str,
    namespace: &str,
    backend: &str,
    artifacts: Option<&Path>,
    side: &str,
) -> Result<Local, Failure> {
    let artifacts = artifacts.map(|p| PathBuf::from(absolute(&p.to_string_lossy())));
    LocalEndpoint::compose(
        &absolute(uri),
        namespace,
        backend,
        artifacts.as_deref(),
        side,
    )
    .map_err(|e| Failure::new(Exit::of(e.class()).code(), e))
}

/// The destination the arguments name (of a run, of `verify` and of the
/// cold verifier alike; what opens its tables for writing is the run's
/// workflow, never `verify` or the cold verifier).
fn destination(d: &DestinationArgs) -> Result<Local, Failure> {
    compose(
        &d.dest,
        &d.namespace,
        &d.backend,
        d.dest_artifacts.as_deref(),
        "--dest",
    )
}

/// The Activity records of `end`, as a failure naming its uri.
fn activity(end: &Local) -> Result<u64, Failure> {
    end.activity().map_err(|e| {
        Failure::new(
            1,
            format_args!("{}: Activity catalog: {e}", end.id.location()),
        )
    })
}

/// The arguments that name `end` as a destination (for the cold
/// verifier child).
fn destination_args(end: &Local) -> Vec<String> {
    vec![
        "--dest".into(),
        end.id.location().to_owned(),
        "--namespace".into(),
        end.id.namespace().to_owned(),
        "--backend".into(),
        end.id.backend().to_owned(),
        "--dest-artifacts".into(),
        end.objects.uri().path().to_owned(),
    ]
}

fn now() -> custos_core::Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Holds the host-wide locks ([`lock::take_all`]) of `identities` for a
/// command's lifetime.
fn host_locks(identities: &[&StorageIdentity]) -> Result<Vec<lock::HostLock>, Failure> {
    lock::take_all(identities).map_err(|e| Failure::new(Exit::of(e.class()).code(), e))
}

fn run_locks(job: &Job) -> Result<Vec<lock::HostLock>, Failure> {
    host_locks(&[&job.source.id, &job.destination.id])
}

/// Refuses a local destination directory that holds what is not this
/// storage identity's (core's rule over custos-migrate's listing).
fn foreign_destination(d: &Local) -> Result<(), Failure> {
    match destination_listing(d) {
        None => Ok(()),
        Some(listing) => check_destination_listing(&listing)
            .map_err(|e| Failure::new(Exit::of(e.class()).code(), e)),
    }
}

/// The job of `migration_id` with its run locks held, and no file at
/// `out_file` yet (a command that writes one refuses an existing one
/// before anything is fenced or runs).
fn start(
    ends: &Endpoints,
    migration_id: &str,
    out_file: Option<&Path>,
) -> Result<(Job, Vec<lock::HostLock>), Failure> {
    let job = job(ends, migration_id)?;
    let locks = run_locks(&job)?;
    if let Some(path) = out_file.filter(|p| p.exists()) {
        return Err(Failure::new(
            Exit::Conflict.code(),
            format_args!("{}: already exists", path.display()),
        ));
    }
    Ok((job, locks))
}

/// The job of `migration_id` between the endpoints `ends` names, its
/// destination checked for foreign contents.
fn job(ends: &Endpoints, migration_id: &str) -> Result<Job, Failure> {
    // The id first: a bad id is the answer whatever else is wrong.
    custos_migrate::endpoint::job_id(migration_id).map_err(|e| Failure::new(2, e))?;
    let version = Name::new(format!("custos-{}", env!("CARGO_PKG_VERSION")))
        .map_err(|e| Failure::new(1, e))?;
    let source = compose(
        &ends.source,
        &ends.to.namespace,
        &ends.to.backend,
        ends.source_artifacts.as_deref(),
        "--source",
    )?;
    let destination = destination(&ends.to)?;
    let job = Job::new(source, destination, migration_id, version, ends.second_copy)
        .map_err(|e| Failure::new(2, e))?;
    foreign_destination(&job.destination)?;
    Ok(job)
}

/// Runs `f` over the workflow of `job`, the cold verifier a child process.
fn with<R>(
    job: &Job,
    progress: &dyn Progress,
    f: impl FnOnce(&Migration<'_, Control, Tables, Objects, cold::Child<'_>>) -> R,
) -> Result<R, Failure> {
    let cold = cold::Child::new(&job.destination);
    let counts = (activity(&job.source)?, activity(&job.destination)?);
    Ok(f(&job.migration(counts, &cold, &now, progress)))
}

/// Writes `bytes` to a new file (refusing an existing one), synced.
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            let code = if e.kind() == std::io::ErrorKind::AlreadyExists {
                Exit::Conflict.code()
            } else {
                Exit::Fault.code()
            };
            Failure::new(code, format_args!("{}: {e}", path.display()))
        })?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| Failure::new(1, format_args!("{}: {e}", path.display())))
}

/// The most bytes of a plan or receipt file read.
const MAX_DOCUMENT: u64 = 64 << 20;

/// `custos migrate check`: preflight alone ([`Migration::validate`]), no
/// run locks, no fences, nothing written anywhere.
fn check(
    out: &mut Out,
    ends: &Endpoints,
    migration_id: &str,
    json: bool,
) -> std::io::Result<ExitCode> {
    let job = match job(ends, migration_id) {
        Ok(j) => j,
        Err(f) => return Ok(f.exit("migrate")),
    };
    let progress = show::Bars::new(json);
    let report = match with(&job, &progress, |m| m.validate()) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Ok(failure_at(&e, &[&job.source, &job.destination]).exit("migrate")),
        Err(f) => return Ok(f.exit("migrate")),
    };
    progress.finish();
    if json {
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        out.line(text)?;
        return Ok(ExitCode::SUCCESS);
    }
    out.line(format!(
        "preflight admitted: {} -> {} (nothing fenced, nothing written)",
        report.source.identity.uri(),
        report.destination.identity.uri()
    ))?;
    for (what, n) in [
        ("source Activity records", report.source.activity_records),
        (
            "destination Activity records",
            report.destination.activity_records,
        ),
        ("unreadable source objects", report.unreadable_objects),
        ("destination tables", report.destination_tables),
        (
            "destination control records",
            report.destination_control_records,
        ),
        (
            "conflicting destination objects",
            report.conflicting_destination_objects,
        ),
    ] {
        out.line(format!("  {what:<32} {n}"))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn plan(
    out: &mut Out,
    ends: &Endpoints,
    migration_id: &str,
    file: Option<&Path>,
    json: bool,
) -> std::io::Result<ExitCode> {
    // An existing output file is refused before planning fences anything.
    let (job, _locks) = match start(ends, migration_id, file) {
        Ok(started) => started,
        Err(f) => return Ok(f.exit("migrate")),
    };
    let progress = show::Bars::new(json);
    let planned = match with(&job, &progress, |m| m.plan()) {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return Ok(failure_at(&e, &[&job.source, &job.destination]).exit("migrate")),
        Err(f) => return Ok(f.exit("migrate")),
    };
    if let Some(path) = file {
        if let Err(f) = write_new(path, &planned.canonical()) {
            return Ok(f.exit("migrate"));
        }
    }
    progress.finish();
    show::plan(out, &planned, json)?;
    Ok(ExitCode::SUCCESS)
}

fn migrate(
    out: &mut Out,
    ends: &Endpoints,
    migration_id: &str,
    plan_file: Option<&Path>,
    receipt_file: Option<&Path>,
    json: bool,
) -> std::io::Result<ExitCode> {
    // An existing receipt file is refused before anything runs.
    let (job, _locks) = match start(ends, migration_id, receipt_file) {
        Ok(started) => started,
        Err(f) => return Ok(f.exit("migrate")),
    };
    let held = match plan_file.map(|p| {
        read_input(p, MAX_DOCUMENT, "plan").and_then(|b| {
            Plan::decode(&b).map_err(|e| Failure::new(2, format_args!("{}: {e}", p.display())))
        })
    }) {
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(f)) => return Ok(f.exit("migrate")),
    };
    stop::install();
    let progress = show::Bars::new(json);
    let receipt = match with(&job, &progress, |m| m.migrate(held.as_ref())) {
        Ok(Ok(r)) => r,
        Ok(Err(e @ WorkflowError::Interrupted(_))) => {
            progress.finish();
            let f = workflow_failure(&e).map_message(|m| format!(
                "{m}; resume it: run `custos migrate run` again with the same endpoints and --migration-id {}",
                job.migration_id
            ));
            return Ok(f.exit("migrate"));
        }
        Ok(Err(e)) => return Ok(failure_at(&e, &[&job.source, &job.destination]).exit("migrate")),
        Err(f) => return Ok(f.exit("migrate")),
    };
    progress.finish();
    // Activated: from here the migration is committed, reported or not.
    out::committed();
    if let Some(path) = receipt_file {
        if let Err(f) = write_new(path, &receipt.encode()) {
            return Ok(Failure::new(
                Exit::Unreported.code(),
                format_args!(
                    "the migration IS complete, but its receipt file could not be written: {}",
                    f.message()
                ),
            )
            .exit("migrate"));
        }
    }
    show::receipt(out, &receipt, json)?;
    Ok(ExitCode::SUCCESS)
}

/// `custos migrate abandon` ([`custos_core::migration::workflow::abandon`]):
/// under the host locks of the destination and of the source its
/// reservation names.
fn abandon(
    out: &mut Out,
    dest: &DestinationArgs,
    migration_id: &str,
    json: bool,
) -> std::io::Result<ExitCode> {
    use custos_core::migration::control::ControlAdmin;
    use custos_core::migration::workflow::abandon as workflow;
    let id = match Name::new(migration_id) {
        Ok(n) => n,
        Err(e) => {
            return Ok(
                Failure::new(2, format_args!("--migration-id {migration_id:?}: {e}"))
                    .exit("migrate"),
            )
        }
    };
    let d = match destination(dest) {
        Ok(d) => d,
        Err(f) => return Ok(f.exit("migrate")),
    };
    if d.locality != Locality::Local {
        return Ok(Failure::new(
            Exit::Refused.code(),
            "endpoint-outside-local-v1: --dest is not a local storage identity [endpoint-outside-local-v1]",
        )
        .exit("migrate"));
    }
    // The source the reservation names, for its lock (read only).
    let source = match d.control.load_destination() {
        Ok(stored) => stored.reservation.map(|r| r.plan.source),
        Err(e) => {
            return Ok(workflow_failure(&WorkflowError::Admin(e)).exit("migrate"));
        }
    };
    let mut ends = vec![&d.id];
    ends.extend(source.as_ref());
    let _locks = match host_locks(&ends) {
        Ok(l) => l,
        Err(f) => return Ok(f.exit("migrate")),
    };
    let open_source =
        |s: &StorageIdentity| -> Result<Option<Box<dyn ControlAdmin>>, WorkflowError> {
            if !s.is_local() {
                return Ok(None);
            }
            let path = PathBuf::from(identity::catalog_location(s, ""));
            if !path.is_file() {
                return Ok(None);
            }
            Ok(Some(Box::new(Control::new(Some(path)))))
        };
    let done = match workflow::abandon(&d.control, &d.tables, open_source, &id) {
        Ok(done) => done,
        Err(e) => return Ok(failure_at(&e, &[&d]).exit("migrate")),
    };
    out::committed();
    show_abandoned(out, &done, json)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints what an abandonment did.
fn show_abandoned(
    out: &mut Out,
    done: &custos_core::migration::workflow::abandon::Abandoned,
    json: bool,
) -> std::io::Result<()> {
    if json {
        out.line(serde_json::to_string_pretty(done).unwrap_or_default())?;
        return Ok(());
    }
    out.line(format!(
        "abandoned migration {} at {}{}",
        done.migration_id,
        done.destination.uri(),
        if done.already {
            " (it was abandoned already)"
        } else {
            ""
        }
    ))?;
    out.line(format!(
        "  source {}: {}",
        done.source.uri(),
        if done.source_marked {
            "its departure is marked abandoned; it may be planned again"
        } else {
            "no control catalog there; nothing to mark"
        }
    ))?;
    out.line(format!(
        "  tables removed at the destination: {}",
        if done.tables_removed.is_empty() {
            "none".to_owned()
        } else {
            done.tables_removed
                .iter()
                .map(Name::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        }
    ))?;
    Ok(())
}

/// The verification mode `--resume-and-tick` asks for.
fn mode(resume_and_tick: bool) -> VerifyMode {
    if resume_and_tick {
        VerifyMode::ResumeAndTick
    } else {
        VerifyMode::ReadOnly
    }
}

/// `custos migrate verify`: the receipt against the destination alone, in
/// `mode`. Read-only, it opens the administration, the tables and the
/// Artifact root for reading only; a failure names what differs.
fn verify(
    out: &mut Out,
    dest: &DestinationArgs,
    receipt: &Path,
    mode: VerifyMode,
    json: bool,
) -> std::io::Result<ExitCode> {
    let stored = match read_input(receipt, MAX_DOCUMENT, "receipt").and_then(|b| {
        StoredReceipt::decode(&b).map_err(|e| {
            Failure::new(
                Exit::Corrupt.code(),
                format_args!("{}: {e}", receipt.display()),
            )
        })
    }) {
        Ok(r) => r,
        Err(f) => return Ok(f.exit("migrate")),
    };
    let d = match destination(dest) {
        Ok(d) => d,
        Err(f) => return Ok(f.exit("migrate")),
    };
    let cold = cold::Child::new(&d);
    match verify_receipt(&d.control, &cold, &stored, mode) {
        Ok(evidence) => {
            show::evidence(out, &stored, &evidence, mode, json)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if json {
                show::verify_failure(out, &stored, mode, &e)?;
            }
            let mut f = failure_at(&e, &[&d]);
            if let Some(text) = show::differences(&e) {
                f = f.map_message(|_| text);
            }
            Ok(f.exit("migrate"))
        }
    }
}

/// The cold verifier as the workflow sees it.
impl ColdVerifier for cold::Child<'_> {
    fn verify(&self, plan: &Plan, mode: VerifyMode) -> Result<ColdEvidence, String> {
        self.run(plan, mode)
    }
}

/// Spawns this binary as `custos migrate cold-verify` (the child side is
/// [`cold::child`]).
fn spawn_cold(args: &[String]) -> std::io::Result<std::process::Child> {
    let exe = std::env::current_exe()?;
    Command::new(exe)
        .arg("migrate")
        .arg("cold-verify")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A fresh process: no inherited working directory into the source.
        .current_dir("/")
        .spawn()
}

/// Whether stderr is a terminal (progress bars) or not (plain lines).
fn terminal() -> bool {
    std::io::stderr().is_terminal()
}
