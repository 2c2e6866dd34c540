//! Helpers several of this crate's integration tests share (each test
//! target compiles the module with `mod support;` and uses what it needs).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use custos_conformance::ledger::{key, sid, tok, tool, ws, LIMITS};
use custos_core::catalogue::{Catalogue, Creation, Request};
use custos_core::ledger::{Key, Ledger};
use custos_core::world::{ControlCatalog, WorldIdentity, WorldRecord, WriterMode};
use custos_sqlite::catalogue::SqliteCatalogue;
use custos_sqlite::control::SqliteControlCatalog;
use custos_sqlite::ledger::SqliteLedger;
use custos_sqlite::Refusal;
use rusqlite::Connection;
use sha2::{Digest, Sha256};

/// `path` with `suffix` appended to its file name (`-wal`, `-journal`).
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The SHA-256 of the file's bytes, hex; `None` when it is absent.
pub fn sha(path: &Path) -> Option<String> {
    std::fs::read(path)
        .ok()
        .map(|b| format!("{:x}", Sha256::digest(b)))
}

/// The bytes of a file and of its sibling with `suffix`, and the listing
/// of their directory: what "nothing written" compares.
pub type State = (Option<String>, Option<String>, Vec<String>);

/// The [`State`] of `path` and its sibling with `suffix`.
pub fn state(path: &Path, suffix: &str) -> State {
    let mut names: Vec<String> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    (sha(path), sha(&sibling(path, suffix)), names)
}

/// An active, resumable world `id`.
pub fn world(id: &str) -> WorldRecord {
    WorldRecord::active(WorldIdentity::new(id, "a world"), WriterMode::Resumable)
}

/// The ids of the worlds `c` discovers, in its order.
pub fn ids(c: &SqliteControlCatalog) -> Vec<String> {
    c.discover_worlds()
        .unwrap()
        .into_iter()
        .map(|w| w.identity.world_id)
        .collect()
}

/// A catalogue at `path` holding session `s1` (key `k1`), reserved.
pub fn catalogue_with_s1(path: &Path) -> SqliteCatalogue {
    let c = SqliteCatalogue::open(path).unwrap();
    c.apply(&Request::Reserve {
        session_id: "s1".into(),
        creation: Creation::local("k1", "n", "/w"),
        now: 1,
    })
    .unwrap();
    c
}

/// A ledger at `path` with session `s` attached (workspace `w`, token
/// `a`) and the call `(s, o, 1)` of the tool `program` admitted: the
/// handle and the call's key.
pub fn ledger_with_an_admitted_call(path: &Path) -> (SqliteLedger, Key) {
    let l = SqliteLedger::open(path).unwrap();
    l.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("a"))
        .unwrap();
    let k = key("s", "o", 1);
    l.admit(&LIMITS, &k, &tool("program"), &tok("a")).unwrap();
    (l, k)
}

/// Makes a file at a path.
pub type Make = fn(&Path);

/// Files no control catalog open accepts, each with the rule that refuses
/// it: zero-length, not SQLite, another application's database.
pub fn foreign_files() -> [(Make, Refusal); 3] {
    [
        (|p| std::fs::write(p, b"").unwrap(), Refusal::ZeroLength),
        (
            |p| std::fs::write(p, b"plain text, no database").unwrap(),
            Refusal::NotSqlite,
        ),
        (
            |p| {
                Connection::open(p)
                    .unwrap()
                    .execute_batch("CREATE TABLE x (a); PRAGMA application_id = 7;")
                    .unwrap()
            },
            Refusal::ForeignApplication {
                found: 7,
                expected: custos_sqlite::control::CONTROL_APPLICATION_ID,
            },
        ),
    ]
}

/// Spawns this test binary again as a child running only the test `test`
/// (single-threaded, output shown), with `env` set to `value`; its stdout
/// and stderr piped.
pub fn spawn_child(test: &str, env: &str, value: String) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(env, value)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}
