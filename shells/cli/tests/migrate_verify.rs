//! `custos migrate verify` on a completed destination: read-only by
//! default — it writes nothing (every file's bytes and mtime, every
//! directory's mtime unchanged), takes no fence and commits no tick, and
//! verifies a destination the user cannot write — while
//! `--resume-and-tick` resumes and ticks; a failure names the table and
//! the evidence, or the object and its address, in text and in `--json`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/fixture.rs"]
#[allow(dead_code)]
mod fixture;
#[path = "support/migration.rs"]
#[allow(dead_code)]
mod migration;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use custos_core::identity::StorageIdentity;
use custos_core::migration::{Resume, StoredReceipt};
use custos_core::world::{ControlCatalog, WorldInfo};
use custos_iceberg::IcebergStore;
use custos_sqlite::control::{catalog_path, SqliteControlCatalog};
use serde_json::Value;

use fixture::{Size, LIVE, TICK};
use migration::Run;

/// A completed migration of the small fixture.
struct Migrated {
    dir: tempfile::TempDir,
    dst: PathBuf,
    receipt: PathBuf,
    table_id: String,
}

fn migrated() -> Migrated {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let dst = dir.path().join("dst");
    let f = fixture::build(&src, Size::SMALL);
    let receipt = dir.path().join("receipt.json");
    let out = migration::run(&src, &dst, "m1", &["--receipt", receipt.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    Migrated {
        dir,
        dst,
        receipt,
        table_id: f.table_id,
    }
}

impl Migrated {
    fn verify_args(&self, extra: &[&str]) -> Vec<String> {
        migration::verify_args(&self.dst, &self.receipt, extra)
    }

    /// `custos migrate verify` of this destination, with `extra`.
    fn verify(&self, extra: &[&str]) -> Run {
        migration::verify(&self.dst, &self.receipt, extra)
    }

    /// The live World at the destination, read without a write.
    fn live(&self) -> WorldInfo {
        let id = StorageIdentity::new(self.dst.to_str().unwrap(), "default", "iceberg").unwrap();
        SqliteControlCatalog::open_read_only(catalog_path(&id).unwrap())
            .unwrap()
            .open_world_readonly(LIVE)
            .unwrap()
    }
}

/// What must not move under a read-only verification: every entry
/// beneath a root with its kind, its bytes (files), its length and its
/// modification time (a file written or a directory whose entries changed
/// — a `-wal`, `-shm` or journal created — moves it).
#[derive(Debug, PartialEq)]
struct Entry {
    dir: bool,
    bytes: Vec<u8>,
    len: u64,
    mtime: (i64, i64),
}

fn stamp(root: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        let dir = m.is_dir();
        if dir {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
        let bytes = if m.is_file() {
            std::fs::read(&p).unwrap()
        } else {
            Vec::new()
        };
        out.insert(
            p,
            Entry {
                dir,
                bytes,
                len: m.len(),
                mtime: (m.mtime(), m.mtime_nsec()),
            },
        );
    }
    out
}

/// Asserts nothing beneath `root` changed since `before`, naming what did.
#[track_caller]
fn unchanged(root: &Path, before: &BTreeMap<PathBuf, Entry>) {
    let after = stamp(root);
    for (p, e) in &after {
        match before.get(p) {
            None => panic!("{} was created", p.display()),
            Some(b) => assert!(b == e, "{} changed: {b:?} -> {e:?}", p.display()),
        }
    }
    for p in before.keys() {
        assert!(after.contains_key(p), "{} was removed", p.display());
    }
}

/// `chmod -R a-w,a+rX` of a tree for its lifetime; the original modes are
/// restored on drop (also when the test fails), so the tree can be removed.
struct ReadOnlyTree(Vec<(PathBuf, u32)>);

impl ReadOnlyTree {
    fn new(root: &Path) -> Self {
        let mut modes = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(p) = stack.pop() {
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                for e in std::fs::read_dir(&p).unwrap() {
                    stack.push(e.unwrap().path());
                }
            }
            modes.push((p, m.permissions().mode()));
        }
        // Parents after children: a directory's mode changes last.
        for (p, mode) in modes.iter().rev() {
            let x = if std::fs::symlink_metadata(p).unwrap().is_dir() {
                0o555
            } else {
                0o444
            };
            let ro = (mode & !0o222) | x;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(ro)).unwrap();
        }
        ReadOnlyTree(modes)
    }
}

impl Drop for ReadOnlyTree {
    fn drop(&mut self) {
        for (p, mode) in &self.0 {
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(*mode));
        }
    }
}

/// Whether this process runs as root (whom permission bits do not stop).
fn root(dir: &Path) -> bool {
    let probe = dir.join(".uid-probe");
    std::fs::write(&probe, b"").unwrap();
    let uid = std::fs::metadata(&probe).unwrap().uid();
    std::fs::remove_file(&probe).unwrap();
    uid == 0
}

/// The uid and gid of `nobody`, whom the read-only tree's modes stop.
const NOBODY: u32 = 65_534;

/// Runs the binary with `args` as a user who cannot write the read-only
/// tree: this user, or — as root — `nobody` (the binary linked or copied
/// where `nobody` can run it; the temp directory opened for reading).
fn unprivileged(dir: &Path, args: &[String]) -> Run {
    let mut cmd = if root(dir) {
        let bin_dir = dir.join("bin");
        std::fs::create_dir_all(&bin_dir).unwrap();
        let exe = bin_dir.join("custos");
        if !exe.exists() && std::fs::hard_link(migration::bin(), &exe).is_err() {
            std::fs::copy(migration::bin(), &exe).unwrap();
        }
        for p in [dir, &bin_dir] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let mut c = Command::new(exe);
        c.uid(NOBODY).gid(NOBODY);
        c
    } else {
        Command::new(migration::bin())
    };
    let out = cmd.args(args).current_dir("/").output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn verify_reads_only_and_verifies_a_destination_it_cannot_write() {
    let m = migrated();
    let world = m.live();
    assert_eq!(world.record.tick_head, TICK + 1, "the run's cold tick");
    let before = stamp(&m.dst);

    // Whoever runs it: nothing at the destination moves, no fence, no tick.
    let v = m.verify(&[]);
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert!(v.stdout.contains("verified (read-only)"), "{}", v.stdout);
    assert!(
        v.stdout
            .contains("nothing written: no fence taken, no tick committed"),
        "{}",
        v.stdout
    );
    println!("custos migrate verify:\n{}", v.stdout);
    unchanged(&m.dst, &before);
    assert_eq!(m.live(), world, "verify fenced or ticked");

    let v = m.verify(&["--json"]);
    assert_eq!(v.code, 0, "{}", v.stderr);
    let j: Value = serde_json::from_str(&v.stdout).unwrap();
    assert_eq!(j["verified"], true);
    assert_eq!(j["mode"], "read-only");
    assert_eq!(j["evidence"]["resume"], "not-exercised");
    assert_eq!(j["evidence"]["objects_verified"], Size::SMALL.objects);
    assert_eq!(j["evidence"]["worlds_discovered"], 1);
    // Digests print as every migration format stores them: 64 hex digits.
    let bare = |v: &Value| {
        v.as_str().is_some_and(|s| {
            s.len() == 64
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
    };
    assert!(bare(&j["receipt_digest"]), "{}", v.stdout);
    assert!(bare(&j["plan_digest"]), "{}", v.stdout);
    assert_eq!(
        j["plan_digest"], j["evidence"]["plan_digest"],
        "{}",
        v.stdout
    );
    unchanged(&m.dst, &before);
    assert_eq!(m.live(), world);

    // A destination the user cannot write (`chmod -R a-w`; as root, run
    // as `nobody`): it verifies, and still nothing moves.
    {
        let _ro = ReadOnlyTree::new(&m.dst);
        let v = unprivileged(m.dir.path(), &m.verify_args(&[]));
        assert_eq!(v.code, 0, "{}", v.stderr);
        assert!(v.stdout.contains("verified (read-only)"), "{}", v.stdout);
        // The tree really refuses writes to that user: the writing
        // verification fails there.
        let w = unprivileged(m.dir.path(), &m.verify_args(&["--resume-and-tick"]));
        assert_ne!(w.code, 0, "a write went through: {}", w.stdout);
        assert!(w.stderr.contains("readonly database"), "{}", w.stderr);
        unchanged(&m.dst, &before);
    }
    assert_eq!(m.live(), world);

    // `--resume-and-tick` writes: a fence under the cold verifier's holder
    // above the last epoch, and one more tick each time.
    for n in 1..=2 {
        let v = m.verify(&["--resume-and-tick", "--json"]);
        assert_eq!(v.code, 0, "{}", v.stderr);
        let j: Value = serde_json::from_str(&v.stdout).unwrap();
        assert_eq!(j["mode"], "resume-and-tick");
        let resume: Resume = serde_json::from_value(j["evidence"]["resume"].clone()).unwrap();
        let Resume::Resumed {
            world: w,
            epoch,
            tick,
        } = resume
        else {
            panic!("{resume:?}")
        };
        assert_eq!((w.as_str(), tick), (LIVE, TICK + 1 + n));
        let after = m.live();
        assert_eq!(after.record.tick_head, TICK + 1 + n);
        assert_eq!(after.fence.issued, epoch);
        assert!(epoch > world.fence.issued);
        assert_eq!(
            after.fence.holder.as_ref().map(|h| h.as_str()),
            Some("custos-cold-verifier")
        );
    }
}

#[test]
fn a_failing_verify_names_the_table_and_the_object() {
    let m = migrated();
    // One more row in the signature table, through the Iceberg shell.
    let id = StorageIdentity::new(m.dst.to_str().unwrap(), "default", "iceberg").unwrap();
    let store = IcebergStore::open_writable(&id).unwrap();
    let one = Size {
        rows: 1,
        ..Size::SMALL
    };
    fixture::append_rows(&store, &m.table_id, one, 99);
    drop(store);
    // Other bytes (of the same length) in one Artifact object's file.
    let objects = m.dst.join("default").join(".custos-artifacts");
    let object = migration::object_files(&objects).remove(0);
    let sha = object.file_name().unwrap().to_str().unwrap().to_owned();
    let mut bytes = std::fs::read(&object).unwrap();
    bytes[0] ^= 0xff;
    std::fs::set_permissions(&object, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&object, &bytes).unwrap();
    let uri = format!("file://{}", object.canonicalize().unwrap().display());
    let rows = Size::SMALL.rows;
    let before = stamp(&m.dst);
    let world = m.live();

    let v = m.verify(&[]);
    assert_eq!(v.code, 7, "{}", v.stderr);
    println!("custos migrate verify (tampered):\n{}", v.stderr);
    let t = &m.table_id;
    for needle in [
        "cold-verification-failed".to_string(),
        format!("table {t}: row count {}, the plan's is {rows}", rows + 1),
        format!("table {t}: content digest "),
        format!("object {sha} at {uri}: bytes differ: sha256 "),
    ] {
        assert!(v.stderr.contains(&needle), "{needle}: {}", v.stderr);
    }
    // Only that table and that object.
    assert_eq!(v.stderr.matches("table ").count(), 2, "{}", v.stderr);
    assert_eq!(v.stderr.matches("object ").count(), 1, "{}", v.stderr);

    let v = m.verify(&["--json"]);
    assert_eq!(v.code, 7, "{}", v.stderr);
    let j: Value = serde_json::from_str(&v.stdout).unwrap();
    assert_eq!(j["verified"], false);
    assert_eq!(j["reason"], "cold-verification-failed");
    let found = j["discrepancies"].as_array().unwrap();
    assert_eq!(found.len(), 3, "{found:?}");
    let kind = |k: &str| found.iter().find(|d| d["kind"] == k).unwrap();
    let count = kind("table-row-count");
    assert_eq!(
        (&count["table"], &count["expected"], &count["found"]),
        (
            &Value::from(t.as_str()),
            &Value::from(rows),
            &Value::from(rows + 1)
        )
    );
    assert_eq!(kind("table-content-digest")["table"], t.as_str());
    let o = kind("object");
    assert_eq!(
        (&o["sha256"], &o["uri"]),
        (&Value::from(sha), &Value::from(uri))
    );
    assert_eq!(o["expected"]["size"], bytes.len());
    assert_eq!(o["found"]["facts"]["size"], bytes.len());
    // A failing verification writes nothing either.
    unchanged(&m.dst, &before);
    assert_eq!(m.live(), world);
}

#[test]
fn a_receipt_the_destination_does_not_hold_is_named() {
    let m = migrated();
    let stored = StoredReceipt::decode(&std::fs::read(&m.receipt).unwrap()).unwrap();
    let mut other = stored.receipt.clone();
    other.completed_at += 1;
    let other = StoredReceipt::seal(other);
    let file = m.dir.path().join("other-receipt.json");
    std::fs::write(&file, other.encode()).unwrap();
    let v = migration::verify(&m.dst, &file, &["--json"]);
    assert_eq!(v.code, 7, "{}", v.stderr);
    let needle = format!(
        "receipt-mismatch: the destination stores receipt {}, not {}",
        stored.digest.hex(),
        other.digest.hex()
    );
    assert!(v.stderr.contains(&needle), "{}", v.stderr);
    let j: Value = serde_json::from_str(&v.stdout).unwrap();
    assert_eq!(j["reason"], "receipt-mismatch");
    assert_eq!(j["receipt_mismatch"]["kind"], "other-receipt");
    assert_eq!(j["receipt_mismatch"]["held"], stored.digest.hex());
}
