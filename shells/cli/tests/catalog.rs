//! `custos catalog discover|show` end to end: a control catalog written by
//! the SQLite shell is listed (destroyed worlds included) and described,
//! as a table and as JSON; a missing catalog or world exits 3 and creates
//! nothing. The read commands open read-only: a file that is not a
//! readable catalog is refused with its bytes and directory untouched, a
//! catalog is read without a byte or a file changing, and a writer's open
//! write transaction neither delays a read nor shows in it. A catalog in
//! rollback-journal mode whose writer was killed mid-transaction (a real
//! hot journal) is refused by every read command with exit 6 naming the
//! file, the journal and `custos catalog recover`, untouched; `recover`
//! rolls it back (and changes nothing else), after which the read commands
//! answer the last committed state. Output to a closed pipe or a full
//! device ends with 141 or 1, never a panic.

#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/binary.rs"]
mod binary;
#[path = "support/hot_journal.rs"]
#[allow(dead_code)]
mod hot_journal;
#[path = "support/worlds.rs"]
mod worlds;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use custos_core::identity::StorageIdentity;
use custos_core::ledger::sha256;
use custos_core::schema::{Field, Schema};
use custos_core::world::{
    ControlCatalog, Request, Signature, WorldIdentity, WorldRecord, WriterMode,
};
use custos_sqlite::control::{catalog_path, SqliteControlCatalog};

use binary::{closed_pipe, custos, custos_into, full_device, stderr};
use worlds::{entity, int64, live_world, show_args};

fn seed(uri: &Path) -> Signature {
    let id = StorageIdentity::new(uri.to_str().unwrap(), "ns", "iceberg").unwrap();
    let c = SqliteControlCatalog::open_for(&id).unwrap();
    let live = live_world();
    c.register(&live).unwrap();
    let schema = Schema::new(vec![entity(), Field::new("Score", int64(), true)]);
    let sig = Signature::new(vec!["Score".into()], schema, "t_score");
    c.apply(&Request::RegisterSignature {
        world_id: "w-live".into(),
        signature: sig.clone(),
    })
    .unwrap();
    let gone = WorldRecord::active(
        WorldIdentity::new("w-gone", "retired"),
        WriterMode::CleanupOnly,
    );
    c.register(&gone).unwrap();
    c.retire(&gone).unwrap();
    sig
}

fn files(dir: &Path) -> Vec<String> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.display().to_string());
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn discover_lists_every_world_including_destroyed() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let uri = dir.path().to_str().unwrap();
    let out = custos(&["catalog", "discover", uri, "--namespace", "ns", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["storage"]["namespace"], "ns");
    assert_eq!(v["storage"]["backend"], "iceberg");
    assert!(v["storage"]["catalog"]
        .as_str()
        .unwrap()
        .ends_with("ns/.custos-catalog-iceberg.db"));
    let worlds = v["worlds"].as_array().unwrap();
    assert_eq!(worlds.len(), 2);
    assert_eq!(worlds[0]["identity"]["world_id"], "w-gone");
    assert_eq!(worlds[0]["status"], "destroyed");
    assert_eq!(worlds[0]["writer_mode"], "cleanup_only");
    assert_eq!(worlds[1]["identity"]["world_id"], "w-live");
    assert_eq!(worlds[1]["status"], "active");
    assert_eq!(worlds[1]["identity"]["run_id"], "run-7");

    // The same through a file:// spelling and as a table.
    let out = custos(&[
        "catalog",
        "discover",
        &format!("file://{uri}/"),
        "--namespace",
        "ns",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("w-gone") && text.contains("destroyed"),
        "{text}"
    );
    assert!(text.contains("w-live") && text.contains("run-7"), "{text}");
    assert!(text.contains("2 world(s)"), "{text}");
}

#[test]
fn show_prints_the_descriptor_and_signatures() {
    let dir = tempfile::tempdir().unwrap();
    let sig = seed(dir.path());
    let uri = dir.path().to_str().unwrap();
    let out = custos(&show_args(uri, "w-live", &["--json"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["world"]["record"]["identity"]["name"], "the live one");
    let sigs = v["world"]["signatures"].as_array().unwrap();
    assert_eq!(sigs.len(), 1);
    assert_eq!(sigs[0]["table_id"], "t_score");
    assert_eq!(sigs[0]["fingerprint"], sig.fingerprint.as_str());
    assert_eq!(sigs[0]["components"], serde_json::json!(["Score"]));

    let out = custos(&["catalog", "show", uri, "w-live", "--namespace", "ns"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("t_score") && text.contains(&sig.fingerprint),
        "{text}"
    );
    assert!(text.contains("column      entity"), "{text}");

    // A destroyed world is still described.
    let out = custos(&show_args(uri, "w-gone", &["--json"]));
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["world"]["record"]["status"], "destroyed");
}

#[test]
fn not_found_is_a_clean_exit_code_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().to_str().unwrap();
    let before = files(dir.path());
    for args in [
        vec!["catalog", "discover", uri],
        vec![
            "catalog",
            "discover",
            uri,
            "--namespace",
            "nowhere",
            "--json",
        ],
        vec!["catalog", "show", uri, "w-live"],
    ] {
        let out = custos(&args);
        assert_eq!(out.status.code(), Some(3), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.matches("NotFound: no control catalog").count(),
            1,
            "{err}"
        );
        assert!(out.stdout.is_empty());
    }
    assert_eq!(files(dir.path()), before, "a miss created files");

    seed(dir.path());
    let out = custos(&["catalog", "show", uri, "w-nobody", "--namespace", "ns"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NotFound: world w-nobody"));
    // A malformed identity is a usage error.
    let out = custos(&["catalog", "discover", uri, "--namespace", "a/b"]);
    assert_eq!(out.status.code(), Some(2));
}

// ------------------------------------------------------------ read-only opens

/// The catalog file of `uri` in namespace `ns` (backend iceberg).
fn catalog_file(uri: &Path, ns: &str) -> PathBuf {
    let id = StorageIdentity::new(uri.to_str().unwrap(), ns, "iceberg").unwrap();
    catalog_path(&id).unwrap()
}

/// SHA-256 of a file's bytes (`None` when it does not exist).
fn sha(path: &Path) -> Option<[u8; 32]> {
    std::fs::read(path).ok().map(|b| sha256(&b))
}

/// `path` with `suffix` appended to its file name.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// What a read command must leave exactly as it found: the catalog file's
/// bytes, its `-wal`'s bytes and every path beneath the storage root.
#[derive(Debug, PartialEq, Eq)]
struct Untouched {
    db: Option<[u8; 32]>,
    wal: Option<[u8; 32]>,
    len: Option<u64>,
    files: Vec<String>,
}

fn untouched(root: &Path, db: &Path) -> Untouched {
    Untouched {
        db: sha(db),
        wal: sha(&sibling(db, "-wal")),
        len: std::fs::metadata(db).ok().map(|m| m.len()),
        files: files(root),
    }
}

/// Runs `custos args` and answers its output and how long it took.
fn timed(args: &[&str]) -> (Output, Duration) {
    let t = Instant::now();
    let out = custos(args);
    (out, t.elapsed())
}

/// The read commands, as run against `uri` in namespace `ns`.
fn read_commands(uri: &str) -> Vec<Vec<String>> {
    [
        vec!["catalog", "discover", uri, "--namespace", "ns"],
        vec!["catalog", "discover", uri, "--namespace", "ns", "--json"],
        vec!["catalog", "show", uri, "w-live", "--namespace", "ns"],
        show_args(uri, "w-live", &["--json"]),
    ]
    .into_iter()
    .map(|v| v.into_iter().map(String::from).collect())
    .collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A zero-length file, an empty SQLite database, another application's
/// database, a file that is no database at all, and a control catalog of a
/// newer version, each where the identity's control catalog would be: every
/// read command refuses it with a typed error naming the file and the rule
/// (3: no control catalog here; 1: a catalog this build cannot read), and
/// leaves its bytes and the directory exactly as they were.
#[test]
fn files_that_are_not_readable_catalogs_are_refused_and_left_untouched() {
    type Make = fn(&Path);
    let cases: [(&str, Make, i32, &str); 6] = [
        (
            "zero-length",
            |p| std::fs::write(p, b"").unwrap(),
            3,
            "is not a control catalog: the file is empty (zero-length)",
        ),
        (
            "empty database",
            |p| {
                let c = rusqlite::Connection::open(p).unwrap();
                c.execute_batch("CREATE TABLE x (a); DROP TABLE x;").unwrap();
            },
            3,
            "is not a control catalog: an SQLite database with no application id, no version and no schema",
        ),
        (
            "foreign database",
            |p| {
                let c = rusqlite::Connection::open(p).unwrap();
                c.execute_batch("CREATE TABLE t (x INTEGER); PRAGMA application_id = 7;")
                    .unwrap();
            },
            3,
            "is not a control catalog: application_id 0x7",
        ),
        (
            "not a database",
            |p| std::fs::write(p, b"hello, I am a text file and no database at all\n").unwrap(),
            3,
            "is not a control catalog: not an SQLite database",
        ),
        (
            "newer version",
            |p| {
                drop(SqliteControlCatalog::open(p).unwrap());
                let c = rusqlite::Connection::open(p).unwrap();
                c.execute_batch("PRAGMA user_version = 4;").unwrap();
            },
            6,
            "is a control catalog of version 4; this build reads versions 1 to 3",
        ),
        (
            "identity without tables",
            |p| {
                drop(SqliteControlCatalog::open(p).unwrap());
                let c = rusqlite::Connection::open(p).unwrap();
                c.execute_batch(
                    "PRAGMA foreign_keys = OFF; DROP TABLE control_staged; DROP TABLE control_migrations; \
                     DROP TABLE control_fences; DROP TABLE control_signatures; DROP TABLE control_worlds;",
                )
                .unwrap();
            },
            7,
            "has a control catalog's identity and version but not its tables",
        ),
    ];
    for (what, make, code, rule) in cases {
        let dir = tempfile::tempdir().unwrap();
        let db = catalog_file(dir.path(), "ns");
        std::fs::create_dir_all(db.parent().unwrap()).unwrap();
        make(&db);
        let uri = dir.path().to_str().unwrap();
        let before = untouched(dir.path(), &db);
        for args in read_commands(uri) {
            let (out, took) = timed(&strs(&args));
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(code), "{what}: {args:?}: {err}");
            assert!(err.contains(rule), "{what}: {args:?}: {err}");
            assert!(
                err.contains(&db.display().to_string()),
                "{what}: the error names the file: {err}"
            );
            assert!(out.stdout.is_empty(), "{what}: {args:?}");
            assert!(
                took < Duration::from_secs(2),
                "{what}: {args:?} took {took:?}"
            );
            assert_eq!(
                untouched(dir.path(), &db),
                before,
                "{what}: {args:?} changed the file or its directory"
            );
        }
    }
}

/// A catalog written by a writer that has closed, then the same catalog
/// while another connection holds `BEGIN IMMEDIATE` with an uncommitted
/// write: every read command answers at once with the committed state, and
/// the catalog's bytes, its `-wal`'s bytes and the directory listing are the
/// same after every command as before it.
#[test]
fn reads_leave_a_catalog_untouched_and_never_wait_for_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let db = catalog_file(dir.path(), "ns");
    let uri = dir.path().to_str().unwrap();

    let check_all = |phase: &str| {
        let before = untouched(dir.path(), &db);
        for args in read_commands(uri) {
            let (out, took) = timed(&strs(&args));
            assert!(
                out.status.success(),
                "{phase}: {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                took < Duration::from_secs(2),
                "{phase}: {args:?} took {took:?}"
            );
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("w-live"), "{phase}: {text}");
            assert!(!text.contains("w-pending"), "{phase}: uncommitted: {text}");
            assert_eq!(
                untouched(dir.path(), &db),
                before,
                "{phase}: {args:?} changed the catalog or its directory"
            );
        }
        let (out, took) = timed(&["catalog", "show", uri, "w-pending", "--namespace", "ns"]);
        assert_eq!(out.status.code(), Some(3), "{phase}");
        assert!(took < Duration::from_secs(2), "{phase}: took {took:?}");
        assert_eq!(untouched(dir.path(), &db), before, "{phase}");
    };

    // (2) The writer has closed: only the catalog file is there.
    assert!(!sibling(&db, "-wal").exists());
    check_all("closed writer");
    let (out, _) = timed(&["catalog", "discover", uri, "--namespace", "ns", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["worlds"].as_array().unwrap().len(), 2);

    // (3) A writer holds an uncommitted write transaction.
    let writer = rusqlite::Connection::open(&db).unwrap();
    writer
        .execute_batch(
            "BEGIN IMMEDIATE;
             INSERT INTO control_worlds (world_id, name, run_id, parent_world_id, writer_mode, status, tick_head)
             VALUES ('w-pending', 'not yet', NULL, NULL, 'resumable', 'active', 0);",
        )
        .unwrap();
    check_all("uncommitted writer");
    let (out, _) = timed(&["catalog", "discover", uri, "--namespace", "ns", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["worlds"].as_array().unwrap().len(), 2, "{v}");
    writer.execute_batch("COMMIT;").unwrap();
    drop(writer);

    // Committed, it is read (the read-only open saw the writer's WAL).
    let out = custos(&["catalog", "show", uri, "w-pending", "--namespace", "ns"]);
    assert!(out.status.success());
}

// ------------------------------------------------------------ output failures

/// Runs `custos args` with stdout a pipe whose read end is closed before
/// the child writes (closed before it is spawned), then with stdout
/// `/dev/full`; answers both exit codes and stderrs.
fn output_failures(args: &[&str]) -> [(Option<i32>, String); 2] {
    let closed = custos_into(args, closed_pipe());
    let full = custos_into(args, full_device());
    [closed, full].map(|o| (o.status.code(), stderr(&o)))
}

#[test]
fn discover_and_show_survive_a_closed_pipe_and_a_full_device() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let uri = dir.path().to_str().unwrap();
    for args in read_commands(uri) {
        let [(closed, closed_err), (full, full_err)] = output_failures(&strs(&args));
        assert!(!closed_err.contains("panicked"), "{args:?}: {closed_err}");
        assert_eq!(closed, Some(141), "{args:?}: {closed_err}");
        assert!(closed_err.is_empty(), "{args:?}: quiet: {closed_err}");
        assert!(!full_err.contains("panicked"), "{args:?}: {full_err}");
        assert_eq!(full, Some(1), "{args:?}: {full_err}");
        assert_eq!(full_err.lines().count(), 1, "{args:?}: {full_err}");
        assert!(
            full_err.starts_with("custos: cannot write output: "),
            "{full_err}"
        );
    }
}

// ------------------------------------------------------------ a hot journal

/// The writer `hot_journal::make_hot` runs and kills (a no-op unless this
/// process is that child).
#[test]
fn hot_journal_writer() {
    hot_journal::writer();
}

/// The world ids of a `discover --json` report.
fn world_ids(stdout: &[u8]) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_slice(stdout).unwrap();
    v["worlds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["identity"]["world_id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_hot_journal_is_refused_by_name_until_recover_rolls_it_back() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let uri = dir.path().to_str().unwrap();
    let db = catalog_file(dir.path(), "ns");
    hot_journal::make_hot(&db, "hot_journal_writer");
    let journal = sibling(&db, "-journal");
    let before = (untouched(dir.path(), &db), sha(&journal));
    let command = format!("custos catalog recover {uri} --namespace ns --backend iceberg");
    for args in read_commands(uri) {
        let out = custos(&strs(&args));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(6), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        for needle in [
            "RecoveryNeeded: the control catalog ",
            &db.display().to_string(),
            &journal.display().to_string(),
            "nothing was written",
            &command,
            "[catalog-recovery-needed]",
        ] {
            assert!(err.contains(needle), "{args:?}: {needle:?} not in {err}");
        }
        assert_eq!(
            (untouched(dir.path(), &db), sha(&journal)),
            before,
            "{args:?} changed the catalog or its directory"
        );
    }

    // The command the message names: the interrupted transaction is rolled
    // back, and nothing else changes (still rollback-journal mode).
    let out = custos(&["catalog", "recover", uri, "--namespace", "ns"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("rolled back the transaction an interrupted writer left in"),
        "{text}"
    );
    assert!(text.contains(&journal.display().to_string()), "{text}");
    assert!(text.ends_with("2 world(s)\n"), "{text}");
    assert!(!journal.exists(), "the journal outlived the recovery");
    assert_eq!(hot_journal::journal_mode(&db), "delete");

    // The last committed state, without the half-written worlds.
    let out = custos(&["catalog", "discover", uri, "--namespace", "ns", "--json"]);
    assert!(out.status.success());
    assert_eq!(world_ids(&out.stdout), ["w-gone", "w-live"]);
    let out = custos(&["catalog", "show", uri, "w-live", "--namespace", "ns"]);
    assert!(out.status.success());

    // Nothing left to recover: a second recovery writes nothing.
    let after = untouched(dir.path(), &db);
    let out = custos(&["catalog", "recover", uri, "--namespace", "ns", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["rolled_back"], false);
    assert_eq!(v["worlds"], 2);
    assert_eq!(untouched(dir.path(), &db), after);
}

#[test]
fn recover_without_a_catalog_is_not_found_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().to_str().unwrap();
    let out = custos(&["catalog", "recover", uri, "--namespace", "ns"]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("custos catalog: NotFound: no control catalog")
            .count(),
        1,
        "{err}"
    );
    assert!(files(dir.path()).is_empty());
}
