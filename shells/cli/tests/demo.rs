//! `custos demo <dir>`: the sample is complete and made by custos's own
//! writers (read back here through the read paths every other command
//! uses), a non-empty directory or a file is refused with nothing written,
//! and stdout carries only the report (progress is stderr's).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use custos_core::identity::StorageIdentity;
use custos_core::world::ControlCatalog;
use custos_iceberg::arrow::array::{Array, Int64Array, StructArray};
use custos_iceberg::IcebergStore;
use custos_sqlite::control::SqliteControlCatalog;

#[path = "support/binary.rs"]
mod binary;

use binary::custos;

/// Asserts `custos releases list` shows tenant `acme` the sample's two
/// releases in `dir/releases`.
#[track_caller]
fn assert_two_releases(dir: &Path) {
    let list = custos(&[
        "releases",
        "list",
        dir.join("releases").to_str().unwrap(),
        "--tenant",
        "acme",
    ]);
    assert!(String::from_utf8_lossy(&list.stdout).contains("2 release(s)"));
}

fn listing(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn the_demo_refuses_anything_but_a_new_or_empty_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("mine.txt"), "keep me").unwrap();
    let out = custos(&["demo", full.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not empty"));
    assert_eq!(listing(&full), BTreeSet::from(["mine.txt".to_owned()]));
    assert_eq!(std::fs::read(full.join("mine.txt")).unwrap(), b"keep me");

    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = custos(&["demo", file.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}

#[test]
fn the_demo_makes_a_complete_sample_through_custos_writers() {
    let tmp = tempfile::tempdir().unwrap();
    // An existing empty directory is taken.
    let dir = tmp.path().join("sample");
    std::fs::create_dir(&dir).unwrap();
    let out = custos(&["demo", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stdout.contains("Try next:"), "{stdout}");
    assert!(
        !stdout.contains("demo: 1/5"),
        "progress on stdout: {stdout}"
    );
    assert_eq!(
        stderr.lines().filter(|l| l.starts_with("demo: ")).count(),
        5,
        "{stderr}"
    );
    assert_eq!(
        listing(&dir),
        ["deployments", "inputs", "releases", "store"]
            .map(str::to_owned)
            .into()
    );

    // The control catalog: a resumable World with ticks and two
    // signatures, a destroyed one.
    let store = dir.canonicalize().unwrap().join("store");
    let id = StorageIdentity::new(store.to_str().unwrap(), "default", "iceberg").unwrap();
    let control = SqliteControlCatalog::open_for(&id).unwrap();
    let worlds = control.discover_worlds().unwrap();
    assert_eq!(worlds.len(), 2);
    let live = control.open_world_readonly("world-live").unwrap();
    assert_eq!(live.record.tick_head, 5);
    assert_eq!(live.signatures.len(), 2);

    // The tables: nullable scores with duplicate rows, nested positions
    // with missing ones.
    let iceberg = IcebergStore::open_readonly(&id).unwrap();
    for sig in &live.signatures {
        let read = iceberg
            .existing_table_batches(sig, &sig.components, 10_000)
            .unwrap();
        match sig.components[0].as_str() {
            "Score" => {
                assert_eq!(read.rows, 130);
                let mut entities = Vec::new();
                let mut null_scores = 0;
                for b in &read.batches {
                    let e = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                    entities.extend(e.values().iter().copied());
                    null_scores += b.column(1).null_count();
                }
                let distinct: BTreeSet<_> = entities.iter().collect();
                assert_eq!(distinct.len(), 120, "ten rows appear twice");
                assert!(null_scores > 0);
            }
            "Position" => {
                assert_eq!(read.rows, 80);
                let nulls: usize = read
                    .batches
                    .iter()
                    .map(|b| {
                        let p = b.column(1).as_any().downcast_ref::<StructArray>().unwrap();
                        assert_eq!(p.num_columns(), 2);
                        p.null_count()
                    })
                    .sum();
                assert_eq!(nulls, 20);
            }
            other => panic!("an unexpected signature {other}"),
        }
    }

    // The Artifact root and the inputs a user publishes and applies.
    assert!(store.join("default/.custos-artifacts").is_dir());
    for f in [
        "greeter-1.2.0.wasm",
        "greeter-1.2.0.json",
        "greeter.contract.json",
        "green-1.2.0.json",
    ] {
        assert!(dir.join("inputs").join(f).is_file(), "{f}");
    }
    assert_two_releases(&dir);
    // A second demo into the same directory is refused and changes nothing.
    let before = listing(&dir);
    assert_eq!(
        custos(&["demo", dir.to_str().unwrap()]).status.code(),
        Some(4)
    );
    assert_eq!(listing(&dir), before);
}

#[test]
fn two_demos_at_once_make_one_sample() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("race");
    let d = dir.to_str().unwrap();
    for _ in 0..3 {
        let _ = std::fs::remove_dir_all(&dir);
        let spawn = || {
            Command::new(env!("CARGO_BIN_EXE_custos"))
                .args(["demo", d])
                .output()
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(spawn);
            let b = s.spawn(spawn);
            (a.join().unwrap().unwrap(), b.join().unwrap().unwrap())
        });
        let mut codes = [a.status.code(), b.status.code()];
        codes.sort();
        assert_eq!(
            codes,
            [Some(0), Some(4)],
            "{}\n{}",
            String::from_utf8_lossy(&a.stderr),
            String::from_utf8_lossy(&b.stderr)
        );
        assert!(!dir.join(".custos-demo-incomplete").exists());
        assert_two_releases(&dir);
    }
}
