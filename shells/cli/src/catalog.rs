//! `custos catalog discover|show`: read-only views of a storage identity's
//! control catalog (spec 000, `discover_worlds` and `open_world_readonly`).
//!
//! Exit codes: 0 success; 2 a malformed identity or no catalog directory;
//! 3 not found (no control catalog for the identity, or an unrecorded
//! world); 1 the catalog could not be opened or read. A missing catalog is
//! never created.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use custos_core::identity::StorageIdentity;
use custos_core::world::{ControlCatalog, WorldError, WorldInfo, WorldRecord};
use custos_sqlite::control::{catalog_path, SqliteControlCatalog};

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
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a catalog command.
pub fn run(cmd: CatalogCommand) -> ExitCode {
    match cmd {
        CatalogCommand::Discover { id, json } => match open(&id.uri, &id.namespace, &id.backend) {
            Ok((identity, path, catalog)) => discover(&identity, &path, &catalog, json),
            Err(code) => code,
        },
        CatalogCommand::Show {
            uri,
            world_id,
            namespace,
            backend,
            json,
        } => match open(&uri, &namespace, &backend) {
            Ok((identity, path, catalog)) => show(&identity, &path, &catalog, &world_id, json),
            Err(code) => code,
        },
    }
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("custos catalog: {msg}");
    ExitCode::from(code)
}

/// A relative local path is made absolute against the working directory.
fn absolute(uri: &str) -> String {
    if uri.contains("://") || Path::new(uri).is_absolute() {
        return uri.to_owned();
    }
    match std::env::current_dir() {
        Ok(cwd) => cwd.join(uri).to_string_lossy().into_owned(),
        Err(_) => uri.to_owned(),
    }
}

fn open(
    uri: &str,
    namespace: &str,
    backend: &str,
) -> Result<(StorageIdentity, PathBuf, SqliteControlCatalog), ExitCode> {
    let identity =
        StorageIdentity::new(&absolute(uri), namespace, backend).map_err(|e| fail(2, e))?;
    let path = catalog_path(&identity).ok_or_else(|| {
        fail(
            2,
            "no catalog directory for a remote identity: set CUSTOS_CATALOG_DIR or HOME",
        )
    })?;
    if !path.is_file() {
        return Err(fail(
            3,
            format!(
                "NotFound: no control catalog for {} (namespace {}, backend {}) at {}",
                identity.uri(),
                identity.namespace(),
                identity.backend(),
                path.display()
            ),
        ));
    }
    let catalog = SqliteControlCatalog::open(&path)
        .map_err(|e| fail(1, format!("cannot open {}: {e}", path.display())))?;
    Ok((identity, path, catalog))
}

fn identity_json(id: &StorageIdentity, path: &Path) -> serde_json::Value {
    serde_json::json!({
        "uri": id.uri(),
        "namespace": id.namespace(),
        "backend": id.backend(),
        "catalog": path.display().to_string(),
    })
}

fn print_json(v: &serde_json::Value) -> ExitCode {
    match serde_json::to_string_pretty(v) {
        Ok(s) => {
            println!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(1, format!("cannot encode the report: {e}")),
    }
}

fn opt(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or("-")
}

fn discover(id: &StorageIdentity, path: &Path, c: &SqliteControlCatalog, json: bool) -> ExitCode {
    let worlds: Vec<WorldRecord> = match c.discover_worlds() {
        Ok(w) => w,
        Err(e) => return fail(1, e),
    };
    if json {
        return print_json(&serde_json::json!({
            "storage": identity_json(id, path),
            "worlds": worlds,
        }));
    }
    println!("control catalog {}", path.display());
    println!(
        "{:<24} {:<10} {:<13} {:>10}  {:<16} {:<16} name",
        "world_id", "status", "writer_mode", "tick_head", "run_id", "parent"
    );
    for w in &worlds {
        println!(
            "{:<24} {:<10} {:<13} {:>10}  {:<16} {:<16} {}",
            w.identity.world_id,
            w.status.as_str(),
            w.writer_mode.as_str(),
            w.tick_head,
            opt(&w.identity.run_id),
            opt(&w.identity.parent_world_id),
            w.identity.name
        );
    }
    println!("{} world(s)", worlds.len());
    ExitCode::SUCCESS
}

fn show(
    id: &StorageIdentity,
    path: &Path,
    c: &SqliteControlCatalog,
    world_id: &str,
    json: bool,
) -> ExitCode {
    let info: WorldInfo = match c.open_world_readonly(world_id) {
        Ok(i) => i,
        Err(e @ WorldError::NotFound { .. }) => return fail(3, e),
        Err(e) => return fail(1, e),
    };
    if json {
        return print_json(&serde_json::json!({
            "storage": identity_json(id, path),
            "world": info,
        }));
    }
    let r = &info.record;
    println!("world_id        {}", r.identity.world_id);
    println!("name            {}", r.identity.name);
    println!("run_id          {}", opt(&r.identity.run_id));
    println!("parent_world_id {}", opt(&r.identity.parent_world_id));
    println!("status          {}", r.status.as_str());
    println!("writer_mode     {}", r.writer_mode.as_str());
    println!("tick_head       {}", r.tick_head);
    println!("signatures      {}", info.signatures.len());
    for s in &info.signatures {
        println!("  table {}", s.table_id);
        println!("    components  {}", s.components.join(", "));
        println!("    fingerprint {}", s.fingerprint);
        for f in &s.schema.fields {
            println!(
                "    column      {} {:?}{}",
                f.name,
                f.ty,
                if f.nullable { "" } else { " not null" }
            );
        }
    }
    ExitCode::SUCCESS
}
