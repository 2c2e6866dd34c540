//! `custos catalog discover|show`: read-only views of a storage identity's
//! control catalog (`discover_worlds` and `open_world_readonly`);
//! `custos catalog recover`: the one writing command, which rolls back what
//! an interrupted writer left and nothing else.
//!
//! `discover` and `show` open the catalog with
//! `SqliteControlCatalog::open_read_only`: no file is created, migrated or
//! written, not even beside the catalog, and a writer's open transaction
//! neither delays the read nor shows in it (the read answers the last
//! committed state).
//!
//! ## A hot journal, and `recover`
//!
//! A catalog in SQLite's rollback-journal mode (another tool made it, or
//! switched it away from WAL) whose writer was killed mid-transaction has a
//! hot `-journal` beside it. Rolling it back writes the file, so the read
//! commands refuse instead — exit 6, naming the file, the journal and the
//! command that recovers it, with nothing written — and so does
//! `custos migrate` at an endpoint whose catalog it has to read.
//! `custos catalog recover <uri> [--namespace N] [--backend B]` is that
//! command: one read through a writing connection (`SqliteControlCatalog::
//! recover`), which is where SQLite rolls the interrupted transaction back
//! to the last committed state; it changes nothing else — the journal mode,
//! the version and every committed row stay as they were — and then reads
//! the catalog back read-only and prints how many worlds it holds. On a
//! catalog without a hot journal it writes nothing. Why a command of its
//! own rather than "the next `custos migrate run` recovers it": a migration
//! is not a repair tool — its preflight writes nothing, and it should start
//! from a state the operator has seen (`recover`, then `discover`); and the
//! writable open a migration makes also switches the file to WAL and
//! migrates its version, which an operator who only wants the catalog
//! readable again did not ask for. `recover` works on the local SQLite
//! catalog only (a PostgreSQL server recovers its own transactions).
//!
//! With `--catalog-url <url>` (or `CUSTOS_CONTROL_CATALOG_URL`; feature
//! `postgres`) the catalog is the identity's on a PostgreSQL server — the
//! schema `custos_postgres::control_schema` derives from the identity, or
//! `--catalog-schema` — opened with `PgControlCatalog::open_read_only`,
//! which creates, migrates and writes nothing; each read is one REPEATABLE
//! READ, READ ONLY transaction. The url is a secret: messages name only
//! `host:port/database`, control characters escaped; no part of the
//! password ever appears. Every wait is bounded: the connection (the
//! server's first reply and the login included) by its connect timeout
//! (default 5 s; `connect_timeout` in the url), statements and lock waits by
//! the server's `statement_timeout` and `lock_timeout` (defaults 30 s and
//! 10 s; `options=-c …` in the url). A missing schema is exit 3 (no control
//! catalog); an unreachable or silent server, or a refused login, is exit 5
//! (unavailable); a catalog of another version is exit 6 (refused).
//!
//! Exit codes (the binary's one table, `crate::exit`): 0 success; 2 a
//! malformed identity or no catalog directory; 3 not found — no control
//! catalog for the identity (no file, or a file that is not a control
//! catalog: zero-length, empty, not SQLite, another application's) or an
//! unrecorded world; 6 a control catalog of a version this build does not
//! read, or one that needs `custos catalog recover` first (a hot journal),
//! or — for `recover` — a file this process may not write; 5 a server that
//! does not answer, or a catalog that stayed locked; 1 the catalog could
//! not be read. `recover` exits 8 when it rolled a transaction back but
//! could not print its report.
//! Output failures end as everywhere in the binary (`crate::out`): 141 for
//! a closed stdout pipe, 1 with one line on stderr for any other write
//! error.

use custos_core::Class;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use custos_core::identity::StorageIdentity;
use custos_core::migration::control::ControlAdmin;
use custos_core::migration::departure::Departures;
use custos_core::root::printable;
use custos_core::world::{ControlCatalog, WorldError, WorldInfo, WorldRecord};
use custos_sqlite::control::{catalog_path, Recovery, SqliteControlCatalog};
use custos_sqlite::OpenError;

use crate::absolute;
use crate::exit::Exit;
use crate::out::{self, Out};

/// The storage identity arguments shared by the catalog commands.
#[derive(Args, Debug)]
pub struct IdentityArgs {
    /// The storage uri (a local path, `file://…`, or a remote uri).
    uri: String,
    /// The namespace.
    #[arg(long, default_value = "default")]
    namespace: String,
    /// The backend.
    #[arg(long, default_value = "iceberg")]
    backend: String,
    #[command(flatten)]
    remote: RemoteArgs,
}

/// Where a control catalog on a server is (feature `postgres`).
#[derive(Args, Debug, Default)]
pub struct RemoteArgs {
    /// A PostgreSQL connection url holding the control catalog (default:
    /// `CUSTOS_CONTROL_CATALOG_URL`; neither: the local SQLite catalog).
    #[arg(long, value_name = "URL")]
    catalog_url: Option<String>,
    /// The PostgreSQL schema of the catalog (default: derived from the
    /// storage identity); needs a url (`--catalog-url` or the environment).
    #[arg(long, value_name = "SCHEMA")]
    catalog_schema: Option<String>,
}

impl RemoteArgs {
    /// The url given, else `CUSTOS_CONTROL_CATALOG_URL` when set and non-empty.
    fn url(&self) -> Option<String> {
        self.catalog_url.clone().or_else(|| {
            std::env::var("CUSTOS_CONTROL_CATALOG_URL")
                .ok()
                .filter(|v| !v.is_empty())
        })
    }
}

/// `custos catalog …`.
#[derive(Subcommand, Debug)]
pub enum CatalogCommand {
    /// List every world ever registered for the storage identity (destroyed included).
    Discover {
        #[command(flatten)]
        id: IdentityArgs,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print one world's durable descriptor and its signatures.
    Show {
        /// The storage uri.
        uri: String,
        /// The world.
        world_id: String,
        /// The namespace.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// The backend.
        #[arg(long, default_value = "iceberg")]
        backend: String,
        #[command(flatten)]
        remote: RemoteArgs,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Roll back the transaction an interrupted writer left in the local
    /// catalog's hot rollback journal, and change nothing else.
    Recover {
        /// The storage uri (a local path, `file://…`, or a remote uri).
        uri: String,
        /// The namespace.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// The backend.
        #[arg(long, default_value = "iceberg")]
        backend: String,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a catalog command.
pub fn run(cmd: CatalogCommand) -> ExitCode {
    out::run(|out| match cmd {
        CatalogCommand::Discover { id, json } => {
            match open(&id.uri, &id.namespace, &id.backend, &id.remote) {
                Ok((identity, place, catalog)) => {
                    discover(out, &identity, &place, catalog.as_ref(), json)
                }
                Err(code) => Ok(code),
            }
        }
        CatalogCommand::Show {
            uri,
            world_id,
            namespace,
            backend,
            remote,
            json,
        } => match open(&uri, &namespace, &backend, &remote) {
            Ok((identity, place, catalog)) => {
                show(out, &identity, &place, catalog.as_ref(), &world_id, json)
            }
            Err(code) => Ok(code),
        },
        CatalogCommand::Recover {
            uri,
            namespace,
            backend,
            json,
        } => recover(out, &uri, &namespace, &backend, json),
    })
}

/// `s` as one word a POSIX shell reads back unchanged: as it is when it
/// holds only safe characters, else single-quoted.
fn shell_word(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "/._-+:=@,%".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The command that recovers the local control catalog of `id`.
pub fn recover_command(id: &StorageIdentity) -> String {
    format!(
        "custos catalog recover {} --namespace {} --backend {}",
        shell_word(id.location()),
        shell_word(id.namespace()),
        shell_word(id.backend())
    )
}

/// The stable reason of a catalog that needs `custos catalog recover`.
pub const RECOVERY_NEEDED: &str = "catalog-recovery-needed";

/// What a command that met a hot journal says: the file, the journal, that
/// nothing was written, and the command that recovers it.
pub fn recovery_needed(id: &StorageIdentity, path: &Path, journal: &Path) -> String {
    format!(
        "RecoveryNeeded: the control catalog {} cannot be read: a writer was interrupted \
         mid-transaction and left the hot rollback journal {}; nothing was written \
         [{RECOVERY_NEEDED}]\n\
         Recover it (this rolls the interrupted transaction back to the last committed state \
         and changes nothing else), then retry:\n  {}",
        path.display(),
        journal.display(),
        recover_command(id)
    )
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    crate::fail::Failure::new(code, msg).exit("catalog")
}

/// A control catalog with its administration (the departure record).
pub trait Catalog: ControlCatalog + ControlAdmin {}
impl<T: ControlCatalog + ControlAdmin> Catalog for T {}

/// An opened catalog and where it is, for the report.
type Opened = (StorageIdentity, String, Box<dyn Catalog>);

/// The departures recorded at this identity as a migration source, as
/// printed: one line each, or none.
fn departure_lines(d: &Departures) -> Vec<String> {
    d.records
        .iter()
        .map(|r| {
            format!(
                "{} to {} by migration {}{}",
                r.leg.as_str(),
                printable(&r.destination.uri().to_string()),
                printable(r.migration_id.as_str()),
                if r.second_copy {
                    " (an acknowledged second copy)"
                } else {
                    ""
                }
            )
        })
        .collect()
}

fn open(
    uri: &str,
    namespace: &str,
    backend: &str,
    remote: &RemoteArgs,
) -> Result<Opened, ExitCode> {
    let identity =
        StorageIdentity::new(&absolute(uri), namespace, backend).map_err(|e| fail(2, e))?;
    match (remote.url(), &remote.catalog_schema) {
        (Some(url), schema) => open_remote(identity, &url, schema.as_deref()),
        (None, Some(_)) => Err(fail(
            2,
            "--catalog-schema names a PostgreSQL schema: give --catalog-url or set CUSTOS_CONTROL_CATALOG_URL",
        )),
        (None, None) => open_local(identity),
    }
}

#[cfg(not(feature = "postgres"))]
fn open_remote(_: StorageIdentity, _: &str, _: Option<&str>) -> Result<Opened, ExitCode> {
    Err(fail(
        2,
        "--catalog-url needs the `postgres` feature, which this build of custos lacks",
    ))
}

#[cfg(feature = "postgres")]
fn open_remote(
    identity: StorageIdentity,
    url: &str,
    schema: Option<&str>,
) -> Result<Opened, ExitCode> {
    use custos_postgres::control::PgControlCatalog;
    let schema = schema.map_or_else(|| custos_postgres::control_schema(&identity), str::to_owned);
    let target = custos_postgres::Target::new(url, schema.clone()).map_err(|e| fail(2, e))?;
    let place = format!("postgresql://{} schema {schema}", target.endpoint());
    let catalog = PgControlCatalog::open_read_only(target).map_err(|e| {
        let code = pg_exit_code(&e);
        fail(code, format!("{place}: {e}"))
    })?;
    Ok((identity, place, Box::new(catalog)))
}

/// The local catalog file of `identity`; refused (printed now) when there
/// is no catalog directory for it.
fn local_path(identity: &StorageIdentity) -> Result<PathBuf, ExitCode> {
    catalog_path(identity).ok_or_else(|| {
        fail(
            2,
            "no catalog directory for a remote identity: set CUSTOS_CATALOG_DIR or HOME",
        )
    })
}

/// The refusal (printed now) of a local catalog that is not at `path`.
fn not_found(identity: &StorageIdentity, path: &Path) -> ExitCode {
    fail(
        3,
        format!(
            "NotFound: no control catalog for {} (namespace {}, backend {}) at {}",
            identity.location(),
            identity.namespace(),
            identity.backend(),
            path.display()
        ),
    )
}

fn open_local(identity: StorageIdentity) -> Result<Opened, ExitCode> {
    let path = local_path(&identity)?;
    let missing = || not_found(&identity, &path);
    if !path.is_file() {
        return Err(missing());
    }
    let catalog = SqliteControlCatalog::open_read_only(&path).map_err(|e| match e {
        // The file went away (or was never a regular file) after the check.
        OpenError::UnopenablePath { .. } => missing(),
        // Readable once recovered: refused until then, nothing written.
        OpenError::RecoveryNeeded { path, journal } => fail(
            Exit::Refused.code(),
            recovery_needed(&identity, &path, &journal),
        ),
        e => match e.class() {
            Class::Internal => fail(1, format!("cannot open {}: {e}", path.display())),
            class => fail(Exit::of(class).code(), e),
        },
    })?;
    Ok((identity, path.display().to_string(), Box::new(catalog)))
}

/// `custos catalog recover`: rolls back a hot journal beside the local
/// catalog (nothing else), then reads the catalog back read-only.
fn recover(
    out: &mut Out,
    uri: &str,
    namespace: &str,
    backend: &str,
    json: bool,
) -> std::io::Result<ExitCode> {
    let identity = match StorageIdentity::new(&absolute(uri), namespace, backend) {
        Ok(id) => id,
        Err(e) => return Ok(fail(2, e)),
    };
    let path = match local_path(&identity) {
        Ok(path) => path,
        Err(code) => return Ok(code),
    };
    let missing = || not_found(&identity, &path);
    if !path.is_file() {
        return Ok(missing());
    }
    let recovery: Recovery = match SqliteControlCatalog::recover(&path) {
        Ok(r) => r,
        Err(e) => {
            return Ok(match e {
                OpenError::UnopenablePath { .. } if !path.is_file() => missing(),
                // A file this process may not write is refused (its class).
                e => match e.class() {
                    Class::Internal => fail(1, format!("cannot recover {}: {e}", path.display())),
                    class => fail(Exit::of(class).code(), e),
                },
            });
        }
    };
    report_recovery(out, &identity, &path, &recovery, json)
}

/// Prints what `recover` did and what the catalog holds now (read back as
/// `discover` reads it).
fn report_recovery(
    out: &mut Out,
    identity: &StorageIdentity,
    path: &Path,
    recovery: &Recovery,
    json: bool,
) -> std::io::Result<ExitCode> {
    if recovery.rolled_back {
        // The rollback is written: a report that cannot be printed says so.
        out::committed();
    }
    let what = if recovery.rolled_back {
        format!(
            "rolled back the transaction an interrupted writer left in {}; the catalog is at its last committed state",
            recovery.journal.display()
        )
    } else {
        "no hot journal: nothing to recover, nothing written".to_owned()
    };
    let place = path.display().to_string();
    if !json {
        writeln!(out, "control catalog {}: {what}", printable(&place))?;
    }
    // What the catalog holds now, read as `discover` reads it.
    let read = open_local(identity.clone()).and_then(|(_, _, catalog)| {
        catalog
            .discover_worlds()
            .map(|w| w.len())
            .map_err(|e| fail(1, e))
    });
    let worlds = match read {
        Ok(n) => n,
        Err(code) => {
            if json {
                out::err(format_args!(
                    "custos catalog: {}: {what}",
                    printable(&place)
                ));
            }
            return Ok(code);
        }
    };
    if json {
        return print_json(
            out,
            &serde_json::json!({
                "storage": identity_json(identity, &place),
                "rolled_back": recovery.rolled_back,
                "journal": recovery.journal.display().to_string(),
                "worlds": worlds,
            }),
        );
    }
    writeln!(out, "{worlds} world(s)")?;
    Ok(ExitCode::SUCCESS)
}

fn identity_json(id: &StorageIdentity, place: &str) -> serde_json::Value {
    serde_json::json!({
        "uri": id.location(),
        "namespace": id.namespace(),
        "backend": id.backend(),
        "catalog": place,
    })
}

fn print_json(out: &mut Out, v: &serde_json::Value) -> std::io::Result<ExitCode> {
    match serde_json::to_string_pretty(v) {
        Ok(s) => {
            out.line(s)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Ok(fail(1, format!("cannot encode the report: {e}"))),
    }
}

/// A stored optional name as printed: escaped, `-` when absent.
fn opt(s: &Option<String>) -> String {
    s.as_deref().map_or_else(|| "-".to_owned(), printable)
}

fn discover(
    out: &mut Out,
    id: &StorageIdentity,
    place: &str,
    c: &dyn Catalog,
    json: bool,
) -> std::io::Result<ExitCode> {
    let worlds: Vec<WorldRecord> = match c.discover_worlds() {
        Ok(w) => w,
        Err(e) => return Ok(fail(1, e)),
    };
    let departures = match c.load_departures() {
        Ok(d) => d,
        Err(e) => return Ok(fail(1, e)),
    };
    if json {
        return print_json(
            out,
            &serde_json::json!({
                "storage": identity_json(id, place),
                "worlds": worlds,
                "departures": departures.records,
            }),
        );
    }
    writeln!(out, "control catalog {}", printable(place))?;
    writeln!(
        out,
        "{:<24} {:<10} {:<13} {:>10}  {:<16} {:<16} name",
        "world_id", "status", "writer_mode", "tick_head", "run_id", "parent"
    )?;
    for w in &worlds {
        writeln!(
            out,
            "{:<24} {:<10} {:<13} {:>10}  {:<16} {:<16} {}",
            printable(&w.identity.world_id),
            w.status.as_str(),
            w.writer_mode.as_str(),
            w.tick_head,
            opt(&w.identity.run_id),
            opt(&w.identity.parent_world_id),
            printable(&w.identity.name)
        )?;
    }
    writeln!(out, "{} world(s)", worlds.len())?;
    for line in departure_lines(&departures) {
        writeln!(out, "departed: {line}")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn show(
    out: &mut Out,
    id: &StorageIdentity,
    place: &str,
    c: &dyn Catalog,
    world_id: &str,
    json: bool,
) -> std::io::Result<ExitCode> {
    let info: WorldInfo = match c.open_world_readonly(world_id) {
        Ok(i) => i,
        Err(e @ WorldError::NotFound { .. }) => return Ok(fail(3, e)),
        Err(e) => return Ok(fail(1, e)),
    };
    let departures = match c.load_departures() {
        Ok(d) => d,
        Err(e) => return Ok(fail(1, e)),
    };
    if json {
        return print_json(
            out,
            &serde_json::json!({
                "storage": identity_json(id, place),
                "world": info,
                "departures": departures.records,
            }),
        );
    }
    let r = &info.record;
    writeln!(out, "world_id        {}", printable(&r.identity.world_id))?;
    writeln!(out, "name            {}", printable(&r.identity.name))?;
    writeln!(out, "run_id          {}", opt(&r.identity.run_id))?;
    writeln!(out, "parent_world_id {}", opt(&r.identity.parent_world_id))?;
    writeln!(out, "status          {}", r.status.as_str())?;
    writeln!(out, "writer_mode     {}", r.writer_mode.as_str())?;
    writeln!(out, "tick_head       {}", r.tick_head)?;
    for line in departure_lines(&departures) {
        writeln!(out, "departed        {line}")?;
    }
    writeln!(out, "signatures      {}", info.signatures.len())?;
    for s in &info.signatures {
        writeln!(out, "  table {}", printable(&s.table_id))?;
        let components: Vec<String> = s.components.iter().map(|c| printable(c)).collect();
        writeln!(out, "    components  {}", components.join(", "))?;
        writeln!(out, "    fingerprint {}", s.fingerprint)?;
        for f in &s.schema.fields {
            writeln!(
                out,
                "    column      {} {:?}{}",
                printable(&f.name),
                f.ty,
                if f.nullable { "" } else { " not null" }
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The exit code of a refused PostgreSQL open: its class's (no such
/// catalog is 3, like a missing file; a silent or unreachable server 5; a
/// version this build does not read 6).
#[cfg(feature = "postgres")]
fn pg_exit_code(e: &custos_postgres::OpenError) -> u8 {
    Exit::of(e.class()).code()
}
