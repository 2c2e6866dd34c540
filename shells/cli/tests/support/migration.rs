//! Helpers of the migration tests: the binary, snapshots of an endpoint's
//! durable state, and the destination's administration.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use custos_core::identity::StorageIdentity;
use custos_core::ledger::{self, Ledger};
use custos_core::migration::control::ControlAdmin;
use custos_core::migration::tables::TableStore;
use custos_core::migration::{Name, Status, TableFacts};
use custos_core::world::{ControlCatalog, SignatureRecord, WorldRecord};
use custos_iceberg::IcebergStore;
use custos_sqlite::control::{catalog_path, SqliteControlCatalog};
use custos_sqlite::ledger::{activity_path, SqliteLedger};

use super::fixture::Fixture;

/// What a run of the binary answered.
#[derive(Debug)]
pub struct Run {
    /// The exit code (-1: ended by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// The binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_custos"))
}

/// Runs the binary with `args`.
pub fn custos(args: &[&str]) -> Run {
    let out = Command::new(bin()).args(args).output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The arguments of `custos migrate run` from `src` to `dst`.
pub fn run_args(src: &Path, dst: &Path, id: &str) -> Vec<String> {
    [
        "migrate",
        "run",
        "--source",
        src.to_str().unwrap(),
        "--dest",
        dst.to_str().unwrap(),
        "--migration-id",
        id,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `custos migrate run` from `src` to `dst`, with `extra` arguments.
pub fn run(src: &Path, dst: &Path, id: &str, extra: &[&str]) -> Run {
    migrate("run", src, dst, id, extra)
}

/// `custos migrate <verb>` (`run`, `plan`, `check`) from `src` to `dst`,
/// with `extra` arguments.
pub fn migrate(verb: &str, src: &Path, dst: &Path, id: &str, extra: &[&str]) -> Run {
    let mut args = run_args(src, dst, id);
    if let Some(v) = args.get_mut(1) {
        *v = verb.to_owned();
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    custos(&refs)
}

/// The arguments of `custos migrate verify` of `dst` against the receipt
/// file `receipt`, with `extra` arguments.
pub fn verify_args(dst: &Path, receipt: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "migrate",
        "verify",
        "--dest",
        dst.to_str().unwrap(),
        "--receipt",
        receipt.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// `custos migrate verify` of `dst` against the receipt file `receipt`,
/// with `extra` arguments.
pub fn verify(dst: &Path, receipt: &Path, extra: &[&str]) -> Run {
    let args = verify_args(dst, receipt, extra);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    custos(&refs)
}

/// Every file beneath `root` with its bytes (directories implied).
pub fn tree(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    out
}

/// The object files beneath an Artifact root, sorted.
pub fn object_files(root: &Path) -> Vec<PathBuf> {
    tree(&root.join("sha256")).into_keys().collect()
}

/// An endpoint's durable state apart from its fence rows: every table's
/// evidence, every object's bytes, every World and signature.
#[derive(Debug, PartialEq)]
pub struct SourceState {
    tables: Vec<(Name, TableFacts)>,
    objects: BTreeMap<PathBuf, Vec<u8>>,
    worlds: Vec<WorldRecord>,
    signatures: Vec<SignatureRecord>,
}

/// The state of the fixture's identity.
pub fn source_state(f: &Fixture) -> SourceState {
    let store = IcebergStore::open_readonly(&f.id).unwrap();
    let control = SqliteControlCatalog::open_read_only(catalog_path(&f.id).unwrap()).unwrap();
    SourceState {
        tables: store.namespace().unwrap(),
        objects: tree(&f.artifacts.join("sha256")),
        worlds: control.discover_worlds().unwrap(),
        signatures: control.list_signatures().unwrap(),
    }
}

fn identity(uri: &Path) -> StorageIdentity {
    StorageIdentity::new(uri.to_str().unwrap(), "default", "iceberg").unwrap()
}

/// Every World's issued fence epoch at `uri`.
pub fn fence_epochs(uri: &Path) -> BTreeMap<String, u64> {
    let control =
        SqliteControlCatalog::open_read_only(catalog_path(&identity(uri)).unwrap()).unwrap();
    control
        .discover_worlds()
        .unwrap()
        .into_iter()
        .map(|w| {
            let info = control.open_world_readonly(&w.identity.world_id).unwrap();
            (w.identity.world_id, info.fence.issued)
        })
        .collect()
}

fn sibling_exists(path: &Path, suffix: &str) -> bool {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    Path::new(&p).exists()
}

/// The destination's administration as a later reader finds it: the
/// reservation's status (`None`: no reservation or no catalog), whether
/// a receipt is stored, and how many Worlds discovery shows.
pub fn destination(uri: &Path) -> (Option<Status>, bool, usize) {
    let path = catalog_path(&identity(uri)).unwrap();
    if !path.exists() {
        return (None, false, 0);
    }
    let control = match SqliteControlCatalog::open_read_only(&path) {
        Ok(c) => c,
        // A creation killed before its first commit: no catalog yet.
        Err(custos_sqlite::OpenError::NotReadable {
            rule: custos_sqlite::Refusal::ZeroLength | custos_sqlite::Refusal::Empty,
            ..
        }) => return (None, false, 0),
        // A writer killed inside a commit leaves a WAL (or journal) whose
        // index only a writable connection may recover; a read-only one is
        // refused (`SQLITE_READONLY_RECOVERY`). The next writer — the
        // retry — recovers it on open, so the reader does the same first:
        // recovery keeps every committed transaction and nothing else.
        Err(e) if sibling_exists(&path, "-wal") || sibling_exists(&path, "-journal") => {
            drop(SqliteControlCatalog::open(&path).unwrap_or_else(|w| panic!("{e}; then {w}")));
            SqliteControlCatalog::open_read_only(&path).unwrap()
        }
        Err(e) => panic!("{e}"),
    };
    let d = control.load_destination().unwrap();
    let receipt = control.stored_receipt().unwrap().is_some();
    let worlds = control.discover_worlds().unwrap().len();
    (d.reservation.map(|r| r.status), receipt, worlds)
}

/// Writes one Activity record (an attached session) at the identity's
/// Activity catalog.
pub fn settle_one_call(id: &StorageIdentity) {
    let path = activity_path(id).unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let l = SqliteLedger::open(&path).unwrap();
    l.attach(
        &ledger::Limits::default(),
        &ledger::SessionId::new("s").unwrap(),
        &ledger::WorkspaceId::new("w").unwrap(),
        1,
        &ledger::AttachToken::new("t").unwrap(),
    )
    .unwrap();
}
