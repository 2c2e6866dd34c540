//! `custos migrate` end to end on real files: a multi-plane
//! identity migrated by the binary, the source then destroyed and the
//! destination proven alone (discovery, a query, Artifact hashing, a
//! higher-epoch resume and a later committed tick); every preflight
//! refusal of a custos identity, each leaving the destination untouched;
//! and SIGKILL anywhere in a run, retried to one receipt (`migrate_kill`);
//! a source control catalog with a hot rollback journal refused by name
//! (exit 6, `custos catalog recover`) until recovered, then migrated without
//! the killed writer's half-written worlds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/fixture.rs"]
#[allow(dead_code)]
mod fixture;
#[path = "support/hot_journal.rs"]
#[allow(dead_code)]
mod hot_journal;
#[path = "support/migration.rs"]
#[allow(dead_code)]
mod migration;

use std::path::Path;

use custos_core::fence::Holder;
use custos_core::identity::StorageIdentity;
use custos_core::migration::artifacts::{facts_of, Occurrence};
use custos_core::migration::metadata::TableMetadata;
use custos_core::migration::tables::TableStore;
use custos_core::migration::{Resume, StoredReceipt, TableFacts};
use custos_core::world::{ControlCatalog, FencePurpose, WorldStatus};
use custos_iceberg::iceberg::table::Table;
use custos_iceberg::iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent};
use custos_iceberg::transfer::logical_metadata;
use custos_iceberg::{IcebergError, IcebergStore};
use custos_sqlite::control::{catalog_path, SqliteControlCatalog};

use fixture::{Size, GONE, LIVE, PARTITIONED, PARTITIONED_PROPERTIES, TICK};
use migration::{custos, migrate, run, tree, Run};

#[test]
fn a_whole_identity_migrates_and_the_destination_stands_alone() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let dst = dir.path().join("dst");
    let f = fixture::build(&src, Size::SMALL);
    let before = migration::source_state(&f);
    let receipt_file = dir.path().join("receipt.json");
    let (out, stored) = run_with_receipt(&src, &dst, &receipt_file);
    let on_file = StoredReceipt::decode(&std::fs::read(&receipt_file).unwrap()).unwrap();
    assert_eq!(on_file, stored);
    let r = &stored.receipt;
    assert_eq!(r.tables.len(), 6, "{r:?}");
    assert_eq!(r.artifacts.occurrences, Size::SMALL.objects as u64 + 1);
    assert_eq!(r.artifacts.objects, Size::SMALL.objects as u64);
    // One active World (the destroyed one is a record, not activated), its
    // fence floor, and every control record (both Worlds, the signature).
    assert_eq!((r.control.worlds, r.control.fence_floors), (1, 1), "{r:?}");
    assert!(r.control.records >= 3, "{r:?}");
    let Resume::Resumed { world, epoch, tick } = &r.cold_verification.resume else {
        panic!("the resumable World was resumed: {r:?}")
    };
    assert_eq!((world.as_str(), *tick), (LIVE, TICK + 1));
    // The source is unchanged apart from its fence rows.
    assert_eq!(migration::source_state(&f), before);
    // Every source-side object is dropped: the destination stands alone.
    std::fs::remove_dir_all(&src).unwrap();
    let d = StorageIdentity::new(dst.to_str().unwrap(), "default", "iceberg").unwrap();
    let control = SqliteControlCatalog::open(catalog_path(&d).unwrap()).unwrap();
    let worlds = control.discover_worlds().unwrap();
    let status = |id: &str| {
        worlds
            .iter()
            .find(|w| w.identity.world_id == id)
            .unwrap()
            .status
    };
    assert_eq!(
        (status(LIVE), status(GONE)),
        (WorldStatus::Active, WorldStatus::Destroyed)
    );
    // A query from the destination alone.
    let store = IcebergStore::open_readonly(&d).unwrap();
    let sig = control.list_signatures().unwrap().remove(0).signature;
    let read = store
        .existing_table_batches(&sig, &sig.components, 1000)
        .unwrap();
    assert_eq!(read.rows as i64, Size::SMALL.rows);
    // Artifact hashing: every relocated row's object hashes as the row says.
    let rows: Vec<Occurrence> = store.read_occurrences(None).unwrap();
    let dst_root = dst.join("default").join(".custos-artifacts");
    for o in &rows {
        let path = o.object_uri.path().to_owned();
        assert!(path.starts_with(dst_root.to_str().unwrap()), "{path}");
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(facts_of(&bytes), o.facts());
    }
    // A higher-epoch resume and a later tick.
    let info = control.open_world_readonly(LIVE).unwrap();
    let (e2, _) = control
        .acquire_fence(LIVE, &Holder::new("after").unwrap(), FencePurpose::Resume)
        .unwrap();
    assert!(e2 > *epoch && e2 > info.fence.issued.saturating_sub(1));
    control
        .commit_tick(LIVE, e2, info.record.tick_head + 1)
        .unwrap();
    // A retry with the source gone returns the stored receipt unchanged.
    let again = run(&src, &dst, "m1", &["--json"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.stdout, out.stdout);
    // Re-verification later, from the destination alone.
    let v = migration::verify(&dst, &receipt_file, &[]);
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert!(v.stdout.contains("verified"), "{}", v.stdout);
    println!("receipt of the fixture:\n{}", out.stdout);
}

/// `custos migrate run` (id `m1`) from `src` to `dst`, its receipt written
/// to `receipt_file` and printed as JSON: the run, which succeeded, and
/// the receipt it printed.
#[track_caller]
fn run_with_receipt(src: &Path, dst: &Path, receipt_file: &Path) -> (Run, StoredReceipt) {
    let out = run(
        src,
        dst,
        "m1",
        &["--receipt", receipt_file.to_str().unwrap(), "--json"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let stored: StoredReceipt = serde_json::from_str(&out.stdout).unwrap();
    (out, stored)
}

/// `custos migrate run` (id `m1`) from `src` to the uri `dest` (not a
/// path: one outside local v1, say), with `extra` arguments.
fn run_to(src: &Path, dest: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "migrate",
        "run",
        "--source",
        src.to_str().unwrap(),
        "--dest",
        dest,
        "--migration-id",
        "m1",
    ];
    args.extend_from_slice(extra);
    custos(&args)
}

/// Asserts `out` refused with exit code 6 and `reason`, and that the
/// destination directory still does not exist (nothing written there).
#[track_caller]
fn refused(out: &Run, reason: &str, dst: &Path) {
    assert_eq!(out.code, 6, "{}", out.stderr);
    assert!(out.stderr.contains(reason), "{reason}: {}", out.stderr);
    assert!(!dst.exists(), "{} was created", dst.display());
}

#[test]
fn identical_identities_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let f = fixture::build(&src, Size::SMALL);
    let before = tree(&src);
    let out = run(
        &src,
        &src,
        "m1",
        &[
            "--dest-artifacts",
            dir.path().join("other").to_str().unwrap(),
        ],
    );
    refused(
        &out,
        "identical-storage-identity",
        &dir.path().join("other"),
    );
    assert_eq!(tree(&src), before, "the source changed");
    drop(f);
}

/// `custos migrate check` is preflight alone: it answers what `plan`
/// would refuse (with the same reason and status), fences nothing and
/// writes nothing on either side.
#[test]
fn check_is_a_dry_run_that_fences_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let dst = dir.path().join("dst");
    let f = fixture::build(&src, Size::SMALL);
    let before = tree(&src);
    let fences = migration::fence_epochs(&src);
    let check = |dst: &Path| migrate("check", &src, dst, "m1", &[]);
    let out = check(&dst);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("preflight admitted"), "{}", out.stdout);
    assert!(!dst.exists(), "check wrote at the destination");
    assert_eq!(tree(&src), before, "check changed the source");
    assert_eq!(migration::fence_epochs(&src), fences, "check fenced");
    // What plan refuses, check refuses alike.
    let busy = dir.path().join("busy");
    fixture::build(&busy, Size::SMALL);
    let busy_before = tree(&busy);
    let out = check(&busy);
    assert_eq!(out.code, 6, "{}", out.stderr);
    assert!(
        out.stderr.contains("destination-not-empty"),
        "{}",
        out.stderr
    );
    assert_eq!(tree(&busy), busy_before);
    assert_eq!(
        migration::fence_epochs(&src),
        fences,
        "a refused check fenced"
    );
    drop(f);
}

/// A hand-edited plan file (its Worlds removed) is refused before
/// anything is reserved, so the destination is not wedged: a plan made
/// afresh then runs to completion.
#[test]
fn an_edited_plan_is_refused_before_the_destination_is_reserved() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let dst = dir.path().join("dst");
    fixture::build(&src, Size::SMALL);
    let plan_file = dir.path().join("plan.json");
    let p = migrate(
        "plan",
        &src,
        &dst,
        "m1",
        &["--out", plan_file.to_str().unwrap()],
    );
    assert_eq!(p.code, 0, "{}", p.stderr);
    let text = std::fs::read_to_string(&plan_file).unwrap();
    let start = text
        .find("\"worlds\":[")
        .expect("the plan lists its Worlds");
    // The Worlds array's end: its matching bracket.
    let mut depth = 0;
    let mut end = start;
    for (i, c) in text[start..].char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    end = start + i + 1;
                    break;
                }
            }
            _ => {}
        }
    }
    let edited = format!("{}\"worlds\":[]{}", &text[..start], &text[end..]);
    assert_ne!(edited, text);
    std::fs::write(&plan_file, edited).unwrap();
    let out = run(&src, &dst, "m1", &["--plan", plan_file.to_str().unwrap()]);
    assert_eq!(out.code, 6, "{}", out.stderr);
    assert!(out.stderr.contains("plan-stale"), "{}", out.stderr);
    assert!(!dst.exists(), "a refused plan reserved the destination");
    let out = run(&src, &dst, "m1", &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

/// A mistyped source moves nothing: no empty identity is activated at the
/// destination.
#[test]
fn a_source_that_does_not_exist_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("typo_src");
    let dst = dir.path().join("dst");
    let out = run(&typo, &dst, "m1", &[]);
    refused(&out, "source-not-found", &dst);
    assert!(!typo.exists(), "the mistyped source was created");
}

/// A destination inside the source (at any depth), or a source inside the
/// destination, moves nothing: refused before anything is written or
/// fenced.
#[test]
fn nested_identities_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let f = fixture::build(&src, Size::SMALL);
    let before = tree(&src);
    let fences = migration::fence_epochs(&src);
    for inner in [src.join("inner"), src.join("default").join("inner")] {
        let out = run(&src, &inner, "m1", &[]);
        refused(&out, "nested-storage-identity", &inner);
    }
    assert_eq!(tree(&src), before, "the source changed");
    assert_eq!(migration::fence_epochs(&src), fences, "a refusal fenced");
    drop(f);
}

#[test]
fn a_populated_destination_is_refused_byte_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let dst = dir.path().join("dst");
    fixture::build(&src, Size::SMALL);
    fixture::build(&dst, Size::SMALL);
    let before = tree(&dst);
    let fences = migration::fence_epochs(&src);
    let out = run(&src, &dst, "m1", &[]);
    assert_eq!(out.code, 6, "{}", out.stderr);
    assert!(
        out.stderr.contains("destination-not-empty"),
        "{}",
        out.stderr
    );
    assert_eq!(tree(&dst), before, "the destination changed");
    assert_eq!(
        migration::fence_epochs(&src),
        fences,
        "a refused preflight fenced"
    );
}

#[test]
fn a_destination_object_that_does_not_verify_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let dst = dir.path().join("dst");
    let f = fixture::build(&src, Size::SMALL);
    // Other bytes at one object's destination content address.
    let one = migration::object_files(&f.artifacts).remove(0);
    let rel = one.strip_prefix(&f.artifacts).unwrap();
    let root = dir.path().join("dst-artifacts");
    // An initialized Artifact root holding other bytes at that address.
    drop(custos_fs::artifacts::ArtifactStore::open(custos_fs::RealFs, &root).unwrap());
    let there = root.join(rel);
    std::fs::create_dir_all(there.parent().unwrap()).unwrap();
    std::fs::write(&there, b"not the object").unwrap();
    let before = tree(&root);
    let out = run(
        &src,
        &dst,
        "m1",
        &["--dest-artifacts", root.to_str().unwrap()],
    );
    refused(&out, "artifact-destination-conflict", &dst);
    assert!(
        out.stderr.contains("destination-not-empty"),
        "{}",
        out.stderr
    );
    assert_eq!(tree(&root), before);
}

#[test]
fn activity_history_at_the_source_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let dst = dir.path().join("dst");
    let f = fixture::build(&src, Size::SMALL);
    migration::settle_one_call(&f.id);
    let out = run(&src, &dst, "m1", &[]);
    refused(&out, "activity-history-present", &dst);
}

#[test]
fn a_corrupt_indexed_artifact_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let dst = dir.path().join("dst");
    let f = fixture::build(&src, Size::SMALL);
    let one = migration::object_files(&f.artifacts).remove(0);
    let mut bytes = std::fs::read(&one).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&one, &bytes).unwrap();
    let out = run(&src, &dst, "m1", &[]);
    refused(&out, "artifact-unreadable", &dst);
    assert!(
        out.stderr.contains("artifact-sha256-mismatch"),
        "{}",
        out.stderr
    );
    // An object removed is refused the same way.
    std::fs::remove_file(&one).unwrap();
    let out = run(&src, &dst, "m1", &[]);
    refused(&out, "artifact-object-missing", &dst);
}

#[test]
fn an_endpoint_outside_local_v1_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fixture::build(&src, Size::SMALL);
    let artifacts = dir.path().join("a");
    let out = run_to(
        &src,
        "s3://bucket/warehouse",
        &["--dest-artifacts", artifacts.to_str().unwrap()],
    );
    refused(&out, "outside-local-v1", &artifacts);
    // Without --dest-artifacts too: the same refusal, not a message about
    // the artifact root's path segments.
    let out = run_to(&src, "s3://bucket/warehouse", &[]);
    refused(&out, "outside-local-v1", &artifacts);
    assert!(!out.stderr.contains("path segment"), "{}", out.stderr);
    // A credential-bearing uri is refused as an argument (exit 2).
    let out = run_to(&src, "s3://user:secret@bucket/warehouse", &[]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(!out.stderr.contains("secret"), "{}", out.stderr);
}

#[test]
fn plan_fences_the_source_and_run_follows_the_written_plan() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let dst = dir.path().join("dst");
    fixture::build(&src, Size::SMALL);
    let plan_file = dir.path().join("plan.json");
    let before = migration::fence_epochs(&src);
    let plan = || {
        custos(&[
            "migrate",
            "plan",
            "--source",
            src.to_str().unwrap(),
            "--dest",
            dst.to_str().unwrap(),
            "--migration-id",
            "m2",
            "--out",
            plan_file.to_str().unwrap(),
        ])
    };
    let p = plan();
    assert_eq!(p.code, 0, "{}", p.stderr);
    assert!(p.stdout.contains("fenced at epoch"), "{}", p.stdout);
    let fences_after_plan = migration::fence_epochs(&src)[LIVE];
    assert!(fences_after_plan > before[LIVE]);
    assert!(!dst.exists(), "planning wrote at the destination");
    // An existing output file is never replaced.
    let again = plan();
    assert_eq!(again.code, 4, "{}", again.stderr);
    assert_eq!(
        migration::fence_epochs(&src)[LIVE],
        fences_after_plan,
        "a refused plan fenced"
    );
    let receipt = dir.path().join("receipt.json");
    std::fs::write(&receipt, b"taken").unwrap();
    // An existing receipt file is refused before anything runs.
    let taken = run(&src, &dst, "m2", &["--receipt", receipt.to_str().unwrap()]);
    assert_eq!(taken.code, 4, "{}", taken.stderr);
    assert!(!dst.exists(), "a refused run wrote at the destination");
    let out = run(&src, &dst, "m2", &["--plan", plan_file.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("migration m2 completed"),
        "{}",
        out.stdout
    );
    // Another migration id on the completed destination is refused.
    let other = run(&src, &dst, "m3", &[]);
    assert_eq!(other.code, 6, "{}", other.stderr);
}

/// An ordinary non-empty directory given as the destination by mistake is
/// refused byte-untouched — at its top, as the namespace directory, or as
/// the Artifact root — and the source is not fenced.
#[test]
fn an_ordinary_non_empty_directory_is_never_a_destination() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fixture::build(&src, Size::SMALL);
    let fences = migration::fence_epochs(&src);
    let notes = dir.path().join("notes");
    std::fs::create_dir_all(notes.join("default")).unwrap();
    std::fs::write(notes.join("todo.txt"), b"my notes").unwrap();
    let before = tree(&notes);
    let out = run(&src, &notes, "m1", &[]);
    assert_eq!(out.code, 6, "{}", out.stderr);
    assert!(out.stderr.contains("todo.txt"), "{}", out.stderr);
    assert_eq!(tree(&notes), before);
    // Only a namespace directory, no catalog: not this identity's either.
    std::fs::remove_file(notes.join("todo.txt")).unwrap();
    std::fs::write(notes.join("default").join("x"), b"x").unwrap();
    let out = run(&src, &notes, "m1", &[]);
    assert_eq!(out.code, 6, "{}", out.stderr);
    // A non-empty Artifact root that is not a store.
    let stuff = dir.path().join("stuff");
    std::fs::create_dir_all(&stuff).unwrap();
    std::fs::write(stuff.join("photo.jpg"), b"jpg").unwrap();
    let dst = dir.path().join("dst");
    let out = run(
        &src,
        &dst,
        "m1",
        &["--dest-artifacts", stuff.to_str().unwrap()],
    );
    assert_eq!(out.code, 6, "{}", out.stderr);
    assert!(!dst.exists());
    assert_eq!(std::fs::read(stuff.join("photo.jpg")).unwrap(), b"jpg");
    assert_eq!(migration::fence_epochs(&src), fences, "a refusal fenced");
}

/// Two runs at once: the second is refused at once (`migration-running`)
/// and the first completes; neither invalidates the other's plan.
#[test]
fn a_second_run_at_once_is_refused_and_the_first_completes() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let dst = dir.path().join("dst");
    fixture::build(&src, Size::SMALL);
    let mut first = std::process::Command::new(migration::bin())
        .args(migration::run_args(&src, &dst, "m1"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the first run has announced a step (it holds its locks).
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(first.stderr.take().unwrap()));
    assert!(lines.next().is_some());
    let second = run(&src, &dst, "m1", &[]);
    for _ in lines.by_ref() {}
    assert!(first.wait().unwrap().success());
    assert_eq!(second.code, 5, "{}", second.stderr);
    assert!(
        second.stderr.contains("migration-running"),
        "{}",
        second.stderr
    );
    assert_eq!(run(&src, &dst, "m1", &[]).code, 0);
}

/// One activated home per World: a source that departed to one
/// destination is refused a second migration to another (whatever its
/// migration id), naming the first destination, before anything is fenced
/// or written; `custos catalog discover` shows where it went; a second copy
/// is made only when the operator says so, and is recorded in the
/// source's record and the receipt.
#[test]
fn a_source_moves_once_unless_a_second_copy_is_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let (d1, d2) = (dir.path().join("d1"), dir.path().join("d2"));
    fixture::build(&src, Size::SMALL);
    let out = run(&src, &d1, "move-1", &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let fences = migration::fence_epochs(&src);
    let d1_uri = format!("file://{}", std::fs::canonicalize(&d1).unwrap().display());
    for id in ["move-1", "move-2"] {
        for verb in ["check", "plan", "run"] {
            let out = migrate(verb, &src, &d2, id, &[]);
            refused(&out, "source-migrated", &d2);
            assert!(
                out.stderr.contains(&d1_uri) && out.stderr.contains("move-1"),
                "the refusal names the first home: {}",
                out.stderr
            );
            assert!(out.stderr.contains("--second-copy"), "{}", out.stderr);
        }
    }
    assert_eq!(migration::fence_epochs(&src), fences, "a refusal fenced");
    let shown = custos(&["catalog", "discover", src.to_str().unwrap()]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert!(
        shown
            .stdout
            .contains(&format!("departed: moved to {d1_uri} by migration move-1")),
        "{}",
        shown.stdout
    );
    // The retry of the first migration still answers its receipt.
    assert_eq!(run(&src, &d1, "move-1", &[]).code, 0);
    // Acknowledged: a second copy, recorded.
    let out = run(&src, &d2, "move-2", &["--second-copy", "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let stored: StoredReceipt = serde_json::from_str(&out.stdout).unwrap();
    assert!(stored.receipt.second_copy, "the receipt records the copy");
    let shown = custos(&["catalog", "discover", src.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&shown.stdout).unwrap();
    let deps = v["departures"].as_array().unwrap();
    assert_eq!(deps.len(), 2, "{v}");
    assert_eq!(deps[1]["migration_id"], "move-2");
    assert_eq!(deps[1]["second_copy"], true);
    assert_eq!(deps[1]["leg"], "moved");
}

/// Someone else's plan while a migration is in flight (planned, not yet
/// activated) is refused by the source's record before it fences
/// anything, so the first migration's retry still completes — it is not
/// wedged by fences a second planner took.
#[test]
fn a_second_plan_of_an_in_flight_source_is_refused_and_the_first_completes() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let (d1, d2) = (dir.path().join("d1"), dir.path().join("d2"));
    fixture::build(&src, Size::SMALL);
    let out = migrate("plan", &src, &d1, "move-1", &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let fences = migration::fence_epochs(&src);
    let out = migrate("plan", &src, &d2, "someone-else", &[]);
    refused(&out, "source-migrated", &d2);
    assert!(out.stderr.contains("planned"), "{}", out.stderr);
    assert_eq!(migration::fence_epochs(&src), fences, "the refusal fenced");
    let out = run(&src, &d1, "move-1", &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

/// The writer `hot_journal::make_hot` runs and kills (a no-op unless this
/// process is that child).
#[test]
fn hot_journal_writer() {
    hot_journal::writer();
}

/// A source whose control catalog (switched to rollback-journal mode by
/// another tool) holds a hot journal: `check`, `plan` and `run` refuse
/// with exit 6 naming the file and the command that recovers it, writing
/// nothing at either endpoint; `custos catalog recover` rolls it back, and
/// the migration then runs without the half-written worlds.
#[test]
fn a_source_catalog_with_a_hot_journal_is_refused_until_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let dst = dir.path().join("dst");
    fixture::build(&src, Size::SMALL);
    let id = StorageIdentity::new(src.to_str().unwrap(), "default", "iceberg").unwrap();
    let db = catalog_path(&id).unwrap();
    hot_journal::make_hot(&db, "hot_journal_writer");
    let journal = hot_journal::sibling(&db, "-journal");
    let command = format!(
        "custos catalog recover {} --namespace default --backend iceberg",
        src.display()
    );
    let before = tree(&src);
    for verb in ["check", "plan", "run"] {
        let out = migrate(verb, &src, &dst, "m1", &[]);
        refused(&out, "[catalog-recovery-needed]", &dst);
        for needle in [
            &db.display().to_string(),
            &journal.display().to_string(),
            &command,
        ] {
            assert!(
                out.stderr.contains(needle),
                "{verb}: {needle:?} not in {}",
                out.stderr
            );
        }
        assert_eq!(tree(&src), before, "{verb} changed the source");
    }
    let out = custos(&["catalog", "recover", src.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("rolled back"), "{}", out.stdout);
    assert!(!journal.exists(), "the journal outlived the recovery");
    let out = run(&src, &dst, "m1", &["--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let stored: StoredReceipt = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(stored.receipt.control.worlds, 1, "{:?}", stored.receipt);
    let d = StorageIdentity::new(dst.to_str().unwrap(), "default", "iceberg").unwrap();
    let moved = SqliteControlCatalog::open_read_only(catalog_path(&d).unwrap()).unwrap();
    let mut ids: Vec<String> = moved
        .discover_worlds()
        .unwrap()
        .into_iter()
        .map(|w| w.identity.world_id)
        .collect();
    ids.sort();
    let mut expected = vec![LIVE.to_owned(), GONE.to_owned()];
    expected.sort();
    assert_eq!(ids, expected);
    assert!(!ids.iter().any(|i| i.starts_with(hot_journal::HALF)));
}

/// The progress of a run (plain lines: stderr is not a terminal) names
/// each table's copy exactly once — the empty tables' included: a table
/// with a snapshot but no row was once committed as an append of no file,
/// which Iceberg refuses, read as an ambiguous commit and copied again.
#[test]
fn progress_names_each_table_copy_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let dst = dir.path().join("dst");
    let f = fixture::build(&src, Size::SMALL);
    let tables = IcebergStore::open_readonly(&f.id)
        .unwrap()
        .namespace()
        .unwrap();
    // Both kinds of empty table: without a snapshot, and with a snapshot
    // that holds no row (whose copy commits nothing).
    assert!(
        tables.iter().any(|(_, t)| t.snapshot == 0 && t.rows == 0)
            && tables.iter().any(|(_, t)| t.snapshot != 0 && t.rows == 0),
        "the fixture has both empty tables: {tables:?}"
    );
    let out = run(&src, &dst, "m1", &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    for (name, _) in &tables {
        for line in [
            format!("migrate: copy table {name}"),
            format!("migrate: verify table {name}"),
        ] {
            let n = out.stderr.lines().filter(|l| *l == line).count();
            assert_eq!(n, 1, "{line:?} {n} times in:\n{}", out.stderr);
        }
        let copied = format!("migrate: table {name}: ");
        let n = out
            .stderr
            .lines()
            .filter(|l| l.starts_with(&copied))
            .count();
        assert_eq!(n, 1, "{copied:?} {n} times in:\n{}", out.stderr);
    }
}

fn store_at(uri: &Path, writable: bool) -> IcebergStore {
    let id = StorageIdentity::new(uri.to_str().unwrap(), "default", "iceberg").unwrap();
    if writable {
        IcebergStore::open_writable(&id).unwrap()
    } else {
        IcebergStore::open_readonly(&id).unwrap()
    }
}

fn ice(op: &'static str) -> impl FnOnce(custos_iceberg::iceberg::Error) -> IcebergError {
    move |e| IcebergError::Iceberg {
        op,
        source: Box::new(e),
    }
}

fn ident(table: &str) -> TableIdent {
    TableIdent::new(NamespaceIdent::new("default".into()), table.into())
}

fn load_table(store: &IcebergStore, table: &str) -> Table {
    store
        .run(async {
            store
                .iceberg_catalog()
                .load_table(&ident(table))
                .await
                .map_err(ice("load"))
        })
        .unwrap()
}

fn facts_of_table(store: &IcebergStore, table: &str) -> TableFacts {
    store
        .namespace()
        .unwrap()
        .into_iter()
        .find(|(n, _)| n.as_str() == table)
        .unwrap()
        .1
}

/// Replaces the destination's [`PARTITIONED`] table of `rows` rows with an
/// unpartitioned, unsorted table of the same schema and rows and no
/// properties: what a copy that drops the table's metadata would leave.
fn strip_metadata(dst: &Path, table: &str, rows: i64) {
    let store = store_at(dst, true);
    let t = load_table(&store, table);
    let schema = t.metadata().current_schema().as_ref().clone();
    store
        .run(async {
            let c = store.iceberg_catalog();
            c.drop_table(&ident(table)).await.map_err(ice("drop"))?;
            c.create_table(
                &NamespaceIdent::new("default".into()),
                TableCreation::builder()
                    .name(table.into())
                    .schema(schema)
                    .build(),
            )
            .await
            .map_err(ice("create"))
        })
        .unwrap();
    let batch = fixture::partitioned_rows(&store, rows);
    store.append(table, &[batch]).unwrap();
}

/// A partitioned, sorted application table with properties arrives with
/// all three (the same metadata fingerprint at both ends, bound in the
/// receipt); a destination that later loses them fails re-verification,
/// which names the table.
#[test]
fn table_metadata_survives_the_move_and_verification_checks_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let dst = dir.path().join("dst");
    fixture::build(&src, Size::SMALL);
    fixture::add_partitioned_table(&src, 90);
    let receipt_file = dir.path().join("receipt.json");
    let (_, stored) = run_with_receipt(&src, &dst, &receipt_file);
    let (s, d) = (store_at(&src, false), store_at(&dst, false));
    let (sf, df) = (
        facts_of_table(&s, PARTITIONED),
        facts_of_table(&d, PARTITIONED),
    );
    assert_ne!(
        sf.metadata_fingerprint,
        TableMetadata::default().fingerprint()
    );
    assert_eq!(df.metadata_fingerprint, sf.metadata_fingerprint);
    assert_eq!((df.rows, df.content_digest), (sf.rows, sf.content_digest));
    let line = stored
        .receipt
        .tables
        .iter()
        .find(|t| t.name.as_str() == PARTITIONED)
        .unwrap();
    assert_eq!(line.metadata_fingerprint, sf.metadata_fingerprint);
    let (st, dt) = (load_table(&s, PARTITIONED), load_table(&d, PARTITIONED));
    let meta = logical_metadata(&dt, PARTITIONED).unwrap();
    assert_eq!(meta, logical_metadata(&st, PARTITIONED).unwrap());
    assert_eq!(meta.partition().len(), 1, "{meta:?}");
    assert_eq!(
        (
            meta.partition()[0].source.as_str(),
            meta.partition()[0].transform.as_str()
        ),
        ("region", "identity")
    );
    assert_eq!(meta.sort().len(), 1, "{meta:?}");
    for (k, v) in PARTITIONED_PROPERTIES {
        assert_eq!(
            dt.metadata().properties().get(k).map(String::as_str),
            Some(v)
        );
    }
    // Every other table's metadata arrives too.
    for (name, f) in s.namespace().unwrap() {
        assert_eq!(
            facts_of_table(&d, name.as_str()).metadata_fingerprint,
            f.metadata_fingerprint,
            "{name}"
        );
    }
    drop((s, d, st, dt));
    // The destination loses the partitioning, sort order and properties
    // (rows and schema kept): re-verification fails and names the table.
    strip_metadata(&dst, PARTITIONED, 90);
    let v = migration::verify(&dst, &receipt_file, &[]);
    assert_ne!(v.code, 0, "{}", v.stdout);
    assert!(
        v.stderr
            .contains(&format!("table {PARTITIONED}: metadata fingerprint")),
        "{}",
        v.stderr
    );
}
